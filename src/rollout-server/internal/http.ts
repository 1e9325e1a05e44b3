/**
 * The rollout server's HTTP pieces: its error (with status and body), JSON responses, reading a
 * body under a size limit, decoding it with errors that name the field, and the bearer-token check.
 */
import { Effect, Result, Schema, SchemaParser, Stream } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpServerResponse } from "effect/http"
import * as Issue from "../../internal/issue.js"
import * as Json from "../../internal/Json.js"
import { errorMessage } from "../../internal/lift.js"
import * as Row from "../../Row.js"
import type * as Api from "../Api.js"

const STATUS = {
  Unauthorized: 401,
  NotFound: 404,
  BodyTooLarge: 413,
  MalformedJson: 400,
  InvalidBody: 400,
  TooManyTrajectories: 413,
  ResponseTooLarge: 413,
  AtCapacity: 429,
  ShuttingDown: 503,
  Internal: 500,
  NotSupported: 501,
  Upstream: 502,
  TrajectoriesFailed: 500
} as const

const TYPE: Record<keyof typeof STATUS, string> = {
  Unauthorized: "unauthorized",
  NotFound: "not_found",
  BodyTooLarge: "body_too_large",
  MalformedJson: "invalid_json",
  InvalidBody: "invalid_request",
  TooManyTrajectories: "too_many_trajectories",
  ResponseTooLarge: "response_too_large",
  AtCapacity: "at_capacity",
  ShuttingDown: "shutting_down",
  Internal: "internal_error",
  NotSupported: "not_supported",
  Upstream: "backend_unavailable",
  TrajectoriesFailed: "trajectories_failed"
}

/**
 * A request the server turns away (or, for `ShuttingDown`, cuts), with its HTTP status. The body
 * sent is `{"error": {"type", "message", "path"?, "retry_after_ms"?, "registered_envs"?}}`.
 *
 * @since 0.1.0
 * @category errors
 */
export class ApiError extends Schema.TaggedError<ApiError>("effect-gym/server/ApiError")("ApiError", {
  reason: Schema.Literals([
    "Unauthorized",
    "NotFound",
    "BodyTooLarge",
    "MalformedJson",
    "InvalidBody",
    "TooManyTrajectories",
    "ResponseTooLarge",
    "AtCapacity",
    "ShuttingDown",
    "Internal",
    "NotSupported",
    "Upstream",
    "TrajectoriesFailed"
  ]),
  detail: Schema.String,
  /** The offending field of the body, e.g. `requests[2].env_config.size`. */
  path: Schema.optional(Schema.String),
  retryAfterMs: Schema.optional(Schema.Number),
  registeredEnvs: Schema.optional(Schema.Array(Schema.String)),
  /** The trajectories that failed (`TrajectoriesFailed`): each one's uuid, index and error. */
  failed: Schema.optional(Schema.Array(Schema.Unknown)),
  /** The connection is gone (the body could not be read to its end): nothing can be sent back. */
  dropped: Schema.optional(Schema.Boolean),
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return this.path === undefined ? this.detail : `${this.path}: ${this.detail}`
  }

  get status(): number {
    return STATUS[this.reason]
  }

  /** The error as the body's `error` object. */
  toJson(): typeof Api.ErrorDetail.Type {
    const out: Record<string, unknown> = { type: TYPE[this.reason], message: this.message }
    if (this.path !== undefined) out.path = this.path
    if (this.retryAfterMs !== undefined) out.retry_after_ms = this.retryAfterMs
    if (this.registeredEnvs !== undefined) out.registered_envs = this.registeredEnvs
    if (this.failed !== undefined) out.failed = this.failed
    return out as typeof Api.ErrorDetail.Type
  }
}

export const shuttingDown = (detail = "the server is shutting down") => new ApiError({ reason: "ShuttingDown", detail })

export const json = (value: unknown, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(Json.stringify(value), { status, contentType: "application/json", headers })

export const errorResponse = (error: ApiError): HttpServerResponse.HttpServerResponse => {
  // @effect/platform-node waits for a body's `end` callback, which never comes on a destroyed
  // socket: an empty response is ended without waiting.
  if (error.dropped === true) return HttpServerResponse.empty({ status: error.status })
  const headers: Record<string, string> = {}
  if (error.reason === "Unauthorized") headers["www-authenticate"] = "Bearer"
  if (error.retryAfterMs !== undefined) {
    headers["retry-after"] = String(Math.max(1, Math.ceil(error.retryAfterMs / 1000)))
  }
  // The rest of an oversized body is not read: the connection cannot be reused.
  if (error.reason === "BodyTooLarge" || error.reason === "ShuttingDown") headers.connection = "close"
  return json({ error: error.toJson() }, error.status, headers)
}

const tooLarge = (max: number) =>
  ({ reason: "BodyTooLarge", detail: `the body is larger than this server's limit of ${max} bytes` }) as const

/**
 * Reads the body, at most `max` bytes: a declared length over the limit is refused unread; a body
 * that grows past it (chunked) is cut off, and with it the connection.
 *
 * The limit is counted here, over the body's stream, rather than with `HttpIncomingMessage`'s
 * `MaxBodySize`: that one fails with an `HttpServerError` whose only sign of the limit is the text
 * of a plain `Error`. Stopping the stream destroys the request, as @effect/platform-node does at
 * its limit.
 */
export const readBody = (request: HttpServerRequest.HttpServerRequest, max: number): Effect.Effect<string, ApiError> => {
  const declared = Number(request.headers["content-length"])
  if (Number.isFinite(declared) && declared > max) return Effect.fail(new ApiError(tooLarge(max)))
  return request.stream.pipe(
    Stream.mapError((cause) =>
      new ApiError({ reason: "InvalidBody", detail: "the body could not be read", dropped: true, cause })
    ),
    Stream.runFoldEffect(() => ({ chunks: [] as Array<Uint8Array>, bytes: 0 }), (body, chunk) => {
      body.bytes += chunk.length
      if (body.bytes > max) return Effect.fail(new ApiError({ ...tooLarge(max), dropped: true }))
      body.chunks.push(chunk)
      return Effect.succeed(body)
    }),
    Effect.flatMap(({ bytes, chunks }) =>
      Effect.try({
        try: () => new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks, bytes)),
        catch: () => new ApiError({ reason: "MalformedJson", detail: "the body is not UTF-8 text" })
      })
    )
  )
}

/** Parses and decodes a JSON body; errors name the field. */
export const decodeBody = <A>(schema: Schema.Decoder<A>, options: { readonly excess: "error" | "ignore" }) => {
  const decode = SchemaParser.decodeUnknownResult(schema, { ...Issue.parseOptions, onExcessProperty: options.excess })
  return (text: string): Result.Result<A, ApiError> => {
    if (text.trim() === "") return Result.fail(new ApiError({ reason: "MalformedJson", detail: "the body is empty" }))
    const parsed = Result.try({
      try: () => Json.parse(text),
      catch: (error) =>
        new ApiError({
          reason: "MalformedJson",
          detail: `malformed JSON: ${errorMessage(error)}`
        })
    })
    return Result.flatMap(parsed, (value) =>
      Result.mapError(decode(value), (error) => {
        const issue = Issue.first(error)
        const path = Row.formatPath(issue.path)
        return new ApiError({ reason: "InvalidBody", detail: issue.message, path: path === "" ? "(body)" : path })
      }))
  }
}
