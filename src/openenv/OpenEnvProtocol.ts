/**
 * The OpenEnv WebSocket protocol (openenv-core 0.2.x / 0.3.x): the JSON text frames of `/ws`, and
 * the typed errors of a client session.
 *
 * Client to server: `reset` (kwargs such as `seed`, `episode_id`), `step` (the action object),
 * `state`, `close` (the server closes with 1000 and sends no reply). Server to client: one
 * `observation`, `state` or `error` frame per request, in request order, with no request id; and
 * an unsolicited `error` frame (`CAPACITY_REACHED`, `SESSION_ERROR`) before the server closes.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"

/**
 * A JSON object (kwargs, actions, observations).
 *
 * @since 0.1.0
 * @category schemas
 */
export const JsonObject = Schema.Record(Schema.String, Schema.Unknown)

/**
 * @since 0.1.0
 * @category models
 */
export type JsonObject = typeof JsonObject.Type

// ---------------------------------------------------------------------------------------------
// Client to server
// ---------------------------------------------------------------------------------------------

/**
 * `{"type":"reset","data":{...kwargs}}`; `data` may be absent (no kwargs).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ResetMessage = Schema.Struct({
  type: Schema.Literal("reset"),
  data: JsonObject.pipe(Schema.withDecodingDefaultType(Effect.sync(() => ({}))))
})

/**
 * `{"type":"step","data":{...action}}`: the action object itself.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StepMessage = Schema.Struct({
  type: Schema.Literal("step"),
  data: JsonObject
})

/**
 * @since 0.1.0
 * @category schemas
 */
export const StateRequest = Schema.Struct({ type: Schema.Literal("state") })

/**
 * @since 0.1.0
 * @category schemas
 */
export const CloseMessage = Schema.Struct({ type: Schema.Literal("close") })

/**
 * A raw MCP request (`{"type":"mcp","data":{jsonrpc...}}`), used by MCP-based envs (the echo env);
 * this project's server answers it with `UNKNOWN_TYPE`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const McpMessage = Schema.Struct({ type: Schema.Literal("mcp"), data: Schema.Unknown })

/**
 * @since 0.1.0
 * @category schemas
 */
export const ClientMessage = Schema.Union([ResetMessage, StepMessage, StateRequest, CloseMessage, McpMessage])

/**
 * @since 0.1.0
 * @category models
 */
export type ClientMessage = typeof ClientMessage.Type

// ---------------------------------------------------------------------------------------------
// Server to client
// ---------------------------------------------------------------------------------------------

/**
 * The reply to `reset` and `step`: the env's observation, with `reward` (absent means `null`) and
 * `done` lifted out of it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ObservationData = Schema.StructWithRest(
  Schema.Struct({
    observation: JsonObject,
    reward: Schema.NullOr(Schema.Number).pipe(Schema.withDecodingDefaultType(Effect.succeed(null))),
    done: Schema.Boolean
  }),
  // fields of its own (a server's extras) are kept
  [JsonObject]
)

/**
 * @since 0.1.0
 * @category models
 */
export type ObservationData = typeof ObservationData.Type

/**
 * @since 0.1.0
 * @category schemas
 */
export const ObservationMessage = Schema.Struct({ type: Schema.Literal("observation"), data: ObservationData })

/**
 * The reply to `state`: `episode_id` and `step_count`, then env-specific fields.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StateData = Schema.StructWithRest(
  Schema.Struct({
    episode_id: Schema.NullOr(Schema.String).pipe(Schema.withDecodingDefaultType(Effect.succeed(null))),
    step_count: Schema.Number
  }),
  [JsonObject]
)

/**
 * @since 0.1.0
 * @category models
 */
export type StateData = typeof StateData.Type

/**
 * @since 0.1.0
 * @category schemas
 */
export const StateMessage = Schema.Struct({ type: Schema.Literal("state"), data: StateData })

/**
 * The error codes of the protocol. `INVALID_JSON`, `UNKNOWN_TYPE`, `VALIDATION_ERROR` and
 * `EXECUTION_ERROR` keep the socket open; `CAPACITY_REACHED`, `FACTORY_ERROR` and `SESSION_ERROR`
 * are followed by a close (1000).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ErrorCode = Schema.Literals([
  "INVALID_JSON",
  "UNKNOWN_TYPE",
  "VALIDATION_ERROR",
  "EXECUTION_ERROR",
  "CAPACITY_REACHED",
  "FACTORY_ERROR",
  "SESSION_ERROR"
])

/**
 * @since 0.1.0
 * @category models
 */
export type ErrorCode = typeof ErrorCode.Type

/**
 * One validation problem, in the shape of pydantic's errors (`type`, `loc`, `msg`, `input`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ValidationIssue = Schema.StructWithRest(
  Schema.Struct({
    type: Schema.String,
    loc: Schema.Array(Schema.Union([Schema.String, Schema.Number])),
    msg: Schema.String
  }),
  [JsonObject]
)

/**
 * @since 0.1.0
 * @category models
 */
export type ValidationIssue = typeof ValidationIssue.Type

/**
 * An error frame's data. `errors` comes with `VALIDATION_ERROR`; `active_sessions` and
 * `max_sessions` with `CAPACITY_REACHED`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ErrorData = Schema.StructWithRest(
  Schema.Struct({
    message: Schema.String,
    code: ErrorCode,
    errors: Schema.optionalKey(Schema.Array(ValidationIssue)),
    active_sessions: Schema.optionalKey(Schema.Number),
    max_sessions: Schema.optionalKey(Schema.Number)
  }),
  [JsonObject]
)

/**
 * @since 0.1.0
 * @category models
 */
export type ErrorData = typeof ErrorData.Type

/**
 * @since 0.1.0
 * @category schemas
 */
export const ErrorMessage = Schema.Struct({ type: Schema.Literal("error"), data: ErrorData })

/**
 * The reply to a raw MCP request (MCP-based envs only).
 *
 * @since 0.1.0
 * @category schemas
 */
export const McpReply = Schema.Struct({ type: Schema.Literal("mcp"), data: Schema.Unknown })

/**
 * @since 0.1.0
 * @category schemas
 */
export const ServerMessage = Schema.Union([ObservationMessage, StateMessage, ErrorMessage, McpReply])

/**
 * @since 0.1.0
 * @category models
 */
export type ServerMessage = typeof ServerMessage.Type

/**
 * Decodes one server frame (already parsed JSON).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeServerMessage = Schema.decodeUnknownResult(ServerMessage)

/**
 * Decodes one client frame (already parsed JSON).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeClientMessage = Schema.decodeUnknownResult(ClientMessage)

// ---------------------------------------------------------------------------------------------
// URLs
// ---------------------------------------------------------------------------------------------

/**
 * The WebSocket URL of a server's `/ws` endpoint, as the Python client derives it: `http` becomes
 * `ws`, `https` becomes `wss`, a trailing `/` is dropped and `/ws` appended. `ws(s)://` URLs are
 * taken as they are (with `/ws` appended unless they end with it). `undefined` for anything else.
 *
 * @since 0.1.0
 * @category urls
 */
export const toWebSocketUrl = (baseUrl: string): string | undefined => {
  let url: URL
  try {
    url = new URL(baseUrl)
  } catch {
    return undefined
  }
  const scheme = url.protocol === "http:" ? "ws:" : url.protocol === "https:" ? "wss:" : url.protocol
  if (scheme !== "ws:" && scheme !== "wss:") return undefined
  if (url.hostname === "" || url.search !== "" || url.hash !== "") return undefined
  const path = url.pathname.replace(/\/+$/, "")
  const wsPath = path.endsWith("/ws") && (url.protocol === "ws:" || url.protocol === "wss:") ? path : `${path}/ws`
  return `${scheme}//${url.host}${wsPath}`
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * Why an OpenEnv call failed.
 *
 * - `CapacityReached`: the server is full (its unsolicited `CAPACITY_REACHED` frame); retry later.
 * - `ValidationError` / `ExecutionError` / `RequestRejected` (`INVALID_JSON`, `UNKNOWN_TYPE`): the
 *   server refused this request; the session stays usable.
 * - `FactoryError` / `SessionError`: the server could not create the env, or ended the session.
 * - `ConnectFailed` / `ConnectTimeout`: no session was opened.
 * - `ReplyTimeout`: no reply in time. A late reply would be read as the answer to the next request,
 *   so the session is dropped.
 * - `ConnectionLost`: the connection closed or broke while a reply was due.
 * - `MalformedFrame`: a frame that is not valid protocol JSON, or a reply of the wrong type; the
 *   session is dropped (its replies can no longer be matched to requests).
 * - `Closed`: the session was already closed or dropped.
 * - `InvalidUrl`: the base URL cannot be turned into a WebSocket URL.
 *
 * @since 0.1.0
 * @category errors
 */
export const ErrorReason = Schema.Literals([
  "CapacityReached",
  "ValidationError",
  "ExecutionError",
  "RequestRejected",
  "FactoryError",
  "SessionError",
  "ConnectFailed",
  "ConnectTimeout",
  "ReplyTimeout",
  "ConnectionLost",
  "MalformedFrame",
  "Closed",
  "InvalidUrl"
])

/**
 * @since 0.1.0
 * @category models
 */
export type ErrorReason = typeof ErrorReason.Type

const TRANSIENT_REASONS: ReadonlySet<ErrorReason> = new Set([
  "CapacityReached",
  "ConnectFailed",
  "ConnectTimeout",
  "ReplyTimeout",
  "ConnectionLost"
])

/**
 * A failed OpenEnv call. `code` is the server's error code when the server sent an error frame;
 * `errors` its validation problems; `activeSessions` / `maxSessions` the capacity it reported.
 *
 * @since 0.1.0
 * @category errors
 */
export class OpenEnvError extends Schema.TaggedError<OpenEnvError>("effect-gym/OpenEnvError")("OpenEnvError", {
  reason: ErrorReason,
  url: Schema.String,
  detail: Schema.String,
  code: Schema.optionalKey(ErrorCode),
  errors: Schema.optionalKey(Schema.Array(ValidationIssue)),
  activeSessions: Schema.optionalKey(Schema.Number),
  maxSessions: Schema.optionalKey(Schema.Number),
  cause: Schema.optionalKey(Schema.Defect())
}) {
  override get message(): string {
    return `openenv ${this.url}: ${this.reason}: ${this.detail}`
  }

  /** Connection failures, timeouts and a full server may go away on their own (a retry may succeed). */
  get transient(): boolean {
    return TRANSIENT_REASONS.has(this.reason)
  }

  /** Whether the session that failed can still be used (the server refused only this request). */
  get sessionUsable(): boolean {
    return this.reason === "ValidationError" || this.reason === "ExecutionError" || this.reason === "RequestRejected"
  }
}

/**
 * The error of an `error` frame.
 *
 * @since 0.1.0
 * @category errors
 */
export const fromErrorFrame = (url: string, data: ErrorData): OpenEnvError => {
  const reason: ErrorReason = data.code === "CAPACITY_REACHED"
    ? "CapacityReached"
    : data.code === "VALIDATION_ERROR"
    ? "ValidationError"
    : data.code === "EXECUTION_ERROR"
    ? "ExecutionError"
    : data.code === "FACTORY_ERROR"
    ? "FactoryError"
    : data.code === "SESSION_ERROR"
    ? "SessionError"
    : "RequestRejected"
  return new OpenEnvError({
    reason,
    url,
    detail: data.message,
    code: data.code,
    ...(data.errors === undefined ? {} : { errors: data.errors }),
    ...(data.active_sessions === undefined ? {} : { activeSessions: data.active_sessions }),
    ...(data.max_sessions === undefined ? {} : { maxSessions: data.max_sessions })
  })
}
