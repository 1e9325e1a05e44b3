/**
 * A whole run: rows in, every row expanded into its GRPO group of `numGenerations` trajectories,
 * trajectories run with at most `concurrency` in flight, each one scored, and every group emitted
 * (with its advantages) as soon as its last trajectory finishes.
 *
 * Bad rows (malformed, not matching the schema, an unknown env, a bad `env_config`) are emitted as
 * `RowFailure` items and the other rows run. A failing trajectory is a record with its typed error;
 * it never fails the run.
 *
 * @since 0.1.0
 */
import { Effect, Either, Queue, Schema, Scope, Stream } from "effect"
import { Inference } from "./Inference.js"
import type { SamplingParams, Service as InferenceService } from "./Inference.js"
import { mixSeed } from "./internal/seed.js"
import { wholeProblem } from "./internal/whole.js"
import * as Registry from "./Registry.js"
import * as Reward from "./Reward.js"
import { RowError } from "./Row.js"
import type { Row } from "./Row.js"
import type * as Scheduler from "./Scheduler.js"
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
  /** `--gym-env`: used by rows whose `env_config` has no `name`. */
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
   * How each trajectory is driven: `loop` (default) runs the trajectory engine's transitions in a
   * plain loop; `stream` folds `Trajectory.stream`. Both give identical results; `stream` exists
   * to check that and to measure what the per-event stream machinery costs.
   */
  readonly driver?: "loop" | "stream" | undefined
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
  readonly error: Scheduler.TrajectoryError | Reward.RewardError | undefined
}

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

/**
 * The run's configuration cannot work (e.g. `--num-generations 0`).
 *
 * @since 0.1.0
 * @category errors
 */
export class RunConfigError extends Schema.TaggedError<RunConfigError>("effect-gym/RunConfigError")(
  "RunConfigError",
  { option: Schema.String, detail: Schema.String }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * Checks that a setting is a whole number >= 1.
 *
 * @since 0.1.0
 * @category validation
 */
export const positiveInteger = (option: string, value: number): Either.Either<void, RunConfigError> => {
  const detail = wholeProblem(value, 1)
  return detail === undefined ? Either.void : Either.left(new RunConfigError({ option, detail }))
}

/**
 * Checks the numeric settings of a run.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (config: {
  readonly numGenerations: number
  readonly maxTurns: number
  readonly concurrency: number
  readonly seed: number
}): Either.Either<void, RunConfigError> => {
  const positive: Array<[string, number]> = [
    ["--num-generations", config.numGenerations],
    ["--max-turns", config.maxTurns],
    ["--concurrency", config.concurrency]
  ]
  for (const [option, value] of positive) {
    const checked = positiveInteger(option, value)
    if (Either.isLeft(checked)) return checked
  }
  if (!Number.isSafeInteger(config.seed)) {
    return Either.left(new RunConfigError({ option: "--seed", detail: `must be an integer, got ${config.seed}` }))
  }
  return Either.void
}

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
export const prepareRow = (config: Config, row: Row): Either.Either<PreparedRow, RowError> => {
  const seed = rowSeed(config.seed, row.index)
  const fail = (path: string, detail: string) =>
    Either.left(new RowError({ file: row.file, line: row.index + 1, path, detail }))
  const explicit = typeof row.envConfig.name === "string" ? row.envConfig.name : undefined
  const name = explicit ?? config.defaultEnv
  if (!config.scheduler.definition.usesRegistryEnvs) {
    return Either.right({ row, env: undefined, seed })
  }
  if (name === undefined) {
    return fail("env_config.name", "no env selected: pass --gym-env NAME or set env_config.name in the row")
  }
  const definition = Registry.env(config.registry, name)
  if (Either.isLeft(definition)) {
    return fail(explicit === undefined ? "--gym-env" : "env_config.name", definition.left.message)
  }
  return Either.match(definition.right.prepare(row.envConfig), {
    onLeft: (error) => fail(error.path, `${error.reason} (env ${name})`),
    onRight: (create) => Either.right({ row, env: { name, create }, seed })
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
const needsRewardFunctions = (config: Config, result: Trajectory.TrajectoryResult): boolean =>
  result.error === undefined && config.columns.functions.length > 0

/** The record of a failed trajectory, or of a run with no reward functions (only the gym column). */
const scoreSync = (config: Config, row: Row, result: Trajectory.TrajectoryResult): TrajectoryRecord => {
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

type Task =
  | { readonly _tag: "Trajectory"; readonly prepared: PreparedRow; readonly generation: number; readonly group: Slot }
  | RowFailure

/** The group of a row being filled. */
interface Slot {
  readonly row: Row
  readonly records: Array<TrajectoryRecord | undefined>
  remaining: number
}

function* prepareRows(config: Config, rows: Iterable<Either.Either<Row, RowError>>): Generator<Either.Either<PreparedRow, RowError>> {
  for (const decoded of rows) yield Either.flatMap(decoded, (row) => prepareRow(config, row))
}

function* tasks(config: Config, rows: Iterable<Either.Either<PreparedRow, RowError>>): Generator<Task> {
  for (const prepared of rows) {
    if (Either.isLeft(prepared)) {
      yield { _tag: "RowFailure", error: prepared.left }
      continue
    }
    const group: Slot = {
      row: prepared.right.row,
      records: new Array(config.numGenerations).fill(undefined),
      remaining: config.numGenerations
    }
    for (let generation = 0; generation < config.numGenerations; generation++) {
      yield { _tag: "Trajectory", prepared: prepared.right, generation, group }
    }
  }
}

const END = Symbol("end")

/**
 * Runs every row. Groups are emitted as they complete (not in row order); row failures as they
 * are met. Interrupting the stream interrupts the trajectories in flight, and their envs are closed.
 *
 * Concurrency is a fixed pool of `concurrency` workers pulling trajectories from the rows, so the
 * number of trajectories in flight (and of partly filled groups) stays bounded however large the
 * dataset is.
 *
 * @since 0.1.0
 * @category running
 */
export const stream = (
  config: Config,
  rows: Iterable<Either.Either<Row, RowError>>
): Stream.Stream<Item, never, Inference> => streamPrepared(config, prepareRows(config, rows))

/**
 * {@link stream} over rows already prepared with {@link prepareRow} (with this config's registry,
 * default env and seed), for callers that check rows before they run them.
 *
 * @since 0.1.0
 * @category running
 */
export const streamPrepared = (
  config: Config,
  rows: Iterable<Either.Either<PreparedRow, RowError>>
): Stream.Stream<Item, never, Inference> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const inference = yield* Inference
      const queue = yield* Effect.acquireRelease(
        Queue.bounded<Item | typeof END>(Math.max(64, config.concurrency)),
        Queue.shutdown
      )
      const source = tasks(config, rows)
      // The trajectories' scopes live under this one. It is added to the run's scope before the
      // workers are forked, so on interruption the workers stop first, then it closes every
      // trajectory still open (and its env), then the queue shuts down.
      const trajectories = yield* Effect.acquireRelease(Scope.make(), (scope, exit) => Scope.close(scope, exit))
      // One fiber per worker, each forked straight into the run's scope (interrupted when it
      // closes): a worker's stack then holds only its own frames, which matters when thousands of
      // workers wait on a model at once. The last worker to finish offers END.
      const scope = yield* Effect.scope
      let running = config.concurrency
      const finished = Effect.suspend(() => (--running === 0 ? Queue.offer(queue, END) : Effect.void))
      for (let i = 0; i < config.concurrency; i++) {
        yield* Effect.forkIn(
          Effect.zipRight(workerLoop(config, inference, trajectories, source, queue), finished),
          scope
        )
      }
      return Stream.fromQueue(queue).pipe(Stream.takeWhile((item): item is Item => item !== END))
    })
  )

const workerLoop = (
  config: Config,
  inference: InferenceService,
  parent: Scope.Scope,
  source: Iterator<Task>,
  queue: Queue.Queue<Item | typeof END>
): Effect.Effect<void> => {
  const options: Trajectory.Options = {
    scheduler: config.scheduler.instance,
    sampling: config.sampling,
    chatTemplateKwargs: config.chatTemplateKwargs
  }
  const worker = Trajectory.worker(inference, parent)
  const loop: Effect.Effect<void> = Effect.suspend(() => {
    const next = source.next()
    if (next.done === true) return Effect.void
    const task = next.value
    if (task._tag === "RowFailure") return Effect.zipRight(Queue.offer(queue, task), loop)
    const req = request(config, task.prepared, task.generation)
    const trajectory = config.driver === "stream"
      ? Effect.provideService(Trajectory.fold(req, Trajectory.stream(req, options)), Inference, inference)
      : worker.run(req, options)
    const finished = (record: TrajectoryRecord): Effect.Effect<void> => {
      const group = task.group
      group.records[task.generation] = record
      group.remaining--
      if (group.remaining > 0) return loop
      const records = withAdvantages(group.records as Array<TrajectoryRecord>)
      return Effect.zipRight(Queue.offer(queue, { _tag: "Group", row: group.row, records }), loop)
    }
    return Effect.flatMap(trajectory, (result) =>
      needsRewardFunctions(config, result)
        ? Effect.flatMap(scoreTrajectory(config, task.prepared.row, result), finished)
        : finished(scoreSync(config, task.prepared.row, result)))
  })
  return worker.provide(loop)
}

/**
 * Runs rows given in memory (already parsed JSON values) and collects every item.
 *
 * @since 0.1.0
 * @category running
 */
export const runAll = (
  config: Config,
  rows: Iterable<Either.Either<Row, RowError>>
): Effect.Effect<Array<Item>, never, Inference> =>
  Effect.map(Stream.runCollect(stream(config, rows)), (chunk) => Array.from(chunk))
