/**
 * A whole run: rows in, every row expanded into its GRPO group of `numGenerations` trajectories,
 * trajectories run with at most `concurrency` in flight, each one scored, and every group emitted
 * (with its advantages) as soon as its last trajectory finishes.
 *
 * Bad rows (malformed, not matching the schema, an unknown env, a bad `env_config`) are emitted as
 * `RowFailure` items and the other rows run. A failing trajectory is a record with its typed error;
 * it never fails the run: failures and defects of the env (creation, reset, step, close), of the
 * scheduler's hooks and of reward functions, a timeout, or a value its log line cannot hold.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Result, Scope, Stream } from "effect"
import type * as Env from "./Env.js"
import type { EncodeError } from "./CompletionsLog.js"
import type { Inference } from "./Inference.js"
import type { SamplingParams } from "./Inference.js"
import { runStream } from "./internal/rollout/engine.js"
import { prepareRow } from "./internal/rollout/scoring.js"
import * as Registry from "./Registry.js"
import * as Reward from "./Reward.js"
import * as RunSpec from "./RunSpec.js"
import { RunConfigError } from "./RunSpec.js"
import { decodeValue, RowError } from "./Row.js"
import type { Row } from "./Row.js"
import * as Scheduler from "./Scheduler.js"
import * as Trajectory from "./Trajectory.js"

/**
 * How a run goes.
 *
 * @since 0.1.0
 * @category models
 */
export interface Config {
  readonly registry: Registry.Registry
  /** The scheduler's definition (for env selection rules) and its instance for this run. */
  readonly scheduler: { readonly definition: Scheduler.Definition; readonly instance: Scheduler.Instance }
  /** `--env`: used by rows whose `env_config` has no `name`. */
  readonly defaultEnv?: string | undefined
  readonly numGenerations: number
  readonly maxTurns: number
  readonly concurrency: number
  readonly seed: number
  readonly columns: Reward.Columns
  readonly sampling?: SamplingParams | undefined
  /** Variables of the model's chat template for every call of the run (e.g. an `/infer/` request's). */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /**
   * How many groups may be ahead of the stream's consumer: started (in flight or complete) but not
   * yet pulled. A consumer that stops after `n` groups (`Stream.take(n)`) has made the run start at
   * most `n + bufferSize` groups. Default {@link defaultBufferSize} (the groups in flight and as
   * many complete ones as a run held before this setting), and groups handed over a chunk at a time
   * (so the bound is looser by the groups of the last chunk pulled); set one for bounded work (the
   * stream then hands over one group per pull).
   */
  readonly bufferSize?: number | undefined
  /** Limits on the phases of each trajectory (absent: none). See {@link Timeouts}. */
  readonly timeouts?: Timeouts | undefined
  /**
   * How many times a trajectory that failed with a transient error (`Scheduler.isTransient`: model
   * transport errors and timeouts, OpenEnv connection and capacity errors, {@link Scheduler.Timeout})
   * is run again, with a fresh env and the same seed. Default 0.
   */
  readonly retries?: number | undefined
}

/**
 * Limits on the phases of a trajectory; absent ones are not limited. A trajectory past a limit ends
 * with a `Timeout` error naming the phase, and its env is closed (itself within `close`). An env
 * call stuck in code that cannot be interrupted (a synchronous loop, an uninterruptible region) is
 * abandoned after `close` more: its trajectory gets its record, and the run goes on without it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Timeouts {
  /** Creating and resetting the env (the scheduler's start). */
  readonly reset?: Duration.Input | undefined
  /** The env's answer to one turn (the scheduler's `onTurnEnd` and `step`), and the reward functions. */
  readonly step?: Duration.Input | undefined
  /** Closing the env (the trajectory's scope). */
  readonly close?: Duration.Input | undefined
  /** The whole trajectory, model calls included (not its close). */
  readonly trajectory?: Duration.Input | undefined
}

/**
 * A row whose env is resolved and whose config is checked.
 *
 * @since 0.1.0
 * @category models
 */
export interface PreparedRow {
  readonly row: Row
  readonly env: Scheduler.PreparedEnv | undefined
  readonly seed: number
}

/**
 * One finished trajectory with its scores. `reward` and `advantage` are absent when it failed.
 *
 * @since 0.1.0
 * @category models
 */
export interface TrajectoryRecord {
  readonly row: Row
  readonly result: Trajectory.TrajectoryResult
  readonly rewards: Readonly<Record<string, number>> | undefined
  readonly reward: number | undefined
  readonly advantage: number | undefined
  readonly error: RecordError | undefined
  /** Attempts made when the trajectory was retried (absent or 1: it ran once). */
  readonly attempts?: number | undefined
  /** The errors of the attempts before the last one. */
  readonly attemptErrors?: ReadonlyArray<Scheduler.TrajectoryError> | undefined
  /** The cluster runner (`host:port`) that ran it: a cluster run's log lines name it. */
  readonly runner?: string | undefined
}

/**
 * Every way a trajectory's record can fail: the trajectory itself, its reward functions, or its
 * log line.
 *
 * @since 0.1.0
 * @category models
 */
export type RecordError = Scheduler.TrajectoryError | Reward.RewardError | EncodeError

/**
 * A finished GRPO group (all generations of one row).
 *
 * @since 0.1.0
 * @category models
 */
export interface Group {
  readonly _tag: "Group"
  readonly row: Row
  readonly records: ReadonlyArray<TrajectoryRecord>
}

/**
 * A row that could not run.
 *
 * @since 0.1.0
 * @category models
 */
export interface RowFailure {
  readonly _tag: "RowFailure"
  readonly error: RowError
}

/**
 * @since 0.1.0
 * @category models
 */
export type Item = Group | RowFailure

export {
  /**
   * Upper bounds of a run's sizes, and why (a value above is refused before anything runs).
   *
   * @since 0.1.0
   * @category validation
   */
  LIMITS,
  /**
   * The run's configuration cannot work (e.g. `--num-generations 0`): which setting, and why.
   *
   * @since 0.1.0
   * @category errors
   */
  RunConfigError
} from "./RunSpec.js"

export {
  /**
   * The request of one generation of a prepared row.
   *
   * @since 0.1.0
   * @category rows
   */
  request,
  /**
   * The row's seed: shared by all generations of the row.
   *
   * @since 0.1.0
   * @category seeds
   */
  rowSeed,
  /**
   * Resolves a row's env (its `env_config.name`, else the run's default) and checks its config.
   *
   * @since 0.1.0
   * @category rows
   */
  prepareRow,
  /**
   * Scores one finished trajectory.
   *
   * @since 0.1.0
   * @category scoring
   */
  scoreTrajectory,
  /**
   * Adds the group's advantages to its records.
   *
   * @since 0.1.0
   * @category scoring
   */
  withAdvantages
} from "./internal/rollout/scoring.js"

export {
  /**
   * The default {@link Config.bufferSize}: the groups `concurrency` trajectories have in flight,
   * plus `max(64, concurrency)` complete groups waiting for the consumer (what a run held before
   * there was a `bufferSize`). Set a smaller one for bounded work under `Stream.take` (a small
   * buffer makes trajectories wait for a slow consumer: measured, 1,024 x 8 FrozenLake at
   * concurrency 1,024 ran ~0.75x as fast with `2 * ceil(concurrency / numGenerations) + 8`).
   *
   * @since 0.1.0
   * @category models
   */
  defaultBufferSize
} from "./internal/rollout/engine.js"

/**
 * Rows to run: in memory (any iterable, pulled lazily) or a `Stream` (a dataset read from disk;
 * pulled a chunk at a time, so memory stays bounded whatever its size).
 *
 * @since 0.1.0
 * @category models
 */
export type Rows<A, E = never> = Iterable<Result.Result<A, RowError>> | Stream.Stream<Result.Result<A, RowError>, E>

/**
 * Options of a running stream: `until`, when it completes, stops the run gracefully (no new
 * trajectory starts, those in flight are interrupted and their envs closed, those already ended and
 * closing their envs finish, the groups complete are still emitted, then the stream ends). An
 * `until` that dies stops the run the same way, and the stream then fails with its defect.
 *
 * @since 0.1.0
 * @category models
 */
export interface StreamOptions {
  readonly until?: Effect.Effect<unknown> | undefined
}

/**
 * Runs every row. Groups are emitted as they complete (not in row order); row failures as they
 * are met. Interrupting the stream interrupts the trajectories in flight, and their envs are closed;
 * `options.until` stops it gracefully (see {@link StreamOptions}).
 *
 * At most `concurrency` trajectories are in flight (a fiber each), started in row order as the rows
 * are read, so the number of trajectories in flight (and of partly filled groups) stays bounded
 * however large the dataset is; at most `bufferSize` groups are ahead of the consumer. When the rows are a `Stream`
 * that fails, no new row starts, what is in flight finishes, and the stream fails with that error
 * after the last group.
 *
 * @since 0.1.0
 * @category running
 */
export const stream = <E = never>(
  config: Config,
  rows: Rows<Row, E>,
  options?: StreamOptions
): Stream.Stream<Item, E, Inference> => streamPrepared(config, prepareAll(config, rows), options)

/**
 * {@link stream} with the turn events of every trajectory as well: ONE stream for the whole run,
 * in chunks (each event tagged with its trajectory: `trajectoryId`, `row`, `generation`,
 * `attempt`). A trajectory's events come in order, before its group; events of trajectories in
 * flight at the same time interleave. A retried trajectory's failed attempts have their events
 * too (their `attempt` tells them apart). A trajectory in flight when the run is stopped
 * (interrupted, `until`) has no `End`: its events stop there, and it is in no group.
 *
 * @since 0.1.0
 * @category running
 */
export const streamEvents = <E = never>(
  config: Config,
  rows: Rows<Row, E>,
  options?: StreamOptions
): Stream.Stream<Event, E, Inference> => runStream(config, prepareAll(config, rows), options, true)

/**
 * What {@link streamEvents} emits: turn events and the run's items.
 *
 * @since 0.1.0
 * @category models
 */
export type Event = Trajectory.TurnEvent | Item

const prepareAll = <E>(config: Config, rows: Rows<Row, E>): Rows<PreparedRow, E> =>
  Stream.isStream(rows)
    ? Stream.map(rows, (decoded) => Result.flatMap(decoded, (row) => prepareRow(config, row)))
    : prepareRows(config, rows)

function* prepareRows(config: Config, rows: Iterable<Result.Result<Row, RowError>>): Generator<Result.Result<PreparedRow, RowError>> {
  for (const decoded of rows) yield Result.flatMap(decoded, (row) => prepareRow(config, row))
}

/**
 * {@link stream} over rows already prepared with {@link prepareRow} (with this config's registry,
 * default env and seed), for callers that check rows before they run them.
 *
 * @since 0.1.0
 * @category running
 */
export const streamPrepared = <E = never>(
  config: Config,
  rows: Rows<PreparedRow, E>,
  options?: StreamOptions
): Stream.Stream<Item, E, Inference> => runStream(config, rows, options, false) as Stream.Stream<Item, E, Inference>

/**
 * Runs rows given in memory (already parsed JSON values) and collects every item.
 *
 * @since 0.1.0
 * @category running
 */
export const runAll = (
  config: Config,
  rows: Iterable<Result.Result<Row, RowError>>
): Effect.Effect<Array<Item>, never, Inference> =>
  Effect.map(Stream.runCollect(stream(config, rows)), (chunk) => Array.from(chunk))

// ---------------------------------------------------------------------------------------------
// The pipeable run API
// ---------------------------------------------------------------------------------------------

/**
 * What {@link make} takes: the envs of the run (by name), and settings with defaults.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never> {
  /** The envs rows may select (`env_config.name`); constructors may require services (`R`). */
  readonly envs: ReadonlyArray<Env.Definition<R>>
  /** The env of rows whose `env_config` has no `name` (default: the only env, when there is one). */
  readonly defaultEnv?: string | undefined
  /** Default `Scheduler.gym`. */
  readonly scheduler?: Scheduler.Definition | undefined
  readonly schedulerOptions?: Readonly<Record<string, unknown>> | undefined
  /** The GRPO group size (default 8). */
  readonly numGenerations?: number | undefined
  /** Default 10. */
  readonly maxTurns?: number | undefined
  /** Trajectories in flight (default 64). */
  readonly concurrency?: number | undefined
  /** The run's seed (default 0). */
  readonly seed?: number | undefined
  /** Reward functions besides the env's reward (`gym_reward`); default none. */
  readonly rewards?: ReadonlyArray<Reward.Definition> | undefined
  /** One weight per reward column (the functions', then `gym_reward`); default 1 each. */
  readonly weights?: ReadonlyArray<number> | undefined
  readonly sampling?: SamplingParams | undefined
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  readonly timeouts?: Timeouts | undefined
  readonly retries?: number | undefined
  /** See {@link Config.bufferSize}. */
  readonly bufferSize?: number | undefined
}

/**
 * A run as a value: what {@link make} gives, and {@link run} and {@link events} take. `R` is the
 * services its envs require.
 *
 * @since 0.1.0
 * @category models
 */
export interface Rollout<R = never> {
  readonly _tag: "Rollout"
  readonly options: Options<R>
}

/**
 * A run's settings that cannot work: a bad number, bad weights, a scheduler that refuses its
 * options.
 *
 * @since 0.1.0
 * @category errors
 */
export type ConfigError = RunConfigError | Reward.RewardConfigError | Scheduler.SchedulerError

/**
 * A run of `envs`, with defaults for everything else (gym scheduler, 8 generations, 10 turns,
 * concurrency 64, seed 0, the env's reward only). Nothing runs until {@link run} or {@link events}.
 *
 * @example
 * const rollout = Rollout.make({ envs: [FrozenLake], numGenerations: 4 })
 * const groups = rows.pipe(Rollout.run(rollout), Stream.take(10))
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(options: Options<R>): Rollout<R> => ({ _tag: "Rollout", options })

/**
 * Builds a run from its settings (decoded once, by any front end: {@link RunSpec.decode}) and what
 * it is made of: the registry its rows' envs are looked up in, its scheduler (whose instance this
 * makes, in the current scope, with the spec's scheduler options) and its reward functions (their
 * columns weighted by the spec's weights). The one place a run's {@link Config} is assembled: the
 * CLI's `run`, the rollout server, the cluster's runners and {@link make} all come through it.
 *
 * @since 0.4.0
 * @category constructors
 */
export const configOf = (
  spec: RunSpec.RunSpec,
  parts: {
    readonly registry: Registry.Registry
    readonly scheduler: Scheduler.Definition
    readonly rewards: ReadonlyArray<Reward.Definition>
    /** How the front end names settings in the scheduler's messages (default `"flags"`). */
    readonly naming?: RunSpec.Naming | undefined
  }
): Effect.Effect<Config, Reward.RewardConfigError | Scheduler.SchedulerError, Scope.Scope> =>
  Effect.gen(function*() {
    const columns = yield* Effect.fromResult(Reward.columns(parts.rewards, spec.rewardWeights))
    const instance = yield* parts.scheduler.make({ options: spec.schedulerOptions, naming: parts.naming ?? "flags" })
    return {
      registry: parts.registry,
      scheduler: { definition: parts.scheduler, instance },
      defaultEnv: spec.defaultEnv,
      numGenerations: spec.numGenerations,
      maxTurns: spec.maxTurns,
      concurrency: spec.concurrency,
      seed: spec.seed,
      columns,
      sampling: spec.sampling,
      chatTemplateKwargs: spec.chatTemplateKwargs,
      timeouts: spec.timeouts,
      retries: spec.retries,
      bufferSize: spec.bufferSize
    } satisfies Config
  })

/**
 * Builds the {@link Config} of a run made with {@link make} (its scheduler instance lives in the
 * current scope): its settings decoded as a {@link RunSpec.RunSpec} (a bad one is a
 * `RunConfigError` naming the option, `numGenerations`), its envs checked, then {@link configOf}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const config = <R>(rollout: Rollout<R>): Effect.Effect<Config, ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const o = rollout.options
    yield* Effect.fromResult(checkKeys(o))
    const envs = yield* Effect.fromResult(checkEnvs(o))
    const spec = yield* Effect.fromResult(RunSpec.decode({
      defaultEnv: o.defaultEnv ?? (envs.length === 1 ? envs[0].name : undefined),
      numGenerations: o.numGenerations,
      maxTurns: o.maxTurns,
      concurrency: o.concurrency,
      seed: o.seed,
      retries: o.retries,
      bufferSize: o.bufferSize,
      timeouts: o.timeouts,
      sampling: o.sampling,
      chatTemplateKwargs: o.chatTemplateKwargs,
      schedulerOptions: o.schedulerOptions,
      rewardWeights: o.weights
    }, "fields").pipe(Result.mapError(asMakeOption)))
    // The services the envs require are in the run's context (run and events require R), so
    // inside the run their constructors need only the trajectory's scope.
    return yield* configOf(spec, {
      registry: Registry.add(Registry.empty, { envs }),
      scheduler: o.scheduler ?? Scheduler.gym,
      rewards: o.rewards ?? [],
      naming: "fields"
    }).pipe(Effect.mapError((error) => error._tag === "RewardConfigError" ? asMakeOption(error) : error))
  })

/**
 * The settings {@link make}'s options spell otherwise than the run spec's fields and the reward
 * columns' checks (which name them as the command line does): `weights`, `rewards`.
 */
const MAKE_OPTIONS: Readonly<Record<string, string>> = {
  rewardWeights: "weights",
  "--reward-weights": "weights",
  "--reward-funcs": "rewards"
}

/** `error` naming its option as {@link make}'s options spell it. */
const asMakeOption = <E extends RunConfigError | Reward.RewardConfigError>(error: E): E => {
  if (!Object.hasOwn(MAKE_OPTIONS, error.option)) return error
  const option = MAKE_OPTIONS[error.option]
  return (error._tag === "RunConfigError"
    ? new RunConfigError({ option, detail: error.detail })
    : new Reward.RewardConfigError({ option, detail: error.detail })) as E
}

/** The keys of {@link Options} (a record, so that an option added there and not here does not compile). */
const OPTIONS: ReadonlySet<string> = new Set(Object.keys({
  envs: true, defaultEnv: true, scheduler: true, schedulerOptions: true, numGenerations: true, maxTurns: true,
  concurrency: true, seed: true, rewards: true, weights: true, sampling: true, chatTemplateKwargs: true,
  timeouts: true, retries: true, bufferSize: true
} satisfies Record<keyof Options, true>))

/** An option no run has (a typo from JavaScript, `numGeneration`), refused as RunSpec refuses its own. */
const checkKeys = <R>(o: Options<R>): Result.Result<void, RunConfigError> => {
  const unknown = Object.keys(o).find((key) => !OPTIONS.has(key) && (o as unknown as Record<string, unknown>)[key] !== undefined)
  return unknown === undefined
    ? Result.void
    : Result.fail(new RunConfigError({ option: unknown, detail: `unknown option (there are ${[...OPTIONS].join(", ")})` }))
}

/**
 * The envs of {@link Options}, refused before anything runs when no row could use them (none, two
 * of one name, an unknown `defaultEnv`: it failed every row).
 */
const checkEnvs = <R>(o: Options<R>): Result.Result<ReadonlyArray<Env.Definition>, RunConfigError> => {
  const refuse = (option: string, detail: string) => Result.fail(new RunConfigError({ option, detail }))
  if (!Array.isArray(o.envs) || o.envs.length === 0) return refuse("envs", "must hold at least one env definition")
  const names = new Set<string>()
  for (const env of o.envs) {
    const name = (env as { readonly name?: unknown } | null)?.name
    if (typeof name !== "string") return refuse("envs", "each must be an env definition (Env.define, Env.make), with a name")
    if (names.has(name)) return refuse("envs", `two envs are named "${name}": a row could not say which it means`)
    names.add(name)
  }
  if (o.defaultEnv !== undefined && !names.has(o.defaultEnv)) {
    return refuse("defaultEnv", `unknown env "${o.defaultEnv}" (envs: ${[...names].join(", ")})`)
  }
  return Result.succeed(o.envs as ReadonlyArray<Env.Definition>)
}

/**
 * What {@link run} takes as rows: decoded rows, rows that failed to decode (`Result`, as
 * `Row.decodeStream` gives them), or plain JSON values (a dataset row: `messages`, `env_config`,
 * other columns), numbered in the order they come.
 *
 * @since 0.1.0
 * @category models
 */
export type RowInput = Row | Result.Result<Row, RowError> | unknown

const isRow = (u: unknown): u is Row =>
  typeof u === "object" && u !== null && typeof (u as Row).file === "string" && typeof (u as Row).index === "number" &&
  Array.isArray((u as Row).messages) && typeof (u as Row).envConfig === "object" && typeof (u as Row).dataDict === "object"

const toRow = (value: unknown, index: number): Result.Result<Row, RowError> =>
  Result.isResult(value)
    ? (value as Result.Result<Row, RowError>)
    : isRow(value)
    ? Result.succeed(value)
    : decodeValue("rows", index, value)

const inputRows = <E, R2>(
  rows: Iterable<RowInput> | Stream.Stream<RowInput, E, R2>
): Effect.Effect<Rows<Row, E>, never, R2> =>
  Stream.isStream(rows)
    ? Effect.map(Effect.context<R2>(), (context) =>
      Stream.provideContext(
        Stream.mapAccum(rows as Stream.Stream<RowInput, E, R2>, () => 0, (i, value) => [i + 1, [toRow(value, i)]]),
        context
      ))
    : Effect.succeed(numbered(rows as Iterable<RowInput>))

function* numbered(rows: Iterable<RowInput>): Generator<Result.Result<Row, RowError>> {
  let i = 0
  for (const value of rows) yield toRow(value, i++)
}

/**
 * Runs rows (a `Stream` or an `Iterable`) and gives the groups as they complete (and row failures
 * as they are met), for `rows.pipe(Rollout.run(rollout))`. The run's envs' services (`R`) and the
 * `Inference` service come from the context. At most `bufferSize` groups are ahead of the consumer,
 * so `Stream.take(n)` starts at most `n + bufferSize` groups. See {@link stream}.
 *
 * @since 0.1.0
 * @category running
 */
export const run = <R>(rollout: Rollout<R>, options?: StreamOptions) =>
<E = never, R2 = never>(
  rows: Iterable<RowInput> | Stream.Stream<RowInput, E, R2>
): Stream.Stream<Item, E | ConfigError, Inference | R | R2> =>
  Stream.unwrap(
    Effect.zipWith(config(rollout), inputRows(rows), (config, input) => stream(config, input, options))
  ) as Stream.Stream<Item, E | ConfigError, Inference | R | R2>

/**
 * {@link run} with every trajectory's turn events as well, in ONE stream for the run (see
 * {@link streamEvents}): `rows.pipe(Rollout.events(rollout))`.
 *
 * @since 0.1.0
 * @category running
 */
export const events = <R>(rollout: Rollout<R>, options?: StreamOptions) =>
<E = never, R2 = never>(
  rows: Iterable<RowInput> | Stream.Stream<RowInput, E, R2>
): Stream.Stream<Event, E | ConfigError, Inference | R | R2> =>
  Stream.unwrap(
    Effect.zipWith(config(rollout), inputRows(rows), (config, input) => streamEvents(config, input, options))
  ) as Stream.Stream<Event, E | ConfigError, Inference | R | R2>

/**
 * Whether a run's element is a group.
 *
 * @since 0.1.0
 * @category guards
 */
export const isGroup = (event: Event): event is Group => event._tag === "Group"

/**
 * Whether a run's element is a turn event.
 *
 * @since 0.1.0
 * @category guards
 */
export const isTurnEvent = (event: Event): event is Trajectory.TurnEvent =>
  event._tag !== "Group" && event._tag !== "RowFailure"
