/**
 * The client side of OpenEnv's MCP tools: a session's `tools/list` as the model's tools, and each of
 * the model's tool calls as one `tools/call` on the same session, so the call acts on the session's
 * own env and runs under the permit the session holds. Two ways on the session's `/ws` connection:
 * `mcp`, JSON-RPC in `{"type":"mcp"}` frames (OpenEnv's Python server and `openenv serve`), and
 * `step`, the `list_tools` / `call_tool` step actions of OpenEnv's `MCPToolClient` (the Python
 * server's `MCPEnvironment.step`, whose observation carries the env's reward and done). Internal.
 */
import { Duration, Effect, Result } from "effect"
import { isRecord, MAX_JSON_DEPTH, nestsDeeper } from "../../internal/inspect.js"
import * as Json from "../../internal/Json.js"
import { readArguments } from "../../internal/toolArguments.js"
import { describe } from "../../internal/lift.js"
import type * as Message from "../../Message.js"
import * as Tool from "../../Tool.js"
import type * as OpenEnvClient from "../OpenEnvClient.js"
import type * as OpenEnvProtocol from "../OpenEnvProtocol.js"

/**
 * Names never offered to the model: `openenv serve`'s own text step (`act`) and new episode
 * (`restart`), which would step or reset the episode behind the scheduler's back, and the names
 * OpenEnv reserves.
 */
export const HIDDEN: ReadonlySet<string> = new Set(["act", "restart", "reset", "step", "state", "close"])

const EMPTY_OBJECT = { type: "object", properties: {} }

/**
 * The tools of a `tools/list` result as the model's tool specs: `inputSchema` (MCP; `input_schema`
 * as OpenEnv's Python server writes it) is the parameters. Hidden names and a name listed twice
 * (the first wins) are left out; a result that is not a list of named tools is refused, naming where.
 */
export const specsOf = (result: unknown): Result.Result<ReadonlyArray<Tool.Spec>, string> => {
  if (!isRecord(result) || !Array.isArray(result.tools)) return Result.fail("the result has no tools list")
  const specs: Array<Tool.Spec> = []
  const seen = new Set<string>()
  for (let i = 0; i < result.tools.length; i++) {
    const tool: unknown = result.tools[i]
    if (!isRecord(tool)) return Result.fail(`tools[${i}] is not an object`)
    const name = tool.name
    if (typeof name !== "string" || name === "") return Result.fail(`tools[${i}].name is not a non-empty string`)
    const schema = tool.inputSchema ?? tool.input_schema ?? EMPTY_OBJECT
    if (!isRecord(schema)) return Result.fail(`tools[${i}] (${name}): its input schema is not an object`)
    if (HIDDEN.has(name) || seen.has(name)) continue
    seen.add(name)
    specs.push({ name, description: typeof tool.description === "string" ? tool.description : "", parameters: schema })
  }
  return Result.succeed(specs)
}

/** A step's result as `openenv serve` sends it with an env tool's answer (`data`). */
const stepOf = (result: Readonly<Record<string, unknown>>): OpenEnvProtocol.ObservationData | undefined => {
  const data = result.data
  if (!isRecord(data) || !isRecord(data.observation) || typeof data.done !== "boolean") return undefined
  const reward = data.reward
  if (reward !== null && reward !== undefined && typeof reward !== "number") return undefined
  return { observation: data.observation, reward: reward ?? null, done: data.done }
}

/** A value as JSON text; one nested past any real one (JSON.stringify would overflow the stack) says so instead. */
const jsonText = (value: unknown): string =>
  typeof value === "string"
    ? value
    : nestsDeeper(value)
    ? `(${Array.isArray(value) ? "an array" : "an object"} nested deeper than ${MAX_JSON_DEPTH} levels)`
    : describe(value)

/** A tools/call result as the tool message's text: its text content (other content as JSON), else its value as JSON. */
const textOf = (result: unknown): string => {
  if (isRecord(result) && Array.isArray(result.content) && result.content.length > 0) {
    return result.content
      .map((part: unknown) => isRecord(part) && part.type === "text" && typeof part.text === "string" ? part.text : jsonText(part))
      .join("\n")
  }
  if (isRecord(result)) {
    const value = result.structuredContent ?? result.structured_content ?? result.data
    if (value !== undefined && value !== null) return jsonText(value)
  }
  return jsonText(result)
}

/**
 * How the requests go: `{"type":"mcp"}` JSON-RPC frames, or `list_tools` / `call_tool` step actions.
 */
export type Via = "mcp" | "step"

/** The session's tools: a `tools/list` result's specs, or what is wrong with the answer. */
export const list = (
  session: OpenEnvClient.Session,
  via: Via
): Effect.Effect<Result.Result<ReadonlyArray<Tool.Spec>, string>, OpenEnvProtocol.OpenEnvError> =>
  via === "step"
    ? Effect.map(session.step({ type: "list_tools" }), (out) => specsOf(out.observation))
    : Effect.map(session.mcp("tools/list"), (reply) =>
      reply._tag === "Error" ? Result.fail(`${reply.message} (JSON-RPC error ${reply.code})`) : specsOf(reply.result))

/** The reasons of OpenEnv's `ToolError.error_type` (a `call_tool` step's `observation.error`). */
const STEP_ERRORS: Readonly<Record<string, Tool.ToolError["reason"]>> = {
  tool_not_found: "UnknownTool",
  invalid_args: "InvalidArguments",
  timeout: "Timeout",
  execution_error: "Failed",
  transport_error: "Failed"
}

export interface CallOptions {
  /** The tool names offered in this episode. */
  readonly offered: ReadonlySet<string>
  readonly via: Via
  readonly timeout: Duration.Duration
  readonly maxArgumentsLength: number
}

/**
 * A call's answer: the tool message's text, and the step's result when the server sent one. A
 * `call_tool` step the server refused is still a step (its reward counts): its `error` is set.
 */
export interface Answer {
  readonly content: string
  readonly step: OpenEnvProtocol.ObservationData | undefined
  readonly error?: Tool.ToolError | undefined
}

/**
 * One tool call as a `tools/call` on the session. The arguments are checked here first (an unknown
 * tool, arguments over the limit, not a JSON object, nested past any real one: not sent). Every
 * failure is a `ToolError`: the server's JSON-RPC error (`-32602` "Tool not found": `UnknownTool`,
 * other `-32602`: `InvalidArguments`, others: `Failed`) or a `call_tool` step's `error` (by its
 * `error_type`), a result marked `isError` (`Failed`), an error frame or a lost connection
 * (`Failed`), no answer within the timeout (`Timeout`; the session is then dropped, as a late reply
 * cannot be told from the next one).
 */
export const call = (
  session: OpenEnvClient.Session,
  toolCall: Message.ToolCall,
  options: CallOptions
): Effect.Effect<Answer, Tool.ToolError> =>
  Effect.suspend(() => {
    const name = toolCall.function.name
    const toolCallId = toolCall.id
    const bad = (reason: Tool.ToolError["reason"], detail: string, cause?: unknown) =>
      Effect.fail(new Tool.ToolError({ tool: name, toolCallId, reason, detail, ...(cause === undefined ? {} : { cause }) }))
    if (!options.offered.has(name)) {
      const names = [...options.offered].join(", ")
      return bad("UnknownTool", `no tool ${JSON.stringify(name)}; the tools are ${names === "" ? "none" : names}`)
    }
    // (as Tool.toolkit reads them; long integers stay exact)
    const read = readArguments(toolCall.function.arguments, options.maxArgumentsLength, Json.parse)
    if (!("args" in read)) return bad(read.reason, read.detail)
    const args = read.args
    if (nestsDeeper(args)) return bad("MalformedArguments", `the arguments nest deeper than ${MAX_JSON_DEPTH} levels`)
    /** A tools/call result (JSON-RPC's, or a call_tool step's `observation.result`) as the answer. */
    const answer = (result: unknown, step: OpenEnvProtocol.ObservationData | undefined): Effect.Effect<Answer, Tool.ToolError> => {
      const content = textOf(result)
      if (isRecord(result) && (result.isError === true || result.is_error === true)) return bad("Failed", content)
      return Effect.succeed({ content, step: step ?? (isRecord(result) ? stepOf(result) : undefined) })
    }
    const sent: Effect.Effect<Answer, Tool.ToolError | OpenEnvProtocol.OpenEnvError> = options.via === "step"
      ? Effect.flatMap(session.step({ type: "call_tool", tool_name: name, arguments: args }), (out) => {
        const error = out.observation.error
        if (isRecord(error)) {
          const type = typeof error.error_type === "string" ? error.error_type : ""
          const refused = new Tool.ToolError({
            tool: name,
            toolCallId,
            reason: STEP_ERRORS[type] ?? "Failed",
            detail: `${jsonText(error.message)} (${type === "" ? "error" : type})`
          })
          return Effect.succeed({ content: Tool.errorContent(refused), step: out, error: refused })
        }
        return answer(out.observation.result, out)
      })
      : Effect.flatMap(session.mcp("tools/call", { name, arguments: args }), (reply) => {
        if (reply._tag === "Result") return answer(reply.result, undefined)
        const detail = `${reply.message} (JSON-RPC error ${reply.code})`
        if (reply.code === -32602) return bad(reply.message.startsWith("Tool not found") ? "UnknownTool" : "InvalidArguments", detail)
        return bad("Failed", detail)
      })
    return sent.pipe(
      Effect.timeoutOrElse({
        duration: options.timeout,
        orElse: () => bad("Timeout", `no answer within ${Duration.format(options.timeout)}`)
      }),
      Effect.catchTag("OpenEnvError", (error) => bad("Failed", error.message, error))
    )
  })
