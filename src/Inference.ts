/**
 * The model, as one service: messages and sampling parameters in, a completion out.
 *
 * Server mode (an OpenAI-compatible HTTP server), colocate mode (an in-process engine) and the
 * scripted test policies are alternative layers of this one tag; the rollout loop does not change
 * between them.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Schema } from "effect"
import type { Message, ToolCall } from "./Message.js"
import type * as Tool from "./Tool.js"

/**
 * Sampling parameters. Absent fields are left to the backend's defaults.
 *
 * @since 0.1.0
 * @category models
 */
export interface SamplingParams {
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  /**
   * A whole number >= 1, or -1: no limit (as in vLLM; absent: the backend's default, which may be the
   * model's). Only backends that list `topK` in `Service.honours` take a limit (the OpenAI API has none).
   */
  readonly topK?: number | undefined
  /** Tokens per turn (per completion). */
  readonly maxTokens?: number | undefined
  readonly stop?: ReadonlyArray<string> | undefined
  readonly presencePenalty?: number | undefined
  readonly frequencyPenalty?: number | undefined
  /** Ask the backend for token ids and logprobs when it can give them. */
  readonly logprobs?: boolean | undefined
  /**
   * Keep only tokens with at least this probability relative to the most likely one (vLLM's
   * `min_p`); 0: no limit (absent: the backend's default). Only backends that list `minP` in
   * `Service.honours` take a value above 0.
   */
  readonly minP?: number | undefined
  /** vLLM's `repetition_penalty` (> 0; 1: none). Only backends that list it in `Service.honours` take another value. */
  readonly repetitionPenalty?: number | undefined
  /** Constrain the reply to a regular expression (vLLM's structured outputs). Only backends that list it. */
  readonly structuredOutputsRegex?: string | undefined
}

/**
 * The optional request features a backend may honour; a backend never ignores one it was given:
 * callers check {@link Service.honours} first (the rollout server answers 400), and a backend fails
 * a call that asks for one it does not list.
 *
 * @since 0.2.0
 * @category models
 */
export type Feature = "topK" | "minP" | "repetitionPenalty" | "structuredOutputsRegex" | "chatTemplateKwargs"

/**
 * One model call of a trajectory.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChatRequest {
  readonly messages: ReadonlyArray<Message>
  readonly sampling: SamplingParams
  /** Identifies the trajectory (`row-generation`), for logs and for backends that keep sessions. */
  readonly trajectoryId: string
  /** 1-based turn number. */
  readonly turn: number
  /**
   * A seed for this call, derived from the run's seed, the row, the generation and the turn, so a
   * seeded run gives the same samples whatever order trajectories run in.
   */
  readonly seed: number
  /**
   * The trajectory's tokens so far (the previous call's prompt and sampled tokens), when the
   * previous call was generated from tokens: a token-level backend sends that sequence, plus the
   * tokens of the messages added since, as the next prompt (token in, token out), so that model
   * output is never decoded and re-encoded. `undefined` on the first turn and for text backends.
   */
  readonly previous?: TokenState | undefined
  /** Variables of the model's chat template (`{"enable_thinking": false}`), for backends that render it. */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /** The tools the env offers in this episode (absent or empty: none). */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
  /** How the model may use them (OpenAI's `tool_choice`); only with `tools`. */
  readonly toolChoice?: Tool.Choice | undefined
}

/**
 * A trajectory's token sequence after a call generated from tokens.
 *
 * @since 0.2.0
 * @category models
 */
export interface TokenState {
  /** The call's prompt followed by its sampled tokens. */
  readonly tokenIds: ReadonlyArray<number>
  /** The conversation those tokens hold: the call's messages and the reply. */
  readonly messages: ReadonlyArray<Message>
  /** How many of the last `tokenIds` were sampled (the reply). */
  readonly sampled: number
  readonly finishReason: FinishReason
}

/**
 * The prompt a completion was sampled from, as tokens (token in, token out).
 *
 * @since 0.2.0
 * @category models
 */
export interface PromptTokens {
  readonly tokenIds: ReadonlyArray<number>
  /**
   * How many leading tokens are the request's `previous.tokenIds`, reused as they are; the rest are
   * the template and message tokens added for this turn. 0 when the prompt was rendered afresh.
   */
  readonly reused: number
  /** Why a later turn's prompt was rendered afresh instead of continuing the previous tokens. */
  readonly restarted?: string | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter" | "abort" | "error"

/**
 * A completion. Token ids and logprobs are present only when the backend gives them; they are
 * never invented.
 *
 * @since 0.1.0
 * @category models
 */
export interface Completion {
  readonly text: string
  readonly finishReason: FinishReason
  /** The reply's tool calls (OpenAI's format): from the server, or parsed out of the text. */
  readonly toolCalls?: ReadonlyArray<ToolCall> | undefined
  /**
   * Why text that looked like a tool call was not one (the text is kept as the reply's content):
   * the log marks the turn `malformed_tool_call`.
   */
  readonly malformedToolCall?: string | undefined
  readonly tokenIds?: ReadonlyArray<number> | undefined
  readonly logprobs?: ReadonlyArray<number> | undefined
  readonly promptTokens?: number | undefined
  /** The prompt as tokens, when the backend generated from tokens. */
  readonly prompt?: PromptTokens | undefined
  /** Why this completion has no token prompt (e.g. a chat-only server), for the log. */
  readonly tokensUnavailable?: string | undefined
  /**
   * The version of the policy's weights when the call was sent (set by whoever tracks weight
   * updates, e.g. the rollout server), so that asynchronous trainers can drop stale samples.
   */
  readonly policyVersion?: number | undefined
}

/**
 * The token state after a completion: `undefined` unless the completion was generated from tokens
 * and its sampled tokens are known.
 *
 * @since 0.2.0
 * @category models
 */
export const tokenState = (completion: Completion, messages: ReadonlyArray<Message>): TokenState | undefined => {
  const prompt = completion.prompt
  const sampled = completion.tokenIds
  if (prompt === undefined || sampled === undefined) return undefined
  return {
    tokenIds: prompt.tokenIds.concat(sampled),
    messages,
    sampled: sampled.length,
    finishReason: completion.finishReason
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class InferenceError extends Schema.TaggedError<InferenceError>()(
  "InferenceError",
  {
    reason: Schema.Literals([
      "Transport",
      "Timeout",
      "RateLimited",
      "ServerError",
      "BadResponse",
      "NoChoice",
      "InvalidRequest",
      "Unavailable",
      "Policy"
    ]),
    backend: Schema.String,
    detail: Schema.String,
    status: Schema.optional(Schema.Number),
    /**
     * The request field the backend rejected, when it is a call's own (`top_k`, `seed`,
     * `chat_template_kwargs`) and the backend refuses rather than drops it (the rollout server).
     */
    field: Schema.optional(Schema.String),
    cause: Schema.optional(Schema.Defect())
  }
) {
  override get message(): string {
    return `${this.backend}: ${this.reason}${this.status === undefined ? "" : ` (HTTP ${this.status})`}: ${this.detail}`
  }

  /** Transport failures and timeouts may go away on their own (`--trajectory-retries` retries them). */
  get transient(): boolean {
    return this.reason === "Transport" || this.reason === "Timeout"
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** A short description of the backend for logs and `/info` (e.g. `policy random`, `server http://...`). */
  readonly name: string
  readonly chat: (request: ChatRequest) => Effect.Effect<Completion, InferenceError>
  /**
   * The conversation rendered with the model's chat template (no generation prompt) and tokenized,
   * as a trainer that re-tokenizes would get it: what the drift check compares a trajectory's token
   * sequence with (with the tools the trajectory offered, rendered as its prompts rendered them).
   * Only backends that generate from tokens have it.
   */
  readonly retokenize?: (
    messages: ReadonlyArray<Message>,
    chatTemplateKwargs?: Readonly<Record<string, unknown>>,
    tools?: ReadonlyArray<Tool.Spec>
  ) => Effect.Effect<ReadonlyArray<number>, InferenceError>
  /**
   * Fails when the backend is declared dead (too many transport failures in a row): a run stops
   * with that one error instead of failing every trajectory slowly. Never succeeds.
   */
  readonly halted?: Effect.Effect<never, InferenceError> | undefined
  /** The optional features this backend honours (absent: none). See {@link Feature}. */
  readonly honours?: ReadonlySet<Feature> | undefined
  /**
   * The chat template (Jinja source) this backend renders prompts with, when it has it in this
   * process (colocate, server mode's `--tokenizer`): what the tool parser is chosen from.
   */
  readonly chatTemplate?: string | undefined
  /**
   * Without the template here: a conversation with one tool call as the backend's template renders
   * it (server mode's token path asks the server's `/tokenize`), to choose the tool parser from.
   */
  readonly callRendering?: string | undefined
  /** How tool calls are read out of reply text (see `ToolParsers.wrap`), and what chose it. */
  readonly toolParser?: ToolParserChoice | undefined
  /**
   * A scripted policy (`Policy.define`), not a model: it samples no tokens, so it has no logprobs to
   * give, and the rollout server does not refuse a request's `logprobs: true` for that (a trainer's
   * dry run against a scripted server sends its defaults, which ask for them).
   */
  readonly scripted?: boolean | undefined
}

/**
 * The parser that reads tool calls out of a backend's text replies (`hermes`, `llama3_json`,
 * `mistral`, or `none`), and what chose it (the option, the model's chat template, or the default).
 *
 * @since 0.3.0
 * @category models
 */
export interface ToolParserChoice {
  readonly name: string
  readonly chosenBy: string
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Inference extends Context.Service<Inference, Service>()("effect-gym/Inference") {}

/**
 * A layer from a plain chat function; handy in tests and plugins.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFunction = (
  name: string,
  chat: (request: ChatRequest) => Effect.Effect<Completion, InferenceError>
): Layer.Layer<Inference> => Layer.succeed(Inference, { name, chat })

/**
 * Calls the model of the current context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const chat = (request: ChatRequest): Effect.Effect<Completion, InferenceError, Inference> =>
  Inference.use((service) => service.chat(request))
