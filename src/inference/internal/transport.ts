/**
 * The HTTP transport of the inference backends that talk to a server (server mode's
 * OpenAI-compatible API, swift-rollout mode's `/infer/`): one `HttpClient` shaped once (JSON,
 * bearer auth, non-2xx statuses as typed errors), attempts under a shared concurrency limit and a
 * timeout, transient failures (connection refused or reset, timeouts, 408, 429, 5xx) retried with
 * jittered exponential backoff (`retry-after-ms` / `Retry-After` honoured up to a minute), and fail
 * fast: after `maxTransportFailures` requests in a row without any response the server is declared
 * down, calls fail at once (one gets through after a pause to see if it is back) and `halted` fails.
 *
 * Every failure is an `InferenceError` with the server's own message.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
// The undici that NodeHttpClient runs on (its Dispatcher service is typed with this one's types).
import * as Undici from "undici"
import { Data, Deferred, Duration, Effect, Layer, type Redacted, Schedule, type Schema, Semaphore } from "effect"
import { HttpClient, HttpClientRequest, HttpClientResponse } from "effect/http"
import type { HttpClientError } from "effect/http"
import { InferenceError } from "../../Inference.js"

/** A server asking for a longer wait than this is not waited for: the usual backoff applies. */
const MAX_RETRY_AFTER = Duration.minutes(1)

export interface Options {
  /** The backend's name in errors (`openai-compat`, `swift-rollout`). */
  readonly backend: string
  /** What is down, for the fail-fast message: `the inference server at URL`. */
  readonly server: string
  readonly apiKey?: Redacted.Redacted | undefined
  /** Per attempt. Default 10 minutes. */
  readonly requestTimeout?: Duration.Input | undefined
  /** Retries of a transient failure. Default 3. */
  readonly retries?: number | undefined
  /** First backoff delay (doubling, jittered, capped at `maxBackoff`). Default 500 ms. */
  readonly backoff?: Duration.Input | undefined
  /** Default 30 seconds. */
  readonly maxBackoff?: Duration.Input | undefined
  /** Requests in flight at most. Default 64. */
  readonly concurrency?: number | undefined
  /** Transport failures in a row after which the server is declared down. Default 20; 0 never. */
  readonly maxTransportFailures?: number | undefined
  /** After the server was declared down, how long calls fail at once before one tries again. Default 10 s. */
  readonly downPause?: Duration.Input | undefined
  /** Trace each request with a span. Off by default (it costs about a third of the throughput). */
  readonly tracing?: boolean | undefined
  /** The `HttpClient` enforces `requestTimeout` itself ({@link undiciClient}): no timer per request. */
  readonly timeoutByTransport?: boolean | undefined
  /** A hint appended to the message of an error status (e.g. what a 404 usually means), by status and URL. */
  readonly hint?: ((status: number, url: string) => string) | undefined
  /** The option that sets `maxTransportFailures`, for the message. */
  readonly failuresOption?: string | undefined
  /** User name and password for Basic auth (from a base URL that held them), when there is no API key. */
  readonly basic?: readonly [string, string] | undefined
  /** Query parameters of a base URL that held them (`?token=...`), sent with every request. */
  readonly query?: ReadonlyArray<readonly [string, string]> | undefined
}

/** One failed attempt: the error it becomes, whether another attempt may help, how long to wait. */
export class AttemptError extends Data.TaggedError("AttemptError")<{
  readonly error: InferenceError
  readonly retryable: boolean
  readonly retryAfter: Duration.Duration | undefined
}> {}

export interface Transport {
  /** The shaped client (JSON accepted, bearer auth, non-2xx as errors), for calls outside `send`. */
  readonly client: HttpClient.HttpClient
  /** The context's client as it is (no status filter, no auth added), untraced: for passing requests through. */
  readonly raw: HttpClient.HttpClient
  /**
   * One call: attempts (each under a permit and the timeout) with retries. `body` is built per
   * attempt. `onRejected` sees a 400/422 answer and says whether to send again at once (a field
   * dropped), which is not counted as a retry.
   */
  readonly send: <A>(
    url: string,
    body: () => Record<string, unknown>,
    schema: Schema.Decoder<A>,
    onRejected?: (sent: Record<string, unknown>, error: InferenceError) => Effect.Effect<boolean>
  ) => Effect.Effect<A, InferenceError>
  /** Fails when the server is declared down. Never succeeds. */
  readonly halted: Effect.Effect<never, InferenceError>
  /** An `HttpClient` error as the attempt error it is. */
  readonly classify: (error: HttpClientError.HttpClientError) => Effect.Effect<AttemptError>
}

const messageOf = (value: unknown): string | undefined => {
  if (typeof value === "string") return value
  if (typeof value !== "object" || value === null) return undefined
  const record = value as Record<string, unknown>
  for (const key of ["message", "detail", "error"]) {
    const inner = record[key]
    if (typeof inner === "string") return inner
    if (typeof inner === "object" && inner !== null) {
      const nested = messageOf(inner)
      if (nested !== undefined) return nested
      return JSON.stringify(inner)
    }
  }
  return undefined
}

export { messageOf }

export const snippet = (text: string, max = 300): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max)}...` : flat
}

/**
 * The server's message in an error body: OpenAI's `{"error": {"message"}}`, `{"error": "..."}`,
 * FastAPI's `{"detail"}`, or the text itself.
 */
export const errorMessage = (body: string): string => {
  try {
    const found = messageOf(JSON.parse(body))
    if (found !== undefined) return snippet(found, 1000)
  } catch {
    // not JSON: the text is the message
  }
  return body.trim() === "" ? "(empty body)" : snippet(body, 1000)
}

/** `retry-after-ms` (OpenAI), then `Retry-After` in seconds or as an HTTP date. */
const retryAfterOf = (headers: Readonly<Record<string, string | undefined>>): Duration.Duration | undefined => {
  const ms = Number(headers["retry-after-ms"])
  let delay: number | undefined = Number.isFinite(ms) && ms >= 0 ? ms : undefined
  const raw = headers["retry-after"]
  if (delay === undefined && raw !== undefined) {
    const seconds = Number(raw)
    if (Number.isFinite(seconds) && seconds >= 0) delay = seconds * 1000
    else {
      const date = Date.parse(raw)
      if (Number.isFinite(date)) delay = Math.max(0, date - Date.now())
    }
  }
  if (delay === undefined) return undefined
  const duration = Duration.millis(delay)
  return Duration.isLessThanOrEqualTo(duration, MAX_RETRY_AFTER) ? duration : undefined
}

const reasonOfStatus = (status: number): InferenceError["reason"] =>
  status === 429 ? "RateLimited" : status === 408 ? "Timeout" : status >= 500 ? "ServerError" : "InvalidRequest"

export const isTransientStatus = (status: number): boolean => status === 408 || status === 429 || status >= 500

export const describeCause = (cause: unknown): string => {
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code
    const inner = (cause as { cause?: unknown }).cause
    const base = typeof code === "string" && !cause.message.includes(code)
      ? `${cause.message} (${code})`
      : cause.message
    return inner instanceof Error && inner.message !== cause.message ? `${base}: ${describeCause(inner)}` : base
  }
  return String(cause)
}

/** undici's own timeouts (see {@link undiciClient}), anywhere in an error's cause chain. */
const isTransportTimeout = (cause: unknown): boolean => {
  for (let c = cause, depth = 0; c !== undefined && c !== null && depth < 5; depth++) {
    const code = (c as { code?: unknown }).code
    if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return true
    c = (c as { cause?: unknown }).cause
  }
  return false
}

/** An `HttpClient` error as an attempt error of `backend`. */
export const classifier = (backend: string, hint: (status: number, url: string) => string = () => "") =>
(error: HttpClientError.HttpClientError): Effect.Effect<AttemptError> => {
  const reason = error.reason
  const where = `${reason.request.method} ${reason.request.url}`
  if (isTransportTimeout(reason.cause)) {
    return Effect.succeed(
      new AttemptError({
        error: new InferenceError({
          reason: "Timeout",
          backend,
          detail: `${where}: no response within the request timeout (${describeCause(reason.cause)})`,
          cause: reason.cause
        }),
        retryable: true,
        retryAfter: undefined
      })
    )
  }
  if (reason._tag === "TransportError" || reason._tag === "EncodeError" || reason._tag === "InvalidUrlError") {
    const transport = reason._tag === "TransportError"
    return Effect.succeed(
      new AttemptError({
        error: new InferenceError({
          reason: transport ? "Transport" : "InvalidRequest",
          backend,
          // The v3 names of the reasons, as before: "Transport", "Encode", "InvalidUrl".
          detail: `${where}: ${describeCause(reason.cause ?? reason.description ?? reason._tag.replace(/Error$/, ""))}`,
          cause: reason.cause
        }),
        retryable: transport,
        retryAfter: undefined
      })
    )
  }
  const response = reason.response
  const status = response.status
  if (reason._tag === "StatusCodeError") {
    // Reading the body also frees the connection for the next attempt.
    return Effect.map(Effect.orElseSucceed(response.text, () => ""), (body) =>
      new AttemptError({
        error: new InferenceError({
          reason: reasonOfStatus(status),
          backend,
          status,
          detail: `${where}: ${errorMessage(body)}${hint(status, reason.request.url)}`
        }),
        retryable: isTransientStatus(status),
        retryAfter: retryAfterOf(response.headers)
      }))
  }
  // Decode (malformed JSON, a body cut short) or EmptyBody: the server answered, wrongly.
  return Effect.map(Effect.orElseSucceed(response.text, () => ""), (body) =>
    new AttemptError({
      error: new InferenceError({
        reason: "BadResponse",
        backend,
        status,
        detail: `${where}: ` +
          (reason._tag === "EmptyBodyError" ? "empty body" : `malformed JSON (${describeCause(reason.cause)})`) +
          (body === "" ? "" : `; body: ${snippet(body)}`),
        cause: reason.cause
      }),
      retryable: false,
      retryAfter: undefined
    }))
}

export const withDetail = (error: InferenceError, detail: string): InferenceError =>
  new InferenceError({
    reason: error.reason,
    backend: error.backend,
    detail,
    ...(error.status === undefined ? {} : { status: error.status }),
    ...(error.field === undefined ? {} : { field: error.field }),
    ...(error.cause === undefined ? {} : { cause: error.cause })
  })

/** The client without spans (and so without `traceparent` headers) for its requests. */
const untraced = <E, R>(client: HttpClient.HttpClient.With<E, R>): HttpClient.HttpClient.With<E, R> =>
  HttpClient.transform(client, (effect) => Effect.provideService(effect, HttpClient.TracerDisabledWhen, () => true))

/** The transport on the `HttpClient` of the context. */
export const make = (options: Options): Effect.Effect<Transport, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const backend = options.backend
    const timeout = Duration.fromInputUnsafe(options.requestTimeout ?? Duration.minutes(10))
    const retries = options.retries ?? 3
    const semaphore = yield* Semaphore.make(options.concurrency ?? 64)
    const apiKey = options.apiKey
    const classify = classifier(backend, options.hint)
    const fromHttpError = (error: HttpClientError.HttpClientError): Effect.Effect<never, AttemptError> =>
      Effect.flatMap(classify(error), Effect.fail)

    const context = yield* HttpClient.HttpClient
    const query = options.query ?? []
    const withQuery = (request: HttpClientRequest.HttpClientRequest) =>
      query.length === 0 ? request : HttpClientRequest.appendUrlParams(request, query)
    const raw = context.pipe(untraced, HttpClient.mapRequest(withQuery))
    const client = context.pipe(
      HttpClient.mapRequest((request) => {
        const shaped = HttpClientRequest.acceptJson(withQuery(request))
        if (apiKey !== undefined) return HttpClientRequest.bearerToken(shaped, apiKey)
        return options.basic === undefined ? shaped : HttpClientRequest.basicAuth(shaped, options.basic[0], options.basic[1])
      }),
      HttpClient.filterStatusOk,
      (client) => (options.tracing === true ? client : untraced(client))
    )

    // Doubling delays capped at maxBackoff (the smaller of the two delays), jittered, `retries` at most,
    // only for retryable failures, never shorter than the server's Retry-After.
    const schedule = Schedule.min([
      Schedule.exponential(options.backoff ?? Duration.millis(500), 2),
      Schedule.spaced(options.maxBackoff ?? Duration.seconds(30))
    ]).pipe(
      Schedule.jittered,
      Schedule.setInputType<AttemptError>(),
      Schedule.while(({ attempt, input }) => attempt <= retries && input.retryable),
      Schedule.modifyDelay(({ duration, input }) =>
        Effect.succeed(input.retryAfter === undefined ? duration : Duration.max(duration, input.retryAfter))
      )
    )

    // ---- fail fast: transport failures in a row -------------------------------------------------
    const maxFailures = options.maxTransportFailures ?? 20
    const downPause = Duration.toMillis(Duration.fromInputUnsafe(options.downPause ?? Duration.seconds(10)))
    const halt = yield* Deferred.make<never, InferenceError>()
    let failuresInARow = 0
    let down: InferenceError | undefined
    let downSince = 0
    const noteAttempt = (error: InferenceError | undefined): Effect.Effect<void> => {
      const transport = error !== undefined && (error.reason === "Transport" || error.reason === "Timeout") &&
        error.status === undefined
      if (!transport) {
        // An answer: the server is back (a long-running rollout server recovers; a run has stopped).
        failuresInARow = 0
        down = undefined
        return Effect.void
      }
      failuresInARow++
      if (down !== undefined) {
        downSince = Date.now()
        return Effect.void
      }
      if (maxFailures === 0 || failuresInARow < maxFailures) return Effect.void
      down = new InferenceError({
        reason: "Unavailable",
        backend,
        detail: `${options.server} is not answering: ${failuresInARow} requests in a row ` +
          `failed without a response (last: ${error.detail}); stopping instead of failing every trajectory ` +
          `(${options.failuresOption ?? "--max-transport-failures"})`,
        cause: error
      })
      downSince = Date.now()
      return Deferred.fail(halt, down)
    }

    const send = <A>(
      url: string,
      body: () => Record<string, unknown>,
      schema: Schema.Decoder<A>,
      onRejected?: (sent: Record<string, unknown>, error: InferenceError) => Effect.Effect<boolean>
    ): Effect.Effect<A, InferenceError> => {
      const decode = HttpClientResponse.schemaBodyJson(schema)
      let attempts = 0
      const once = (sent: Record<string, unknown>): Effect.Effect<A, AttemptError> => {
        const response = Effect.flatMap(
          client.execute(HttpClientRequest.post(url).pipe(HttpClientRequest.bodyJsonUnsafe(sent))),
          decode
        )
        return (options.timeoutByTransport === true ? response : Effect.timeoutOrElse(response, {
          duration: timeout,
          orElse: () =>
            Effect.fail(new AttemptError({
              error: new InferenceError({
                reason: "Timeout",
                backend,
                detail: `POST ${url}: no response within ${Duration.format(timeout)}`
              }),
              retryable: true,
              retryAfter: undefined
            }))
        })).pipe(
          Effect.catchTags({
            HttpClientError: fromHttpError,
            SchemaError: (error) =>
              Effect.fail(
                new AttemptError({
                  error: new InferenceError({
                    reason: "BadResponse",
                    backend,
                    detail: `POST ${url}: unexpected response: ${error.message}`
                  }),
                  retryable: false,
                  retryAfter: undefined
                })
              )
          }),
          Effect.tap(() => noteAttempt(undefined)),
          Effect.tapError((failure) => noteAttempt(failure.error)),
          // A field the server rejected: dropped by the caller, sent again at once (not a retry).
          Effect.catchIf(
            (failure) => onRejected !== undefined && (failure.error.status === 400 || failure.error.status === 422),
            (failure) =>
              Effect.flatMap(onRejected!(sent, failure.error), (again) => (again ? once(body()) : Effect.fail(failure)))
          )
        )
      }
      const attempt = Effect.suspend(() => {
        attempts++
        // While down, calls fail at once; after a pause one gets through to see if it is back.
        if (down !== undefined && Date.now() - downSince < downPause) {
          return Effect.fail(new AttemptError({ error: down, retryable: false, retryAfter: undefined }))
        }
        return semaphore.withPermit(once(body()))
      })
      return attempt.pipe(
        Effect.retry(schedule),
        Effect.mapError((failure) =>
          attempts <= 1 || failure.error === down
            ? failure.error
            : withDetail(failure.error, `${failure.error.detail} (after ${attempts} attempts)`)
        )
      )
    }

    return { client, raw, send, halted: Deferred.await(halt), classify }
  })

/**
 * An `HttpClient` on undici with keep-alive connections, enforcing `requestTimeout` as undici's
 * headers and body timeouts (the server must start answering, and the body must not stall, within
 * it): racing an Effect timer against every request costs about a sixth of the client's throughput.
 *
 * `NodeHttpClient`'s undici client gives every request its own headers and body timeouts (an hour,
 * and none: it leaves timeouts to `Effect.timeout`), which win over the agent's; an interceptor of
 * the agent puts the request timeout back on every request.
 */
export const undiciClient = (requestTimeout: Duration.Input | undefined): Layer.Layer<HttpClient.HttpClient> => {
  const timeoutMs = Duration.toMillis(Duration.fromInputUnsafe(requestTimeout ?? Duration.minutes(10)))
  const dispatcher = Layer.effect(
    NodeHttpClient.Dispatcher,
    Effect.acquireRelease(
      Effect.sync(() =>
        new Undici.Agent({ headersTimeout: timeoutMs, bodyTimeout: timeoutMs, keepAliveTimeout: 30_000 }).compose(
          (dispatch) => (options, handler) =>
            dispatch({ ...options, headersTimeout: timeoutMs, bodyTimeout: timeoutMs }, handler)
        )
      ),
      (agent) => Effect.promise(() => agent.destroy())
    )
  )
  return NodeHttpClient.layerUndiciNoDispatcher.pipe(Layer.provide(dispatcher))
}
