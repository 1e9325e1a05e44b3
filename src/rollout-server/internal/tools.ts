/**
 * Tools on the rollout server's endpoints.
 *
 * - A request's `tools` (ms-swift's `RolloutInferRequest.tools`, `Optional[List[Tool]]`): each one
 *   OpenAI's `{"type": "function", "function": {name, description, parameters}}` or the function
 *   object alone (ms-swift's `BaseAgentTemplate.wrap_tool` takes both), checked into specs with
 *   errors that name the field and its index; `tool_choice` in OpenAI's shape.
 * - {@link offering}: the backend with the request's tools offered on every call of its
 *   trajectories (next to the env's own), so that they reach the model as the env's do: OpenAI's
 *   `tools` in server mode, the chat template's `tools` on the token path and in colocate mode.
 * - {@link fromAgentFormat}: a request's messages in ms-swift's agent format (`tool_call`,
 *   `tool_response`) in OpenAI's form.
 * - {@link swiftMessages}: a conversation in the form ms-swift's trainer reads: each reply's calls
 *   written in its text, as ms-swift's agent templates write them, and no `tool_calls` key (its
 *   template renders an assistant's `tool_calls` again after the reply's own tokens).
 */
import { Effect, Result } from "effect"
import type { Service } from "../../Inference.js"
import { InferenceError } from "../../Inference.js"
import * as PyJson from "../../inference/internal/pyJson.js"
import { AGENT_TEMPLATE, pythonJson } from "../../inference/ToolParsers.js"
import { isRecord, nestsDeeper } from "../../internal/inspect.js"
import { schemaProblem } from "../../internal/jsonSchema.js"
import { stringify } from "../../internal/lift.js"
import type { Message, ToolCall } from "../../Message.js"
import type * as Tool from "../../Tool.js"
import { ApiError } from "./http.js"

/** A value as the error shows it: JSON, cut short (a tool may be megabytes). */
const shown = (value: unknown): string => {
  if (nestsDeeper(value, 16)) return "a value nested deeper than 16 levels"
  const text = String(stringify(value))
  return text.length > 80 ? `${text.slice(0, 77)}...` : text
}

const invalid = (path: string, detail: string) => Result.fail(new ApiError({ reason: "InvalidBody", path, detail }))

const SHAPE = `{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}} ` +
  "(or the function object alone)"
const FUNCTION_KEYS = new Set(["name", "description", "parameters"])
/** Deeper than any real schema of arguments, and far from the stack's limit for the checks and JSON that follow. */
const MAX_DEPTH = 64

/**
 * A request's tools as specs, or `undefined` for none (`null` or `[]`). Fields that would not reach
 * the model (`strict`, ms-swift's `name_for_model`, ...) are refused, not dropped.
 */
export const decodeTools = (
  tools: ReadonlyArray<unknown> | null | undefined,
  path: string
): Result.Result<ReadonlyArray<Tool.Spec> | undefined, ApiError> => {
  if (tools === null || tools === undefined || tools.length === 0) return Result.succeed(undefined)
  const specs: Array<Tool.Spec> = []
  const seen = new Map<string, number>()
  for (let j = 0; j < tools.length; j++) {
    const tool = tools[j]
    const at = `${path}[${j}]`
    if (!isRecord(tool)) return invalid(at, `expected a tool, ${SHAPE}; got ${shown(tool)}`)
    let fn: Readonly<Record<string, unknown>> = tool
    let fnAt = at
    if ("type" in tool || "function" in tool) {
      const extra = Object.keys(tool).find((key) => key !== "type" && key !== "function")
      if (extra !== undefined) return invalid(`${at}.${extra}`, "not a field of a tool (only type and function)")
      if (tool.type !== "function") return invalid(`${at}.type`, `expected "function", got ${shown(tool.type)}`)
      if (!isRecord(tool.function)) return invalid(`${at}.function`, `expected the function object, got ${shown(tool.function)}`)
      fn = tool.function
      fnAt = `${at}.function`
    }
    const extra = Object.keys(fn).find((key) => !FUNCTION_KEYS.has(key))
    if (extra !== undefined) {
      return invalid(
        `${fnAt}.${extra}`,
        "not a field of a function tool (name, description, parameters): it would not reach the model, so it is refused"
      )
    }
    const name = fn.name
    if (typeof name !== "string" || name.trim() === "") return invalid(`${fnAt}.name`, `expected a non-empty string, got ${shown(name)}`)
    const first = seen.get(name)
    if (first !== undefined) return invalid(`${fnAt}.name`, `${shown(name)} is offered twice (also ${path}[${first}])`)
    seen.set(name, j)
    if (typeof fn.description !== "string") {
      return invalid(`${fnAt}.description`, `expected a string (what the model reads about the tool), got ${shown(fn.description)}`)
    }
    const parameters = fn.parameters
    if (!isRecord(parameters) || parameters.type !== "object") {
      return invalid(
        `${fnAt}.parameters`,
        `expected a JSON Schema object of the arguments ({"type": "object", "properties": {...}}), got ${shown(parameters)}`
      )
    }
    if (nestsDeeper(parameters, MAX_DEPTH)) {
      return invalid(`${fnAt}.parameters`, `nested deeper than ${MAX_DEPTH} levels: not a tool's arguments schema`)
    }
    const problem = schemaProblem(parameters, "parameters")
    if (problem !== undefined) return invalid(`${fnAt}.parameters`, problem)
    specs.push({ name, description: fn.description, parameters })
  }
  return Result.succeed(specs)
}

/** A request's `tool_choice` (OpenAI's shape), or `undefined` when it gives none. */
export const decodeToolChoice = (
  choice: unknown,
  tools: ReadonlyArray<Tool.Spec> | undefined,
  path: string
): Result.Result<Tool.Choice | undefined, ApiError> => {
  if (choice === null || choice === undefined) return Result.succeed(undefined)
  if (tools === undefined) return invalid(path, "given without tools: there is nothing to choose from")
  if (choice === "auto" || choice === "none" || choice === "required") return Result.succeed(choice)
  const named = isRecord(choice) && choice.type === "function" && isRecord(choice.function) ? choice.function.name : undefined
  if (typeof named !== "string") {
    return invalid(
      path,
      `expected "auto", "none", "required" or {"type": "function", "function": {"name": ...}}, got ${shown(choice)}`
    )
  }
  if (!tools.some((t) => t.name === named)) {
    return invalid(`${path}.function.name`, `${shown(named)} is not one of the request's tools (${tools.map((t) => t.name).join(", ")})`)
  }
  return Result.succeed({ name: named })
}

const sameSpec = (a: Tool.Spec, b: Tool.Spec): boolean =>
  a.description === b.description && JSON.stringify(a.parameters) === JSON.stringify(b.parameters)

/**
 * The backend with `tools` offered on every call, after the env's own (a tool both offer must be the
 * same, else the call fails with `field: "tools"`: the model would see two tools of one name), and
 * `choice` over the env's.
 */
export const offering = (service: Service, tools: ReadonlyArray<Tool.Spec>, choice: Tool.Choice | undefined): Service => ({
  ...service,
  chat: (request) => {
    const own = request.tools ?? []
    const added: Array<Tool.Spec> = []
    for (const tool of tools) {
      const clash = own.find((t) => t.name === tool.name)
      if (clash === undefined) added.push(tool)
      else if (!sameSpec(clash, tool)) {
        return Effect.fail(
          new InferenceError({
            reason: "InvalidRequest",
            backend: service.name,
            field: "tools",
            detail: `the env offers a tool named ${JSON.stringify(tool.name)} too, with another description or parameters`
          })
        )
      }
    }
    return service.chat({
      ...request,
      tools: own.length === 0 ? tools : [...own, ...added],
      toolChoice: choice ?? request.toolChoice ?? "auto"
    })
  }
})

/**
 * How a reply's calls are written in its text: the backend's tool parser's format (hermes by
 * default), or `in-text` for a backend whose replies keep their calls in their text (swift-rollout).
 */
export type CallFormat = "hermes" | "llama3_json" | "mistral" | "in-text"

/** JSON text's value (Python's numbers kept), or `undefined` when it is not JSON or nests deeper than {@link MAX_DEPTH}. */
const jsonOf = (text: string): { readonly value: unknown } | undefined => {
  let value: unknown
  try {
    value = PyJson.parse(text)
  } catch {
    return undefined
  }
  return nestsDeeper(value, MAX_DEPTH) ? undefined : { value }
}

/** A call's arguments as a value, or the text itself when it is not JSON (or too deep to write back). */
const argumentsOf = (call: ToolCall): unknown => {
  const parsed = jsonOf(call.function.arguments)
  return parsed === undefined ? call.function.arguments : parsed.value
}

/**
 * The calls as text, as ms-swift's agent template of the family writes them (`json.dumps` of each
 * call): hermes `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` per call, llama3
 * `{"name": ..., "parameters": ...}` per call, one a line; mistral `[TOOL_CALLS]` and a JSON list.
 */
export const callsText = (format: Exclude<CallFormat, "in-text">, calls: ReadonlyArray<ToolCall>): string => {
  const objects = calls.map((c) =>
    format === "llama3_json"
      ? { name: c.function.name, parameters: argumentsOf(c) }
      : { name: c.function.name, arguments: argumentsOf(c) }
  )
  switch (format) {
    case "hermes":
      return objects.map((o) => `<tool_call>\n${pythonJson(o)}\n</tool_call>`).join("\n")
    case "llama3_json":
      return objects.map(pythonJson).join("\n")
    case "mistral":
      return `[TOOL_CALLS]${pythonJson(objects)}`
  }
}

/**
 * An assistant message's text with its calls written in (a newline between, as Qwen's template
 * writes it); with `in-text`, its text as it is (the whole reply).
 */
export const replyText = (format: CallFormat, message: Message): string => {
  const calls = message.tool_calls
  if (calls === undefined || calls.length === 0 || format === "in-text") return message.content
  const text = callsText(format, calls)
  return message.content === "" ? text : `${message.content}\n${text}`
}

/**
 * The conversation as ms-swift's trainer reads it: replies with their calls in their text, no
 * `tool_calls`. With `in-text`, a message with empty text keeps its `tool_calls` (not a reply of the
 * backend: ms-swift's template writes them, as the backend's did).
 */
export const swiftMessages = (format: CallFormat, messages: ReadonlyArray<Message>): ReadonlyArray<Message> =>
  messages.some((m) => m.tool_calls !== undefined)
    ? messages.map((m) => {
      if (m.tool_calls === undefined || (format === "in-text" && m.content === "")) return m
      const { tool_calls: _calls, ...rest } = m
      return { ...rest, content: replyText(format, m) }
    })
    : messages

/**
 * The format of a backend's tool parser (`none` or unknown: hermes, ms-swift's default for Qwen);
 * `in-text` for swift-rollout's agent template.
 */
export const formatOf = (service: Service): CallFormat => {
  const name = service.toolParser?.name
  return name === "llama3_json" || name === "mistral" ? name : name === AGENT_TEMPLATE.name ? "in-text" : "hermes"
}

/** A message of an `/infer/` request: OpenAI's roles, or ms-swift's agent format's. */
type AgentMessage = Omit<Message, "role"> & { readonly role: Message["role"] | "tool_call" | "tool_response" }

/**
 * A request's messages with ms-swift's agent format in OpenAI's form, as ms-swift's template reads
 * them (`swift/template/template_inputs.py`, `base.py`): a `tool_response` is a `tool` message; a run
 * of `tool_call` messages (each a JSON `{"name", "arguments"}`, or `parameters`) is one assistant
 * message's `tool_calls`, the previous assistant message's when it has none (ms-swift joins them);
 * the `tool` messages that follow answer the calls in order (their `tool_call_id` and `name`).
 */
export const fromAgentFormat = (
  messages: ReadonlyArray<AgentMessage>,
  path: string
): Result.Result<ReadonlyArray<Message>, ApiError> => {
  if (!messages.some((m) => m.role === "tool_call" || m.role === "tool_response")) {
    return Result.succeed(messages as ReadonlyArray<Message>)
  }
  const out: Array<Message> = []
  const unanswered: Array<ToolCall> = []
  for (let j = 0; j < messages.length; j++) {
    const m = messages[j]
    if (m.role === "tool_call") {
      const call = jsonOf(m.content)?.value
      const args = isRecord(call) ? call.arguments ?? call.parameters : undefined
      if (!isRecord(call) || typeof call.name !== "string" || args === undefined) {
        return invalid(
          `${path}[${j}].content`,
          `a tool_call message's content is a call's JSON, {"name": ..., "arguments": {...}}; got ${shown(m.content)}`
        )
      }
      const toolCall: ToolCall = {
        id: `call_${j}`,
        type: "function",
        function: { name: call.name, arguments: typeof args === "string" ? args : pythonJson(args) }
      }
      unanswered.push(toolCall)
      const last = out.at(-1)
      if (last !== undefined && last.role === "assistant") {
        out[out.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), toolCall] }
      } else {
        out.push({ role: "assistant", content: "", tool_calls: [toolCall] })
      }
      continue
    }
    if (m.role === "tool" || m.role === "tool_response") {
      // (a tool message that names its call answers that one; else the first call not yet answered)
      const at = m.tool_call_id === undefined ? 0 : unanswered.findIndex((c) => c.id === m.tool_call_id)
      const answered = at < 0 ? undefined : unanswered.splice(at, 1)[0]
      const { role: _role, ...rest } = m
      out.push(
        answered === undefined || m.tool_call_id !== undefined
          ? { ...rest, role: "tool" }
          : { ...rest, role: "tool", tool_call_id: answered.id, name: answered.function.name }
      )
      continue
    }
    out.push(m as Message)
  }
  return Result.succeed(out)
}
