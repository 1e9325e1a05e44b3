/**
 * Rewards: the env's reward column (`gym_reward`, the trajectory's total), reward functions by name
 * beside it, weights, and GRPO group advantages.
 *
 * Columns are the reward functions in the order given, then `gym_reward` last; `--reward-weights`
 * gives one weight per column (the gym column's weight last), as in the reference.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema } from "effect"
import { show } from "./internal/inspect.js"
import { describe, liftMaybe } from "./internal/lift.js"
import type { MaybeEffect } from "./internal/lift.js"
import { PY_SPACE } from "./internal/pyre.js"
import * as Message from "./Message.js"
import type { TrajectoryResult } from "./Trajectory.js"

/**
 * The name of the env's reward column.
 *
 * @since 0.1.0
 * @category constants
 */
export const GYM_COLUMN = "gym_reward"

/**
 * What a reward function scores: the last assistant message (`completion`), the whole
 * conversation, the row's extra columns and the trajectory itself.
 *
 * @since 0.1.0
 * @category models
 */
export interface RewardInput {
  readonly completion: string
  readonly messages: ReadonlyArray<Message.Message>
  readonly dataDict: Readonly<Record<string, unknown>>
  readonly trajectory: TrajectoryResult
}

/**
 * @since 0.1.0
 * @category errors
 */
export class RewardError extends Schema.TaggedError<RewardError>()("RewardError", {
  reward: Schema.String,
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `reward ${this.reward}: ${this.detail}`
  }
}

/**
 * Reward columns and weights that do not fit together, or an unknown reward function.
 *
 * @since 0.1.0
 * @category errors
 */
export class RewardConfigError extends Schema.TaggedError<RewardConfigError>()(
  "RewardConfigError",
  {
    option: Schema.String,
    detail: Schema.String
  }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * A reward function registered under a name.
 *
 * @since 0.1.0
 * @category models
 */
export interface Definition {
  readonly name: string
  readonly description: string
  readonly score: (input: RewardInput) => Effect.Effect<number, RewardError>
}

/**
 * A reward function from plain code (a number, a Promise of one, or an Effect). A result that is
 * not a finite number is a `RewardError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const define = (options: {
  readonly name: string
  readonly description?: string | undefined
  readonly score: (input: RewardInput) => MaybeEffect<number>
}): Definition => ({
  name: options.name,
  description: options.description ?? "",
  score: (input) =>
    Effect.flatMap(
      liftMaybe(
        () => options.score(input),
        (cause) => new RewardError({ reward: options.name, detail: describe(cause), cause })
      ),
      (value) => typeof value === "number" && Number.isFinite(value) ? Effect.succeed(value) : Effect.fail(notFinite(options.name, value))
    )
})

/** A reward function's value that is not a finite number, shown as what it is (a string quoted). */
const notFinite = (reward: string, value: unknown): RewardError =>
  new RewardError({ reward, detail: `must return a finite number, got ${show(value, 80)}` })

const FORMAT = new RegExp(`^<think>[\\s\\S]*?</think>${PY_SPACE}*<answer>[\\s\\S]*?</answer>$`, "u")

/**
 * The built-in `format` reward: 1 when the last assistant message is exactly
 * `<think>...</think>` then `<answer>...</answer>` (whitespace between), else 0.
 *
 * @since 0.1.0
 * @category definitions
 */
export const format: Definition = define({
  name: "format",
  description: "1.0 when the last reply matches ^<think>.*?</think>\\s*<answer>.*?</answer>$ (dot matches newline), else 0.0",
  score: (input) => (FORMAT.test(input.completion) ? 1 : 0)
})

/**
 * The reward columns of a run and their weights.
 *
 * @since 0.1.0
 * @category models
 */
export interface Columns {
  readonly functions: ReadonlyArray<Definition>
  /** Reward function names, then `gym_reward`. */
  readonly names: ReadonlyArray<string>
  readonly weights: ReadonlyArray<number>
}

/**
 * Checks weights against the columns: none means 1 for every column; otherwise exactly one per
 * column, the gym column last.
 *
 * @since 0.1.0
 * @category constructors
 */
export const columns = (
  functions: ReadonlyArray<Definition>,
  weights?: ReadonlyArray<number> | undefined
): Result.Result<Columns, RewardConfigError> => {
  const names = [...functions.map((f) => f.name), GYM_COLUMN]
  const seen = new Set<string>()
  for (const name of names) {
    if (seen.has(name)) {
      return Result.fail(new RewardConfigError({ option: "--reward-funcs", detail: `column ${name} given twice` }))
    }
    seen.add(name)
  }
  if (weights === undefined || weights.length === 0) {
    return Result.succeed({ functions, names, weights: names.map(() => 1) })
  }
  if (weights.length !== names.length) {
    return Result.fail(
      new RewardConfigError({
        option: "--reward-weights",
        detail: `${weights.length} weight(s) given for ${names.length} reward column(s) (${
          names.join(", ")
        }); give one per column, the ${GYM_COLUMN} weight last`
      })
    )
  }
  const bad = weights.findIndex((w) => !Number.isFinite(w))
  if (bad >= 0) {
    return Result.fail(
      new RewardConfigError({ option: "--reward-weights", detail: `weight ${bad + 1} is not a finite number` })
    )
  }
  return Result.succeed({ functions, names, weights })
}

/**
 * One reward function's score; a definition that throws or dies (one not made with {@link define})
 * fails with a `RewardError` too, so a buggy reward fails its trajectory, not the run.
 */
const scoreOne = (f: Definition, input: RewardInput): Effect.Effect<number, RewardError> =>
  Effect.suspend(() => f.score(input)).pipe(
    Effect.catchDefect((defect) => Effect.fail(new RewardError({ reward: f.name, detail: describe(defect), cause: defect }))),
    Effect.filterOrFail(
      (value) => typeof value === "number" && Number.isFinite(value),
      (value) => notFinite(f.name, value)
    )
  )

/**
 * Scores a finished trajectory: one value per column (functions, then the gym total).
 *
 * @since 0.1.0
 * @category scoring
 */
export const score = (
  cols: Columns,
  trajectory: TrajectoryResult,
  dataDict: Readonly<Record<string, unknown>>
): Effect.Effect<Record<string, number>, RewardError> => {
  const out: Record<string, number> = {}
  if (cols.functions.length === 0) {
    out[GYM_COLUMN] = trajectory.totalReward
    return Effect.succeed(out)
  }
  const input: RewardInput = {
    completion: Message.lastOf(trajectory.messages, "assistant") ?? "",
    messages: trajectory.messages,
    dataDict,
    trajectory
  }
  return Effect.map(
    Effect.forEach(cols.functions, (f) => scoreOne(f, input)),
    (values) => {
      for (let i = 0; i < values.length; i++) out[cols.functions[i].name] = values[i]
      out[GYM_COLUMN] = trajectory.totalReward
      return out
    }
  )
}

/**
 * The weighted sum of a trajectory's reward columns.
 *
 * @since 0.1.0
 * @category scoring
 */
export const weighted = (cols: Columns, rewards: Readonly<Record<string, number>>): number => {
  let sum = 0
  for (let i = 0; i < cols.names.length; i++) sum += cols.weights[i] * rewards[cols.names[i]]
  return sum
}

/**
 * The epsilon added to the group's standard deviation (as in TRL and ms-swift).
 *
 * @since 0.1.0
 * @category constants
 */
export const ADVANTAGE_EPSILON = 1e-4

/**
 * GRPO advantages of one group: `(reward - mean) / (std + eps)`, with the sample standard deviation
 * (N - 1, as `torch.std`). Failed trajectories (`undefined`) take no part and get `undefined`; a
 * group with fewer than two scored trajectories has advantage 0 (there is nothing to compare).
 *
 * @since 0.1.0
 * @category scoring
 */
export const advantages = (
  rewards: ReadonlyArray<number | undefined>,
  epsilon: number = ADVANTAGE_EPSILON
): Array<number | undefined> => {
  let n = 0
  let sum = 0
  for (const r of rewards) {
    if (r !== undefined) {
      n++
      sum += r
    }
  }
  if (n < 2) return rewards.map((r) => (r === undefined ? undefined : 0))
  let mean = sum / n
  if (!Number.isFinite(mean)) {
    // (a sum past the largest double: the mean as a running average instead)
    // (each term divided first: r - mean itself overflows when they have opposite signs near the largest)
    mean = 0
    let k = 0
    for (const r of rewards) if (r !== undefined) mean += r / ++k - mean / k
  }
  let sq = 0
  for (const r of rewards) if (r !== undefined) sq += (r - mean) * (r - mean)
  const std = Math.sqrt(sq / (n - 1))
  if (!Number.isFinite(std)) {
    // Squares past the largest double (rewards of about 1e154 and more) made std Infinity and
    // every advantage 0: the deviations are scaled by the largest first (same value, no overflow).
    // Halved, as a deviation may pass the largest double (1.7e308 and -1.7e308), and kept scaled
    // to the end, as the std may too.
    let scale = 0
    for (const r of rewards) if (r !== undefined) scale = Math.max(scale, Math.abs(r / 2 - mean / 2))
    let scaled = 0
    for (const r of rewards) if (r !== undefined) scaled += ((r / 2 - mean / 2) / scale) ** 2
    const unit = Math.sqrt(scaled / (n - 1)) + epsilon / (2 * scale)
    return rewards.map((r) => (r === undefined ? undefined : ((r / 2 - mean / 2) / scale) / unit))
  }
  return rewards.map((r) => (r === undefined ? undefined : (r - mean) / (std + epsilon)))
}
