/**
 * Server mode: the `Inference` service over an OpenAI-compatible chat-completions API
 * (`POST {baseUrl}/chat/completions`), as served by vLLM, SGLang, llama.cpp's `llama-server`,
 * Ollama and hosted APIs.
 *
 * - One `HttpClient`, shaped once: the base URL, JSON, bearer auth (the key is `Redacted` and never
 *   logged), non-2xx statuses as typed errors.
 * - Each call is one or more attempts. An attempt holds one permit of a semaphore shared by every
 *   trajectory of the run (`concurrency` requests in flight at most) and has its own timeout.
 *   Transient failures (connection refused or reset, timeouts, 408, 429, 5xx) are retried with
 *   jittered exponential backoff; a `retry-after-ms` / `Retry-After` header (up to a minute) is
 *   honoured. Other failures fail at once.
 * - Responses are decoded with schemas. Token ids and logprobs are taken where the server gives
 *   them and never invented: vLLM's `choices[].token_ids` (`return_token_ids`), the per-token `id`
 *   of llama.cpp's `logprobs.content`, vLLM's `token_id:N` tokens (`--return-tokens-as-token-ids`),
 *   and `logprobs.content[].logprob` (or `prob`, llama.cpp's post-sampling form).
 * - Every failure is an `InferenceError` of the trajectory, with the server's own message:
 *   `Transport`, `Timeout`, `RateLimited`, `ServerError` (after the retries), `InvalidRequest`
 *   (other 4xx), `BadResponse` (malformed JSON, an unexpected shape), `NoChoice`.
 *
 * @since 0.1.0
 */
import { HttpClient, HttpClientRequest, HttpClientResponse } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import type { HttpClientError } from "@effect/platform"
import type { ConfigError } from "effect"
import {
  Config,
  Data,
  Duration,
  Effect,
  Either,
  Layer,
  Option,
  ParseResult,
  Redacted,
  Schedule,
  Schema
} from "effect"
import type { ChatRequest, Completion, FinishReason, SamplingParams, Service } from "../Inference.js"
import { Inference, InferenceError } from "../Inference.js"
import * as Undici from "undici"
import * as Sampling from "./Sampling.js"
import { optionProblem } from "../internal/whole.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The API's base URL, up to and including the version: `http://127.0.0.1:8000/v1`. */
  readonly baseUrl: string
  /** The model name the server knows (`vllm serve NAME`, `ollama pull NAME`). */
  readonly model: string
  /** Sent as `Authorization: Bearer ...` when present. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** Defaults under each call's own parameters. `logprobs` defaults to true. */
  readonly sampling?: SamplingParams | undefined
  /** Send each call's seed (derived from the run's seed, row, generation and turn) as `seed`. */
  readonly seeded?: boolean | undefined
  /**
   * Only fields of the OpenAI API: no `top_k`, no `return_token_ids`. For hosted APIs that reject
   * unknown fields; token ids are then unavailable (logprobs still come when asked for).
   */
  readonly strict?: boolean | undefined
  /** Extra request fields for a server's own parameters (e.g. vLLM's `repetition_penalty`). */
  readonly extraBody?: Readonly<Record<string, unknown>> | undefined
  /** Per attempt. Default 10 minutes. */
  readonly requestTimeout?: Duration.DurationInput | undefined
  /** Retries of a transient failure. Default 3. */
  readonly retries?: number | undefined
  /** First backoff delay (doubling, jittered, capped at `maxBackoff`). Default 500 ms. */
  readonly backoff?: Duration.DurationInput | undefined
  /** Default 30 seconds. */
  readonly maxBackoff?: Duration.DurationInput | undefined
  /** Requests in flight at most, shared by every trajectory using this layer. Default 64. */
  readonly concurrency?: number | undefined
  /**
   * Trace each request with a span (and propagate `traceparent` to the server). Off by default:
   * a span per completion costs about a third of the client's throughput.
   */
  readonly tracing?: boolean | undefined
  /**
   * The `HttpClient` enforces `requestTimeout` itself (as {@link layerUndici}'s does), so no timer
   * is raced against each request here.
   */
  readonly timeoutByTransport?: boolean | undefined
}

const BACKEND = "openai-compat"
/** A server asking for a longer wait than this is not waited for: the usual backoff applies. */
const MAX_RETRY_AFTER = Duration.minutes(1)

// ---------------------------------------------------------------------------------------------
// Wire schemas
// ---------------------------------------------------------------------------------------------

const TokenLogprob = Schema.Struct({
  token: Schema.optional(Schema.NullOr(Schema.String)),
  logprob: Schema.optional(Schema.NullOr(Schema.Number)),
  prob: Schema.optional(Schema.NullOr(Schema.Number)),
  id: Schema.optional(Schema.NullOr(Schema.Int))
})

const Choice = Schema.Struct({
  message: Schema.optional(Schema.NullOr(Schema.Struct({ content: Schema.optional(Schema.NullOr(Schema.String)) }))),
  finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
  token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
  logprobs: Schema.optional(
    Schema.NullOr(Schema.Struct({ content: Schema.optional(Schema.NullOr(Schema.Array(TokenLogprob))) }))
  )
})

/**
 * The parts of a chat-completion response this client reads (other fields are ignored).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ChatCompletion = Schema.Struct({
  choices: Schema.optional(Schema.NullOr(Schema.Array(Choice))),
  prompt_token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
  usage: Schema.optional(
    Schema.NullOr(Schema.Struct({ prompt_tokens: Schema.optional(Schema.NullOr(Schema.Number)) }))
  ),
  /** Some servers answer 200 with an error object. */
  error: Schema.optional(Schema.Unknown)
})

/**
 * @since 0.1.0
 * @category schemas
 */
export type ChatCompletion = typeof ChatCompletion.Type

// ---------------------------------------------------------------------------------------------
// Requests and responses
// ---------------------------------------------------------------------------------------------

/**
 * The JSON body of one call.
 *
 * @since 0.1.0
 * @category encoding
 */
export const requestBody = (
  options: Pick<Options, "model" | "seeded" | "strict" | "extraBody">,
  request: ChatRequest,
  sampling: SamplingParams
): Record<string, unknown> => {
  const body: Record<string, unknown> = {
    ...options.extraBody,
    model: options.model,
    messages: request.messages.map((m) => ({ role: m.role, content: m.content })),
    stream: false
  }
  if (sampling.temperature !== undefined) body.temperature = sampling.temperature
  if (sampling.topP !== undefined) body.top_p = sampling.topP
  if (sampling.topK !== undefined) body.top_k = sampling.topK
  if (sampling.maxTokens !== undefined) body.max_tokens = sampling.maxTokens
  if (sampling.stop !== undefined && sampling.stop.length > 0) body.stop = sampling.stop
  if (sampling.presencePenalty !== undefined) body.presence_penalty = sampling.presencePenalty
  if (sampling.frequencyPenalty !== undefined) body.frequency_penalty = sampling.frequencyPenalty
  if (options.seeded === true) body.seed = request.seed
  if (sampling.logprobs !== false) {
    body.logprobs = true
    // llama.cpp returns logprobs only with at least one alternative; one keeps responses small.
    body.top_logprobs = 1
    if (options.strict !== true) body.return_token_ids = true
  }
  return body
}

const TOKEN_ID = /^token_id:(\d+)$/

const tokenIdsOf = (choice: typeof Choice.Type): Array<number> | undefined => {
  if (choice.token_ids != null) return [...choice.token_ids]
  const content = choice.logprobs?.content
  if (content == null) return undefined
  if (content.every((c) => typeof c.id === "number")) return content.map((c) => c.id as number)
  const ids: Array<number> = []
  for (const c of content) {
    const match = typeof c.token === "string" ? TOKEN_ID.exec(c.token) : null
    if (match === null) return undefined
    ids.push(Number(match[1]))
  }
  return ids
}

const logprobsOf = (choice: typeof Choice.Type): Array<number> | undefined => {
  const content = choice.logprobs?.content
  if (content == null) return undefined
  if (content.every((c) => typeof c.logprob === "number")) return content.map((c) => c.logprob as number)
  if (content.every((c) => typeof c.prob === "number")) return content.map((c) => Math.log(c.prob as number))
  return undefined
}

const finishReasonOf = (raw: string | null | undefined): FinishReason => {
  switch (raw) {
    case "stop":
    case "length":
    case "tool_calls":
    case "content_filter":
    case "abort":
    case "error":
      return raw
    case "function_call":
      return "tool_calls"
    case "max_tokens":
      return "length"
    default:
      // null, absent, or a server's own word for a natural end (`eos`, `end_turn`).
      return "stop"
  }
}

/**
 * The completion of a decoded response, or why there is none.
 *
 * @since 0.1.0
 * @category decoding
 */
export const toCompletion = (response: ChatCompletion): Either.Either<Completion, InferenceError> => {
  const choice = response.choices?.[0]
  if (choice === undefined) {
    const said = response.error === undefined ? "" : `: ${messageOf(response.error) ?? JSON.stringify(response.error)}`
    return Either.left(
      new InferenceError({ reason: "NoChoice", backend: BACKEND, detail: `the response has no choice${said}` })
    )
  }
  const completion: {
    text: string
    finishReason: FinishReason
    tokenIds?: ReadonlyArray<number>
    logprobs?: ReadonlyArray<number>
    promptTokens?: number
  } = { text: choice.message?.content ?? "", finishReason: finishReasonOf(choice.finish_reason) }
  const tokenIds = tokenIdsOf(choice)
  if (tokenIds !== undefined) completion.tokenIds = tokenIds
  const logprobs = logprobsOf(choice)
  if (logprobs !== undefined) completion.logprobs = logprobs
  const promptTokens = response.prompt_token_ids?.length ?? response.usage?.prompt_tokens ?? undefined
  if (promptTokens !== undefined && promptTokens !== null) completion.promptTokens = promptTokens
  return Either.right(completion)
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

const snippet = (text: string, max = 300): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max)}...` : flat
}

/**
 * The server's message in an error body: OpenAI's `{"error": {"message"}}`, `{"error": "..."}`,
 * FastAPI's `{"detail"}`, or the text itself.
 *
 * @since 0.1.0
 * @category decoding
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

// ---------------------------------------------------------------------------------------------
// Attempts and retries
// ---------------------------------------------------------------------------------------------

/** One failed attempt: the error it becomes, whether another attempt may help, how long to wait. */
class AttemptError extends Data.TaggedError("AttemptError")<{
  readonly error: InferenceError
  readonly retryable: boolean
  readonly retryAfter: Duration.Duration | undefined
}> {}

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
  return Duration.lessThanOrEqualTo(duration, MAX_RETRY_AFTER) ? duration : undefined
}

const reasonOfStatus = (status: number): InferenceError["reason"] =>
  status === 429 ? "RateLimited" : status === 408 ? "Timeout" : status >= 500 ? "ServerError" : "InvalidRequest"

const hintOfStatus = (status: number): string =>
  status === 404
    ? " (is the base URL right? it usually ends in /v1; is the model name one the server serves?)"
    : status === 401 || status === 403
    ? " (check the API key: --api-key-env VAR)"
    : ""

const isTransientStatus = (status: number): boolean => status === 408 || status === 429 || status >= 500

const describeCause = (cause: unknown): string => {
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

const fromHttpError = (error: HttpClientError.HttpClientError): Effect.Effect<never, AttemptError> =>
  Effect.flatMap(classify(error), Effect.fail)

/** undici's own timeouts (see {@link layerUndici}), anywhere in an error's cause chain. */
const isTransportTimeout = (cause: unknown): boolean => {
  for (let c = cause, depth = 0; c !== undefined && c !== null && depth < 5; depth++) {
    const code = (c as { code?: unknown }).code
    if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return true
    c = (c as { cause?: unknown }).cause
  }
  return false
}

const classify = (error: HttpClientError.HttpClientError): Effect.Effect<AttemptError> => {
  const where = `${error.request.method} ${error.request.url}`
  if (isTransportTimeout(error.cause)) {
    return Effect.succeed(
      new AttemptError({
        error: new InferenceError({
          reason: "Timeout",
          backend: BACKEND,
          detail: `${where}: no response within the request timeout (${describeCause(error.cause)})`,
          cause: error.cause
        }),
        retryable: true,
        retryAfter: undefined
      })
    )
  }
  if (error._tag === "RequestError") {
    const transport = error.reason === "Transport"
    return Effect.succeed(
      new AttemptError({
        error: new InferenceError({
          reason: transport ? "Transport" : "InvalidRequest",
          backend: BACKEND,
          detail: `${where}: ${describeCause(error.cause ?? error.description ?? error.reason)}`,
          cause: error.cause
        }),
        retryable: transport,
        retryAfter: undefined
      })
    )
  }
  const status = error.response.status
  if (error.reason === "StatusCode") {
    // Reading the body also frees the connection for the next attempt.
    return Effect.map(Effect.orElseSucceed(error.response.text, () => ""), (body) =>
      new AttemptError({
        error: new InferenceError({
          reason: reasonOfStatus(status),
          backend: BACKEND,
          status,
          detail: `${where}: ${errorMessage(body)}${hintOfStatus(status)}`
        }),
        retryable: isTransientStatus(status),
        retryAfter: retryAfterOf(error.response.headers)
      }))
  }
  // Decode (malformed JSON, a body cut short) or EmptyBody: the server answered, wrongly.
  return Effect.map(Effect.orElseSucceed(error.response.text, () => ""), (body) =>
    new AttemptError({
      error: new InferenceError({
        reason: "BadResponse",
        backend: BACKEND,
        status,
        detail: `${where}: ` +
          (error.reason === "EmptyBody" ? "empty body" : `malformed JSON (${describeCause(error.cause)})`) +
          (body === "" ? "" : `; body: ${snippet(body)}`),
        cause: error.cause
      }),
      retryable: false,
      retryAfter: undefined
    }))
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

const withDetail = (error: InferenceError, detail: string): InferenceError =>
  new InferenceError({
    reason: error.reason,
    backend: error.backend,
    detail,
    ...(error.status === undefined ? {} : { status: error.status }),
    ...(error.cause === undefined ? {} : { cause: error.cause })
  })

const invalid = (detail: string) => new InferenceError({ reason: "InvalidRequest", backend: BACKEND, detail })

/**
 * Checks the options (URL, model, numbers, sampling) without contacting the server.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (options: Options): Either.Either<Options, InferenceError> => {
  let url: URL
  try {
    url = new URL(options.baseUrl)
  } catch {
    return Either.left(
      invalid(`--base-url ${JSON.stringify(options.baseUrl)} is not a URL (e.g. http://127.0.0.1:8000/v1)`)
    )
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Either.left(invalid(`--base-url ${options.baseUrl}: only http:// and https:// URLs are supported`))
  }
  if (options.model.trim() === "") return Either.left(invalid("--model: the model name must not be empty"))
  const problem = optionProblem("--retries", options.retries, 0) ??
    optionProblem("--inference-concurrency", options.concurrency, 1)
  if (problem !== undefined) return Either.left(invalid(problem))
  const durations = [["--request-timeout", options.requestTimeout], ["backoff", options.backoff]] as const
  for (const [option, input] of durations) {
    if (input === undefined) continue
    const duration = Duration.decodeUnknown(input)
    if (Option.isNone(duration) || !Duration.greaterThan(duration.value, Duration.zero)) {
      return Either.left(invalid(`${option}: must be a positive duration`))
    }
  }
  if (options.strict === true && options.sampling?.topK !== undefined) {
    return Either.left(invalid("--top-k is not part of the OpenAI API; it cannot be sent with --strict-openai"))
  }
  return Either.map(Sampling.validate(BACKEND, options.sampling ?? {}), () => options)
}

/**
 * The service on the `HttpClient` of the context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Service, InferenceError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    yield* validate(options)
    const defaults: SamplingParams = options.sampling ?? {}
    const timeout = Duration.decode(options.requestTimeout ?? Duration.minutes(10))
    const retries = options.retries ?? 3
    const semaphore = yield* Effect.makeSemaphore(options.concurrency ?? 64)
    const apiKey = options.apiKey

    const client = (yield* HttpClient.HttpClient).pipe(
      HttpClient.mapRequest((request) => {
        const shaped = request.pipe(HttpClientRequest.prependUrl(options.baseUrl), HttpClientRequest.acceptJson)
        return apiKey === undefined ? shaped : HttpClientRequest.bearerToken(shaped, apiKey)
      }),
      HttpClient.filterStatusOk,
      (client) =>
        options.tracing === true
          ? client
          : client.pipe(HttpClient.withTracerDisabledWhen(() => true), HttpClient.withTracerPropagation(false))
    )

    const schedule = Schedule.exponential(options.backoff ?? Duration.millis(500), 2).pipe(
      Schedule.union(Schedule.spaced(options.maxBackoff ?? Duration.seconds(30))),
      Schedule.jittered,
      Schedule.intersect(Schedule.recurs(retries)),
      Schedule.intersect(Schedule.identity<AttemptError>()),
      Schedule.whileInput((failure: AttemptError) => failure.retryable),
      Schedule.modifyDelay(([, failure], delay) =>
        failure.retryAfter === undefined ? delay : Duration.max(delay, failure.retryAfter)
      )
    )

    const decode = HttpClientResponse.schemaBodyJson(ChatCompletion)
    const samplingOf = Sampling.checker(BACKEND, defaults)

    const chat = (request: ChatRequest): Effect.Effect<Completion, InferenceError> => {
      const checked = samplingOf(request.sampling)
      if (Either.isLeft(checked)) return Effect.fail(checked.left)
      const sampling = checked.right
      const http = HttpClientRequest.post("/chat/completions").pipe(
        HttpClientRequest.bodyUnsafeJson(requestBody(options, request, sampling))
      )
      let attempts = 0
      const attempt = Effect.suspend(() => {
        attempts++
        const response = Effect.flatMap(client.execute(http), decode)
        return (options.timeoutByTransport === true ? response : Effect.timeoutFail(response, {
          duration: timeout,
          onTimeout: () =>
            new AttemptError({
              error: new InferenceError({
                reason: "Timeout",
                backend: BACKEND,
                detail: `POST ${options.baseUrl}/chat/completions: no response within ${Duration.format(timeout)}`
              }),
              retryable: true,
              retryAfter: undefined
            })
        })).pipe(
          Effect.catchTags({
            RequestError: fromHttpError,
            ResponseError: fromHttpError,
            ParseError: (error) =>
              Effect.fail(
                new AttemptError({
                  error: new InferenceError({
                    reason: "BadResponse",
                    backend: BACKEND,
                    detail: `the response is not a chat completion: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
                  }),
                  retryable: false,
                  retryAfter: undefined
                })
              )
          }),
          semaphore.withPermits(1)
        )
      })
      return attempt.pipe(
        Effect.retry(schedule),
        Effect.mapError((failure) =>
          attempts <= 1
            ? failure.error
            : withDetail(failure.error, `${failure.error.detail} (after ${attempts} attempts)`)
        ),
        Effect.flatMap(toCompletion)
      )
    }

    return { name: `server ${options.baseUrl} model ${options.model}`, chat } satisfies Service
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Inference, InferenceError, HttpClient.HttpClient> =>
  Layer.effect(Inference, make(options))

/**
 * The layer on its own HTTP client: undici with keep-alive connections, enforcing
 * `requestTimeout` as undici's headers and body timeouts (the server must start answering, and
 * the body must not stall, within it). This is what the command line uses: racing an Effect timer
 * against every request costs about a sixth of the client's throughput.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerUndici = (options: Options): Layer.Layer<Inference, InferenceError> => {
  const timeoutMs = Duration.toMillis(Duration.decode(options.requestTimeout ?? Duration.minutes(10)))
  const dispatcher = Layer.scoped(
    NodeHttpClient.Dispatcher,
    Effect.acquireRelease(
      Effect.sync(() => new Undici.Agent({ headersTimeout: timeoutMs, bodyTimeout: timeoutMs, keepAliveTimeout: 30_000 })),
      (agent) => Effect.promise(() => agent.destroy())
    )
  )
  return Layer.effect(Inference, make({ ...options, timeoutByTransport: true })).pipe(
    Layer.provide(NodeHttpClient.layerUndiciWithoutDispatcher),
    Layer.provide(dispatcher)
  )
}

/**
 * The layer with options read from `Config` (environment variables by default), e.g.
 * `layerConfig({ baseUrl: Config.string("BASE_URL"), model: Config.string("MODEL"), apiKey:
 * Config.option(Config.redacted("OPENAI_API_KEY")).pipe(Config.map(Option.getOrUndefined)) })`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options>
): Layer.Layer<Inference, InferenceError | ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(Inference, Effect.flatMap(Config.unwrap(config), make))
