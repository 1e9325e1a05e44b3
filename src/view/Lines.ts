/**
 * One line of a completions log as the viewer's index needs it: its summary, or what is wrong with
 * it (malformed JSON, a field of the wrong type), named by file, line and field.
 *
 * Indexing a large log parses every line, and the conversation (and the token arrays) are most of
 * a line's bytes but none of its summary. Lines written by effect-gym have a fixed key order (row,
 * generation, id, env, env_config, messages, rewards, ..., timings), so the head before
 * `"messages"` and the tail from `"rewards"` are parsed on their own, the token arrays cut out of
 * the tail. A raw `,"messages":[` or `],"rewards":` cannot occur inside a JSON string (its quotes
 * would be escaped), and each part parses only if the cut fell at the top level, so a line of any
 * other shape (another key order, such a key nested in env_config) is parsed whole instead: that
 * also gives the error message of a malformed line.
 *
 * @since 0.1.0
 */
import { isRecord } from "../internal/inspect.js"
import { replyChars } from "../internal/replyChars.js"
import type { EndReason, Problem, Summary } from "./Model.js"

const parseOrUndefined = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** The token fields, in the writer's order: from the first of them to `timings`, all are cut. */
const TOKEN_KEYS = [",\"response_token_ids\":", ",\"prompt_token_ids\":", ",\"token_ids\":"]
const HAS_IDS = /"(?:response_token_ids|token_ids)":\[/

const ROLE_ASSISTANT = "\"role\":\"assistant\""
const THEN_CONTENT = ",\"content\":\""
const THEN_TOOL_CALLS = ",\"tool_calls\":"

/** Where the string {@link stringLength} last read ends (its closing quote): no pair allocated per message. */
let stringEnd = 0

/**
 * The length (as JavaScript counts it) of the JSON string whose text starts at `from` (after its
 * opening quote), read without decoding it; where it ends goes to `stringEnd`.
 */
const stringLength = (s: string, from: number): number => {
  let length = 0
  let i = from
  let backslash = s.indexOf("\\", i)
  for (;;) {
    const quote = s.indexOf("\"", i)
    if (quote < 0) {
      stringEnd = s.length
      return length + s.length - i
    }
    if (backslash < 0 || backslash > quote) {
      stringEnd = quote
      return length + quote - i
    }
    // an escape: one character, `\uXXXX` included (non-ASCII is written as is, so one UTF-16 unit)
    length += backslash - i + 1
    i = backslash + (s.charCodeAt(backslash + 1) === 117 ? 6 : 2)
    backslash = s.indexOf("\\", i)
  }
}

/**
 * The characters of the assistant messages' text in the conversation `s.slice(from, to)` (as the
 * run's summary counts them), without parsing it; `undefined` when an assistant message is not
 * written as effect-gym writes it (`{"role":"assistant","content":"...`).
 *
 * @since 0.4.0
 * @category parsing
 */
export const assistantChars = (s: string, from: number, to: number): number | undefined => {
  let chars = 0
  for (let i = s.indexOf(ROLE_ASSISTANT, from); i >= 0 && i < to; i = s.indexOf(ROLE_ASSISTANT, i)) {
    const content = i + ROLE_ASSISTANT.length
    if (s.charCodeAt(i - 1) !== 123 || !s.startsWith(THEN_CONTENT, content)) return undefined
    chars += stringLength(s, content + THEN_CONTENT.length)
    i = stringEnd
    // (its tool calls are counted too: read from the parsed messages)
    if (s.startsWith(THEN_TOOL_CALLS, i + 1)) return undefined
  }
  return chars
}

/**
 * The tokens of `"response_token_ids":[[...],...]` starting at `from` (at its `[`), counted without
 * parsing them; `null` when a turn has none (`null`), as the run's summary counts only trajectories
 * whose every turn has ids.
 */
const countTokens = (s: string, from: number): number | null => {
  let depth = 0
  let tokens = 0
  let inArray = false
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c === 91) {
      depth++
      if (depth === 2) inArray = false
    } else if (c === 93) {
      depth--
      if (depth === 0) return tokens
    } else if (depth === 1 && c === 110) {
      return null
    } else if (depth === 2 && c !== 44 && c !== 32 && !inArray) {
      inArray = true
      tokens++
    } else if (depth === 2 && c === 44) {
      inArray = false
    }
  }
  return null
}

/** The completion tokens of a parsed line's `response_token_ids`: `null` without them, or when a turn has none. */
const tokensOf = (ids: unknown): number | null => {
  if (!Array.isArray(ids) || ids.length === 0) return null
  let tokens = 0
  for (const turn of ids) {
    if (!Array.isArray(turn)) return null
    tokens += turn.length
  }
  return tokens
}

/**
 * The line without its conversation (`messages` is `null`, `__completion_chars` the characters of
 * the model's replies in it) and, when the cut is safe, without the token fields (replaced by
 * `__token_ids`: whether they held token ids, and `__completion_tokens`); `undefined` when the line
 * is not in effect-gym's key order (then parse it whole).
 */
export const skim = (s: string): Record<string, unknown> | undefined => {
  const m = s.indexOf(",\"messages\":[")
  if (m < 0) return undefined
  const r = s.indexOf("],\"rewards\":", m)
  if (r < 0) return undefined
  const head = parseOrUndefined(s.slice(0, m) + "}")
  if (!isObject(head)) return undefined
  let tail: unknown
  const tailText = s.slice(r + 2)
  let k = -1
  for (const key of TOKEN_KEYS) {
    const i = tailText.indexOf(key)
    if (i >= 0 && (k < 0 || i < k)) k = i
  }
  const t = k < 0 ? -1 : tailText.lastIndexOf(",\"timings\":")
  if (t > k) {
    const ids = HAS_IDS.test(tailText.slice(k, t))
    const at = tailText.indexOf(TOKEN_KEYS[0], k)
    const tokens = at < 0 || at >= t ? null : countTokens(tailText, at + TOKEN_KEYS[0].length)
    tail = parseOrUndefined(
      "{" + tailText.slice(0, k) + `,"__token_ids":${ids},"__completion_tokens":${tokens}` + tailText.slice(t)
    )
  }
  if (!isObject(tail)) tail = parseOrUndefined("{" + tailText)
  if (!isObject(tail)) return undefined
  // Assigned, not spread: a new object per line costs more than parsing a small tail.
  for (const key in head) if (!(key in tail)) tail[key] = head[key]
  tail.messages = null
  const chars = assistantChars(s, m, r)
  if (chars === undefined) {
    const messages = parseOrUndefined(s.slice(m + 12, r + 1))
    tail.__completion_chars = Array.isArray(messages) ? charsOf(messages) : 0
  } else {
    tail.__completion_chars = chars
  }
  return tail
}

const num = (u: unknown): number => (typeof u === "number" && Number.isFinite(u) ? u : 0)

/** The characters the model wrote in a parsed conversation (its text and tool calls: {@link replyChars}). */
const charsOf = (messages: ReadonlyArray<unknown>): number => {
  let chars = 0
  for (const m of messages) chars += replyChars(m)
  return chars
}

const MESSAGE_CHARS = 300

/**
 * The summary of one line, or the problem that keeps it out of the index. `file` names it in the
 * problem; `line` is its line number (1-based).
 *
 * @since 0.1.0
 * @category parsing
 */
export const summarize = (text: string, file: string, line: number): Summary | Problem => {
  let value: unknown = skim(text)
  if (value === undefined) {
    try {
      value = JSON.parse(text)
    } catch (error) {
      return { file, line, kind: "malformed", detail: `not JSON: ${error instanceof Error ? error.message : String(error)}` }
    }
  }
  return summarizeValue(value, file, line)
}

/**
 * The summary of a parsed line (see {@link summarize}).
 *
 * @since 0.1.0
 * @category parsing
 */
export const summarizeValue = (value: unknown, file: string, line: number): Summary | Problem => {
  const problem = (kind: Problem["kind"], detail: string): Problem => ({ file, line, kind, detail })
  if (!isRecord(value)) return problem("shape", "not a JSON object (a completions log line is one object per line)")
  const field = (name: string, detail: string) => problem("shape", `${name}: ${detail}`)
  const { end_reason, error, generation, id, row, rollout_infos, timings } = value
  if (typeof row !== "number" || !Number.isInteger(row)) return field("row", "expected an integer")
  if (typeof generation !== "number" || !Number.isInteger(generation)) return field("generation", "expected an integer")
  if (typeof id !== "string") return field("id", "expected a string")
  if (end_reason !== "done" && end_reason !== "max_turns" && end_reason !== "error") {
    return field("end_reason", `expected "done", "max_turns" or "error", got ${JSON.stringify(end_reason) ?? "nothing"}`)
  }
  if (!isRecord(rollout_infos)) return field("rollout_infos", "expected an object")
  if (typeof rollout_infos.num_turns !== "number") return field("rollout_infos.num_turns", "expected a number")
  if (value.reward !== null && typeof value.reward !== "number") return field("reward", "expected a number or null")
  if (value.advantage !== null && value.advantage !== undefined && typeof value.advantage !== "number") {
    return field("advantage", "expected a number or null")
  }
  if (error !== null && error !== undefined && (!isRecord(error) || typeof error._tag !== "string")) {
    return field("error", "expected null or an object with a _tag")
  }
  if (value.env !== null && value.env !== undefined && typeof value.env !== "string") {
    return field("env", "expected a string or null")
  }
  if (!("messages" in value)) return field("messages", "missing")
  let modelMs = 0
  let envMs = 0
  // (logs written before wait_ms have none: no waiting measured)
  let waitMs = isRecord(timings) ? num(timings.reset_wait_ms) : 0
  if (isRecord(timings) && Array.isArray(timings.turns)) {
    for (const turn of timings.turns) {
      if (isRecord(turn)) {
        modelMs += num(turn.model_ms)
        envMs += num(turn.env_ms)
        waitMs += num(turn.wait_ms)
      }
    }
  }
  const stepInfos = Array.isArray(rollout_infos.step_infos) ? rollout_infos.step_infos : []
  const lastInfo: unknown = stepInfos[stepInfos.length - 1]
  const success = isRecord(lastInfo) ? lastInfo.is_success : undefined
  const finishReasons = Array.isArray(value.finish_reasons) ? value.finish_reasons : []
  const failed = isRecord(error)
  let rewards: Record<string, number> | null = null
  if (!failed && isRecord(value.rewards)) {
    rewards = value.rewards as Record<string, number>
    // (copied only when a value is not a finite number, which a log written by effect-gym never has)
    for (const column in rewards) {
      if (num(rewards[column]) !== rewards[column]) {
        rewards = Object.fromEntries(Object.entries(value.rewards).map(([c, x]) => [c, num(x)]))
        break
      }
    }
  }
  const message = failed && typeof error.message === "string" ? error.message : null
  return {
    line,
    id,
    row,
    generation,
    env: typeof value.env === "string" ? value.env : null,
    endReason: end_reason as EndReason,
    reward: failed ? null : (value.reward as number | null),
    envReward: num(rollout_infos.total_reward),
    advantage: typeof value.advantage === "number" ? value.advantage : null,
    turns: rollout_infos.num_turns,
    totalMs: isRecord(timings) ? num(timings.total_ms) : 0,
    modelMs,
    envMs,
    waitMs,
    errorTag: failed ? (error._tag as string) : null,
    errorMessage: message === null ? null : message.length > MESSAGE_CHARS ? message.slice(0, MESSAGE_CHARS) + "…" : message,
    tokens: value.__token_ids === true || Array.isArray(value.response_token_ids) || Array.isArray(value.token_ids),
    config: JSON.stringify(value.env_config ?? null),
    solved: typeof success === "boolean" ? success && !failed : null,
    rewards,
    truncated: end_reason === "max_turns"
      ? "max_turns"
      : end_reason === "done" && finishReasons[finishReasons.length - 1] === "length"
      ? "length"
      : null,
    completionTokens: "__completion_tokens" in value
      ? (typeof value.__completion_tokens === "number" ? value.__completion_tokens : null)
      : tokensOf(value.response_token_ids),
    completionChars: typeof value.__completion_chars === "number"
      ? value.__completion_chars
      : Array.isArray(value.messages)
      ? charsOf(value.messages)
      : 0
  }
}

/**
 * @since 0.1.0
 * @category predicates
 */
export const isProblem = (u: Summary | Problem): u is Problem => "kind" in u
