/**
 * OpenEnv's MCP surface (`POST /mcp`, and `{"type":"mcp"}` frames on `/ws`): JSON-RPC 2.0 with
 * `tools/list`, `tools/call` and the session methods `openenv/session/create` /
 * `openenv/session/close`, with the Python server's codes and messages. A text env exposes its step
 * as the tool `act` (`{"message": "..."}`: the model's reply) and a new episode as `restart`
 * (`{"seed"?, "episode_id"?}`); `reset`, `step`, `state` and `close` are reserved names in OpenEnv.
 * An env that offers tools at reset (`Env.ResetResult.tools`) has them listed too, after a reset
 * (a session's episode, or a fresh env for a call without one), each called as an assistant tool
 * call stepped through the env; a tool whose name is taken (`act`, `restart` or a reserved one) is
 * not listed.
 */
import { Effect, Result } from "effect"
import { isRecord } from "../../internal/inspect.js"
import type * as OpenEnvProtocol from "../OpenEnvProtocol.js"
import type { Episode, Failure } from "./episode.js"

export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600
export const METHOD_NOT_FOUND = -32601
export const INVALID_PARAMS = -32602
export const INTERNAL_ERROR = -32603
export const SERVER_ERROR = -32000

const MESSAGES: Record<number, string> = {
  [PARSE_ERROR]: "Parse error",
  [INVALID_REQUEST]: "Invalid Request",
  [METHOD_NOT_FOUND]: "Method not found",
  [INVALID_PARAMS]: "Invalid params",
  [INTERNAL_ERROR]: "Internal error",
  [SERVER_ERROR]: "Server error"
}

type Id = string | number | null

export const success = (id: Id, result: unknown) => ({ jsonrpc: "2.0", id, result })

export const error = (id: Id, code: number, message?: string, data: unknown = null) => ({
  jsonrpc: "2.0",
  id,
  error: { code, message: message ?? MESSAGES[code] ?? "Unknown error", data }
})

export const TOOLS = [
  {
    name: "act",
    description: "Send the model's reply to the env (one step): returns the observation, the reward and done",
    inputSchema: {
      type: "object",
      properties: { message: { type: "string", description: "The model's reply" } },
      required: ["message"],
      additionalProperties: false
    }
  },
  {
    name: "restart",
    description: "Start a new episode (a reset): returns the first observation",
    inputSchema: {
      type: "object",
      properties: {
        seed: { type: "integer", minimum: 0, description: "The episode's seed" },
        episode_id: { type: "string", description: "The episode's id" }
      },
      additionalProperties: false
    }
  }
] as const

const TAKEN: ReadonlySet<string> = new Set(["act", "restart", "reset", "step", "state", "close"])

/** An episode's own tools as MCP lists them (`inputSchema`: the spec's parameters). */
const envTools = (episode: Episode) =>
  episode.tools
    .filter((t) => !TAKEN.has(t.name))
    .map((t) => ({ name: t.name, description: t.description, inputSchema: t.parameters }))

/** An env tool's answer: its tool message as the text content, the step's result as the structured content. */
const envToolResult = (content: string, data: OpenEnvProtocol.ObservationData) => ({
  content: [{ type: "text", text: content, annotations: null, meta: null }],
  structured_content: data,
  meta: null,
  data,
  is_error: false
})

/** A tool's answer in the shape FastMCP's results are sent in. */
const toolResult = (data: OpenEnvProtocol.ObservationData) => ({
  content: [{ type: "text", text: JSON.stringify(data.observation), annotations: null, meta: null }],
  structured_content: data,
  meta: null,
  data,
  is_error: false
})

/** A parsed JSON-RPC request, or the error response for one that is not. */
export const parseRequest = (
  value: unknown
): Result.Result<{ readonly id: Id; readonly method: string; readonly params: unknown }, object> => {
  const id: Id = isRecord(value) && (typeof value.id === "string" || typeof value.id === "number") ? value.id : null
  if (!isRecord(value)) return Result.fail(error(null, INVALID_REQUEST, "Invalid request: input should be an object"))
  const problems: Array<string> = []
  if (value.jsonrpc !== "2.0") problems.push("jsonrpc: Input should be '2.0'")
  if (typeof value.method !== "string") problems.push("method: Field required (a string)")
  if (value.id !== undefined && value.id !== null && typeof value.id !== "string" && typeof value.id !== "number") {
    problems.push("id: Input should be a string, an integer or null")
  }
  for (const key of Object.keys(value)) {
    if (!["jsonrpc", "method", "params", "id"].includes(key)) problems.push(`${key}: Extra inputs are not permitted`)
  }
  if (problems.length > 0) {
    return Result.fail(error(null, INVALID_REQUEST, `Invalid request: ${problems.length} validation errors: ${problems.join("; ")}`))
  }
  return Result.succeed({ id, method: value.method as string, params: value.params ?? {} })
}

export interface Sessions {
  /** Opens an MCP-managed session (counted against the server's capacity). */
  readonly create: Effect.Effect<{ readonly id: string } | { readonly capacity: { readonly active: number; readonly max: number } } | { readonly failure: Failure }>
  readonly close: (id: string) => Effect.Effect<boolean>
  readonly get: (id: string) => Episode | undefined
  /** A fresh episode for one stateless call, closed after it. */
  readonly fresh: <A, E>(use: (episode: Episode) => Effect.Effect<A, E>) => Effect.Effect<A, E>
  /** Marks a session used now (idle reaping). */
  readonly touch: (id: string) => void
}

/** Whether Python takes the value as true (`if value:`): how the Python server reads `session_id`. */
const truthy = (value: unknown): boolean =>
  value !== undefined && value !== null && value !== false && value !== 0 && value !== "" &&
  !(Array.isArray(value) && value.length === 0) && !(isRecord(value) && Object.keys(value).length === 0)

/** A value as Python's `str` writes it, for the messages that name a `session_id`. */
const pythonStr = (value: unknown): string =>
  typeof value === "string" ? value : value === true ? "True" : value === false ? "False" : JSON.stringify(value)

/**
 * Answers one JSON-RPC request. `bound` is the `/ws` session the request came on, with its id
 * (tools then act on its episode; `openenv/session/create` answers with its id, as the Python
 * server does); otherwise `params.session_id` picks an MCP session, and without it a fresh env
 * serves the call and is closed.
 */
export const handle = (
  request: { readonly id: Id; readonly method: string; readonly params: unknown },
  sessions: Sessions,
  bound?: { readonly id: string; readonly episode: Episode }
): Effect.Effect<object> =>
  Effect.gen(function*() {
    const { id, method } = request
    if (!isRecord(request.params)) return error(id, INVALID_PARAMS, "Params must be an object")
    const params = request.params
    // on /ws the session is the connection's own: no second one that would outlive it
    if (method === "openenv/session/create" && bound !== undefined) return success(id, { session_id: bound.id })
    if (method === "openenv/session/create") {
      const created = yield* sessions.create
      if ("id" in created) return success(id, { session_id: created.id })
      if ("capacity" in created) {
        return error(
          id,
          SERVER_ERROR,
          `Server at capacity: ${created.capacity.active}/${created.capacity.max} sessions active. Cannot accept new connections.`,
          { active_sessions: created.capacity.active, max_sessions: created.capacity.max }
        )
      }
      return error(id, SERVER_ERROR, created.failure.message, created.failure.extra ?? null)
    }
    if (method === "openenv/session/close") {
      const target = params.session_id
      if (!truthy(target)) return error(id, INVALID_PARAMS, "Invalid params - 'session_id' is required")
      if (bound !== undefined && target === bound.id) {
        return error(id, INVALID_REQUEST, "Cannot close active WebSocket-managed session via MCP method")
      }
      const closed = typeof target === "string" && (yield* sessions.close(target))
      return closed
        ? success(id, { session_id: target, closed: true })
        : error(id, INVALID_PARAMS, `Unknown session_id: ${pythonStr(target)}`)
    }
    if (method !== "tools/list" && method !== "tools/call") {
      return error(id, METHOD_NOT_FOUND, `Method not found: ${method}`)
    }
    let episode = bound?.episode
    // any value Python takes as true names a session (a number names none: "Unknown session_id")
    const sessionId = params.session_id
    if (episode === undefined && truthy(sessionId)) {
      episode = typeof sessionId === "string" ? sessions.get(sessionId) : undefined
      if (episode === undefined) return error(id, INVALID_PARAMS, `Unknown session_id: ${pythonStr(sessionId)}`)
      sessions.touch(sessionId as string)
    }
    if (method === "tools/list") {
      const list = (target: Episode) =>
        Effect.map(target.open, () => success(id, { tools: [...TOOLS, ...envTools(target)] }))
      const listed = episode === undefined ? sessions.fresh(list) : list(episode)
      return yield* Effect.catch(listed, () => Effect.succeed(success(id, { tools: TOOLS })))
    }
    const name = params.name
    if (typeof name !== "string" || name === "") return error(id, INVALID_PARAMS, "Missing 'name' in params")
    // (arguments that are not an object were taken as none: a tool then ran on {})
    if (params.arguments != null && !isRecord(params.arguments)) {
      return error(id, INVALID_PARAMS, "Invalid params - 'arguments' must be an object")
    }
    const args = isRecord(params.arguments) ? params.arguments : {}
    const run = (target: Episode): Effect.Effect<object, Failure> => {
      if (name === "act") {
        if (typeof args.message !== "string") {
          return Effect.succeed(error(id, INVALID_PARAMS, "Invalid params - 'message' (a string) is required"))
        }
        return Effect.map(target.step(args.message), (data) => success(id, toolResult(data)))
      }
      if (name === "restart") {
        const kwargs: Record<string, unknown> = {}
        if (args.seed !== undefined) kwargs.seed = args.seed
        if (args.episode_id !== undefined) kwargs.episode_id = args.episode_id
        return Effect.map(target.reset(kwargs), (data) => success(id, toolResult(data)))
      }
      // the env's own tools, as offered at its last reset (a fresh env is reset first)
      return Effect.flatMap(target.open, (): Effect.Effect<object, Failure> => {
        if (TAKEN.has(name) || !target.tools.some((t) => t.name === name)) {
          return Effect.succeed(error(id, INVALID_PARAMS, `Tool not found: ${name}`))
        }
        return Effect.map(target.callTool(name, args), (answer) => success(id, envToolResult(answer.content, answer.data)))
      })
    }
    const answered = episode === undefined ? sessions.fresh(run) : run(episode)
    return yield* Effect.catch(answered, (failed) => Effect.succeed(error(id, INTERNAL_ERROR, failed.message)))
  })
