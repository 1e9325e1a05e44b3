/** The overview of a log, the trajectory browser and the comparison of two logs. */
import * as Model from "../Model.js"
import type { Meta } from "../Protocol.js"
import * as Charts from "./charts.js"
import { h, link, ms, num, pct, replace } from "./dom.js"
import { href } from "./router.js"
import type { Source } from "./source.js"

export interface Context {
  readonly source: Source
  readonly meta: Meta
  readonly log: number
  readonly params: URLSearchParams
  /** Run once the view is in the document (charts need their laid-out width). */
  readonly afterMount: Array<() => void>
}

export const trajectoryHref = (log: number, line: number) => href(["trajectory", line], { log: log === 0 ? undefined : log })

const listHref = (ctx: Context, query: Partial<Model.Query>) => {
  const params = Model.queryParams(query)
  if (ctx.log !== 0) params.set("log", String(ctx.log))
  return href(["trajectories"], params)
}

const stat = (testId: string, label: string, value: string, sub?: string) =>
  h("div", { class: "stat", "data-testid": testId }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), sub === undefined ? null : h("div", { class: "stat-sub" }, sub))

export const overview = async (ctx: Context, el: HTMLElement) => {
  const o = await ctx.source.overview(ctx.log)
  const timeTotal = o.time.modelMs + o.time.envMs
  const modelShare = timeTotal === 0 ? 0 : o.time.modelMs / timeTotal
  const cards = h(
    "section",
    { class: "stats" },
    stat("stat-trajectories", "trajectories", num(o.trajectories), `${num(o.groups)} groups`),
    stat("stat-success", "positive reward", pct(o.successRate), `${num(o.successes)} done with a positive env reward`),
    o.solved === null
      ? null
      : stat("stat-solved", "solved", pct(o.solvedRate), `${num(o.solved)} of ${num(o.trajectories)}: the env's is_success`),
    stat("stat-reward", "mean reward", num(o.meanReward, 4), `env ${num(o.meanEnvReward, 4)} · over ${num(o.scored)} not failed`),
    stat("stat-turns", "mean turns", num(o.meanTurns, 2)),
    stat("stat-truncated", "truncated", pct(o.truncated.rate), `max_turns ${num(o.truncated.maxTurns)} · length ${num(o.truncated.length)}`),
    stat(
      "stat-completion",
      "completion length",
      o.completion.meanTokens === null ? `${num(o.completion.meanChars, 1)} chars` : `${num(o.completion.meanTokens, 1)} tokens`,
      `per trajectory (the model's replies)${o.completion.meanTokens === null ? "" : ` · ${num(o.completion.meanChars, 1)} chars`}`
    ),
    stat("stat-failures", "failures", num(o.failures), o.failures === 0 ? "none" : `${o.failuresByTag.length} error tags`),
    stat(
      "stat-time",
      "model vs env time",
      `${pct(modelShare)} model`,
      `model ${ms(o.time.modelMs)} · env ${ms(o.time.envMs)}${
        o.time.waitMs > 0 ? ` · waiting to be scheduled ${ms(o.time.waitMs)}` : ""
      } · mean trajectory ${ms(o.time.meanTotalMs)}`
    ),
    o.tokens > 0 ? stat("stat-tokens", "with token ids", num(o.tokens)) : null
  )
  const share = h(
    "div",
    { class: "share", title: `model ${ms(o.time.modelMs)}, env ${ms(o.time.envMs)}` },
    h("div", { class: "share-model", style: `width:${(modelShare * 100).toFixed(1)}%` }, "model"),
    h("div", { class: "share-env", style: `width:${((1 - modelShare) * 100).toFixed(1)}%` }, "env")
  )
  const reasons = h(
    "table",
    { class: "table", "data-testid": "end-reasons" },
    h("thead", null, h("tr", null, h("th", null, "end reason"), h("th", null, "trajectories"), h("th", null, ""))),
    h(
      "tbody",
      null,
      Model.END_REASONS.map((reason) =>
        h("tr", null, h("td", null, reason), h("td", { class: "n" }, num(o.endReasons[reason])), h("td", null, o.endReasons[reason] > 0 ? link(listHref(ctx, { end: reason }), "show") : ""))
      )
    )
  )
  const columns = o.meanRewards.length > 0
    ? h(
      "table",
      { class: "table", "data-testid": "reward-columns" },
      h("thead", null, h("tr", null, h("th", null, "reward column"), h("th", null, "mean"))),
      h("tbody", null, o.meanRewards.map((c) => h("tr", null, h("td", null, h("code", null, c.column)), h("td", { class: "n" }, num(c.mean, 4)))))
    )
    : null
  const envs = o.envs.length > 0
    ? h(
      "table",
      { class: "table", "data-testid": "envs" },
      h("thead", null, h("tr", null, h("th", null, "env"), h("th", null, "trajectories"), h("th", null, "mean reward"))),
      h("tbody", null, o.envs.map((e) => h("tr", null, h("td", null, link(listHref(ctx, { env: e.env }), e.env)), h("td", { class: "n" }, num(e.count)), h("td", { class: "n" }, num(e.meanReward, 4)))))
    )
    : null
  const failures = h(
    "section",
    { class: "failures", "data-testid": "failures" },
    h("h2", null, "Failures by error tag"),
    o.failuresByTag.length === 0
      ? h("p", { class: "muted" }, "No trajectory failed.")
      : h(
        "table",
        { class: "table" },
        h("thead", null, h("tr", null, h("th", null, "error tag"), h("th", null, "count"), h("th", null, "example"), h("th", null, "trajectories"))),
        h(
          "tbody",
          null,
          o.failuresByTag.map((group) =>
            h(
              "tr",
              { "data-testid": `failure-${group.tag}` },
              h("td", null, h("code", null, group.tag)),
              h("td", { class: "n" }, num(group.count)),
              h("td", { class: "message" }, group.examples[0]?.message ?? ""),
              h(
                "td",
                { class: "links" },
                group.examples.map((e) => link(trajectoryHref(ctx.log, e.line), e.id)),
                " ",
                link(listHref(ctx, { tag: group.tag }), `all ${num(group.count)} →`)
              )
            )
          )
        )
      )
  )
  const hist = o.rewardHistogram
  const adv = o.advantageByGroup
  const charts = [
    Charts.box("chart-reward-histogram", "Reward histogram", hist.discrete ? "one bar per reward value" : `${hist.x.length} bins`, hist.x.length),
    Charts.box("chart-reward-by-row", "Reward by row", o.rewardByRow.binned > 1 ? `mean with min–max band; ${o.rewardByRow.binned} rows per point` : "mean of the group with its min–max band", o.rewardByRow.x.length),
    Charts.box(
      "chart-advantage",
      "Advantage spread per group",
      `min–max band of the advantages in each group; ${num(adv.flatGroups)} of ${num(adv.groupsScored)} groups have equal rewards (all advantages 0: no learning signal)`,
      adv.x.length
    ),
    Charts.box("chart-turns-reward", "Turns vs reward", `point size: how many trajectories${o.turnsVsReward.pointsCapped ? " (the most frequent pairs)" : ""}; red: mean reward per turn count`, o.turnsVsReward.points.length),
    Charts.box("chart-turns", "Turns distribution", null, o.turns.length)
  ]
  replace(
    el,
    cards,
    share,
    h("section", { class: "grid2" }, h("div", null, h("h2", null, "End reasons"), reasons), h("div", null, h("h2", null, "Envs"), envs, columns === null ? null : h("h2", null, "Reward columns (means over the trajectories not failed)"), columns)),
    failures,
    h("h2", null, "Charts"),
    h("section", { class: "charts" }, charts.map((c) => c.el))
  )
  ctx.afterMount.push(() => {
    Charts.bars(charts[0].plot, hist.x, hist.counts, hist.width, "reward")
    Charts.band(charts[1].plot, o.rewardByRow, "row", "reward")
    Charts.band(charts[2].plot, adv, "row (group)", "advantage")
    Charts.scatter(charts[3].plot, o.turnsVsReward.points, o.turnsVsReward.meanByTurns, "turns", "reward")
    Charts.bars(charts[4].plot, o.turns.map((t) => t.turns), o.turns.map((t) => t.count), 1, "turns", true)
  })
}

const option = (value: string, label: string, selected: boolean) => h("option", { value, selected }, label)

export const list = async (ctx: Context, el: HTMLElement) => {
  const query = Model.parseQuery(ctx.params)
  const [o, page] = await Promise.all([ctx.source.overview(ctx.log), ctx.source.trajectories(ctx.log, query)])
  const field = (_name: string, control: HTMLElement, label: string) => h("label", { class: "field" }, h("span", null, label), control)
  const select = (name: string, values: ReadonlyArray<string>, current: string | undefined, any = "any") =>
    h("select", { name, "data-testid": `filter-${name}` }, option("", any, current === undefined), values.map((v) => option(v, v, v === current)))
  const input = (name: string, value: string | number | undefined, attrs: Record<string, string> = {}) =>
    h("input", { name, value: value === undefined ? "" : String(value), "data-testid": `filter-${name}`, ...attrs })
  const form = h(
    "form",
    { class: "filters", "data-testid": "filters" },
    field("env", select("env", o.envs.map((e) => e.env), query.env), "env"),
    field("end", select("end", Model.END_REASONS, query.end), "end reason"),
    field("tag", select("tag", o.failuresByTag.map((f) => f.tag), query.tag), "error tag"),
    field("min", input("min", query.min, { type: "number", step: "any", placeholder: "min", class: "short" }), "reward ≥"),
    field("max", input("max", query.max, { type: "number", step: "any", placeholder: "max", class: "short" }), "reward ≤"),
    field("row", input("row", query.row, { type: "number", step: "1", placeholder: "row", class: "short" }), "row"),
    field("q", input("q", query.q, { type: "search", placeholder: "text in the trajectory" }), "search"),
    field("sort", h("select", { name: "sort", "data-testid": "filter-sort" }, Model.SORT_KEYS.map((k) => option(k, k === "time" ? "time (total)" : k, k === query.sort))), "sort by"),
    field("dir", h("select", { name: "dir", "data-testid": "filter-dir" }, option("asc", "ascending", query.dir === "asc"), option("desc", "descending", query.dir === "desc")), "order"),
    h("button", { type: "submit", "data-testid": "apply" }, "Apply"),
    link(listHref(ctx, {}), "clear")
  )
  // A new sort key starts with its natural order: largest first, except the file's order.
  const sortSelect = form.querySelector<HTMLSelectElement>("[name=sort]")!
  const dirSelect = form.querySelector<HTMLSelectElement>("[name=dir]")!
  sortSelect.addEventListener("change", () => void (dirSelect.value = sortSelect.value === "line" ? "asc" : "desc"))
  form.addEventListener("submit", (event) => {
    event.preventDefault()
    const data = new FormData(form)
    const read = (k: string) => {
      const v = data.get(k)
      return typeof v === "string" && v.trim() !== "" ? v.trim() : undefined
    }
    const sort = (read("sort") ?? "line") as Model.SortKey
    const next = Model.parseQuery(new URLSearchParams(Object.entries({ env: read("env"), end: read("end"), tag: read("tag"), min: read("min"), max: read("max"), row: read("row"), q: read("q"), sort, dir: read("dir") }).filter((e): e is [string, string] => e[1] !== undefined)))
    location.hash = listHref(ctx, { ...next, offset: 0 })
  })
  const from = page.matched === 0 ? 0 : page.offset + 1
  const to = page.offset + page.items.length
  const pager = h(
    "div",
    { class: "pager" },
    h("span", { "data-testid": "matched" }, `${num(from)}–${num(to)} of ${num(page.matched)} matched (${num(page.total)} trajectories)`),
    page.offset > 0 ? link(listHref(ctx, { ...query, offset: Math.max(0, page.offset - query.limit) }), "← previous") : null,
    to < page.matched ? link(listHref(ctx, { ...query, offset: page.offset + query.limit }), "next →") : null
  )
  const rows = page.items.map((s) =>
    h(
      "tr",
      { "data-testid": "trajectory-row", "data-line": s.line, class: s.errorTag !== null ? "failed" : "" },
      h("td", { class: "n" }, link(trajectoryHref(ctx.log, s.line), String(s.line))),
      h("td", null, link(trajectoryHref(ctx.log, s.line), s.id)),
      h("td", null, s.env ?? ""),
      h("td", null, h("span", { class: `badge ${s.endReason}` }, s.endReason)),
      h("td", { class: "n" }, num(s.reward, 4)),
      h("td", { class: "n" }, num(s.envReward, 4)),
      h("td", { class: "n" }, num(s.advantage, 3)),
      h("td", { class: "n" }, String(s.turns)),
      h("td", { class: "n" }, ms(s.totalMs)),
      h("td", { class: "message" }, s.errorTag === null ? "" : h("span", null, h("code", null, s.errorTag), " ", s.errorMessage ?? ""))
    )
  )
  replace(
    el,
    form,
    page.note === undefined ? null : h("p", { class: "note" }, page.note),
    pager,
    h(
      "table",
      { class: "table trajectories", "data-testid": "trajectories" },
      h("thead", null, h("tr", null, ["line", "id", "env", "end", "reward", "env reward", "advantage", "turns", "time", "error"].map((c) => h("th", null, c)))),
      h("tbody", null, rows)
    ),
    page.items.length === 0 ? h("p", { class: "empty", "data-testid": "no-match" }, "No trajectory matches these filters.") : null
  )
}

export const compare = async (ctx: Context, el: HTMLElement) => {
  const options = Model.parseCompareOptions(ctx.params)
  const c = await ctx.source.compare(options)
  const [a, b] = ctx.meta.logs
  const sortLink = (sort: Model.CompareSort, label: string) =>
    sort === options.sort ? h("strong", null, label) : link(href(["compare"], { sort }), label)
  const box = Charts.box("chart-delta", "Reward change by row (B − A)", c.deltaByRow.binned > 1 ? `${c.deltaByRow.binned} rows per point` : null, c.deltaByRow.x.length)
  const listOf = (log: number, row: number) => href(["trajectories"], { log: log === 0 ? undefined : log, row })
  const to = options.offset + c.rows.length
  replace(
    el,
    h(
      "section",
      { class: "stats" },
      stat("compare-a", `A: ${a?.name ?? ""}`, num(c.meanA, 4), `mean reward over the rows in both · success ${pct(c.successRateA)}`),
      stat("compare-b", `B: ${b?.name ?? ""}`, num(c.meanB, 4), `mean reward over the rows in both · success ${pct(c.successRateB)}`),
      stat("compare-delta", "change", c.meanA === null || c.meanB === null ? "–" : num(c.meanB - c.meanA, 4), `${num(c.improved)} rows up · ${num(c.worsened)} down · ${num(c.unchanged)} same`),
      stat("compare-rows", "rows in both", num(c.common), `${num(c.onlyA)} only in A · ${num(c.onlyB)} only in B`)
    ),
    c.configDiffers > 0
      ? h("p", { class: "warning", "data-testid": "config-differs" }, `${num(c.configDiffers)} rows have a different env_config in the two logs: they did not run the same dataset rows.`)
      : null,
    h("section", { class: "charts" }, box.el),
    h("h2", null, "Rows that changed most"),
    h("p", null, "sort: ", sortLink("change", "largest change"), " · ", sortLink("delta", "change (B − A)"), " · ", sortLink("row", "row")),
    h(
      "table",
      { class: "table", "data-testid": "compare-rows-table" },
      h("thead", null, h("tr", null, ["row", "env", "A mean", "B mean", "change", "A success", "B success", ""].map((t) => h("th", null, t)))),
      h(
        "tbody",
        null,
        c.rows.map((r) =>
          h(
            "tr",
            { "data-testid": "compare-row", "data-row": r.row, class: r.configDiffers ? "warn" : "" },
            h("td", { class: "n" }, String(r.row)),
            h("td", null, r.env ?? ""),
            h("td", { class: "n" }, `${num(r.a.mean, 3)} (${r.a.n})`),
            h("td", { class: "n" }, `${num(r.b.mean, 3)} (${r.b.n})`),
            h("td", { class: `n ${r.delta !== null && r.delta > 0 ? "up" : r.delta !== null && r.delta < 0 ? "down" : ""}` }, r.delta === null ? "–" : (r.delta > 0 ? "+" : "") + num(r.delta, 3)),
            h("td", { class: "n" }, `${r.a.successes}/${r.a.n}`),
            h("td", { class: "n" }, `${r.b.successes}/${r.b.n}`),
            h("td", null, link(listOf(0, r.row), "A"), " ", link(listOf(1, r.row), "B"))
          )
        )
      )
    ),
    h(
      "div",
      { class: "pager" },
      h("span", null, `${num(c.matched === 0 ? 0 : options.offset + 1)}–${num(to)} of ${num(c.matched)} rows`),
      options.offset > 0 ? link(href(["compare"], { sort: options.sort, dir: options.dir, offset: Math.max(0, options.offset - options.limit) }), "← previous") : null,
      to < c.matched ? link(href(["compare"], { sort: options.sort, dir: options.dir, offset: options.offset + options.limit }), "next →") : null
    )
  )
  ctx.afterMount.push(() => Charts.band(box.plot, c.deltaByRow, "row", "change"))
}
