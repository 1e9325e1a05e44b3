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
import type { Message } from "./Message.js"

/**
 * Sampling parameters. Absent fields are left to the backend's defaults.
 *
 * @since 0.1.0
 * @category models
 */
export interface SamplingParams {
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  readonly topK?: number | undefined
  /** Tokens per turn (per completion). */
  readonly maxTokens?: number | undefined
  readonly stop?: ReadonlyArray<string> | undefined
  readonly presencePenalty?: number | undefined
  readonly frequencyPenalty?: number | undefined
  /** Ask the backend for token ids and logprobs when it can give them. */
  readonly logprobs?: boolean | undefined
}

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
  readonly tokenIds?: ReadonlyArray<number> | undefined
  readonly logprobs?: ReadonlyArray<number> | undefined
  readonly promptTokens?: number | undefined
}

/**
 * @since 0.1.0
 * @category errors
 */
export class InferenceError extends Schema.TaggedError<InferenceError>("effect-gym/InferenceError")(
  "InferenceError",
  {
    reason: Schema.Literal(
      "Transport",
      "Timeout",
      "RateLimited",
      "ServerError",
      "BadResponse",
      "NoChoice",
      "InvalidRequest",
      "Unavailable",
      "Policy"
    ),
    backend: Schema.String,
    detail: Schema.String,
    status: Schema.optional(Schema.Number),
    cause: Schema.optional(Schema.Defect)
  }
) {
  override get message(): string {
    return `${this.backend}: ${this.reason}${this.status === undefined ? "" : ` (HTTP ${this.status})`}: ${this.detail}`
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
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Inference extends Context.Tag("effect-gym/Inference")<Inference, Service>() {}

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
  Effect.flatMap(Inference, (service) => service.chat(request))
