/**
 * The viewer's page: reads its configuration from the document, then draws the view the URL names
 * (overview, trajectories, one trajectory, comparison) from the viewer's API or from the data a
 * report embeds; a live page redraws as the logs grow.
 */
import type { Meta, PageConfig, RunProgress } from "../Protocol.js"
import { dashboard } from "./dashboard.js"
import { bytes, h, link, ms, num, pct, replace } from "./dom.js"
import { compare, type Context, list, overview } from "./overview.js"
import { current, href } from "./router.js"
import * as Sources from "./source.js"
import { trajectory } from "./trajectory.js"

const config = JSON.parse(document.getElementById("effect-gym-config")?.textContent ?? "{}") as PageConfig
const app = document.getElementById("app")!

const progressBanner = (p: RunProgress) => {
  const fraction = p.total === null || p.total === 0 ? null : Math.min(1, p.done / p.total)
  return h(
    "div",
    { class: `banner live${p.finished ? " finished" : ""}`, "data-testid": "live", "data-done": p.done, "data-finished": p.finished ? "yes" : "no" },
    h("strong", null, p.finished ? "Run finished" : "Run in progress"),
    " ",
    h("span", { "data-testid": "live-done" }, `${num(p.done)}${p.total === null ? "" : ` / ${num(p.total)}`} trajectories`),
    fraction === null ? null : h("span", { class: "bar" }, h("span", { style: `width:${(fraction * 100).toFixed(1)}%` })),
    ` · ${num(Math.round(p.trajectoriesPerSecond))} traj/s · ${num(Math.round(p.turnsPerSecond))} turns/s · mean reward ${num(p.meanReward, 4)} · success ${pct(p.successRate)} · failures ${num(p.failures)}${p.badRows > 0 ? ` · bad rows ${num(p.badRows)}` : ""} · ${ms(p.elapsedMs)}`
  )
}

const banners = (meta: Meta) => {
  const out: Array<HTMLElement> = []
  if (meta.progress !== null) out.push(progressBanner(meta.progress))
  for (const log of meta.logs) {
    if (log.indexing && !meta.live) {
      out.push(h("div", { class: "banner", "data-testid": "indexing" }, `Indexing ${log.name}: ${bytes(log.indexedBytes)} of ${bytes(log.bytes)} (${log.bytes === 0 ? 0 : Math.floor((log.indexedBytes / log.bytes) * 100)}%), ${num(log.trajectories)} trajectories so far`))
    }
    if (log.problemCount > 0) {
      const fatal = log.trajectories === 0 && !log.indexing
      out.push(
        h(
          "div",
          { class: `banner ${fatal ? "error" : "warning"}`, "data-testid": "problems" },
          h("strong", null, fatal ? `${log.name}: nothing to show` : `${log.name}: ${num(log.problemCount)} ${log.problemCount === 1 ? "problem" : "problems"}`),
          h("ul", null, log.problems.slice(0, 10).map((p) => h("li", { "data-kind": p.kind }, `${p.file}${p.line === null ? "" : `:${p.line}`}: ${p.detail}`))),
          log.problemCount > 10 ? h("p", null, `… and ${num(log.problemCount - 10)} more (the command line lists them too)`) : null
        )
      )
    }
  }
  if (meta.capNote !== null) out.push(h("div", { class: "banner warning", "data-testid": "cap-note" }, meta.capNote))
  return out
}

const start = async () => {
  if (config.mode === "dashboard") {
    dashboard(app, config.events, config.title)
    return
  }
  const source = config.mode === "server" ? Sources.server(config.api) : Sources.report(config.data)
  let meta = await source.meta()
  const nav = h("nav", { class: "nav" })
  const conn = h("span", { class: "conn", "data-testid": "connection" })
  const bannerBox = h("div", { class: "banners" })
  const main = h("main", { "data-testid": "view" })
  replace(app, h("header", { class: "top" }, h("span", { class: "brand" }, "effect-gym view"), nav, conn), bannerBox, main)

  let renderCount = 0
  const render = async () => {
    const drawn = location.hash
    const route = current()
    const log = Math.min(meta.logs.length - 1, Math.max(0, Number(route.params.get("log") ?? "0") || 0))
    const ctx: Context = { source, meta, log, params: route.params, afterMount: [] }
    const page = route.path[0] ?? "overview"
    const logParam = { log: log === 0 ? undefined : log }
    replace(
      nav,
      link(href(["overview"], logParam), h("span", { class: page === "overview" ? "active" : "" }, "Overview")),
      link(href(["trajectories"], logParam), h("span", { class: page === "trajectories" ? "active" : "" }, "Trajectories")),
      meta.logs.length > 1 ? link(href(["compare"]), h("span", { class: page === "compare" ? "active" : "" }, "Compare")) : null,
      h(
        "span",
        { class: "logs", "data-testid": "log-name" },
        meta.logs.length > 1
          ? meta.logs.map((l, i) =>
            i === log && page !== "compare"
              ? h("strong", null, `${"AB"[i]}: ${l.name}`)
              : link(href(page === "compare" ? ["overview"] : route.path.slice(0, 1), { log: i === 0 ? undefined : i }), `${"AB"[i]}: ${l.name}`)
          )
          : meta.logs[0]?.name ?? ""
      )
    )
    replace(bannerBox, banners(meta))
    const mine = ++renderCount
    const target = h("div", { class: `page page-${page}` })
    try {
      if (meta.logs.every((l) => l.trajectories === 0)) {
        target.appendChild(h("p", { class: "empty", "data-testid": "nothing" }, meta.logs.some((l) => l.indexing) ? "Indexing…" : "No trajectories to show: see the problems above."))
      } else if (page === "trajectories") await list(ctx, target)
      else if (page === "trajectory") await trajectory(ctx, target, Number(route.path[1]))
      else if (page === "compare") await compare(ctx, target)
      else await overview(ctx, target)
    } catch (error) {
      replace(target, h("div", { class: "banner error", "data-testid": "view-error" }, error instanceof Error ? error.message : String(error)))
    }
    if (mine !== renderCount) return
    main.replaceChildren(target)
    for (const mount of ctx.afterMount) mount()
    main.setAttribute("data-page", page)
    main.setAttribute("data-rendered", String(mine))
    // the URL this view was drawn for: a test (or a script) waits for it to be the page's URL
    main.setAttribute("data-hash", drawn)
  }

  window.addEventListener("hashchange", () => void render())
  await render()

  // Live: redraw when the logs grow (at most once a second), update the progress banner at once.
  let versions: string | undefined
  let pending: ReturnType<typeof setTimeout> | undefined
  let lastDraw = 0
  source.subscribe(
    async (state) => {
      meta = await source.meta()
      replace(bannerBox, banners(meta))
      const next = state.versions.join(",") + (state.indexing ? "+" : "")
      const first = versions === undefined
      if (next === versions) return
      versions = next
      // The first state describes what was just drawn, unless the logs were still being indexed.
      if (first && !state.indexing && !meta.live) return
      const page = current().path[0] ?? "overview"
      if (page === "trajectory") return
      if (pending !== undefined) return
      const wait = Math.max(0, 1000 - (Date.now() - lastDraw))
      pending = setTimeout(() => {
        pending = undefined
        lastDraw = Date.now()
        void render()
      }, wait)
    },
    (open) => replace(conn, open ? (meta.live ? "● live" : "● connected") : "○ disconnected")
  )
}

void start()
