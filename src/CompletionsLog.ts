/**
 * The completions log: one JSON line per trajectory (`completions.jsonl`), written as groups finish.
 *
 * @since 0.1.0
 */
import { FileSystem } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Schema } from "effect"
import type * as Scope from "effect/Scope"
import * as Json from "./internal/Json.js"
import { Messages } from "./Message.js"
import type { Item, TrajectoryRecord } from "./Rollout.js"

const Info = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * The error of a failed trajectory as written to the log: its tag, its message and its fields.
 *
 * @since 0.1.0
 * @category schemas
 */
export const LoggedError = Schema.Struct(
  { _tag: Schema.String, message: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/**
 * One line of `completions.jsonl`. Consumers can decode lines with this schema.
 *
 * @since 0.1.0
 * @category schemas
 */
export const CompletionLine = Schema.Struct({
  row: Schema.Number,
  generation: Schema.Number,
  id: Schema.String,
  env: Schema.NullOr(Schema.String),
  env_config: Info,
  messages: Messages,
  rewards: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Number })),
  reward: Schema.NullOr(Schema.Number),
  advantage: Schema.NullOr(Schema.Number),
  rollout_infos: Schema.Struct(
    {
      total_reward: Schema.Number,
      step_rewards: Schema.Array(Schema.Number),
      num_turns: Schema.Number,
      reset_info: Schema.NullOr(Info),
      step_infos: Schema.Array(Info)
    },
    Schema.Record({ key: Schema.String, value: Schema.Unknown })
  ),
  end_reason: Schema.Literal("done", "max_turns", "error"),
  error: Schema.NullOr(LoggedError),
  finish_reasons: Schema.Array(Schema.String),
  /** One entry per turn: the completion's token ids, `null` for a turn whose backend gave none. */
  response_token_ids: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** One entry per turn: 1 for each model token (the response holds model tokens only). */
  response_loss_mask: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** One entry per turn: the logprob of each token, `null` for a turn whose backend gave none. */
  rollout_logprobs: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** The templated first prompt (token in, token out; see `TokenSequence`). */
  prompt_token_ids: Schema.optional(Schema.Array(Schema.Number)),
  /** Everything after the prompt: sampled tokens and the template/observation tokens between turns; `null` when unavailable. */
  token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Number))),
  /** 1 exactly on sampled tokens. */
  loss_mask: Schema.optional(Schema.Array(Schema.Literal(0, 1))),
  /** Per token of `token_ids`: the sampled token's logprob, `null` elsewhere. */
  logprobs: Schema.optional(Schema.Array(Schema.NullOr(Schema.Number))),
  /** Why `token_ids` is `null`. */
  token_ids_unavailable: Schema.optional(Schema.String),
  /** One entry per turn: the policy version its model call was sent under (`null`: not versioned). */
  policy_versions: Schema.optional(Schema.Array(Schema.NullOr(Schema.Number))),
  timings: Schema.Struct({
    total_ms: Schema.Number,
    reset_ms: Schema.Number,
    turns: Schema.Array(Schema.Struct({ model_ms: Schema.Number, env_ms: Schema.Number }))
  })
})

/**
 * @since 0.1.0
 * @category models
 */
export type CompletionLine = typeof CompletionLine.Encoded

/**
 * A typed error as plain data: `_tag`, `message` and its fields (not its cause or stack).
 *
 * @since 0.1.0
 * @category encoding
 */
export const errorToJson = (error: { readonly _tag: string; readonly message: string }): typeof LoggedError.Type => {
  const out: Record<string, unknown> = { _tag: error._tag, message: error.message }
  for (const [key, value] of Object.entries(error)) {
    if (key !== "cause" && key !== "stack" && key !== "_tag" && key !== "message") out[key] = value
  }
  return out as typeof LoggedError.Type
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000

/**
 * The log line of one trajectory.
 *
 * @since 0.1.0
 * @category encoding
 */
export const toLine = (record: TrajectoryRecord): CompletionLine => {
  const result = record.result
  const line: Record<string, unknown> = {
    row: result.row,
    generation: result.generation,
    id: result.id,
    env: result.env ?? null,
    env_config: record.row.envConfig,
    messages: result.messages,
    rewards: record.rewards ?? null,
    reward: record.reward ?? null,
    advantage: record.advantage ?? null,
    rollout_infos: {
      ...result.rolloutInfos,
      total_reward: result.totalReward,
      step_rewards: result.stepRewards,
      num_turns: result.numTurns,
      reset_info: result.resetInfo ?? null,
      step_infos: result.stepInfos
    },
    end_reason: result.endReason,
    error: record.error === undefined ? null : errorToJson(record.error),
    finish_reasons: result.turns.map((t) => t.finishReason)
  }
  // Token fields keep one entry per turn, so turn i is always entry i; a turn whose backend gave no
  // ids (or no logprobs) is `null` there, never a made-up list. A field no turn has is left out.
  if (result.turns.some((t) => t.tokenIds !== undefined)) {
    line.response_token_ids = result.turns.map((t) => t.tokenIds ?? null)
    line.response_loss_mask = result.turns.map((t) => t.tokenIds === undefined ? null : t.tokenIds.map(() => 1))
  }
  if (result.turns.some((t) => t.logprobs !== undefined)) {
    line.rollout_logprobs = result.turns.map((t) => t.logprobs ?? null)
  }
  if (result.turns.some((t) => t.policyVersion !== undefined)) {
    line.policy_versions = result.turns.map((t) => t.policyVersion ?? null)
  }
  const tokens = result.tokens
  if (tokens !== undefined) {
    if (tokens._tag === "Sequence") {
      line.prompt_token_ids = tokens.sequence.promptTokenIds
      line.token_ids = tokens.sequence.tokenIds
      line.loss_mask = tokens.sequence.lossMask
      line.logprobs = tokens.sequence.logprobs
    } else {
      line.token_ids = null
      line.token_ids_unavailable = tokens.reason
    }
  }
  line.timings = {
    total_ms: round(result.timings.totalMs),
    reset_ms: round(result.timings.resetMs),
    turns: result.timings.turns.map((t) => ({ model_ms: round(t.modelMs), env_ms: round(t.envMs) }))
  }
  return line as CompletionLine
}

/**
 * The JSON text of one log line (integers beyond 2^53 stay exact).
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeLine = (record: TrajectoryRecord): string => Json.stringify(toLine(record))

/**
 * A writer of the log: `write` appends the lines of some items (each group's trajectories; nothing
 * for a row failure) in one write. The file is closed with the scope.
 *
 * @since 0.1.0
 * @category models
 */
export interface Writer {
  readonly write: (items: Iterable<Item>) => Effect.Effect<void, PlatformError>
}

/**
 * Opens (truncates) the log file.
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (path: string): Effect.Effect<Writer, PlatformError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = yield* fs.open(path, { flag: "w" })
    const encoder = new TextEncoder()
    return {
      write: (items) => {
        let text = ""
        for (const item of items) {
          if (item._tag !== "Group") continue
          for (const record of item.records) text += encodeLine(record) + "\n"
        }
        return text === "" ? Effect.void : file.writeAll(encoder.encode(text))
      }
    }
  })
