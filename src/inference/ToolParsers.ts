/**
 * Tool calls parsed out of a model's text, one parser per model family, as vLLM's tool parsers
 * read them (`--tool-call-parser`): `hermes` (Hermes 2 Pro, Qwen 2.5/3: `<tool_call>{json}</tool_call>`),
 * `llama3_json` (Llama 3.x: JSON objects `{"name", "parameters"}`, `;`-separated) and `mistral`
 * (`[TOOL_CALLS]` then a JSON array, or `name{arguments}` per call as v11+ tokenizers write them).
 *
 * The results equal vLLM's on the vectors of vLLM's own tests (`test/fixtures/tool_parsers/`).
 * Text that holds a call the parser cannot read is kept whole as the reply's text, with the reason in
 * `malformed` (the log marks the turn `malformed_tool_call`).
 *
 * {@link wrap} applies a parser to a backend's completions for requests that offer tools and got no
 * structured calls: a server started without its own tool parser, or a text-only backend.
 *
 * @since 0.3.0
 */
import { Effect } from "effect"
import type { Completion, Service } from "../Inference.js"
import type { ToolCall } from "../Message.js"
import * as PyJson from "./internal/pyJson.js"

/**
 * @since 0.3.0
 * @category models
 */
export const names = ["hermes", "llama3_json", "mistral"] as const

/**
 * @since 0.3.0
 * @category models
 */
export type Name = typeof names[number]

/**
 * What a parser read: the text outside the calls (`null` when there is none, as vLLM gives it), the
 * calls, and why text that looked like a call was kept as text.
 *
 * @since 0.3.0
 * @category models
 */
export interface Parsed {
  readonly content: string | null
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly malformed?: string | undefined
}

/**
 * JSON as Python's `json.dumps` writes it (`", "` and `": "` separators, non-ASCII kept), which is
 * how vLLM's parsers re-serialise arguments; numbers read by {@link tryJson} keep Python's float or
 * int (`4.0` stays `4.0`, `1e-05` is written so, a big int exact).
 */
export const pythonJson = (value: unknown): string => {
  if (value instanceof PyJson.PyNumber) return value.toString()
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null"
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(", ")}]`
  return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`).join(", ")}}`
}

const call = (id: string, name: string, args: string): ToolCall => ({
  id,
  type: "function",
  function: { name, arguments: args }
})

const isObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u) && !(u instanceof PyJson.PyNumber)

const kept = (text: string, malformed: string): Parsed => ({ content: text, toolCalls: [], malformed })
const plain = (text: string): Parsed => ({ content: text, toolCalls: [] })

/** A JSON text's value (its numbers as Python reads them), or `undefined` when it is not JSON. */
const tryJson = (text: string): { readonly value: unknown } | undefined => {
  try {
    return { value: PyJson.parse(text) }
  } catch {
    return undefined
  }
}

// ---- hermes -------------------------------------------------------------------------------------

const HERMES_START = "<tool_call>"
const HERMES_END = "</tool_call>"

const hermes = (text: string, idOf: (i: number) => string): Parsed => {
  const start = text.indexOf(HERMES_START)
  if (start < 0) return plain(text)
  const calls: Array<ToolCall> = []
  let at = start
  while (at >= 0) {
    const bodyStart = at + HERMES_START.length
    const end = text.indexOf(HERMES_END, bodyStart)
    // A call without its closing tag runs to the end of the text (the model stopped at EOS).
    const body = text.slice(bodyStart, end < 0 ? text.length : end)
    const parsed = tryJson(body.trim())
    if (parsed === undefined || !isObject(parsed.value) || typeof parsed.value.name !== "string") {
      return kept(text, `${HERMES_START} ${calls.length + 1} is not a JSON object with a name: ${body.trim().slice(0, 80)}`)
    }
    const args = parsed.value.arguments
    calls.push(call(idOf(calls.length), parsed.value.name, pythonJson(args === undefined ? {} : args)))
    at = end < 0 ? -1 : text.indexOf(HERMES_START, end + HERMES_END.length)
  }
  const content = text.slice(0, start)
  return { content: content === "" ? null : content, toolCalls: calls }
}

// ---- llama3_json ----------------------------------------------------------------------------------

/**
 * The ends (exclusive) of JSON objects, braces counted outside strings: `end(from)` for a `{` at
 * `from`, `undefined` when it is never closed. Every `{` a scan passes outside strings is answered
 * by it too (an object inside another is read the same on its own), and a later scan jumps over
 * what is known, so that trying each `{` of the text, as vLLM does, scans it a few times rather
 * than once from every brace (200 KB of `{` took 78 s before).
 */
const objectEnds = (text: string) => {
  // per position: 0 not known, -1 never closed, else the end (a Map of 5 M entries took 4 s)
  const known = new Int32Array(text.length + 1)
  return (from: number): number | undefined => {
    if (known[from] !== 0) return known[from] < 0 ? undefined : known[from]
    const open: Array<number> = []
    let inString = false
    for (let i = from; i < text.length; i++) {
      const ch = text[i]
      if (inString) {
        if (ch === "\\") i++
        else if (ch === "\"") inString = false
      } else if (ch === "\"") inString = true
      else if (ch === "{") {
        const end = known[i]
        if (end < 0) break
        if (end > 0) i = end - 1
        else open.push(i)
      } else if (ch === "}") {
        const at = open.pop()!
        known[at] = i + 1
        if (open.length === 0) return i + 1
      }
    }
    for (const at of open) known[at] = -1
    known[from] = -1
    return undefined
  }
}

/**
 * How many characters of JSON llama3_json may hand to the JSON parser per character of text:
 * objects nested in an object that is not JSON are each tried (`{{{...}}}`), which would be
 * quadratic. Real replies use about one.
 */
const LLAMA3_JSON_PER_CHAR = 8

const llama3Json = (text: string, idOf: (i: number) => string): Parsed => {
  const calls: Array<ToolCall> = []
  const objectEnd = objectEnds(text)
  let budget = LLAMA3_JSON_PER_CHAR * text.length + 65_536
  let i = text.indexOf("{")
  while (i >= 0) {
    const end = objectEnd(i)
    if (end !== undefined && (budget -= end - i) < 0) {
      return kept(text, `its objects nest too deep to read as calls (over ${LLAMA3_JSON_PER_CHAR} times its length to parse)`)
    }
    const parsed = end === undefined ? undefined : tryJson(text.slice(i, end))
    if (parsed === undefined || end === undefined) {
      i = text.indexOf("{", i + 1)
      continue
    }
    const value = parsed.value
    if (isObject(value) && typeof value.name === "string" && ("parameters" in value || "arguments" in value)) {
      const args = "parameters" in value ? value.parameters : value.arguments
      calls.push(call(idOf(calls.length), value.name, pythonJson(args)))
    }
    i = text.indexOf("{", end)
  }
  if (calls.length > 0) return { content: null, toolCalls: calls }
  return /\{\s*"name"\s*:/.test(text) ? kept(text, "a JSON object with \"name\" that is not a complete tool call") : plain(text)
}

// ---- mistral ----------------------------------------------------------------------------------------

const MISTRAL_BOT = "[TOOL_CALLS]"

const mistral = (text: string, idOf: (i: number) => string): Parsed => {
  const first = text.indexOf(MISTRAL_BOT)
  if (first < 0) return plain(text)
  const before = text.slice(0, first)
  const content = before === "" ? null : before
  const after = text.slice(first + MISTRAL_BOT.length).trimStart()
  const calls: Array<ToolCall> = []
  if (after.startsWith("[")) {
    // the JSON array of calls, as tokenizers before v11 have the model write it
    const parsed = tryJson(after.trimEnd())
    if (parsed === undefined || !Array.isArray(parsed.value)) return kept(text, `${MISTRAL_BOT} is not followed by a JSON array`)
    for (const item of parsed.value) {
      if (!isObject(item) || typeof item.name !== "string") return kept(text, `${MISTRAL_BOT}: a call without a name`)
      calls.push(call(idOf(calls.length), item.name, pythonJson(item.arguments === undefined ? {} : item.arguments)))
    }
    return { content, toolCalls: calls }
  }
  // v11+: `name{arguments}` after each [TOOL_CALLS]; the arguments as the model wrote them
  for (const part of text.slice(first + MISTRAL_BOT.length).split(MISTRAL_BOT)) {
    const brace = part.indexOf("{")
    const name = brace < 0 ? "" : part.slice(0, brace).trim()
    if (name === "" || /\s/.test(name)) return kept(text, `${MISTRAL_BOT} is not followed by name{arguments}`)
    calls.push(call(idOf(calls.length), name, part.slice(brace)))
  }
  return { content, toolCalls: calls }
}

/**
 * Parses `text` with the parser `name`; call ids come from `idOf` (the call's index in the reply).
 *
 * @since 0.3.0
 * @category parsing
 */
export const parse = (name: Name, text: string, idOf: (index: number) => string = (i) => `call_${i}`): Parsed => {
  switch (name) {
    case "hermes":
      return hermes(text, idOf)
    case "llama3_json":
      return llama3Json(text, idOf)
    case "mistral":
      return mistral(text, idOf)
  }
}

/**
 * The parser a chat template writes calls for: `mistral` for `[TOOL_CALLS]`, `llama3_json` for
 * Llama 3.x's `<|python_tag|>` / `"parameters"` templates, else `hermes` (Qwen 2.5/3, Hermes, and
 * the default when there is no template).
 *
 * @since 0.3.0
 * @category parsing
 */
export const defaultFor = (template: string | undefined): Name => chooseFor(template).name

/**
 * The choice of a backend whose calls are read by ms-swift's agent template (`swift rollout
 * --agent_template`, swift-rollout mode), each reply keeping its calls in its text: no parser here.
 *
 * @since 0.3.0
 * @category constants
 */
export const AGENT_TEMPLATE = {
  name: "agent_template",
  chosenBy: "the swift rollout backend (its agent template reads the calls; a reply keeps them in its text)"
} as const

/**
 * {@link defaultFor} with what decided it, for the run's record and summary.
 *
 * @since 0.3.0
 * @category parsing
 */
export const chooseFor = (
  template: string | undefined,
  /** What `template` is, for `chosenBy`: the template's source, or a rendering of a call by it. */
  what = "the chat template"
): { readonly name: Name; readonly chosenBy: string } =>
  template === undefined
    ? { name: "hermes", chosenBy: "the default (no chat template known here)" }
    : template.includes(MISTRAL_BOT)
    ? { name: "mistral", chosenBy: `${what} (it writes ${MISTRAL_BOT})` }
    : template.includes(HERMES_START)
    ? { name: "hermes", chosenBy: `${what} (it writes ${HERMES_START})` }
    : template.includes("<|python_tag|>") || template.includes("Environment: ipython")
    ? { name: "llama3_json", chosenBy: `${what} (Llama 3.x: <|python_tag|>, Environment: ipython)` }
    : { name: "hermes", chosenBy: `the default (${what} shows none of the known call formats)` }

/**
 * A completion with its calls parsed out of its text (a completion that already has calls, as a
 * server with its own parser sends them, is left as it is).
 *
 * @since 0.3.0
 * @category parsing
 */
export const applyTo = (name: Name, completion: Completion, idPrefix: string): Completion => {
  if (completion.toolCalls !== undefined && completion.toolCalls.length > 0) return completion
  const parsed = parse(name, completion.text, (i) => `${idPrefix}_${i}`)
  if (parsed.toolCalls.length > 0) {
    return {
      ...completion,
      text: parsed.content ?? "",
      toolCalls: parsed.toolCalls,
      finishReason: completion.finishReason === "stop" ? "tool_calls" : completion.finishReason
    }
  }
  return parsed.malformed === undefined ? completion : { ...completion, malformedToolCall: parsed.malformed }
}

/**
 * A backend whose completions, for requests that offer tools, have their calls parsed out of the
 * text by `name`. Requests without tools are passed through untouched.
 *
 * @since 0.3.0
 * @category combinators
 */
export const wrap = (service: Service, name: Name, chosenBy = "the caller"): Service => ({
  ...service,
  toolParser: { name, chosenBy },
  chat: (request) => {
    const answer = service.chat(request)
    if (request.tools === undefined || request.tools.length === 0) return answer
    return Effect.map(answer, (c) => applyTo(name, c, `call_${request.trajectoryId}_${request.turn}`))
  }
})
