/**
 * A client of the rollout server, so that a TypeScript pipeline consumes remote rollouts as if they
 * were local: `stream(batch)` is a `Stream` of decoded results (one per trajectory, each group's as
 * the group completes), and every way it can go wrong is a typed `RolloutClientError`:
 *
 * - `Status`: the server answered with an error status; its error object (`type`, `message`, the
 *   offending field's `path`) is kept. 429 (at capacity) is retried `retries` times, after the
 *   server's `Retry-After` hint.
 * - `ServerError`: the server cut the stream (it is shutting down) and said so in a last line.
 * - `Malformed`: a line (or a body) that is not what the server's schema says.
 * - `ConnectionLost`: the connection broke mid-stream, or the stream ended with fewer results than
 *   the server admitted.
 * - `Transport`: no response at all (connection refused, DNS).
 *
 * Interrupting the stream closes the connection; the server then cancels the request's
 * trajectories and closes their envs.
 *
 * @since 0.1.0
 */
import {
  Context,
  Duration,
  Effect,
  Layer,
  type Redacted,
  Result,
  Schedule,
  Schema,
  SchemaIssue,
  SchemaParser,
  Stream
} from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import type { HttpClientError, HttpClientResponse } from "effect/http"
import * as Issue from "../internal/issue.js"
import * as Json from "../internal/Json.js"
import * as Api from "./Api.js"
import { errorMessage } from "../internal/lift.js"

/**
 * @since 0.1.0
 * @category errors
 */
export class RolloutClientError extends Schema.TaggedError<RolloutClientError>("effect-gym/server/RolloutClientError")(
  "RolloutClientError",
  {
    reason: Schema.Literals(["Status", "ServerError", "Malformed", "ConnectionLost", "Transport"]),
    detail: Schema.String,
    /** The HTTP status (`Status`). */
    status: Schema.optional(Schema.Number),
    /** The server's error object (`Status`, `ServerError`). */
    body: Schema.optional(Api.ErrorDetail),
    /** The 1-based line of the stream (`Malformed`). */
    line: Schema.optional(Schema.Number),
    cause: Schema.optional(Schema.Defect())
  }
) {
  override get message(): string {
    const status = this.status === undefined ? "" : ` (HTTP ${this.status})`
    const line = this.line === undefined ? "" : ` (line ${this.line})`
    return `rollout server: ${this.reason}${status}${line}: ${this.detail}`
  }

  /** The server's hint of when to retry a 429, in milliseconds. */
  get retryAfterMs(): number | undefined {
    return this.body?.retry_after_ms
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The server's URL, e.g. `http://127.0.0.1:8000`. */
  readonly baseUrl: string
  /** Sent as `Authorization: Bearer ...` (the server's `--api-key-env`). */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** Retries of a request the server turned away for capacity (429). Default 2. */
  readonly retries?: number | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** Results as they finish (`Accept: application/x-ndjson`). */
  readonly stream: (batch: Api.RolloutBatch) => Stream.Stream<Api.RolloutResult, RolloutClientError>
  /** All results at once, in row order (a JSON array). */
  readonly run: (batch: Api.RolloutBatch) => Effect.Effect<ReadonlyArray<Api.RolloutResult>, RolloutClientError>
  /** The reference's `/infer/` endpoint. */
  readonly infer: (body: Api.InferBody) => Effect.Effect<ReadonlyArray<Api.InferOutput>, RolloutClientError>
  readonly info: Effect.Effect<Api.Info, RolloutClientError>
  readonly health: Effect.Effect<typeof Api.Health.Type, RolloutClientError>
}

/**
 * @since 0.1.0
 * @category tags
 */
export class RolloutClient extends Context.Service<RolloutClient, Service>()("effect-gym/RolloutClient") {}

const transport = (cause: HttpClientError.HttpClientError) =>
  new RolloutClientError({ reason: "Transport", detail: cause.message, cause })

const decodeError = SchemaParser.decodeUnknownResult(Api.ErrorBody)

/** A non-2xx response as an error, with the server's error object when it sent one. */
const statusError = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.flatMap(Effect.orElseSucceed(response.text, () => ""), (text) => {
    const parsed = Result.flatMap(Result.try(() => Json.parse(text)), (value) => decodeError(value))
    const body = Result.isSuccess(parsed) ? parsed.success.error : undefined
    return Effect.fail(
      new RolloutClientError({
        reason: "Status",
        status: response.status,
        detail: body?.message ?? (text.trim() === "" ? "(empty body)" : text.slice(0, 500)),
        body
      })
    )
  })

const malformed = (detail: string, line?: number, cause?: unknown) =>
  new RolloutClientError({ reason: "Malformed", detail, line, cause })

const parseJson = (text: string, line?: number): Result.Result<unknown, RolloutClientError> =>
  Result.try({
    try: () => Json.parse(text),
    catch: (cause) => malformed(`not JSON: ${errorMessage(cause)}`, line, cause)
  })

/** Decodes a parsed JSON value with a schema; errors name the field. */
const decodeValue = <A>(schema: Schema.Decoder<A>) => {
  const decode = SchemaParser.decodeUnknownResult(schema, Issue.parseOptions)
  return (value: unknown, line?: number): Result.Result<A, RolloutClientError> =>
    Result.mapError(decode(value), (issue) => malformed(formatIssue(issue), line, issue))
}

const formatIssue = SchemaIssue.makeFormatterDefault()

/** Parses JSON text (big integers exact) and decodes it. */
const decodeJson = <A>(schema: Schema.Decoder<A>) => {
  const decode = decodeValue(schema)
  return (text: string): Result.Result<A, RolloutClientError> =>
    Result.flatMap(parseJson(text), (value) => decode(value))
}

const decodeResult = decodeValue(Api.RolloutResult)
const decodeServerError = decodeValue(Api.ServerErrorLine)
const decodeResults = decodeJson(Schema.Array(Api.RolloutResult))
const decodeOutputs = decodeJson(Schema.Array(Api.InferOutput))
const decodeInfo = decodeJson(Api.Info)
const decodeHealth = decodeJson(Api.Health)

/** One line of a stream: a result, or the server's last word when it cut the stream. */
const decodeLine = (text: string, line: number): Result.Result<Api.RolloutResult, RolloutClientError> =>
  Result.flatMap(parseJson(text, line), (value) => {
    if (typeof value !== "object" || value === null || !Object.prototype.hasOwnProperty.call(value, "server_error")) {
      return decodeResult(value, line)
    }
    return Result.flatMap(decodeServerError(value, line), ({ server_error: body }) =>
      Result.fail(new RolloutClientError({ reason: "ServerError", detail: body.message, body })))
  })

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Service, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const apiKey = options.apiKey
    const retries = options.retries ?? 2
    const client = (yield* HttpClient.HttpClient).pipe(
      HttpClient.mapRequest((request) => {
        const prefixed = HttpClientRequest.prependUrl(request, options.baseUrl.replace(/\/+$/, ""))
        return apiKey === undefined ? prefixed : HttpClientRequest.bearerToken(prefixed, apiKey)
      })
    )

    /** A 429 is retried `retries` times, each after the server's hint (1 s without one). */
    const atCapacity = Schedule.identity<RolloutClientError>().pipe(
      Schedule.while(({ attempt, input }) => attempt <= retries && input.reason === "Status" && input.status === 429),
      Schedule.addDelay(({ input }) => Effect.succeed(Duration.millis(input.retryAfterMs ?? 1000)))
    )

    /** Sends a request; a 2xx response is returned, anything else is an error (429 retried). */
    const send = (request: HttpClientRequest.HttpClientRequest) => {
      const attempt = Effect.flatMap(
        Effect.mapError(client.execute(request), transport),
        (response) => response.status >= 200 && response.status < 300 ? Effect.succeed(response) : statusError(response)
      )
      return Effect.retry(attempt, atCapacity)
    }

    const body = (response: HttpClientResponse.HttpClientResponse) =>
      Effect.mapError(
        response.text,
        (cause) => new RolloutClientError({ reason: "ConnectionLost", detail: cause.message, cause })
      )

    const postJson = (path: string, value: unknown) =>
      HttpClientRequest.post(path).pipe(
        HttpClientRequest.bodyText(Json.stringify(value), "application/json"),
        HttpClientRequest.acceptJson
      )

    const stream = (batch: Api.RolloutBatch): Stream.Stream<Api.RolloutResult, RolloutClientError> =>
      Stream.unwrap(Effect.map(
        send(postJson("/v1/rollouts", batch).pipe(HttpClientRequest.accept(Api.NDJSON))),
        (response) => {
          const expected = Number(response.headers[Api.TRAJECTORIES_HEADER])
          // Lines decoded so far (a line that does not decode fails the stream).
          let received = 0
          return response.stream.pipe(
            Stream.mapError((cause) =>
              new RolloutClientError({ reason: "ConnectionLost", detail: `the stream broke: ${cause.message}`, cause })
            ),
            Stream.decodeText(),
            Stream.splitLines,
            Stream.filter((text) => text.trim() !== ""),
            Stream.mapEffect((text) => Effect.fromResult(decodeLine(text, ++received))),
            Stream.concat(Stream.suspend(() =>
              Number.isFinite(expected) && received < expected
                ? Stream.fail(
                  new RolloutClientError({
                    reason: "ConnectionLost",
                    detail: `the stream ended after ${received} of ${expected} results`
                  })
                )
                : Stream.empty
            ))
          )
        }
      ))

    const run = (batch: Api.RolloutBatch) =>
      Effect.flatMap(send(postJson("/v1/rollouts", batch)), body).pipe(
        Effect.flatMap((text) => Effect.fromResult(decodeResults(text)))
      )

    const infer = (request: Api.InferBody) =>
      Effect.flatMap(send(postJson("/infer/", request)), body).pipe(
        Effect.flatMap((text) => Effect.fromResult(decodeOutputs(text)))
      )

    const get = (path: string) =>
      Effect.flatMap(send(HttpClientRequest.get(path).pipe(HttpClientRequest.acceptJson)), body)

    return {
      stream,
      run,
      infer,
      info: Effect.flatMap(get("/info"), (text) => Effect.fromResult(decodeInfo(text))),
      health: Effect.flatMap(get("/health"), (text) => Effect.fromResult(decodeHealth(text)))
    } satisfies Service
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<RolloutClient, never, HttpClient.HttpClient> =>
  Layer.effect(RolloutClient, make(options))

/**
 * Results of a batch as they finish, from the client of the current context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const stream = (batch: Api.RolloutBatch): Stream.Stream<Api.RolloutResult, RolloutClientError, RolloutClient> =>
  Stream.unwrap(RolloutClient.useSync((client) => client.stream(batch)))
