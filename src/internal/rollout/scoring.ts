/**
 * A run's rows and records: seeds, env selection, requests, scores and advantages. Internal;
 * `Rollout` exports each of them.
 */
import { Effect, Result } from "effect"
import type * as Env from "../../Env.js"
import { mixSeed } from "../seed.js"
import * as Registry from "../../Registry.js"
import * as Reward from "../../Reward.js"
import type { Config, PreparedRow, TrajectoryRecord } from "../../Rollout.js"
import { RowError } from "../../Row.js"
import type { Row } from "../../Row.js"
import type * as Scheduler from "../../Scheduler.js"
import type * as Trajectory from "../../Trajectory.js"

/**
 * The row's seed: shared by all generations of the row.
 *
 * @since 0.1.0
 * @category seeds
 */
export const rowSeed = (runSeed: number, rowIndex: number): number => mixSeed(runSeed, rowIndex)

/**
 * Resolves a row's env (its `env_config.name`, else the run's default) and checks its config.
 *
 * @since 0.1.0
 * @category rows
 */
export const prepareRow = (config: Config, row: Row): Result.Result<PreparedRow, RowError> => {
  const seed = rowSeed(config.seed, row.index)
  const fail = (path: string, detail: string) =>
    Result.fail(new RowError({ file: row.file, line: row.index + 1, path, detail }))
  const explicit = typeof row.envConfig.name === "string" ? row.envConfig.name : undefined
  // (a scheduler written by hand in a JavaScript plugin may have no `envs`)
  const brought = config.scheduler.definition.envs ?? []
  const name = explicit ?? config.defaultEnv ?? brought[0]?.name
  if (name === undefined) {
    return fail("env_config.name", "no env selected: pass --env NAME or set env_config.name in the row")
  }
  // The scheduler's own envs first (it provides their services), then the registry's.
  const own = brought.find((env) => env.name === name) as Env.Definition | undefined
  const definition = own === undefined ? Registry.env(config.registry, name) : Result.succeed(own)
  if (Result.isFailure(definition)) {
    return fail(explicit === undefined ? "--env" : "env_config.name", definition.failure.message)
  }
  return Result.match(definition.success.prepare(row.envConfig), {
    onFailure: (error) => fail(error.path, `${error.reason} (env ${name})`),
    onSuccess: (create): Result.Result<PreparedRow, RowError> => Result.succeed({ row, env: { name, create }, seed })
  })
}

/**
 * The request of one generation of a prepared row.
 *
 * @since 0.1.0
 * @category rows
 */
export const request = (config: Config, prepared: PreparedRow, generation: number): Scheduler.TrajectoryRequest => ({
  id: `r${prepared.row.index}-g${generation}`,
  row: prepared.row.index,
  generation,
  seed: mixSeed(prepared.seed, 0x10000 + generation),
  rowSeed: prepared.seed,
  messages: prepared.row.messages,
  dataDict: prepared.row.dataDict,
  envConfig: prepared.row.envConfig,
  env: prepared.env,
  maxTurns: config.maxTurns
})

/**
 * Scores one finished trajectory.
 *
 * @since 0.1.0
 * @category scoring
 */
export const scoreTrajectory = (
  config: Config,
  row: Row,
  result: Trajectory.TrajectoryResult
): Effect.Effect<TrajectoryRecord> => {
  if (!needsRewardFunctions(config, result)) return Effect.succeed(scoreSync(config, row, result))
  return Effect.match(Reward.score(config.columns, result, row.dataDict), {
    onFailure: (error) => ({ row, result, rewards: undefined, reward: undefined, advantage: undefined, error }),
    onSuccess: (rewards) => ({
      row,
      result,
      rewards,
      reward: Reward.weighted(config.columns, rewards),
      advantage: undefined,
      error: undefined
    })
  })
}

/** Whether scoring runs reward functions (an Effect); otherwise it is plain arithmetic ({@link scoreSync}). */
export const needsRewardFunctions = (config: Config, result: Trajectory.TrajectoryResult): boolean =>
  result.error === undefined && config.columns.functions.length > 0

/** The record of a failed trajectory, or of a run with no reward functions (only the gym column). */
export const scoreSync = (config: Config, row: Row, result: Trajectory.TrajectoryResult): TrajectoryRecord => {
  if (result.error !== undefined) {
    return { row, result, rewards: undefined, reward: undefined, advantage: undefined, error: result.error }
  }
  const rewards = { [Reward.GYM_COLUMN]: result.totalReward }
  return { row, result, rewards, reward: Reward.weighted(config.columns, rewards), advantage: undefined, error: undefined }
}

/**
 * Adds the group's advantages to its records.
 *
 * @since 0.1.0
 * @category scoring
 */
export const withAdvantages = (records: ReadonlyArray<TrajectoryRecord>): Array<TrajectoryRecord> => {
  const advantages = Reward.advantages(records.map((r) => r.reward))
  return records.map((r, i) => ({ ...r, advantage: advantages[i] }))
}
