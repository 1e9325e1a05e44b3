/**
 * The options that `run` and `serve` share: which env, scheduler and policy, plugins, reward
 * functions and weights; and `resolve`, which loads the plugins and checks every name and number
 * before anything runs.
 */
import { Command, Options } from "@effect/cli"
import { Effect, Option } from "effect"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import * as Reward from "../Reward.js"
import type * as Rollout from "../Rollout.js"
import type * as Scheduler from "../Scheduler.js"
import { integer, keyValues, OptionError, parseNumbers, plugins, seconds } from "./common.js"

/** Most retries of one trajectory: each can take up to the timeouts' sum. */
export const MAX_TRAJECTORY_RETRIES = 100

/**
 * @since 0.1.0
 * @category options
 */
export const options = {
  gymEnv: Options.text("gym-env").pipe(
    Options.withDescription("The env of rows whose env_config has no name"),
    Options.optional
  ),
  scheduler: Options.text("scheduler").pipe(
    Options.withDescription("The multi-turn scheduler (one instance for the whole run or server)"),
    Options.withDefault("gym_scheduler")
  ),
  schedulerOptions: keyValues("scheduler-option", "key=value options for the scheduler (repeatable)"),
  maxConcurrentEnvs: integer("max-concurrent-envs").pipe(
    Options.withDescription("Sessions per OpenEnv server at once (the scheduler option max_concurrent_envs)"),
    Options.optional
  ),
  policy: Options.text("policy").pipe(
    Options.withDescription(
      "--mode scripted: the in-process policy that answers (random, the default; frozen-lake-solver; or a plugin's)"
    ),
    Options.optional
  ),
  policyOptions: keyValues("policy-option", "key=value options for the policy, e.g. epsilon=0.1 (repeatable)"),
  plugins,
  rewardFuncs: Options.text("reward-funcs").pipe(
    Options.withDescription("Reward functions (columns before gym_reward)"),
    Options.repeated
  ),
  rewardWeights: Options.text("reward-weights").pipe(
    Options.withDescription("One weight per reward column, the gym_reward weight last"),
    Options.repeated
  ),
  resetTimeout: seconds("reset-timeout", "Seconds to create and reset an env (the scheduler's start)", 300),
  stepTimeout: seconds("step-timeout", "Seconds for the env's answer to one turn, and for the reward functions", 300),
  closeTimeout: seconds("close-timeout", "Seconds to close an env", 30),
  trajectoryTimeout: seconds("trajectory-timeout", "Seconds for a whole trajectory, model calls included", "none"),
  trajectoryRetries: integer("trajectory-retries").pipe(
    Options.withDescription(
      "Runs again, with a fresh env and the same seed, a trajectory that failed with a transient error " +
        "(model transport errors and timeouts, OpenEnv connection and capacity errors, timeouts), up to N times"
    ),
    Options.withDefault(0)
  )
}

/**
 * @since 0.1.0
 * @category options
 */
export type Args = Command.Command.ParseConfig<typeof options>

/**
 * What the shared options name, loaded and checked.
 *
 * @since 0.1.0
 * @category models
 */
export interface Resolved {
  readonly registry: Registry.Registry
  readonly scheduler: Scheduler.Definition
  readonly schedulerOptions: Readonly<Record<string, unknown>>
  readonly columns: Reward.Columns
  readonly defaultEnv: string | undefined
  readonly timeouts: Rollout.Timeouts
  readonly retries: number
}

/**
 * Loads the plugins, then looks up the scheduler, the reward functions and the default env (an
 * unknown name lists what is registered) and checks the weights against the columns.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (args: Args) =>
  Effect.gen(function*() {
    const registry = yield* PluginLoader.registry(args.plugins)
    const scheduler = yield* Registry.scheduler(registry, args.scheduler)
    const rewardDefs = yield* Effect.forEach(args.rewardFuncs, (name) => Registry.reward(registry, name))
    const columns = yield* Reward.columns(rewardDefs, yield* parseNumbers("--reward-weights", args.rewardWeights))
    const defaultEnv = Option.getOrUndefined(args.gymEnv)
    if (defaultEnv !== undefined && scheduler.usesRegistryEnvs) yield* Registry.env(registry, defaultEnv)
    const schedulerOptions = Option.match(args.maxConcurrentEnvs, {
      onNone: () => args.schedulerOptions,
      onSome: (n): Readonly<Record<string, unknown>> => ({ ...args.schedulerOptions, max_concurrent_envs: n })
    })
    if (args.trajectoryRetries < 0 || args.trajectoryRetries > MAX_TRAJECTORY_RETRIES) {
      return yield* new OptionError({
        option: "--trajectory-retries",
        detail: `must be between 0 and ${MAX_TRAJECTORY_RETRIES}, got ${args.trajectoryRetries}`
      })
    }
    const timeouts: Rollout.Timeouts = {
      reset: args.resetTimeout,
      step: args.stepTimeout,
      close: args.closeTimeout,
      trajectory: args.trajectoryTimeout
    }
    return {
      registry,
      scheduler,
      schedulerOptions,
      columns,
      defaultEnv,
      timeouts,
      retries: args.trajectoryRetries
    } satisfies Resolved
  })
