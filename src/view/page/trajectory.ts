/** One trajectory: the conversation with each turn's step, the env's board, the token view, the JSON. */
import type { Detail, Frame, Rendered, Token, TokenView } from "../Detail.js"
import { h, link, ms, num, replace } from "./dom.js"
import type { Context } from "./overview.js"
import { href } from "./router.js"

type ToolCall = { readonly id: string; readonly name: string; readonly arguments: string }
type Message = {
  readonly role: string
  readonly content: string
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly toolCallId: string | undefined
  readonly name: string | undefined
}

/** A log line's message as the page shows it: text, and an assistant's tool calls or a tool message's call id. */
const messageOf = (m: Record<string, unknown>): Message => ({
  role: String(m.role),
  content: String(m.content ?? ""),
  toolCalls: arr(m.tool_calls).filter(isRecord).map((c) => {
    const fn = isRecord(c.function) ? c.function : {}
    return { id: String(c.id ?? ""), name: String(fn.name ?? ""), arguments: String(fn.arguments ?? "") }
  }),
  toolCallId: typeof m.tool_call_id === "string" ? m.tool_call_id : undefined,
  name: typeof m.name === "string" ? m.name : undefined
})

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const arr = (u: unknown): ReadonlyArray<unknown> => (Array.isArray(u) ? u : [])

const pretty = (value: unknown) => h("pre", { class: "json" }, JSON.stringify(value, null, 2))

const here = (ctx: Context, line: number, changes: Record<string, string | number | undefined>) => {
  const params = new URLSearchParams(ctx.params)
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined) params.delete(k)
    else params.set(k, String(v))
  }
  return href(["trajectory", line], params)
}

/** The board panel: one frame at a time, with previous / next (each frame has its URL). */
const board = (ctx: Context, line: number, rendered: Rendered, step: number) => {
  const frame: Frame | undefined = rendered.frames[Math.min(step, rendered.frames.length - 1)]
  const index = frame === undefined ? 0 : rendered.frames.indexOf(frame)
  const grid = frame?.grid
  const blocks = grid?.blocks
  return h(
    "aside",
    { class: "board", "data-testid": "board", "data-renderer": rendered.renderer, "data-frame": index, "data-frames": rendered.frames.length },
    h("h3", null, rendered.title),
    h(
      "div",
      { class: "board-nav" },
      index > 0 ? link(here(ctx, line, { step: index - 1 }), "← previous") : h("span", { class: "muted" }, "← previous"),
      h("span", { "data-testid": "frame-label" }, frame?.label ?? "no frames"),
      index < rendered.frames.length - 1 ? link(here(ctx, line, { step: index + 1 }), "next →") : h("span", { class: "muted" }, "next →")
    ),
    grid === undefined
      ? null
      : h(
        "table",
        { class: `cells${blocks !== undefined ? " blocks" : ""}`, "data-testid": "board-grid" },
        h(
          "tbody",
          null,
          grid.cells.map((row, i) =>
            h(
              "tr",
              { class: blocks !== undefined && (i + 1) % blocks === 0 && i + 1 < grid.cells.length ? "block-end" : "" },
              row.map((cell, j) =>
                h(
                  "td",
                  {
                    class: `cell tone-${cell.tone ?? "plain"}${blocks !== undefined && (j + 1) % blocks === 0 && j + 1 < row.length ? " block-right" : ""}`,
                    title: cell.title,
                    "data-tone": cell.tone ?? "plain"
                  },
                  cell.text
                )
              )
            )
          )
        )
      ),
    h("ul", { class: "notes", "data-testid": "frame-notes" }, (frame?.notes ?? []).map((n) => h("li", { class: `note-${n.tone ?? "info"}` }, n.text))),
    h(
      "div",
      { class: "frame-strip" },
      rendered.frames.map((f, i) => link(here(ctx, line, { step: i }), h("span", { class: i === index ? "current" : "" }, String(f.turn))))
    ),
    (rendered.notes ?? []).length > 0 ? h("ul", { class: "notes" }, (rendered.notes ?? []).map((n) => h("li", { class: `note-${n.tone ?? "info"}` }, n.text))) : null
  )
}

const conversation = (ctx: Context, detail: Detail, step: number, hasBoard: boolean) => {
  const line = detail.line
  const messages = arr(line.messages).filter(isRecord).map(messageOf)
  const infos = isRecord(line.rollout_infos) ? line.rollout_infos : {}
  const stepRewards = arr(infos.step_rewards)
  const stepInfos = arr(infos.step_infos)
  const timings = isRecord(line.timings) ? line.timings : {}
  const turnTimings = arr(timings.turns)
  const finish = arr(line.finish_reasons)
  const numTurns = typeof infos.num_turns === "number" ? infos.num_turns : 0
  const done = infos.gym_done === true
  const items: Array<HTMLElement> = []
  let turn = 0
  let seenUser = false
  for (const message of messages) {
    if (message.role === "assistant") turn++
    const isObservation = message.role === "user"
    const label = message.role === "assistant"
      ? `turn ${turn}: model`
      : isObservation
      ? (seenUser ? `observation after turn ${turn}` : "reset observation")
      : message.role === "tool"
      ? `tool ${message.name ?? ""} answers ${message.toolCallId ?? "?"}`
      : message.role
    if (isObservation) seenUser = true
    items.push(
      h(
        "div",
        { class: `message role-${message.role}${hasBoard && message.role === "assistant" && turn === step ? " selected" : ""}`, "data-testid": `message-${message.role}`, "data-turn": turn },
        h("div", { class: "message-head" }, label, hasBoard && message.role === "assistant" ? link(here(ctx, detail.summary.line, { step: turn }), "board") : null),
        // (a reply that is only tool calls has no text to show)
        message.content === "" && message.toolCalls.length > 0 ? null : h("pre", { class: "content" }, message.content),
        message.toolCalls.length === 0 ? null : h(
          "div",
          { class: "tool-calls" },
          message.toolCalls.map((c) =>
            h("pre", { class: "tool-call", "data-testid": "tool-call", title: c.id }, `→ ${c.name}(${c.arguments})  [${c.id}]`)
          )
        )
      )
    )
    if (message.role === "assistant") {
      const t = turn - 1
      const timing = isRecord(turnTimings[t]) ? turnTimings[t] : undefined
      const reward = stepRewards[t]
      const info = stepInfos[t]
      const answered = t < stepInfos.length || t < stepRewards.length
      items.push(
        h(
          "div",
          { class: "step", "data-testid": "step", "data-turn": turn },
          answered
            ? [
              h("span", null, "reward ", h("strong", null, typeof reward === "number" ? num(reward, 4) : "–")),
              h("span", null, "done ", h("strong", null, turn === numTurns && done ? "yes" : "no")),
              h("span", null, "finish ", String(finish[t] ?? "–")),
              h("span", null, "model ", ms(typeof timing?.model_ms === "number" ? timing.model_ms : null)),
              h("span", null, "env ", ms(typeof timing?.env_ms === "number" ? timing.env_ms : null)),
              typeof timing?.wait_ms === "number" && timing.wait_ms > 0 ? h("span", null, "waiting ", ms(timing.wait_ms)) : null,
              info === undefined ? null : h("details", null, h("summary", null, "infos"), pretty(info))
            ]
            : h("span", { class: "muted" }, "the env did not answer this turn", detail.summary.errorTag === null ? "" : ` (${detail.summary.errorTag})`)
        )
      )
    }
  }
  return h("div", { class: "conversation", "data-testid": "conversation" }, items)
}

const logprobColor = (lp: number | null): string => {
  if (lp === null) return "transparent"
  const p = Math.exp(Math.max(-20, Math.min(0, lp)))
  // red (unlikely) -> yellow -> green (likely)
  return `hsla(${Math.round(p * 120)}, 75%, 50%, 0.35)`
}

/**
 * A token's text made visible: newlines and tabs marked, other control characters as `\xHH`
 * escapes, a leading or trailing space as `·`. `�` stays: a byte token that is only part of a
 * UTF-8 character has no text of its own.
 */
const visible = (text: string) =>
  text
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`)
    .replace(/\n/g, "↵\n")
    .replace(/\t/g, "→\t")
    .replace(/^ | $/g, "·")

/** One token as a span: text (or id), trained underline, logprob colour, details on hover. */
const tokenSpan = (t: Token) =>
  h(
    "span",
    {
      class: `token${t.mask === 1 ? " trained" : ""}${t.text === null ? " id-only" : ""}`,
      style: `background:${logprobColor(t.logprob)}`,
      "data-testid": "token",
      "data-id": t.id,
      "data-mask": t.mask ?? "",
      "data-logprob": t.logprob ?? "",
      title: `id ${t.id}${t.logprob === null ? "" : ` · logprob ${t.logprob.toFixed(4)} (p ${Math.exp(t.logprob).toFixed(3)})`}${t.mask === null ? "" : ` · loss mask ${t.mask}`}${t.text === null ? "" : ` · text ${JSON.stringify(t.text)}`}`
    },
    t.text === null ? String(t.id) : visible(t.text)
  )

const sequence = (view: TokenView) => {
  const s = view.sequence
  if (s === null) return null
  if ("unavailable" in s) return h("p", { class: "note", "data-testid": "sequence-unavailable" }, `No token sequence: ${s.unavailable}`)
  const trained = s.tokens.filter((t) => t.mask === 1).length
  return h(
    "div",
    { class: "token-turn", "data-testid": "token-sequence" },
    h("h4", null, `the whole sequence (token in, token out): ${s.prompt.length} prompt tokens, ${s.tokens.length} after them, ${trained} trained (loss mask 1)`),
    s.problems.map((p) => h("p", { class: "warning" }, p)),
    h("details", null, h("summary", null, `the prompt (${s.prompt.length} tokens)`), h("div", { class: "token-row" }, s.prompt.map(tokenSpan))),
    h("div", { class: "token-row" }, s.tokens.map(tokenSpan))
  )
}

const tokens = (view: TokenView) =>
  h(
    "section",
    { class: "tokens", "data-testid": "tokens" },
    h("p", { class: "note", "data-testid": "tokens-note" }, view.note),
    h(
      "p",
      { class: "legend" },
      h("span", { class: "token trained" }, "trained (loss mask 1)"),
      " ",
      h("span", { class: "token" }, "not trained"),
      " · background: probability of the token, ",
      h("span", { class: "token", style: `background:${logprobColor(Math.log(0.02))}` }, "low"),
      " ",
      h("span", { class: "token", style: `background:${logprobColor(Math.log(0.5))}` }, "mid"),
      " ",
      h("span", { class: "token", style: `background:${logprobColor(0)}` }, "high")
    ),
    sequence(view),
    view.turns.map((turn) =>
      h(
        "div",
        { class: "token-turn", "data-testid": "token-turn", "data-turn": turn.turn },
        h(
          "h4",
          null,
          `turn ${turn.turn}`,
          turn.tokens === null ? " — no token ids from the backend" : ` — ${turn.tokens.length} tokens`,
          turn.matches === null ? null : h("span", { class: `match match-${turn.matches}`, "data-testid": "token-match" }, turn.matches === "exact" ? "decoded = message" : turn.matches === "whitespace" ? "decoded = message (but for whitespace)" : "decoded ≠ message")
        ),
        turn.problems.map((p) => h("p", { class: "warning" }, p)),
        turn.tokens === null ? null : h("div", { class: "token-row" }, turn.tokens.map(tokenSpan)),
        turn.decoded !== null && turn.matches === "differs"
          ? h("div", { class: "diff" }, h("div", null, "decoded: ", h("pre", null, turn.decoded)), h("div", null, "message: ", h("pre", null, turn.message ?? "")))
          : null
      )
    )
  )

export const trajectory = async (ctx: Context, el: HTMLElement, line: number) => {
  const detail = await ctx.source.trajectory(ctx.log, line)
  const s = detail.summary
  const tab = ctx.params.get("tab") ?? "conversation"
  const rendered = detail.rendered !== null && !("error" in detail.rendered) ? detail.rendered : null
  const stepParam = Number(ctx.params.get("step") ?? "0")
  const step = Number.isInteger(stepParam) && stepParam >= 0 ? stepParam : 0
  const error = isRecord(detail.line.error) ? detail.line.error : null
  const tabs = [
    ["conversation", "Conversation"],
    ...(detail.tokens !== null ? [["tokens", "Tokens"]] : []),
    ["json", "JSON"]
  ] as const
  let body: HTMLElement
  if (tab === "tokens" && detail.tokens !== null) body = tokens(detail.tokens)
  else if (tab === "json") body = h("section", { "data-testid": "json" }, pretty(detail.line))
  else {
    body = h(
      "section",
      { class: rendered === null ? "" : "with-board" },
      conversation(ctx, detail, step, rendered !== null),
      rendered === null ? null : board(ctx, line, rendered, step)
    )
  }
  replace(
    el,
    h(
      "header",
      { class: "trajectory-head", "data-testid": "trajectory-head" },
      h("h1", null, s.id, " ", h("span", { class: `badge ${s.endReason}` }, s.endReason)),
      h(
        "p",
        { class: "facts" },
        `line ${s.line} · row ${s.row} · generation ${s.generation} · env ${s.env ?? "–"} · reward ${num(s.reward, 4)} · env reward ${num(s.envReward, 4)} · advantage ${num(s.advantage, 4)} · ${s.turns} turns · ${ms(s.totalMs)} (model ${ms(s.modelMs)}, env ${ms(s.envMs)}${s.waitMs > 0 ? `, waiting to be scheduled ${ms(s.waitMs)}` : ""})${
          s.solved === null ? "" : s.solved ? " · solved" : " · not solved"
        }`
      ),
      h("p", null, link(href(["trajectories"], { log: ctx.log === 0 ? undefined : ctx.log, row: s.row }), `the other generations of row ${s.row}`))
    ),
    error === null
      ? null
      : h("div", { class: "error-box", "data-testid": "error" }, h("code", null, String(error._tag)), " ", String(error.message ?? ""), h("details", null, h("summary", null, "fields"), pretty(error))),
    detail.problems.length === 0
      ? null
      : h("div", { class: "warning", "data-testid": "schema-problems" }, "This line does not match the completions log schema:", h("ul", null, detail.problems.map((p) => h("li", null, p)))),
    detail.rendered !== null && "error" in detail.rendered ? h("p", { class: "warning" }, detail.rendered.error) : null,
    h("nav", { class: "tabs" }, tabs.map(([id, label]) => (id === tab ? h("strong", { "data-testid": `tab-${id}` }, label) : link(here(ctx, line, { tab: id === "conversation" ? undefined : id }), h("span", { "data-testid": `tab-${id}` }, label))))),
    body
  )
}
