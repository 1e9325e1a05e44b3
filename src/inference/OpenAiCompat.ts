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
import { Config, Console, Duration, Effect, Layer, Option, Redacted, Result, Schedule, Schema } from "effect"
import { HttpClient, HttpClientRequest, HttpClientResponse } from "effect/http"
import type {
  ChatRequest,
  Completion,
  Feature,
  FinishReason,
  PromptTokens as Prompt,
  SamplingParams,
  Service
} from "../Inference.js"
import { Inference, InferenceError } from "../Inference.js"
import type { Message, ToolCall } from "../Message.js"
import { MAX_JSON_DEPTH, nestsDeeper } from "../internal/inspect.js"
import * as Tool from "../Tool.js"
import * as HfTokenizer from "./HfTokenizer.js"
import * as PromptTokens from "./PromptTokens.js"
import * as Redact from "../internal/redact.js"
import * as Sampling from "./Sampling.js"
import { optionProblem } from "../internal/whole.js"
import * as Transport from "./internal/transport.js"

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
   * Only fields of the OpenAI API, whatever asks for others (a call's sampling included): no
   * `top_k`, no `return_token_ids`, no `chat_template_kwargs`. For hosted APIs that reject unknown
   * fields; token ids and the token path are then unavailable (logprobs still come when asked for).
   */
  readonly strict?: boolean | undefined
  /**
   * Token in, token out (see `PromptTokens`): each turn's prompt goes to `/completions` as token
   * ids, built from the previous turn's tokens and the template tokens of the new messages; the
   * server returns the sampled token ids and logprobs. `auto` (the default) uses it when the server
   * takes token prompts and returns token ids (checked once at start) and a tokenizer is at hand
   * (`tokenizer`, or the server's `/tokenize`), else the chat path, saying why once; `require` fails
   * at start instead; `off` always uses the chat path.
   */
  readonly tokenPath?: "auto" | "require" | "off" | undefined
  /** A Hugging Face model folder (tokenizer.json, tokenizer_config.json): the token path's local tokenizer and template. */
  readonly tokenizer?: string | undefined
  /** Variables of the model's chat template (`{"enable_thinking": false}`): sent as `chat_template_kwargs`, or applied by the token path's renderer. */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /**
   * Transport failures (no answer: connection refused or reset, timeouts) in a row, across all
   * calls, after which the server is declared down: calls fail at once and `halted` fails, so a
   * run stops with one message. Default 20; 0 never.
   */
  readonly maxTransportFailures?: number | undefined
  /** After the server was declared down, how long calls fail at once before one tries again. Default 10 seconds. */
  readonly downPause?: Duration.Input | undefined
  /** Ask `GET {baseUrl}/models` at start, so an unreachable server is one clear error. Default true. */
  readonly checkServer?: boolean | undefined
  /**
   * What a call's own field that the server rejects (400/422 naming `top_k`, `seed` or
   * `chat_template_kwargs`) does: `drop` (the default, a run's choice) sends the call again without
   * it and drops it for the rest of the run, with one warning; `refuse` (the rollout server: a
   * trainer's request is honoured or refused) fails the call with an `InvalidRequest` whose `field`
   * names it, every time. Other fields (`return_token_ids`, `logprobs`, `top_logprobs`) are dropped.
   */
  readonly rejectedFields?: "drop" | "refuse" | undefined
  /** Where warnings go (a field the server rejected, the chat path chosen). Default: stderr through `Console`. */
  readonly onWarning?: ((message: string) => Effect.Effect<void>) | undefined
  /** Extra request fields for a server's own parameters (e.g. vLLM's `repetition_penalty`). */
  readonly extraBody?: Readonly<Record<string, unknown>> | undefined
  /** Per attempt. Default 10 minutes. */
  readonly requestTimeout?: Duration.Input | undefined
  /** Retries of a transient failure. Default 3. */
  readonly retries?: number | undefined
  /** First backoff delay (doubling, jittered, capped at `maxBackoff`). Default 500 ms. */
  readonly backoff?: Duration.Input | undefined
  /** Default 30 seconds. */
  readonly maxBackoff?: Duration.Input | undefined
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

// ---------------------------------------------------------------------------------------------
// Wire schemas
// ---------------------------------------------------------------------------------------------

const TokenLogprob = Schema.Struct({
  token: Schema.optional(Schema.NullOr(Schema.String)),
  logprob: Schema.optional(Schema.NullOr(Schema.Number)),
  prob: Schema.optional(Schema.NullOr(Schema.Number)),
  id: Schema.optional(Schema.NullOr(Schema.Int))
})

/**
 * A tool call as servers send it: `arguments` JSON text (some send an object; any other JSON value is
 * kept as its JSON text, which the env's toolkit answers as malformed arguments rather than the whole
 * reply failing), `id` sometimes missing or empty.
 */
const WireToolCall = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.optional(Schema.Unknown)
  })
})

/**
 * A wire call's arguments as JSON text. Arguments nested past any real ones become text that is
 * not JSON (the toolkit answers it as malformed): JSON.stringify overflowed the stack on 10,000
 * levels, and the trajectory ended with an UnexpectedError.
 */
const argumentsText = (args: unknown): string =>
  typeof args === "string"
    ? args
    : nestsDeeper(args)
    ? `(arguments nested deeper than ${MAX_JSON_DEPTH} levels)`
    : JSON.stringify(args ?? {})

const Choice = Schema.Struct({
  message: Schema.optional(Schema.NullOr(Schema.Struct({
    content: Schema.optional(Schema.NullOr(Schema.String)),
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
  }))),
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
 * Request fields outside the OpenAI API, never sent with `strict`.
 *
 * @since 0.2.0
 * @category encoding
 */
export const NON_STANDARD: ReadonlySet<string> = new Set([
  "top_k",
  "return_token_ids",
  "chat_template_kwargs",
  "min_p",
  "repetition_penalty"
])

/**
 * Fields a server may reject (400/422 naming the field): dropped for the rest of the run, with one
 * warning, and the request sent again without it.
 *
 * @since 0.2.0
 * @category encoding
 */
export const DROPPABLE: ReadonlyArray<string> = [
  "return_token_ids",
  "chat_template_kwargs",
  "top_k",
  "seed",
  "top_logprobs",
  "logprobs"
]

/**
 * The fields of {@link DROPPABLE} that come from a call's own request (its sampling, seed and template
 * variables): with `rejectedFields: "refuse"`, a call the server rejects for one of them fails.
 *
 * @since 0.3.0
 * @category encoding
 */
export const REFUSABLE: ReadonlyArray<string> = ["top_k", "seed", "chat_template_kwargs"]

/**
 * The wire fields a call's sampling sets, by its parameter: with `rejectedFields: "refuse"` a call
 * the server rejects for one of them fails naming it too. (Not `logprobs`: server mode asks for them
 * by default and drops its own default; `/infer/` refuses a request that asked for them and got none.
 * Nor `max_tokens`: a server names it when a long conversation leaves too little room, which fails
 * that trajectory, not the request.)
 */
const ASKED: ReadonlyArray<readonly [keyof SamplingParams, string]> = [
  ["temperature", "temperature"],
  ["topP", "top_p"],
  ["stop", "stop"],
  ["presencePenalty", "presence_penalty"],
  ["frequencyPenalty", "frequency_penalty"],
  ["minP", "min_p"],
  ["repetitionPenalty", "repetition_penalty"]
]

const askedOf = (sampling: SamplingParams): ReadonlySet<string> => {
  const asked = new Set<string>()
  for (const [param, field] of ASKED) if (sampling[param] !== undefined) asked.add(field)
  return asked
}

/** Whether an error's text names `field` as a word (`logprobs` is not named by `top_logprobs`). */
const names = (detail: string, field: string): boolean =>
  new RegExp(`(?<![A-Za-z0-9_])${field}(?![A-Za-z0-9_])`).test(detail)

/** The sampling fields common to both APIs. */
const samplingFields = (
  body: Record<string, unknown>,
  options: Pick<Options, "seeded">,
  request: ChatRequest,
  sampling: SamplingParams
) => {
  if (sampling.temperature !== undefined) body.temperature = sampling.temperature
  if (sampling.topP !== undefined) body.top_p = sampling.topP
  if (sampling.topK !== undefined) body.top_k = sampling.topK
  if (sampling.maxTokens !== undefined) body.max_tokens = sampling.maxTokens
  if (sampling.stop !== undefined && sampling.stop.length > 0) body.stop = sampling.stop
  if (sampling.presencePenalty !== undefined) body.presence_penalty = sampling.presencePenalty
  if (sampling.frequencyPenalty !== undefined) body.frequency_penalty = sampling.frequencyPenalty
  // vLLM's and SGLang's extra sampling parameters (never dropped: a server that rejects them fails the call).
  if (sampling.minP !== undefined && sampling.minP !== 0) body.min_p = sampling.minP
  if (sampling.repetitionPenalty !== undefined && sampling.repetitionPenalty !== 1) {
    body.repetition_penalty = sampling.repetitionPenalty
  }
  if (options.seeded === true) body.seed = request.seed
}

/** Removes what must not be sent: non-standard fields under `strict`, and fields the server rejected. */
const restrict = (body: Record<string, unknown>, strict: boolean | undefined, dropped?: ReadonlySet<string>) => {
  if (strict === true) for (const key of NON_STANDARD) delete body[key]
  if (dropped !== undefined) for (const key of dropped) delete body[key]
  return body
}

const mergeKwargs = (
  defaults: Readonly<Record<string, unknown>> | undefined,
  call: Readonly<Record<string, unknown>> | undefined
) => (defaults === undefined ? call : call === undefined ? defaults : { ...defaults, ...call })

/**
 * A message as the chat API takes it: text messages as `{ role, content }`; an assistant message's
 * `tool_calls` and a tool message's `tool_call_id` in OpenAI's format (a tool message's `name`, which
 * OpenAI's API does not define, only without `strict`).
 */
const wireMessage = (m: Message, strict: boolean): Record<string, unknown> => {
  const out: Record<string, unknown> = { role: m.role, content: m.content }
  if (m.tool_calls !== undefined && m.tool_calls.length > 0) out.tool_calls = m.tool_calls
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id
  if (m.name !== undefined && !strict) out.name = m.name
  return out
}

/**
 * The JSON body of one chat call.
 *
 * @since 0.1.0
 * @category encoding
 */
export const requestBody = (
  options: Pick<Options, "model" | "seeded" | "strict" | "extraBody" | "chatTemplateKwargs">,
  request: ChatRequest,
  sampling: SamplingParams,
  dropped?: ReadonlySet<string>
): Record<string, unknown> => {
  const body: Record<string, unknown> = {
    ...options.extraBody,
    model: options.model,
    messages: request.messages.map((m) => wireMessage(m, options.strict === true)),
    stream: false
  }
  if (request.tools !== undefined && request.tools.length > 0) {
    body.tools = request.tools.map(Tool.toOpenAi)
    body.tool_choice = Tool.choiceToOpenAi(request.toolChoice ?? "auto")
  }
  samplingFields(body, options, request, sampling)
  if (sampling.logprobs !== false) {
    body.logprobs = true
    // llama.cpp returns logprobs only with at least one alternative; one keeps responses small.
    body.top_logprobs = 1
    body.return_token_ids = true
  }
  const kwargs = mergeKwargs(options.chatTemplateKwargs, request.chatTemplateKwargs)
  if (kwargs !== undefined && Object.keys(kwargs).length > 0) body.chat_template_kwargs = kwargs
  return restrict(body, options.strict, dropped)
}

/**
 * The JSON body of one token-path call: `/completions` with the prompt as token ids (vLLM's
 * `CompletionRequest`), asking for the sampled token ids and one logprob per token.
 *
 * @since 0.2.0
 * @category encoding
 */
export const completionsBody = (
  options: Pick<Options, "model" | "seeded" | "extraBody">,
  request: ChatRequest,
  sampling: SamplingParams,
  prompt: ReadonlyArray<number>,
  maxTokens: number | undefined,
  dropped?: ReadonlySet<string>
): Record<string, unknown> => {
  const body: Record<string, unknown> = { ...options.extraBody, model: options.model, prompt, stream: false }
  samplingFields(body, options, request, sampling)
  if (body.max_tokens === undefined && maxTokens !== undefined) body.max_tokens = maxTokens
  body.logprobs = 1
  body.return_token_ids = true
  return restrict(body, false, dropped)
}

const CompletionChoice = Schema.Struct({
  text: Schema.optional(Schema.NullOr(Schema.String)),
  finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
  token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
  prompt_token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
  logprobs: Schema.optional(Schema.NullOr(Schema.Struct({
    tokens: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
    token_logprobs: Schema.optional(Schema.NullOr(Schema.Array(Schema.NullOr(Schema.Number))))
  })))
})

/**
 * The parts of a `/completions` response the token path reads.
 *
 * @since 0.2.0
 * @category schemas
 */
export const TextCompletion = Schema.Struct({
  choices: Schema.optional(Schema.NullOr(Schema.Array(CompletionChoice))),
  error: Schema.optional(Schema.Unknown)
})

/**
 * The completion of a token-path response: the sampled token ids are required (the server must
 * give them: `return_token_ids`, or `token_id:N` token strings).
 *
 * @since 0.2.0
 * @category decoding
 */
export const toTokenCompletion = (
  response: typeof TextCompletion.Type,
  prompt: Prompt
): Result.Result<Completion, InferenceError> => {
  const choice = response.choices?.[0]
  if (choice === undefined) {
    const said = response.error === undefined ? "" : `: ${messageOf(response.error) ?? JSON.stringify(response.error)}`
    return Result.fail(
      new InferenceError({ reason: "NoChoice", backend: BACKEND, detail: `the response has no choice${said}` })
    )
  }
  let tokenIds: ReadonlyArray<number> | undefined = choice.token_ids ?? undefined
  const strings = choice.logprobs?.tokens
  if (tokenIds === undefined && strings != null) {
    const ids: Array<number> = []
    for (const token of strings) {
      const match = TOKEN_ID.exec(token)
      if (match === null) break
      ids.push(Number(match[1]))
    }
    if (ids.length === strings.length) tokenIds = ids
  }
  if (tokenIds === undefined) {
    return Result.fail(new InferenceError({
      reason: "BadResponse",
      backend: BACKEND,
      detail: "the /completions response has no token ids (the token path needs return_token_ids)"
    }))
  }
  const sent = choice.prompt_token_ids
  if (sent != null && sent.length !== prompt.tokenIds.length) {
    return Result.fail(new InferenceError({
      reason: "BadResponse",
      backend: BACKEND,
      detail: `the server changed the token prompt (${prompt.tokenIds.length} tokens sent, ${sent.length} used: ` +
        "did it add a BOS token?)"
    }))
  }
  const raw = choice.logprobs?.token_logprobs
  const logprobs = raw != null && raw.length === tokenIds.length && raw.every((x) => typeof x === "number")
    ? raw as ReadonlyArray<number>
    : undefined
  return Result.succeed({
    text: choice.text ?? "",
    finishReason: finishReasonOf(choice.finish_reason),
    tokenIds,
    ...(logprobs === undefined ? {} : { logprobs }),
    promptTokens: prompt.tokenIds.length,
    prompt
  })
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
export const toCompletion = (
  response: ChatCompletion,
  /** Ids for calls the server sent without one: `<idPrefix>_<index>`. */
  idPrefix = "call"
): Result.Result<Completion, InferenceError> => {
  const choice = response.choices?.[0]
  if (choice === undefined) {
    const said = response.error === undefined ? "" : `: ${messageOf(response.error) ?? JSON.stringify(response.error)}`
    return Result.fail(
      new InferenceError({ reason: "NoChoice", backend: BACKEND, detail: `the response has no choice${said}` })
    )
  }
  const completion: {
    text: string
    finishReason: FinishReason
    tokenIds?: ReadonlyArray<number>
    logprobs?: ReadonlyArray<number>
    promptTokens?: number
    toolCalls?: ReadonlyArray<ToolCall>
  } = { text: choice.message?.content ?? "", finishReason: finishReasonOf(choice.finish_reason) }
  const calls = choice.message?.tool_calls
  if (calls != null && calls.length > 0) {
    completion.toolCalls = calls.map((call, i): ToolCall => ({
      // An empty id answers no call: the tool message's tool_call_id "" would match any other empty one.
      id: call.id == null || call.id === "" ? `${idPrefix}_${i}` : call.id,
      type: "function",
      function: {
        name: call.function.name,
        arguments: argumentsText(call.function.arguments)
      }
    }))
  }
  const tokenIds = tokenIdsOf(choice)
  if (tokenIds !== undefined) completion.tokenIds = tokenIds
  const logprobs = logprobsOf(choice)
  if (logprobs !== undefined) completion.logprobs = logprobs
  const promptTokens = response.prompt_token_ids?.length ?? response.usage?.prompt_tokens ?? undefined
  if (promptTokens !== undefined && promptTokens !== null) completion.promptTokens = promptTokens
  return Result.succeed(completion)
}

/**
 * The server's message in an error body: OpenAI's `{"error": {"message"}}`, `{"error": "..."}`,
 * FastAPI's `{"detail"}`, or the text itself.
 *
 * @since 0.1.0
 * @category decoding
 */
export const errorMessage = Transport.errorMessage

const messageOf = Transport.messageOf

const hintOfStatus = (status: number, url: string): string =>
  // The server's /tokenize is at its root, not under the base URL: a 404 there means it has none.
  status === 404 && url.endsWith("/tokenize")
    ? ""
    : status === 404
    ? " (is the base URL right? it usually ends in /v1; is the model name one the server serves?)"
    : status === 401 || status === 403
    ? " (check the API key: --api-key-env VAR)"
    : ""

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

const invalid = (detail: string) => new InferenceError({ reason: "InvalidRequest", backend: BACKEND, detail })

/**
 * Checks the options (URL, model, numbers, sampling) without contacting the server.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (options: Options): Result.Result<Options, InferenceError> => {
  let url: URL
  try {
    url = new URL(options.baseUrl)
  } catch {
    return Result.fail(
      invalid(`--base-url ${JSON.stringify(Redact.url(options.baseUrl))} is not a URL (e.g. http://127.0.0.1:8000/v1)`)
    )
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Result.fail(invalid(`--base-url ${Redact.url(options.baseUrl)}: only http:// and https:// URLs are supported`))
  }
  if (options.model.trim() === "") return Result.fail(invalid("--model: the model name must not be empty"))
  const problem = optionProblem("--retries", options.retries, 0) ??
    optionProblem("--inference-concurrency", options.concurrency, 1)
  if (problem !== undefined) return Result.fail(invalid(problem))
  const durations = [["--request-timeout", options.requestTimeout], ["backoff", options.backoff]] as const
  for (const [option, input] of durations) {
    if (input === undefined) continue
    const duration = Duration.fromInput(input)
    if (Option.isNone(duration) || !Duration.isGreaterThan(duration.value, Duration.zero)) {
      return Result.fail(invalid(`${option}: must be a positive duration`))
    }
  }
  if (options.strict === true && options.sampling?.topK !== undefined) {
    return Result.fail(invalid("--top-k is not part of the OpenAI API; it cannot be sent with --strict-openai"))
  }
  return Result.map(Sampling.validate(BACKEND, options.sampling ?? {}), () => options)
}

/**
 * The service on the `HttpClient` of the context. Unless `checkServer` is false, the server is
 * asked for its models first (an unreachable server, or a rejected key, fails here); the token
 * path is chosen then too.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Service, InferenceError, HttpClient.HttpClient> => {
  // Credentials in the base URL never reach a message, a log line or /info: a user name and
  // password go as Basic auth (fetch refuses URLs that hold them); every error is scrubbed of them
  // and of query values.
  const secrets = Redact.secretsOf(options.baseUrl)
  if (secrets.length === 0) return makeWith(options, undefined)
  const { basic, plain, query } = Redact.split(options.baseUrl)
  const scrubbed = (error: InferenceError) => Transport.withDetail(error, Redact.scrub(error.detail, secrets))
  const warn = options.onWarning ?? ((message: string) => Console.error(`warning: ${message}`))
  const onWarning = (message: string) => warn(Redact.scrub(message, secrets))
  return makeWith({ ...options, baseUrl: plain, onWarning }, basic, query).pipe(
    Effect.mapError(scrubbed),
    Effect.map((service): Service => {
      const { halted, retokenize } = service
      return {
        ...service,
        name: Redact.scrub(service.name, secrets),
        chat: (request) =>
          Effect.mapBoth(service.chat(request), {
            onFailure: scrubbed,
            onSuccess: (completion) =>
              completion.tokensUnavailable === undefined
                ? completion
                : { ...completion, tokensUnavailable: Redact.scrub(completion.tokensUnavailable, secrets) }
          }),
        ...(retokenize === undefined ? {} : {
          retokenize: (messages, kwargs, tools) => Effect.mapError(retokenize(messages, kwargs, tools), scrubbed)
        }),
        ...(halted === undefined ? {} : { halted: Effect.mapError(halted, scrubbed) })
      }
    })
  )
}

const makeWith = (
  options: Options,
  basic: readonly [string, string] | undefined,
  query: ReadonlyArray<readonly [string, string]> = []
): Effect.Effect<Service, InferenceError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    yield* Effect.fromResult(validate(options))
    const defaults: SamplingParams = options.sampling ?? {}
    const timeout = Duration.fromInputUnsafe(options.requestTimeout ?? Duration.minutes(10))
    const warn = options.onWarning ?? ((message: string) => Console.error(`warning: ${message}`))
    const root = rootOf(options.baseUrl)
    const transport = yield* Transport.make({
      backend: BACKEND,
      server: `the inference server at ${options.baseUrl}`,
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
      tracing: options.tracing,
      timeoutByTransport: options.timeoutByTransport,
      hint: hintOfStatus
    })
    const base = transport.client
    const halt = transport.halted

    // ---- fields the server rejected, dropped for the rest of the run --------------------------
    const dropped = new Set<string>()
    const refuse = options.rejectedFields === "refuse"
    // While the token path is chosen, its warnings wait: `--token-path require` may yet fail, and then
    // the error alone is said.
    let deferred: Array<string> | undefined = []
    const warnOnce = (message: string): Effect.Effect<void> =>
      deferred === undefined ? warn(message) : Effect.sync(() => void deferred!.push(message))
    /** A droppable field of `body` that a 400/422 answer names, dropped (with one warning), or undefined. */
    const dropRejected = (asked: ReadonlySet<string>) => (body: Record<string, unknown>, error: InferenceError): Effect.Effect<boolean> => {
      if (error.status !== 400 && error.status !== 422) return Effect.succeed(false)
      const field = DROPPABLE.find((key) => key in body && error.detail.includes(key))
      if (field === undefined) return Effect.succeed(false)
      if (refuse && (REFUSABLE.includes(field) || asked.has(field))) return Effect.succeed(false)
      // Another call dropped it meanwhile: send again, without it.
      if (dropped.has(field)) return Effect.succeed(true)
      dropped.add(field)
      return Effect.as(
        warnOnce(
          `the server rejected the request field ${field} (HTTP ${error.status}); it is not sent for the rest of ` +
            `the run${field === "return_token_ids" ? ", so token ids are only what the logprobs give" : ""}`
        ),
        true
      )
    }

    /** Under `refuse`, a call's own field that the server rejected, named in the call's error. */
    const refused = (asked: ReadonlySet<string>, body: Record<string, unknown>, error: InferenceError): InferenceError => {
      if (!refuse || (error.status !== 400 && error.status !== 422)) return error
      const field = REFUSABLE.find((key) => key in body && error.detail.includes(key)) ??
        [...asked].find((key) => key in body && names(error.detail, key))
      if (field === undefined) return error
      return new InferenceError({
        reason: "InvalidRequest",
        backend: BACKEND,
        status: error.status,
        field,
        detail: `the server rejected the request field ${field}; it is not dropped (a request's field is honoured ` +
          `or refused): ${error.detail}`
      })
    }

    /** One call, with retries; `body` is built per attempt, so a field dropped meanwhile is not sent again. */
    const send = <A>(
      url: string,
      body: () => Record<string, unknown>,
      schema: Schema.Decoder<A>,
      sampling: SamplingParams = {}
    ): Effect.Effect<A, InferenceError> => {
      let sent: Record<string, unknown> = {}
      const built = () => (sent = body())
      const asked = refuse ? askedOf(sampling) : new Set<string>()
      return Effect.mapError(transport.send(url, built, schema, dropRejected(asked)), (error) => refused(asked, sent, error))
    }

    // top_k, min_p and repetition_penalty are vLLM's (and SGLang's) extra parameters; --strict-openai sends
    // none of them, nor chat_template_kwargs, and says so (`honours`: the rollout server refuses a request's
    // top_k with a 400 rather than dropping it). A regex has no one form across servers.
    const honours: ReadonlySet<Feature> = options.strict === true
      ? new Set()
      : new Set(["topK", "minP", "repetitionPenalty", "chatTemplateKwargs"])
    // A call's own top_k under --strict-openai is dropped, never sent (as the library always did).
    const accepts: ReadonlySet<Feature> = options.strict === true ? new Set(["topK"]) : honours
    const checkSampling = Sampling.checker(BACKEND, defaults)
    const samplingOf = (call: SamplingParams): Result.Result<SamplingParams, InferenceError> =>
      Result.flatMap(checkSampling(call), (sampling) => {
        const unsupported = Sampling.requireHonoured(BACKEND, sampling, accepts)
        return unsupported === undefined ? Result.succeed(sampling) : Result.fail(unsupported)
      })

    // ---- start: the server answers, its models, the token path ----------------------------------
    // A bad tokenizer folder is an option error, found before the server is asked anything.
    const local = options.tokenizer === undefined ? undefined : yield* HfTokenizer.load(options.tokenizer)
    if (local !== undefined && local.template === undefined) {
      return yield* invalid(
        `--tokenizer ${options.tokenizer}: no chat template there (tokenizer_config.json's chat_template, or chat_template.jinja)`
      )
    }
    let maxModelLen: number | undefined
    if (options.checkServer !== false) maxModelLen = yield* checkModels(base, options, timeout, transport.classify)

    const chatText = (request: ChatRequest): Effect.Effect<Completion, InferenceError> => {
      const checked = samplingOf(request.sampling)
      if (Result.isFailure(checked)) return Effect.fail(checked.failure)
      const sampling = checked.success
      return Effect.flatMap(
        send(
          `${options.baseUrl}/chat/completions`,
          () => requestBody(options, request, sampling, dropped),
          ChatCompletion,
          sampling
        ),
        (response) =>
          Effect.fromResult(
            Result.map(
              toCompletion(response, `call_${request.trajectoryId}_${request.turn}`),
              (completion) => ({ ...completion, tokensUnavailable: chatOnly ?? choiceOnChatPath(request) })
            )
          )
      )
    }
    let chatOnly: string | undefined
    // The --tokenizer folder's template: the model's, which the tool parser is chosen from.
    const chatTemplate = local?.template?.source
    let service: Service = {
      name: `server ${options.baseUrl} model ${options.model}`,
      chat: chatText,
      halted: halt,
      honours,
      chatTemplate
    }

    const tokenPath = yield* chooseTokenPath(options, {
      local,
      root,
      timeout,
      maxModelLen,
      tokenize: (body) => send(`${root}/tokenize`, () => body, TokenizeResponse),
      probe: (prompt) =>
        send(
          `${options.baseUrl}/completions`,
          () => completionsBody(options, probeRequest, {}, prompt, 1, dropped),
          TextCompletion
        )
    })
    const waiting = deferred
    deferred = undefined
    for (const message of waiting) yield* warn(message)
    if (tokenPath._tag === "Chat") {
      chatOnly = `server mode on the chat path: ${tokenPath.reason}; a trainer must re-tokenize the messages`
      if (options.tokenPath !== "off") yield* warn(`${chatOnly} (token_ids: null in the log)`)
      return service
    }
    const renderer = tokenPath.renderer
    // Without a local template, the server's shows how it writes a call: what the tool parser is chosen from.
    const callRendering = local === undefined
      ? yield* renderedCall((body) => send(`${root}/tokenize`, () => body, TokenizeResponse), options.model)
      : undefined
    let toldMaxTokens = false
    // Tools are rendered by the template into the token prompt; the calls come back as text in the
    // sampled tokens, and the run's tool parser (`ToolParsers.wrap`) reads them out.
    const chatTokens = (request: ChatRequest): Effect.Effect<Completion, InferenceError> => {
      // A template cannot make the model call a tool (or none): the chat API, whose server can, takes such a call.
      if (choiceOnChatPath(request) !== undefined) return chatText(request)
      const checked = samplingOf(request.sampling)
      if (Result.isFailure(checked)) return Effect.fail(checked.failure)
      const sampling = checked.success
      return Effect.flatMap(PromptTokens.prompt(renderer, request, request.chatTemplateKwargs), (prompt) => {
        const room = maxModelLen === undefined ? undefined : maxModelLen - prompt.tokenIds.length
        if (room !== undefined && room < 1) {
          return Effect.fail(invalid(`the prompt has ${prompt.tokenIds.length} tokens; the model takes ${maxModelLen}`))
        }
        // The completions API's own default is short (vLLM: 16 tokens), unlike chat's.
        const tell = room === undefined && sampling.maxTokens === undefined && !toldMaxTokens
        if (tell) toldMaxTokens = true
        return Effect.andThen(tell ? warn(
          "the token path sends no max_tokens (the server reports no max_model_len in /v1/models): the server's " +
            "/v1/completions default applies (vLLM's is 16 tokens); set --max-tokens"
        ) : Effect.void, Effect.flatMap(
          send(
            `${options.baseUrl}/completions`,
            () => completionsBody(options, request, sampling, prompt.tokenIds, room, dropped),
            TextCompletion,
            sampling
          ),
          (response) => Effect.fromResult(toTokenCompletion(response, prompt))
        ))
      })
    }
    service = {
      name: `server ${options.baseUrl} model ${options.model} (token in/out, ${renderer.name})`,
      chat: chatTokens,
      retokenize: (messages, kwargs, tools) => renderer.tokenize(messages, { addGenerationPrompt: false, kwargs, tools }),
      halted: halt,
      honours,
      chatTemplate,
      callRendering
    }
    return service
  })

/**
 * A conversation with one tool call as the server's own template renders it (`/tokenize` with
 * `return_token_strs`, the strings joined, byte-level and SentencePiece spaces and newlines made
 * plain), or `undefined` when the server cannot say (the template refuses tools, no token strings).
 */
const renderedCall = (
  tokenize: (body: Record<string, unknown>) => Effect.Effect<typeof TokenizeResponse.Type, InferenceError>,
  model: string
): Effect.Effect<string | undefined> =>
  tokenize({
    model,
    messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "", tool_calls: [{ id: "call_0", type: "function", function: { name: "probe", arguments: "{}" } }] }
    ],
    tools: [Tool.toOpenAi({ name: "probe", description: "", parameters: { type: "object", properties: {} } })],
    add_generation_prompt: false,
    add_special_tokens: false,
    return_token_strs: true
  }).pipe(
    Effect.map((response) => response.token_strs?.join("").replace(/[Ġ▁]/g, " ").replace(/Ċ/g, "\n") ?? undefined),
    Effect.catch(() => Effect.succeed(undefined))
  )

/**
 * Why a call with tools goes by the chat path on a server with a token path: a `tool_choice` other
 * than `auto` is the server's to enforce (the token path renders the tools, and cannot constrain the reply).
 */
const choiceOnChatPath = (request: ChatRequest): string | undefined =>
  request.tools !== undefined && request.tools.length > 0 && request.toolChoice !== undefined && request.toolChoice !== "auto"
    ? `tool_choice ${JSON.stringify(request.toolChoice)} goes by the chat path (the server enforces it; a token prompt cannot)`
    : undefined

const probeRequest: ChatRequest = {
  messages: [{ role: "user", content: "Hi" }],
  sampling: {},
  trajectoryId: "probe",
  turn: 1,
  seed: 0
}

/** The server's root (`http://host:8000` for `http://host:8000/v1`): vLLM serves `/tokenize` there. */
const rootOf = (baseUrl: string): string => baseUrl.replace(/\/+$/, "").replace(/\/v\d+$/, "")

const ModelList = Schema.Struct({
  data: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
    id: Schema.optional(Schema.NullOr(Schema.String)),
    max_model_len: Schema.optional(Schema.NullOr(Schema.Number))
  }))))
})

/**
 * `GET {baseUrl}/models`: no answer at all, or a rejected key, is an error now rather than a
 * failure of every trajectory later. Other statuses pass (some servers have no such route). Gives
 * the model's `max_model_len` when the server says it (vLLM does).
 */
const checkModels = (
  client: HttpClient.HttpClient,
  options: Options,
  timeout: Duration.Duration,
  classify: Transport.Transport["classify"]
): Effect.Effect<number | undefined, InferenceError> => {
  const url = `${options.baseUrl}/models`
  const within = Duration.min(timeout, Duration.seconds(30))
  return client.execute(HttpClientRequest.get(url)).pipe(
    Effect.flatMap(HttpClientResponse.schemaBodyJson(ModelList)),
    Effect.timeoutOrElse({
      duration: within,
      orElse: () =>
        Effect.fail(
          new Transport.AttemptError({
            error: new InferenceError({
              reason: "Timeout",
              backend: BACKEND,
              detail: `no answer within ${Duration.format(within)}`
            }),
            retryable: false,
            retryAfter: undefined
          })
        )
    }),
    Effect.map((list) => {
      const entry = list.data?.find((m) => m.id === options.model)
      return entry?.max_model_len ?? undefined
    }),
    Effect.catchTags({
      HttpClientError: (error) => Effect.flatMap(classify(error), Effect.fail),
      SchemaError: () => Effect.succeed(undefined)
    }),
    // A connection dropped or reset once (a keep-alive socket the server closed, a restarting proxy)
    // is not a server that is down: ask again, twice, before saying so.
    Effect.retry({
      times: 2,
      schedule: Schedule.spaced(Duration.millis(250)),
      while: (failure: Transport.AttemptError) =>
        failure.error.status === undefined && failure.error.reason === "Transport"
    }),
    Effect.catch((failure: Transport.AttemptError) => {
      const error = failure.error
      if (error.status === 401 || error.status === 403) return Effect.fail(error)
      if (error.status !== undefined || error.reason === "BadResponse") return Effect.succeed(undefined)
      return Effect.fail(
        new InferenceError({
          reason: "Unavailable",
          backend: BACKEND,
          detail: `cannot reach the inference server (${error.detail}): is it running, is --base-url right?`,
          cause: error
        })
      )
    })
  )
}

const TokenizeResponse = Schema.Struct({
  tokens: Schema.Array(Schema.Int),
  token_strs: Schema.optional(Schema.NullOr(Schema.Array(Schema.String)))
})

type TokenPathChoice =
  | { readonly _tag: "Chat"; readonly reason: string }
  | { readonly _tag: "Tokens"; readonly renderer: PromptTokens.Renderer }

/**
 * The token path, when the options allow it and the server can do it: a tokenizer (local, or the
 * server's `/tokenize`), and `/completions` taking a token prompt and returning token ids (one
 * request of one token to find out).
 */
const chooseTokenPath = (
  options: Options,
  server: {
    readonly local: HfTokenizer.HfTokenizer | undefined
    readonly root: string
    readonly timeout: Duration.Duration
    readonly maxModelLen: number | undefined
    readonly tokenize: (body: Record<string, unknown>) => Effect.Effect<typeof TokenizeResponse.Type, InferenceError>
    readonly probe: (prompt: ReadonlyArray<number>) => Effect.Effect<typeof TextCompletion.Type, InferenceError>
  }
): Effect.Effect<TokenPathChoice, InferenceError> =>
  Effect.gen(function*() {
    const mode = options.tokenPath ?? "auto"
    const chat = (reason: string) =>
      mode === "require"
        ? Effect.fail(invalid(`--token-path require: ${reason}`))
        : Effect.succeed<TokenPathChoice>({ _tag: "Chat", reason })
    if (mode === "off") return yield* chat("--token-path off")
    if (options.strict === true) return yield* chat("--strict-openai sends no token-id fields")
    if (options.sampling?.logprobs === false) return yield* chat("--no-logprobs asks for no token ids")
    let renderer: PromptTokens.Renderer
    const tokenizer = server.local
    if (tokenizer !== undefined && tokenizer.template !== undefined) {
      renderer = PromptTokens.local({
        name: `tokenizer ${options.tokenizer}`,
        backend: BACKEND,
        template: tokenizer.template,
        encode: tokenizer.encode,
        isSpecial: tokenizer.isSpecial,
        kwargs: options.chatTemplateKwargs
      })
    } else {
      const remote = remoteRenderer(options, server.root, server.tokenize)
      const works = yield* Effect.result(remote.tokenize(probeRequest.messages, { addGenerationPrompt: true }))
      if (Result.isFailure(works)) {
        return yield* chat(
          `no tokenizer (give --tokenizer DIR, a Hugging Face model folder; the server's POST ${server.root}/tokenize ` +
            `answered: ${works.failure.detail})`
        )
      }
      renderer = remote
    }
    const prompt = yield* renderer.tokenize(probeRequest.messages, { addGenerationPrompt: true })
    const probe = yield* Effect.result(Effect.flatMap(server.probe(prompt), (response) =>
      Effect.fromResult(toTokenCompletion(response, { tokenIds: prompt, reused: 0 }))))
    if (Result.isFailure(probe)) {
      return yield* chat(`POST ${options.baseUrl}/completions with a token prompt failed: ${probe.failure.detail}`)
    }
    return { _tag: "Tokens", renderer } as const
  })

/**
 * A renderer on the server's own `/tokenize` (vLLM's `TokenizeChatRequest`): the template and the
 * tokenizer the server itself uses. The tokens after a reply are found in the tokenized
 * conversation with the reply replaced by a marker: the server's token strings
 * (`return_token_strs`) show where the marker ends, and everything after it is what the template
 * adds. (Comparing with a rendering that stops at the reply would not do: Qwen3's template renders
 * a last assistant message differently from an earlier one.)
 */
const remoteRenderer = (
  options: Options,
  root: string,
  tokenize: (body: Record<string, unknown>) => Effect.Effect<typeof TokenizeResponse.Type, InferenceError>
): PromptTokens.Renderer => {
  // vLLM's TokenizeChatRequest takes the chat API's messages (tool calls, tool results) and `tools`.
  const body = (
    messages: ReadonlyArray<Message>,
    extra: Record<string, unknown>,
    kwargs: Readonly<Record<string, unknown>> | undefined,
    tools: ReadonlyArray<Tool.Spec> | undefined
  ) => {
    const merged = mergeKwargs(options.chatTemplateKwargs, kwargs)
    return {
      model: options.model,
      messages: messages.map((m) => wireMessage(m, false)),
      add_special_tokens: false,
      ...extra,
      ...(tools === undefined || tools.length === 0 ? {} : { tools: tools.map(Tool.toOpenAi) }),
      ...(merged === undefined ? {} : { chat_template_kwargs: merged })
    }
  }
  return {
    name: `the server's ${root}/tokenize`,
    tokenize: (messages, { addGenerationPrompt, kwargs, tools }) =>
      Effect.map(tokenize(body(messages, { add_generation_prompt: addGenerationPrompt }, kwargs, tools)), (r) => r.tokens),
    after: (messages, reply, kwargs, tools) =>
      Effect.flatMap(
        tokenize(
          body(PromptTokens.withMarker(messages, reply), { add_generation_prompt: true, return_token_strs: true }, kwargs, tools)
        ),
        (response) => {
          const strings = response.token_strs
          if (strings == null || strings.length !== response.tokens.length) {
            return Effect.fail(invalid("the server's /tokenize gives no token strings (return_token_strs)"))
          }
          const joined = strings.join("")
          const at = joined.indexOf(PromptTokens.MARKER)
          if (at < 0 || joined.lastIndexOf(PromptTokens.MARKER) !== at) {
            return Effect.fail(invalid("the reply's marker is not found once in the server's tokenization"))
          }
          const end = at + PromptTokens.MARKER.length
          let offset = 0
          for (let i = 0; i < strings.length; i++) {
            offset += strings[i].length
            if (offset === end) return Effect.succeed(response.tokens.slice(i + 1))
            if (offset > end) break
          }
          return Effect.fail(invalid("the reply does not end on a token boundary in the server's tokenization"))
        }
      )
  }
}

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
export const layerUndici = (options: Options): Layer.Layer<Inference, InferenceError> =>
  Layer.effect(Inference, make({ ...options, timeoutByTransport: true })).pipe(
    Layer.provide(Transport.undiciClient(options.requestTimeout))
  )

/**
 * The layer with options read from `Config` (environment variables by default), e.g.
 * `layerConfig({ baseUrl: Config.string("BASE_URL"), model: Config.string("MODEL"), apiKey:
 * Config.option(Config.redacted("OPENAI_API_KEY")).pipe(Config.map(Option.getOrUndefined)) })`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Wrap<Options>
): Layer.Layer<Inference, InferenceError | Config.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(Inference, Effect.flatMap(Config.unwrap(config), make))
