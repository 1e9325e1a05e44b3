/**
 * Swift-rollout mode: the `Inference` service over the single-turn `POST /infer/` of an ms-swift
 * rollout server (`swift rollout --model M` without `--multi_turn_scheduler`: vLLM inside, the
 * weights synced by the trainer). effect-gym runs the turns (scheduler, env, rewards); each turn is
 * one `/infer/` call with the conversation so far, answered with the backend's sampled token ids,
 * their logprobs and its prompt token ids (`return_details`).
 *
 * - The request is the reference's own shape (`RolloutInferRequest`, `RequestConfig`, from ms-swift's
 *   `swift/infer_engine/protocol.py`); the response is its `RolloutOutput` (or a bare
 *   `ChatCompletionResponse`, which its client accepts too).
 * - `RequestConfig` fields are sent as the call asks: `top_k -1`, `min_p 0` and
 *   `repetition_penalty 1` mean "no limit" and are sent as such, since `null` there means the
 *   model's own generation config.
 * - The backend renders the chat template itself from messages: the prompt of a later turn is the
 *   backend's rendering of the whole conversation. When that rendering begins with the previous
 *   prompt and the sampled tokens, the trajectory is one token sequence (as on the token path);
 *   when it does not (a template that re-renders earlier replies, a reply that re-tokenizes
 *   differently), the sequence stops there and says why, while each turn keeps its sampled tokens.
 * - Tools: a call's tools go in the request's `tools` (OpenAI's format); the backend's agent template
 *   renders them and reads the reply's calls (`tool_calls`, taken only when the call offered tools),
 *   and the reply keeps its whole text, calls included, as ms-swift gives it. A reply goes back
 *   without its `tool_calls` (they are in its text), a tool's answer as a `tool` message. ms-swift's
 *   request has no `tool_choice`: only `auto`, else the call fails naming it.
 * - {@link Control} forwards the trainer's control endpoints (weights, caches, communicator) to the
 *   same backend, unchanged: see the rollout server's `internal/swift.ts`.
 *
 * Transport, retries, timeouts and fail fast are server mode's (`internal/transport.ts`).
 *
 * @since 0.2.0
 */
import { Duration, Effect, Layer, type Redacted, Result, Schema, type Scope } from "effect"
import { HttpClientRequest } from "effect/http"
import type { HttpClient } from "effect/http"
import type { ChatRequest, Completion, Feature, FinishReason, PromptTokens, SamplingParams, Service } from "../Inference.js"
import { Inference, InferenceError } from "../Inference.js"
import type { Message, ToolCall } from "../Message.js"
import * as Tool from "../Tool.js"
import { optionProblem } from "../internal/whole.js"
import * as Transport from "./internal/transport.js"
import { toolCallsOf, WireToolCall } from "./internal/wireToolCalls.js"
import { AGENT_TEMPLATE } from "./ToolParsers.js"
import * as Redact from "../internal/redact.js"
import * as Sampling from "./Sampling.js"

const BACKEND = "swift-rollout"

/**
 * @since 0.2.0
 * @category models
 */
export interface Options {
  /** The rollout server's root URL, e.g. `http://127.0.0.1:8000` (`/infer/` is under it). */
  readonly baseUrl: string
  /** Sent as a bearer token when present (a proxy in front of the backend). */
  readonly apiKey?: Redacted.Redacted | undefined
  /** Defaults under each call's own parameters. `logprobs` defaults to true. */
  readonly sampling?: SamplingParams | undefined
  /** Send each call's seed (derived from the run's seed, row, generation and turn). */
  readonly seeded?: boolean | undefined
  /** Variables of the model's chat template, under each call's own. */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /** Per attempt (and per forwarded control call). Default 10 minutes. */
  readonly requestTimeout?: Duration.Input | undefined
  /** Retries of a transient `/infer/` failure. Default 3. Control calls are never retried. */
  readonly retries?: number | undefined
  readonly backoff?: Duration.Input | undefined
  readonly maxBackoff?: Duration.Input | undefined
  /** `/infer/` calls in flight at most. Default 64. */
  readonly concurrency?: number | undefined
  /** Transport failures in a row after which the backend is declared down. Default 20; 0 never. */
  readonly maxTransportFailures?: number | undefined
  readonly downPause?: Duration.Input | undefined
  /**
   * Ask `GET /health/` and `POST /get_engine_type/` at start (an unreachable backend, or one that
   * runs its own multi-turn scheduler, is one clear error). Default true.
   */
  readonly checkServer?: boolean | undefined
  readonly timeoutByTransport?: boolean | undefined
}

/**
 * What the backend's `POST /get_engine_type/` said at start.
 *
 * @since 0.2.0
 * @category models
 */
export interface EngineType {
  readonly engine_type: string
  readonly enable_multi_turn: boolean
  readonly use_gym_env: boolean
  readonly enable_lora: boolean
}

/**
 * One control request to forward, as the trainer sent it.
 *
 * @since 0.2.0
 * @category models
 */
export interface Forward {
  readonly method: "GET" | "POST"
  /** The path with its query, e.g. `/update_flattened_params/`. */
  readonly path: string
  readonly body: Uint8Array
  readonly contentType: string | undefined
}

/**
 * The backend's answer, passed back as it is.
 *
 * @since 0.2.0
 * @category models
 */
export interface Forwarded {
  readonly status: number
  readonly body: Uint8Array
  readonly contentType: string | undefined
}

/**
 * The backend's control side: its engine type, and forwarding of control requests.
 *
 * @since 0.2.0
 * @category models
 */
export interface Control {
  /** `swift rollout http://...`, for messages. */
  readonly name: string
  readonly baseUrl: string
  /** `undefined` when the backend was not asked (`checkServer: false`). */
  readonly engine: EngineType | undefined
  /** Sends the request to the backend, once (never retried: weight updates are not idempotent). */
  readonly forward: (request: Forward) => Effect.Effect<Forwarded, InferenceError>
}

/**
 * @since 0.2.0
 * @category models
 */
export interface SwiftRollout {
  readonly service: Service
  readonly control: Control
}

// ---------------------------------------------------------------------------------------------
// Wire shapes (ms-swift's swift/infer_engine/protocol.py)
// ---------------------------------------------------------------------------------------------

const Choice = Schema.Struct({
  message: Schema.Struct({
    content: Schema.optional(Schema.NullOr(Schema.Unknown)),
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
  }),
  finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
  logprobs: Schema.optional(Schema.NullOr(Schema.Struct({
    content: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({ logprob: Schema.Number }))))
  }))),
  token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int)))
})

const ChatCompletionResponse = Schema.Struct({
  choices: Schema.Array(Choice),
  prompt_token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({ prompt_tokens: Schema.optional(Schema.NullOr(Schema.Number)) })))
})

const RolloutOutput = Schema.Struct({
  response: ChatCompletionResponse,
  messages: Schema.optional(Schema.NullOr(Schema.Unknown))
})

/**
 * The `/infer/` answer: a list of `RolloutOutput`s (or of bare chat completions, which ms-swift's
 * client accepts as well).
 *
 * @since 0.2.0
 * @category schemas
 */
export const InferResponse = Schema.Array(Schema.Union([RolloutOutput, ChatCompletionResponse]))

const EngineTypeResponse = Schema.Struct({
  engine_type: Schema.String,
  enable_multi_turn: Schema.optional(Schema.NullOr(Schema.Boolean)),
  use_gym_env: Schema.optional(Schema.NullOr(Schema.Boolean)),
  enable_lora: Schema.optional(Schema.NullOr(Schema.Boolean))
})

const mergeKwargs = (
  defaults: Readonly<Record<string, unknown>> | undefined,
  call: Readonly<Record<string, unknown>> | undefined
): Readonly<Record<string, unknown>> => ({ ...defaults, ...call })

/**
 * The `RequestConfig` of one call, every field as ms-swift's `asdict(RequestConfig)` has it.
 *
 * @since 0.2.0
 * @category encoding
 */
export const requestConfig = (
  options: Pick<Options, "seeded">,
  request: Pick<ChatRequest, "seed">,
  sampling: SamplingParams
): Record<string, unknown> => ({
  max_tokens: sampling.maxTokens ?? null,
  temperature: sampling.temperature ?? null,
  top_k: sampling.topK ?? null,
  top_p: sampling.topP ?? null,
  min_p: sampling.minP ?? null,
  repetition_penalty: sampling.repetitionPenalty ?? null,
  num_beams: 1,
  stop: sampling.stop === undefined ? [] : [...sampling.stop],
  seed: options.seeded === true ? request.seed : null,
  stream: false,
  logprobs: sampling.logprobs !== false,
  top_logprobs: null,
  prompt_logprobs: null,
  n: 1,
  best_of: null,
  presence_penalty: sampling.presencePenalty ?? 0,
  frequency_penalty: sampling.frequencyPenalty ?? 0,
  length_penalty: 1,
  // token_ids and prompt_token_ids come only with it
  return_details: true,
  structured_outputs_regex: sampling.structuredOutputsRegex ?? null
})

/**
 * The body of one single-turn `/infer/` call (one `RolloutInferRequest`).
 *
 * @since 0.2.0
 * @category encoding
 */
export const inferBody = (
  options: Pick<Options, "seeded" | "chatTemplateKwargs">,
  request: ChatRequest,
  sampling: SamplingParams
): Record<string, unknown> => ({
  infer_requests: [{
    messages: request.messages.map(wireMessage),
    images: [],
    audios: [],
    videos: [],
    tools: request.tools === undefined || request.tools.length === 0 ? null : request.tools.map(Tool.toOpenAi),
    objects: {},
    chat_template_kwargs: mergeKwargs(options.chatTemplateKwargs, request.chatTemplateKwargs),
    data_dict: {},
    uuid: null
  }],
  request_config: requestConfig(options, request, sampling),
  use_tqdm: false
})

/**
 * A message as the backend takes it. A reply of this backend keeps its calls in its text (its
 * `content` is the whole reply, see {@link toCompletion}): its `tool_calls` are left out, since
 * ms-swift's template renders an assistant's `tool_calls` after its text, which would write the
 * calls twice. An assistant message whose calls are not in its text (empty content: a prompt's)
 * keeps them, for the backend's agent template to write.
 */
const wireMessage = (m: Message): Record<string, unknown> =>
  m.tool_calls !== undefined && m.tool_calls.length > 0 && m.content === ""
    ? { role: m.role, content: m.content, tool_calls: m.tool_calls }
    : { role: m.role, content: m.content }

const finishReasonOf = (raw: string | null | undefined): FinishReason =>
  raw === "length" ? "length" : raw === "abort" ? "abort" : "stop"

/** The token prompt of a call, and how much of it continues the previous call's tokens. */
const promptOf = (ids: ReadonlyArray<number>, request: ChatRequest): PromptTokens => {
  const previous = request.previous
  if (previous === undefined) return { tokenIds: ids, reused: 0 }
  const before = previous.tokenIds
  let at = 0
  const n = Math.min(before.length, ids.length)
  while (at < n && before[at] === ids[at]) at++
  if (at === before.length) return { tokenIds: ids, reused: before.length }
  const promptLength = before.length - previous.sampled
  const where = at < promptLength
    ? `token ${at} of the previous prompt (its template renders an earlier turn differently now, e.g. without its reasoning)`
    : `token ${at - promptLength} of the previous reply (the template renders it differently, or its text ` +
      "tokenizes differently than the model sampled it)"
  return {
    tokenIds: ids,
    reused: 0,
    restarted: `the backend renders each prompt from the messages (swift rollout's /infer/ takes no tokens), and ` +
      `turn ${request.turn}'s prompt differs from the previous tokens at ${where}`
  }
}

/**
 * The completion of one `/infer/` answer.
 *
 * @since 0.2.0
 * @category decoding
 */
export const toCompletion = (
  response: typeof InferResponse.Type,
  request: ChatRequest
): Result.Result<Completion, InferenceError> => {
  const bad = (detail: string) => Result.fail(new InferenceError({ reason: "BadResponse", backend: BACKEND, detail }))
  if (response.length !== 1) return bad(`POST /infer/ answered ${response.length} outputs for one request`)
  const first = response[0]
  const output = "response" in first ? first : { response: first, messages: undefined }
  if (output.messages !== undefined && output.messages !== null) {
    return bad(
      "the backend ran its own multi-turn scheduler (its output has messages): start swift rollout without " +
        "--multi_turn_scheduler, effect-gym runs the turns"
    )
  }
  const choice = output.response.choices[0]
  if (choice === undefined) {
    return Result.fail(new InferenceError({ reason: "NoChoice", backend: BACKEND, detail: "the response has no choice" }))
  }
  const content = choice.message.content ?? ""
  if (typeof content !== "string") return bad("the reply's content is not text")
  const tokenIds = choice.token_ids ?? undefined
  const raw = choice.logprobs?.content
  const logprobs = raw != null && tokenIds !== undefined && raw.length === tokenIds.length
    ? raw.map((entry) => entry.logprob)
    : undefined
  const promptIds = output.response.prompt_token_ids ?? undefined
  const completion: {
    text: string
    finishReason: FinishReason
    tokenIds?: ReadonlyArray<number>
    logprobs?: ReadonlyArray<number>
    promptTokens?: number
    prompt?: PromptTokens
    tokensUnavailable?: string
    toolCalls?: ReadonlyArray<ToolCall>
  } = { text: content, finishReason: finishReasonOf(choice.finish_reason) }
  // The backend's agent template reads calls out of every reply; they are the reply's only when the
  // call offered tools. `content` stays the whole reply, calls included, as the backend gives it.
  const calls = choice.message.tool_calls
  if (calls != null && calls.length > 0 && request.tools !== undefined && request.tools.length > 0) {
    completion.toolCalls = toolCallsOf(calls, `call_${request.trajectoryId}_${request.turn}`)
    if (completion.finishReason === "stop") completion.finishReason = "tool_calls"
  }
  if (tokenIds !== undefined) completion.tokenIds = tokenIds
  if (logprobs !== undefined) completion.logprobs = logprobs
  const promptTokens = promptIds?.length ?? output.response.usage?.prompt_tokens ?? undefined
  if (promptTokens !== undefined && promptTokens !== null) completion.promptTokens = promptTokens
  if (promptIds !== undefined && tokenIds !== undefined) completion.prompt = promptOf(promptIds, request)
  else {
    completion.tokensUnavailable = "the swift rollout backend returned no token ids (return_details): " +
      "a trainer must re-tokenize the messages"
  }
  return Result.succeed(completion)
}

const invalid = (detail: string) => new InferenceError({ reason: "InvalidRequest", backend: BACKEND, detail })

/**
 * Checks the options without contacting the backend.
 *
 * @since 0.2.0
 * @category validation
 */
export const validate = (options: Options): Result.Result<Options, InferenceError> => {
  let url: URL
  try {
    url = new URL(options.baseUrl)
  } catch {
    return Result.fail(invalid(`--base-url ${JSON.stringify(Redact.url(options.baseUrl))} is not a URL (e.g. http://127.0.0.1:8000)`))
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Result.fail(invalid(`--base-url ${Redact.url(options.baseUrl)}: only http:// and https:// URLs are supported`))
  }
  const problem = optionProblem("--retries", options.retries, 0) ??
    optionProblem("--inference-concurrency", options.concurrency, 1)
  if (problem !== undefined) return Result.fail(invalid(problem))
  return Result.map(Sampling.validate(BACKEND, options.sampling ?? {}), () => options)
}

const HONOURS: ReadonlySet<Feature> = new Set(["topK", "minP", "repetitionPenalty", "structuredOutputsRegex", "chatTemplateKwargs"])

/** `http://host:8000` from `http://host:8000/` (swift rollout serves at its root, not under /v1). */
const rootOf = (baseUrl: string): string => baseUrl.replace(/\/+$/, "")

/**
 * The service and its control side, on the `HttpClient` of the context.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<SwiftRollout, InferenceError, HttpClient.HttpClient> => {
  // Credentials in the base URL never reach a message, a log line or /info (as for OpenAiCompat):
  // a user name and password go as Basic auth; every error is scrubbed of them and of query values.
  const secrets = Redact.secretsOf(options.baseUrl)
  if (secrets.length === 0) return makeWith(options, undefined)
  const { basic, plain, query } = Redact.split(options.baseUrl)
  const scrubbed = (error: InferenceError) => Transport.withDetail(error, Redact.scrub(error.detail, secrets))
  return makeWith({ ...options, baseUrl: plain }, basic, query).pipe(
    Effect.mapError(scrubbed),
    Effect.map(({ control, service }): SwiftRollout => {
      const name = Redact.scrub(service.name, secrets)
      return {
        service: { ...service, name, chat: (request) => Effect.mapError(service.chat(request), scrubbed) },
        control: {
          ...control,
          name,
          baseUrl: Redact.url(control.baseUrl),
          forward: (request) => Effect.mapError(control.forward(request), scrubbed)
        }
      }
    })
  )
}

const makeWith = (
  options: Options,
  basic: readonly [string, string] | undefined,
  query: ReadonlyArray<readonly [string, string]> = []
): Effect.Effect<SwiftRollout, InferenceError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    yield* Effect.fromResult(validate(options))
    const root = rootOf(options.baseUrl)
    const timeout = Duration.fromInputUnsafe(options.requestTimeout ?? Duration.minutes(10))
    const transport = yield* Transport.make({
      backend: BACKEND,
      server: `the swift rollout server at ${root}`,
      apiKey: options.apiKey,
      basic,
      query,
      requestTimeout: options.requestTimeout,
      retries: options.retries,
      backoff: options.backoff,
      maxBackoff: options.maxBackoff,
      concurrency: options.concurrency,
      maxTransportFailures: options.maxTransportFailures,
      downPause: options.downPause,
      timeoutByTransport: options.timeoutByTransport,
      hint: (status) =>
        status === 404 ? " (is --base-url the root of a `swift rollout` server, e.g. http://127.0.0.1:8000?)" : ""
    })
    const engine = options.checkServer === false ? undefined : yield* checkBackend(transport, root, timeout)

    const defaults: SamplingParams = { logprobs: true, ...options.sampling }
    const checkSampling = Sampling.checker(BACKEND, defaults)
    const chat = (request: ChatRequest): Effect.Effect<Completion, InferenceError> => {
      // ms-swift's request has no tool_choice: its agent template renders the tools, nothing constrains the reply.
      const choice = request.toolChoice
      if (request.tools !== undefined && request.tools.length > 0 && choice !== undefined && choice !== "auto") {
        return Effect.fail(new InferenceError({
          reason: "InvalidRequest",
          backend: BACKEND,
          field: "tool_choice",
          detail: `tool_choice ${JSON.stringify(choice)} is not supported in swift-rollout mode (only "auto": ms-swift's ` +
            "/infer/ takes tools but no tool_choice)"
        }))
      }
      const checked = checkSampling(request.sampling)
      if (Result.isFailure(checked)) return Effect.fail(checked.failure)
      const sampling = checked.success
      return Effect.flatMap(
        transport.send(`${root}/infer/`, () => inferBody(options, request, sampling), InferResponse),
        (response) => Effect.fromResult(toCompletion(response, request))
      )
    }

    const forward = (request: Forward): Effect.Effect<Forwarded, InferenceError> => {
      const url = `${root}${request.path}`
      const base = HttpClientRequest.make(request.method)(url)
      const withKey = options.apiKey !== undefined
        ? HttpClientRequest.bearerToken(base, options.apiKey)
        : basic === undefined
        ? base
        : HttpClientRequest.basicAuth(base, basic[0], basic[1])
      const sent = request.method === "GET" || request.body.length === 0
        ? withKey
        : HttpClientRequest.bodyUint8Array(withKey, request.body, request.contentType ?? "application/json")
      return transport.raw.execute(sent).pipe(
        Effect.flatMap((response) =>
          Effect.map(response.arrayBuffer, (buffer): Forwarded => ({
            status: response.status,
            body: new Uint8Array(buffer),
            contentType: response.headers["content-type"]
          }))
        ),
        (effect) =>
          options.timeoutByTransport === true ? effect : Effect.timeoutOrElse(effect, {
            duration: timeout,
            orElse: () =>
              Effect.fail(
                new InferenceError({
                  reason: "Timeout",
                  backend: BACKEND,
                  detail: `${request.method} ${url}: no response within ${Duration.format(timeout)}`
                })
              )
          }),
        Effect.catchTag(
          "HttpClientError",
          (error) => Effect.flatMap(transport.classify(error), (failure) => Effect.fail(failure.error))
        )
      )
    }

    const service: Service = {
      name: `swift rollout ${root}`,
      chat,
      halted: transport.halted,
      honours: HONOURS,
      toolParser: AGENT_TEMPLATE
    }
    return { service, control: { name: `swift rollout ${root}`, baseUrl: root, engine, forward } }
  })

/**
 * `GET /health/` (no answer: one clear error now, not a failure of every trajectory later), then
 * `POST /get_engine_type/`: a backend that runs its own multi-turn scheduler cannot be driven turn
 * by turn.
 */
const checkBackend = (
  transport: Transport.Transport,
  root: string,
  timeout: Duration.Duration
): Effect.Effect<EngineType, InferenceError> => {
  const within = Duration.min(timeout, Duration.seconds(30))
  const unreachable = (error: InferenceError) =>
    new InferenceError({
      reason: "Unavailable",
      backend: BACKEND,
      detail: `cannot reach the swift rollout server at ${root} (${error.detail}): is it running, is --base-url right?`,
      cause: error
    })
  const call = <A>(request: HttpClientRequest.HttpClientRequest, schema: Schema.Decoder<A>) =>
    transport.client.execute(request).pipe(
      Effect.flatMap((response) => Effect.flatMap(response.json, Schema.decodeUnknownEffect(schema))),
      Effect.timeoutOrElse({
        duration: within,
        orElse: () =>
          Effect.fail(
            new InferenceError({
              reason: "Timeout",
              backend: BACKEND,
              detail: `${request.method} ${request.url}: no answer within ${Duration.format(within)}`
            })
          )
      }),
      Effect.catchTags({
        HttpClientError: (error) => Effect.flatMap(transport.classify(error), (failure) => Effect.fail(failure.error)),
        SchemaError: (error) =>
          Effect.fail(
            new InferenceError({
              reason: "BadResponse",
              backend: BACKEND,
              detail: `${request.method} ${request.url}: unexpected answer: ${error.message}`
            })
          )
      })
    )
  return Effect.gen(function*() {
    yield* call(HttpClientRequest.get(`${root}/health/`), Schema.Unknown).pipe(
      Effect.mapError((error) => (error.status === undefined || error.status >= 500 ? unreachable(error) : error))
    )
    const engine = yield* call(HttpClientRequest.post(`${root}/get_engine_type/`), EngineTypeResponse).pipe(
      Effect.mapError((error) =>
        error.status === 404
          ? invalid(
            `${root} has no POST /get_engine_type/: it is not a swift rollout server (swift-rollout mode needs ` +
              "`swift rollout --model M`; for an OpenAI-compatible server use --mode server)"
          )
          : error
      )
    )
    if (engine.enable_multi_turn === true) {
      return yield* invalid(
        `the swift rollout server at ${root} runs its own multi-turn scheduler (--multi_turn_scheduler): effect-gym ` +
          "runs the turns itself and needs a single-turn backend; start swift rollout without --multi_turn_scheduler"
      )
    }
    return {
      engine_type: engine.engine_type,
      enable_multi_turn: false,
      use_gym_env: engine.use_gym_env === true,
      enable_lora: engine.enable_lora === true
    }
  })
}

/**
 * The service and its control side on their own HTTP client (undici, keep-alive, the request
 * timeout enforced by the transport), for the current scope.
 *
 * @since 0.2.0
 * @category constructors
 */
export const makeScoped = (options: Options): Effect.Effect<SwiftRollout, InferenceError, Scope.Scope> =>
  Effect.gen(function*() {
    const context = yield* Layer.build(Transport.undiciClient(options.requestTimeout))
    return yield* make({ ...options, timeoutByTransport: true }).pipe(Effect.provide(context))
  })

/**
 * @since 0.2.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Inference, InferenceError, HttpClient.HttpClient> =>
  Layer.effect(Inference, Effect.map(make(options), (swift) => swift.service))
