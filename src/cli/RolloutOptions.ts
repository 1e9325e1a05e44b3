/**
 * The options that `run` and `serve` share: which env, scheduler and policy, plugins, reward
 * functions and weights; and `resolve`, which loads the plugins and checks every name and number
 * before anything runs.
 */
import { Duration, Effect, Option } from "effect"
import type { Command } from "effect/cli"
import { Flag } from "effect/cli"
import type * as Scope from "effect/Scope"
import * as EnvWorkers from "../isolation/EnvWorkers.js"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import * as Reward from "../Reward.js"
import type * as Rollout from "../Rollout.js"
import type * as Scheduler from "../Scheduler.js"
import { integer, keyValues, OptionError, parseNumbers, parseSeconds, plugins, repeated, seconds, secondsText, toggle } from "./common.js"

/** `--env-timeout`'s default (seconds). */
export const ENV_TIMEOUT_DEFAULT = "60"


/**
 * @since 0.1.0
 * @category options
 */
export const options = {
  gymEnv: Flag.String("env").pipe(
    Flag.withAlias("gym-env"),
    Flag.withDescription("The env of rows whose env_config has no name (--gym-env: its old name)"),
    Flag.optional
  ),
  scheduler: Flag.String("scheduler").pipe(
    Flag.withDescription("The multi-turn scheduler (one instance for the whole run or server)"),
    Flag.withDefault("gym_scheduler")
  ),
  schedulerOptions: keyValues("scheduler-option", "key=value options for the scheduler (repeatable)"),
  maxConcurrentEnvs: integer("max-concurrent-envs").pipe(
    Flag.withDescription(
      "Sessions per OpenEnv server at once (the scheduler option max_concurrent_envs) (default: the scheduler's, 4 for openenv)"
    ),
    Flag.optional
  ),
  policy: Flag.String("policy").pipe(
    Flag.withDescription(
      "--mode scripted: the in-process policy that answers (random, the default; frozen-lake-solver; or a plugin's)"
    ),
    Flag.optional
  ),
  policyOptions: keyValues("policy-option", "key=value options for the policy, e.g. epsilon=0.1 (repeatable)"),
  plugins,
  rewardFuncs: repeated("reward-funcs", "Reward functions (columns before gym_reward)"),
  rewardWeights: repeated("reward-weights", "One weight per reward column, the gym_reward weight last"),
  resetTimeout: seconds("reset-timeout", "Seconds to create and reset an env (the scheduler's start)", 300),
  stepTimeout: seconds("step-timeout", "Seconds for the env's answer to one turn, and for the reward functions", 300),
  closeTimeout: seconds("close-timeout", "Seconds to close an env", 30),
  trajectoryTimeout: seconds("trajectory-timeout", "Seconds for a whole trajectory, model calls included", "none"),
  trajectoryRetries: integer("trajectory-retries").pipe(
    Flag.withDescription(
      "Runs again, with a fresh env and the same seed, a trajectory that failed with a transient error " +
        "(model transport errors and timeouts, OpenEnv connection and capacity errors, timeouts), up to N times"
    ),
    Flag.withDefault(0)
  ),
  ...isolationOptions()
}

/**
 * The env workers' options (with `--isolate-envs` for `run`, by default for the servers).
 *
 * @since 0.1.0
 * @category options
 */
export function isolationOptions() {
  return {
    envWorkers: integer("env-workers").pipe(
      Flag.withDescription("Worker threads that run isolated envs (default: the machine's cores)"),
      Flag.optional
    ),
    envTimeout: secondsText("env-timeout").pipe(
      Flag.withDescription(
        "Seconds an isolated env's create, reset or step may take; then that env fails and its worker is replaced"
      ),
      Flag.withDefault(ENV_TIMEOUT_DEFAULT)
    )
  }
}

/**
 * `run`: envs off the main thread, in worker threads.
 *
 * @since 0.1.0
 * @category options
 */
export const isolateEnvs = toggle(
  "isolate-envs",
  "Run envs in worker threads (--env-workers, --env-timeout): an env that blocks or hangs fails alone"
)

/**
 * The servers: envs on the main thread, as `run` does by default (faster; one blocking env then
 * freezes the server).
 *
 * @since 0.1.0
 * @category options
 */
export const inProcessEnvs = toggle(
  "in-process-envs",
  "Run envs on the server's own thread (no worker threads): faster, but an env that blocks freezes the server"
)

/**
 * A pool of env workers for the current scope (the same plugins loaded in each), and the registry
 * with every env wrapped to run there.
 *
 * @since 0.1.0
 * @category constructors
 */
export const isolate = (
  registry: Registry.Registry,
  args: {
    readonly plugins: ReadonlyArray<string>
    readonly envWorkers: Option.Option<number>
    readonly envTimeout: string
  }
): Effect.Effect<
  { readonly registry: Registry.Registry; readonly workers: EnvWorkers.EnvWorkers },
  OptionError | EnvWorkers.WorkerStartError,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const timeout = yield* parseSeconds("--env-timeout", args.envTimeout)
    const size = Option.getOrUndefined(args.envWorkers)
    if (size !== undefined && size < 1) {
      return yield* new OptionError({ option: "--env-workers", detail: `must be >= 1, got ${size}` })
    }
    const workers = yield* EnvWorkers.make({
      plugins: args.plugins,
      workers: size,
      timeout: Duration.millis(Math.round(timeout * 1000))
    })
    return { registry: workers.registry(registry), workers }
  })

/**
 * @since 0.1.0
 * @category options
 */
export type Args = Command.Command.Config.Infer<typeof options>

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
  /** The reward functions named by `--reward-funcs`, in order. */
  readonly rewards: ReadonlyArray<Reward.Definition>
  readonly rewardWeights: ReadonlyArray<number> | undefined
  /** Their columns, weighted (the weights checked against them). */
  readonly columns: Reward.Columns
  readonly defaultEnv: string | undefined
  readonly timeouts: Rollout.Timeouts
  readonly retries: number
}

/**
 * Loads the plugins, then looks up the scheduler, the reward functions and the default env (an
 * unknown name lists what is registered) and checks the weights against the columns. With
 * `isolate`, the envs run in a pool of worker threads made in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (args: Args, options: { readonly isolate?: boolean | undefined } = {}) =>
  Effect.gen(function*() {
    const loaded = yield* PluginLoader.registry(args.plugins)
    const scheduler = yield* Effect.fromResult(Registry.scheduler(loaded, args.scheduler))
    const rewards = yield* Effect.forEach(args.rewardFuncs, (name) => Effect.fromResult(Registry.reward(loaded, name)))
    const weights = yield* parseNumbers("--reward-weights", args.rewardWeights)
    const columns = yield* Effect.fromResult(Reward.columns(rewards, weights))
    const defaultEnv = Option.getOrUndefined(args.gymEnv)
    yield* Effect.fromResult(Registry.checkDefaultEnv(loaded, scheduler, defaultEnv))
    const schedulerOptions = Option.match(args.maxConcurrentEnvs, {
      onNone: () => args.schedulerOptions,
      onSome: (n): Readonly<Record<string, unknown>> => ({ ...args.schedulerOptions, max_concurrent_envs: n })
    })
    const timeouts: Rollout.Timeouts = {
      reset: args.resetTimeout,
      step: args.stepTimeout,
      close: args.closeTimeout,
      trajectory: args.trajectoryTimeout
    }
    // Last, once everything else is known to be right: the env workers take a moment to start.
    const registry = options.isolate === true ? (yield* isolate(loaded, args)).registry : loaded
    return {
      registry,
      scheduler,
      schedulerOptions,
      rewards,
      rewardWeights: weights,
      columns,
      defaultEnv,
      timeouts,
      retries: args.trajectoryRetries
    } satisfies Resolved
  })
