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
import { Cause, Chunk, Deferred, Duration, Effect, Either, ExecutionStrategy, Exit, Fiber, FiberId, Option, Queue, Schema, Scope, Stream } from "effect"
import type { RuntimeFiber } from "effect/Fiber"
import type * as Env from "./Env.js"
import { check as checkEncodable, EncodeError, withEncodeError } from "./CompletionsLog.js"
import { Inference } from "./Inference.js"
import type { SamplingParams, Service as InferenceService } from "./Inference.js"
import { positiveMillis, waitAtMost } from "./internal/duration.js"
import { describe } from "./internal/lift.js"
import { mixSeed } from "./internal/seed.js"
import { wholeProblem } from "./internal/whole.js"
import * as Registry from "./Registry.js"
import * as Reward from "./Reward.js"
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
 * abandoned after `close` more: its trajectory gets its record, and a new worker takes its place.
 *
 * @since 0.1.0
 * @category models
 */
export interface Timeouts {
  /** Creating and resetting the env (the scheduler's start). */
  readonly reset?: Duration.DurationInput | undefined
  /** The env's answer to one turn (the scheduler's `onTurnEnd` and `step`), and the reward functions. */
  readonly step?: Duration.DurationInput | undefined
  /** Closing the env (the trajectory's scope). */
  readonly close?: Duration.DurationInput | undefined
  /** The whole trajectory, model calls included (not its close). */
  readonly trajectory?: Duration.DurationInput | undefined
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
 * Upper bounds of a run's sizes, and why (a value above is refused before anything runs).
 *
 * @since 0.1.0
 * @category validation
 */
export const LIMITS = {
  numGenerations: {
    max: 4096,
    reason: "a group's trajectories are held in memory until its last one ends (GRPO groups are 2 to a few hundred)"
  },
  concurrency: {
    max: 100_000,
    reason: "each trajectory in flight holds an env, a conversation and a worker; memory runs out before more helps"
  },
  maxTurns: {
    max: 10_000,
    reason: "a trajectory holds its whole conversation, which no model's context takes past a few thousand turns"
  }
} as const

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
  const sizes: Array<[string, number, { readonly max: number; readonly reason: string }]> = [
    ["--num-generations", config.numGenerations, LIMITS.numGenerations],
    ["--max-turns", config.maxTurns, LIMITS.maxTurns],
    ["--concurrency", config.concurrency, LIMITS.concurrency]
  ]
  for (const [option, value, limit] of sizes) {
    const checked = positiveInteger(option, value)
    if (Either.isLeft(checked)) return checked
    if (value > limit.max) {
      return Either.left(
        new RunConfigError({ option, detail: `must be at most ${limit.max}, got ${value}: ${limit.reason}` })
      )
    }
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
  // (a scheduler written by hand in a JavaScript plugin may have no `envs`)
  const brought = config.scheduler.definition.envs ?? []
  const name = explicit ?? config.defaultEnv ?? brought[0]?.name
  if (name === undefined) {
    return fail("env_config.name", "no env selected: pass --gym-env NAME or set env_config.name in the row")
  }
  // The scheduler's own envs first (it provides their services), then the registry's.
  const own = brought.find((env) => env.name === name) as Env.Definition | undefined
  const definition = own === undefined ? Registry.env(config.registry, name) : Either.right(own)
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

/** One generation of a prepared row to run, with the attempts made so far. */
interface TrajectoryTask {
  readonly _tag: "Trajectory"
  readonly prepared: PreparedRow
  readonly generation: number
  readonly group: GroupSlot
  attempt: number
  errors: Array<Scheduler.TrajectoryError> | undefined
}

type Task = TrajectoryTask | RowFailure

/** The group of a row being filled. */
interface GroupSlot {
  readonly row: Row
  readonly records: Array<TrajectoryRecord | undefined>
  remaining: number
}

/**
 * Rows to run: in memory (any iterable, pulled lazily) or a `Stream` (a dataset read from disk;
 * pulled a chunk at a time, so memory stays bounded whatever its size).
 *
 * @since 0.1.0
 * @category models
 */
export type Rows<A, E = never> = Iterable<Either.Either<A, RowError>> | Stream.Stream<Either.Either<A, RowError>, E>

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
 * The tasks of a run, expanded lazily from its rows: each row's generations, row failures as they
 * come. A `Stream` of rows is pulled one chunk at a time by whichever worker runs out first (the
 * others wait for that pull).
 */
class Tasks<E> {
  private iterator: Iterator<Either.Either<PreparedRow, RowError>> | undefined
  private current: { readonly prepared: PreparedRow; readonly group: GroupSlot; next: number } | undefined
  private refilling: Deferred.Deferred<void> | undefined
  /** The fiber of the read under way (see {@link refill}). */
  private puller: Fiber.RuntimeFiber<void> | undefined = undefined
  exhausted = false
  failure: Cause.Cause<E> | undefined = undefined
  /** Groups started and not yet pulled by the consumer (at most `bufferSize`). */
  private ahead = 0
  /** Workers waiting for room to start a new row, first come first served. */
  private readonly waiting: Array<Deferred.Deferred<void>> = []

  constructor(
    private readonly numGenerations: number,
    iterator: Iterator<Either.Either<PreparedRow, RowError>> | undefined,
    private readonly pull: Effect.Effect<Chunk.Chunk<Either.Either<PreparedRow, RowError>>, Option.Option<E>> | undefined,
    private readonly bufferSize: number
  ) {
    this.iterator = iterator
  }

  /**
   * The consumer pulled a group: one more row may start. Wakes as many waiting workers as a group
   * has generations (they take its tasks), not all of them.
   */
  pulled(): void {
    this.ahead--
    for (let i = 0; i < this.numGenerations && this.waiting.length > 0; i++) {
      Deferred.unsafeDone(this.waiting.shift()!, Exit.void)
    }
  }

  private wait(): Effect.Effect<void> {
    const room = Deferred.unsafeMake<void>(FiberId.none)
    this.waiting.push(room)
    return Deferred.await(room)
  }

  /**
   * No row will start any more (the rows ran out, or their stream failed): every worker waiting for
   * room is woken, to find that out and end. (Only as many as a group has generations were woken per
   * group pulled: the others waited for ever, and the stream never ended.)
   */
  private finish(): void {
    this.exhausted = true
    const waiting = this.waiting.splice(0)
    for (const room of waiting) Deferred.unsafeDone(room, Exit.void)
  }

  /**
   * The next task; `undefined` when there are no more; or an Effect to wait on before asking again
   * (the next chunk of a stream is being read). Throws what an iterable of rows throws.
   */
  next(): Task | Effect.Effect<void> | undefined {
    for (;;) {
      const current = this.current
      if (current !== undefined) {
        const generation = current.next++
        if (current.next >= this.numGenerations) this.current = undefined
        return {
          _tag: "Trajectory",
          prepared: current.prepared,
          generation,
          group: current.group,
          attempt: 1,
          errors: undefined
        }
      }
      if (this.exhausted) return undefined
      if (this.ahead >= this.bufferSize) return this.wait()
      const iterator = this.iterator
      if (iterator === undefined) return this.refill()
      const step = iterator.next()
      if (step.done === true) {
        this.iterator = undefined
        if (this.pull === undefined) this.finish()
        continue
      }
      const prepared = step.value
      if (Either.isLeft(prepared)) return { _tag: "RowFailure", error: prepared.left }
      const row = prepared.right.row
      const group: GroupSlot = { row, records: new Array(this.numGenerations).fill(undefined), remaining: this.numGenerations }
      this.current = { prepared: prepared.right, group, next: 0 }
      this.ahead++
    }
  }

  private refill(): Effect.Effect<void> {
    const pull = this.pull
    if (pull === undefined) {
      this.finish()
      return Effect.void
    }
    if (this.refilling !== undefined) return Deferred.await(this.refilling)
    const refilled = Deferred.unsafeMake<void>(FiberId.none)
    this.refilling = refilled
    // The pull runs on a fiber of its own, and the workers (this one too) only wait for it: a pull is
    // not interrupted halfway (rows would be lost to a stray interruption), and a run that stops does
    // not wait for a read that may never end (a FIFO whose writer stays open, a terminal).
    const settle = Effect.matchCause(pull, {
      onFailure: (cause) => {
        this.refilling = this.puller = undefined
        Deferred.unsafeDone(refilled, Exit.void)
        const failure = Cause.failureOption(cause)
        if (!(Option.isSome(failure) && Option.isNone(failure.value))) {
          this.failure = Cause.map(cause, (e) => (e as Option.Some<E>).value)
        }
        this.finish()
      },
      onSuccess: (chunk) => {
        this.refilling = this.puller = undefined
        Deferred.unsafeDone(refilled, Exit.void)
        this.iterator = chunk[Symbol.iterator]()
      }
    })
    return Effect.flatMap(Effect.forkDaemon(settle), (fiber) => {
      if (this.refilling === refilled) this.puller = fiber
      return Deferred.await(refilled)
    })
  }

  /**
   * The run is over: a read still waiting is interrupted (no one will run what it brings), and its
   * end awaited, so that the rows stream's own finalizers (a cursor, a file) run after the read that
   * uses them, not under it. An interrupted read ends at once unless it cannot be interrupted: that
   * one is waited for within `limit` ms (the close timeout) when there is one.
   */
  abandon(limit: number | undefined): Effect.Effect<void> {
    const puller = this.puller
    this.puller = undefined
    if (puller === undefined) return Effect.void
    const stop = Fiber.interrupt(puller)
    return limit === undefined ? Effect.asVoid(stop) : waitAtMost(stop, limit)
  }
}

/** What a worker that replaces a stopped one does first: finish (or run again) the stopped one's task. */
interface Recovery {
  readonly task: TrajectoryTask
  /** The stopped trajectory's result (after its env is closed); `undefined`: run the task again. */
  readonly result: Effect.Effect<Trajectory.TrajectoryResult> | undefined
}

/** One place in the pool: a worker and what it is doing, as the watchdog sees it. */
interface WorkerSlot {
  readonly worker: Trajectory.Worker
  fiber: RuntimeFiber<void> | undefined
  /** The trajectory in flight (including its retries and scoring). */
  task: TrajectoryTask | undefined
  /** Reward functions running over this result since `started`. */
  scoring: { readonly started: number; readonly result: Trajectory.TrajectoryResult } | undefined
  /** The timeout the watchdog found (and interrupted the worker for), with what it was about. */
  expired: { readonly error: Scheduler.Timeout; readonly token: object | undefined; readonly at: number } | undefined
  /** The worker could not be stopped and was replaced; whatever it does later is ignored. */
  abandoned: boolean
  recovery: Recovery | undefined
}

const END = Symbol("end")

/** What the pool's queue carries: items, batches of turn events (when events are on), the end. */
type Out = Item | ReadonlyArray<Trajectory.TurnEvent> | typeof END

/** Most events a batch holds before it is handed to the queue (sooner when the consumer waits). */
const EVENT_BATCH = 512

/**
 * The turn events of a run, buffered in one batch shared by every worker. A worker hands the
 * batch to the queue after a transition when the batch is full or the consumer is waiting for
 * more (so events come in large chunks under load, and without delay when the consumer is idle),
 * and before it offers a group (so a group comes after its trajectories' events).
 */
class EventSink {
  private batch: Array<Trajectory.TurnEvent> = []
  private readonly push = (event: Trajectory.TurnEvent): void => {
    this.batch.push(event)
  }
  private readonly drain = (): Effect.Effect<void> | undefined => {
    const batch = this.batch
    if (batch.length === 0) return undefined
    if (batch.length < EVENT_BATCH) {
      const size = this.queue.unsafeSize()
      if (Option.isSome(size) && size.value > 0) return undefined
    }
    return this.flush()
  }

  constructor(private readonly queue: Queue.Queue<Out>) {}

  listener(request: Scheduler.TrajectoryRequest, attempt: number): Trajectory.Listener {
    return new Trajectory.Emitter(request, this.push, this.drain, attempt)
  }

  /** Hands what is buffered to the queue (waiting for room). */
  flush(): Effect.Effect<void> | undefined {
    const batch = this.batch
    if (batch.length === 0) return undefined
    this.batch = []
    return Queue.offer(this.queue, batch)
  }
}

/**
 * The default {@link Config.bufferSize}: the groups `concurrency` workers have in flight, plus
 * `max(64, concurrency)` complete groups waiting for the consumer (what a run held before there was
 * a `bufferSize`). Set a smaller one for bounded work under `Stream.take` (a small buffer makes
 * workers wait for a slow consumer: measured, 1,024 x 8 FrozenLake at concurrency 1,024 ran ~0.75x
 * as fast with `2 * ceil(concurrency / numGenerations) + 8`).
 *
 * @since 0.1.0
 * @category models
 */
export const defaultBufferSize = (config: { readonly concurrency: number; readonly numGenerations: number }): number =>
  Math.ceil(config.concurrency / config.numGenerations) + Math.max(64, config.concurrency)

/** Workers a pool starts with; it grows by one per task taken, up to its concurrency. */
const INITIAL_WORKERS = 16

const millis = (input: Duration.DurationInput | undefined): number | undefined =>
  input === undefined ? undefined : Duration.toMillis(Duration.decode(input))

const withTimeout = (result: Trajectory.TrajectoryResult, error: Scheduler.Timeout): Trajectory.TrajectoryResult =>
  result.error !== undefined ? result : { ...result, endReason: "error", error }

/**
 * The worker pool of a run: `concurrency` fibers, each pulling tasks and running their trajectories,
 * and offering each group to the queue when it completes.
 *
 * Guarantees:
 * - a worker is never lost: whatever ends its fiber is counted (`onExit`), so the run always ends;
 * - a trajectory past a timeout is stopped (its worker fiber interrupted by the watchdog, then
 *   replaced by one that records the trajectory with its `Timeout` and closes its env); a worker
 *   that does not stop within the close timeout is abandoned and replaced all the same;
 * - taking a task, closing an env and completing a group are not interrupted halfway: a stop or a
 *   stray interruption never loses a task taken or a group that is complete (an interrupted
 *   worker's task is run again, or finished, by its replacement);
 * - a failing source of rows, or a defect in the pool itself, stops new work; what is in flight
 *   finishes, and the stream fails after its last group.
 */
class Pool<E> {
  private live = 0
  /** Workers started so far (the pool grows to `concurrency` as tasks are taken). */
  private started = 0
  private stopping = false
  private draining = false
  private failure: Cause.Cause<E> | undefined = undefined
  private readonly slots = new Set<WorkerSlot>()
  readonly done = Deferred.unsafeMake<void>(FiberId.none)
  private readonly limits: Trajectory.TimeoutLimits
  /** How long a stopped worker may take to exit before it is abandoned (the close timeout). */
  private readonly grace: number | undefined
  private readonly options: Trajectory.Options
  private readonly retries: number

  constructor(
    private readonly config: Config,
    private readonly inference: InferenceService,
    private readonly parent: Scope.Scope,
    private readonly tasks: Tasks<E>,
    private readonly queue: Queue.Queue<Out>,
    private readonly sink: EventSink | undefined
  ) {
    const t = config.timeouts ?? {}
    this.limits = {
      reset: millis(t.reset),
      step: millis(t.step),
      close: millis(t.close),
      trajectory: millis(t.trajectory)
    }
    this.grace = this.limits.close
    this.options = {
      scheduler: config.scheduler.instance,
      sampling: config.sampling,
      chatTemplateKwargs: config.chatTemplateKwargs
    }
    this.retries = config.retries ?? 0
  }

  /** Forks the workers (and the watchdog, when there are limits) into `scope`. */
  start(scope: Scope.Scope): Effect.Effect<void> {
    return Effect.suspend(() => {
      // A few workers now; each task taken starts one more until there are `concurrency`: a run of
      // 1,000 trajectories with --concurrency 100000 forks 1,000 fibers, not 100,000.
      const first = Math.min(this.config.concurrency, INITIAL_WORKERS)
      const spawns: Array<Effect.Effect<void>> = []
      for (let i = 0; i < first; i++) spawns.push(this.grow())
      const limits = Object.values(this.limits).filter((x): x is number => x !== undefined)
      const watchdog = limits.length === 0 ? Effect.void : Effect.asVoid(
        Effect.forkIn(this.watch(Math.min(1000, Math.max(5, Math.min(...limits) / 10))), scope)
      )
      return Effect.zipRight(Effect.all(spawns, { discard: true }), watchdog)
    })
  }

  /** The stream's end: after every worker is done, and after the groups they offered. */
  end(): Effect.Effect<void> {
    return Effect.zipRight(
      Deferred.await(this.done),
      Effect.suspend(() => Effect.zipRight(this.sink?.flush() ?? Effect.void, Queue.offer(this.queue, END)))
    )
  }

  /** The run's failure, if a source of rows failed or a worker died (raised after the last group). */
  get failed(): Cause.Cause<E> | undefined {
    return this.failure
  }

  /** When the run was stopped ({@link stop}; `performance.now()`), if it was. */
  stoppedAt: number | undefined = undefined
  private graceful = false

  /**
   * Stops the run: no new trajectory starts; those in flight are interrupted. A graceful stop (the
   * run's `until`) leaves the trajectories that have ended and are closing their envs to finish
   * (their close cannot be interrupted and is waited for anyway): their records still complete
   * their groups (they were dropped, though done).
   */
  stop(graceful = false): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.stopping) return Effect.void
      this.stopping = true
      this.graceful = graceful
      this.stoppedAt = performance.now()
      const fibers = [...this.slots].flatMap((slot) =>
        slot.fiber === undefined || (graceful && slot.worker.closing) ? [] : [slot.fiber]
      )
      const interrupt = Effect.forEach(fibers, (fiber) => Fiber.interruptFork(fiber), { discard: true })
      // A worker stuck where it cannot be interrupted is given up after the close timeout.
      const grace = this.grace
      if (grace === undefined) return interrupt
      const abandonAll = Effect.uninterruptible(Effect.suspend(() => this.abandonAll()))
      const giveUp = Effect.race(Deferred.await(this.done), Effect.delay(abandonAll, grace))
      return Effect.zipRight(interrupt, Effect.asVoid(Effect.forkDaemon(giveUp)))
    })
  }

  /**
   * The stream's consumer is gone: shuts the queue down (a worker offering a group to it stops
   * waiting), stops the run, and waits (within the close timeout, when there is one) for its workers.
   */
  shutdown(): Effect.Effect<void> {
    const wait = this.grace === undefined
      ? Deferred.await(this.done)
      : waitAtMost(Deferred.await(this.done), this.grace + 50)
    return Effect.zipRight(
      Effect.zipRight(Effect.zipRight(Queue.shutdown(this.queue), this.stop()), wait),
      Effect.suspend(() => this.tasks.abandon(this.grace))
    )
  }

  private slot(worker = new Trajectory.Worker(this.inference, this.parent)): WorkerSlot {
    return {
      worker,
      fiber: undefined,
      task: undefined,
      scoring: undefined,
      expired: undefined,
      abandoned: false,
      recovery: undefined
    }
  }

  /** Starts one more worker (counted as live at once, so the run cannot end in between). */
  private grow(): Effect.Effect<void> {
    this.started++
    this.live++
    return this.spawn(this.slot())
  }

  private spawn(slot: WorkerSlot): Effect.Effect<void> {
    this.slots.add(slot)
    const body = Effect.interruptible(
      Effect.onExit(
        slot.worker.provide(this.loop(slot)),
        (exit) => this.exited(slot, exit)
      )
    )
    return Effect.map(Effect.forkDaemon(body), (fiber) => {
      slot.fiber = fiber
    })
  }

  private workerDone(slot: WorkerSlot): void {
    this.slots.delete(slot)
    if (--this.live === 0) Deferred.unsafeDone(this.done, Exit.void)
  }

  /** A failure from outside the pool (the run's `until` died): no new work; the stream fails with it after the last group. */
  failWith(cause: Cause.Cause<unknown>): void {
    this.fail(cause as Cause.Cause<never>)
  }

  private fail(cause: Cause.Cause<E>): void {
    this.failure = this.failure === undefined ? cause : Cause.sequential(this.failure, cause)
    this.draining = true
  }

  private loop(slot: WorkerSlot) {
    const loop: Effect.Effect<void> = Effect.suspend(() => {
      const recovery = slot.recovery
      if (recovery !== undefined) {
        slot.recovery = undefined
        const next = recovery.result === undefined
          ? Effect.zipRight(slot.worker.discard(), this.attempt(slot, recovery.task))
          : Effect.flatMap(recovery.result, (result) => this.settle(slot, recovery.task, result))
        return Effect.zipRight(next, loop)
      }
      if (this.stopping || this.draining) return Effect.void
      let next: Task | Effect.Effect<void> | undefined
      try {
        next = this.tasks.next()
      } catch (defect) {
        this.fail(Cause.die(defect))
        return Effect.void
      }
      if (next === undefined) {
        if (this.tasks.failure !== undefined && !this.draining) this.fail(this.tasks.failure)
        return Effect.void
      }
      if (Effect.isEffect(next)) return Effect.zipRight(next, loop)
      if (next._tag === "RowFailure") return Effect.zipRight(Effect.uninterruptible(Queue.offer(this.queue, next)), loop)
      // Set with the take, so that an interruption from now on finds the task to run again.
      slot.task = next
      const run = Effect.zipRight(this.attempt(slot, next), loop)
      return this.started < this.config.concurrency ? Effect.zipRight(this.grow(), run) : run
    })
    return loop
  }

  /** Runs one attempt of a task. */
  private attempt(slot: WorkerSlot, task: TrajectoryTask): Effect.Effect<void> {
    slot.task = task
    const req = request(this.config, task.prepared, task.generation)
    return Effect.flatMap(
      slot.worker.run(req, this.options, this.sink?.listener(req, task.attempt)),
      (result) => this.settle(slot, task, result)
    )
  }

  /** A finished attempt: retried when its error is transient and attempts are left; else scored. */
  private settle(
    slot: WorkerSlot,
    task: TrajectoryTask,
    result: Trajectory.TrajectoryResult
  ): Effect.Effect<void> {
    // A worker given up by the watchdog that got going again: its task was finished by another.
    if (slot.abandoned) return Effect.interrupt
    const error = result.error
    if (error !== undefined && task.attempt <= this.retries && Scheduler.isTransient(error)) {
      ;(task.errors ??= []).push(error)
      task.attempt++
      const backoff = Duration.millis(Math.min(100 * 2 ** (task.attempt - 2), 5000))
      return Effect.zipRight(Effect.sleep(backoff), this.attempt(slot, task))
    }
    const row = task.prepared.row
    if (!needsRewardFunctions(this.config, result)) return this.complete(slot, task, scoreSync(this.config, row, result))
    slot.scoring = { started: performance.now(), result }
    return Effect.flatMap(scoreTrajectory(this.config, row, result), (record) => {
      slot.scoring = undefined
      return this.complete(slot, task, record)
    })
  }

  /**
   * A trajectory's final record: checked for its log line, put in its group, the group offered when
   * full. Synchronous (so atomic) but for the offer: the last trajectory of a group puts its record
   * and offers the group without a chance of interruption in between, so a complete group is never
   * lost to a stop.
   */
  private complete(slot: WorkerSlot, task: TrajectoryTask, record: TrajectoryRecord): Effect.Effect<void> {
    if (slot.abandoned) return Effect.interrupt
    if (task.group.remaining === 1) return Effect.uninterruptible(Effect.suspend(() => this.put(slot, task, record)))
    return this.put(slot, task, record)
  }

  private put(slot: WorkerSlot, task: TrajectoryTask, record: TrajectoryRecord): Effect.Effect<void> {
    slot.task = undefined
    let out = task.attempt > 1 ? { ...record, attempts: task.attempt, attemptErrors: task.errors } : record
    const problem = checkEncodable(out)
    if (problem !== undefined) out = withEncodeError(out, problem)
    const group = task.group
    group.records[task.generation] = out
    if (--group.remaining > 0) return Effect.void
    const records = withAdvantages(group.records as Array<TrajectoryRecord>)
    const offer = Queue.offer(this.queue, { _tag: "Group", row: group.row, records } satisfies Group)
    const events = this.sink?.flush()
    return events === undefined ? offer : Effect.zipRight(events, offer)
  }

  /** Whatever ended a worker's fiber: it is counted, replaced, or it ends the run. */
  private exited(slot: WorkerSlot, exit: Exit.Exit<void>): Effect.Effect<void> {
    return Effect.suspend(() => {
      // A stuck worker that stopped at last: close what it left open; its place was taken already.
      if (slot.abandoned) return slot.worker.discard()
      if (Exit.isSuccess(exit)) {
        this.workerDone(slot)
        return Effect.void
      }
      if (Cause.isInterruptedOnly(exit.cause)) {
        const expired = slot.expired
        if (expired !== undefined && !this.stopping) {
          // Stopped by the watchdog: a new fiber takes the slot and finishes the task first.
          slot.expired = undefined
          slot.recovery = this.recoveryOf(slot, expired)
          return this.spawn(slot)
        }
        this.workerDone(slot)
        return Effect.void
      }
      // A defect in the pool itself (a bug): no new work, and the run fails after what is in flight.
      this.fail(exit.cause as Cause.Cause<never>)
      this.workerDone(slot)
      return slot.worker.discard()
    })
  }

  /**
   * What a replacement does with the stopped worker's task: the timed-out trajectory's result, or
   * (when the interruption landed elsewhere than on the trajectory that timed out) run it again.
   */
  private recoveryOf(slot: WorkerSlot, expired: NonNullable<WorkerSlot["expired"]>): Recovery | undefined {
    const task = slot.task
    const scoring = slot.scoring
    slot.scoring = undefined
    if (task === undefined) return undefined
    if (scoring !== undefined && scoring.result === expired.token) {
      return { task, result: Effect.succeed(withTimeout(scoring.result, expired.error)) }
    }
    const current = slot.worker.current
    if (current !== undefined && current === expired.token) return { task, result: slot.worker.recover(expired.error) }
    return { task, result: undefined }
  }

  /** A worker that did not stop within the close timeout: given up, its task finished by a new one. */
  private abandon(slot: WorkerSlot, expired: NonNullable<WorkerSlot["expired"]>): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (slot.abandoned || !this.slots.has(slot)) return Effect.void
      slot.abandoned = true
      this.slots.delete(slot)
      const fresh = this.slot()
      const task = slot.task
      const closing = slot.worker.closing
      if (task !== undefined) {
        const scoring = slot.scoring
        const result = scoring !== undefined && scoring.result === expired.token
          ? withTimeout(scoring.result, expired.error)
          : slot.worker.current !== undefined && slot.worker.current === expired.token
          ? slot.worker.abandon(expired.error)
          : undefined
        fresh.recovery = { task, result: result === undefined ? undefined : Effect.succeed(result) }
      }
      if (this.stopping) {
        const gone = Effect.sync(() => {
          if (--this.live === 0) Deferred.unsafeDone(this.done, Exit.void)
        })
        // after a graceful stop, a trajectory that had ended and whose close ran past its timeout
        // still gets its record (see abandonAll)
        const result = fresh.recovery?.result
        if (!this.graceful || !closing || task === undefined || result === undefined) return gone
        const record = Effect.flatMap(result, (r) => this.closedRecord(slot, task, r))
        return Effect.ensuring(Effect.exit(Effect.uninterruptible(record)), gone)
      }
      return this.spawn(fresh)
    })
  }

  /** The record of a trajectory that had ended and whose close ran past its timeout during a graceful stop. */
  private closedRecord(slot: WorkerSlot, task: TrajectoryTask, result: Trajectory.TrajectoryResult): Effect.Effect<void> {
    return this.put(slot, task, scoreSync(this.config, task.prepared.row, result))
  }

  /**
   * After a stop: workers still running past the close timeout are given up, and the run ends.
   * After a graceful one, those whose trajectory had ended and was closing its env get their records
   * first, with the close's `Timeout`, as the watchdog gives them in a run that goes on, so that
   * their groups are still emitted (they were left out).
   */
  private abandonAll(): Effect.Effect<void> {
    const records: Array<Effect.Effect<void>> = []
    const close = this.limits.close
    for (const slot of this.slots) {
      const task = slot.task
      if (this.graceful && close !== undefined && task !== undefined && slot.worker.closing) {
        const result = slot.worker.abandon(new Scheduler.Timeout({ phase: "close", limit: "close", seconds: close / 1000 }))
        if (result !== undefined) records.push(this.closedRecord(slot, task, result))
      }
      slot.abandoned = true
    }
    this.slots.clear()
    const end = Effect.sync(() => {
      this.live = 0
      Deferred.unsafeDone(this.done, Exit.void)
    })
    return records.length === 0 ? end : Effect.ensuring(Effect.exit(Effect.all(records, { discard: true })), end)
  }

  /** Every `period` ms: interrupts workers past a limit, abandons those that did not stop. */
  private watch(period: number): Effect.Effect<void> {
    const check = Effect.suspend(() => {
      const now = performance.now()
      const actions: Array<Effect.Effect<void>> = []
      for (const slot of this.slots) {
        const fiber = slot.fiber
        if (fiber === undefined) continue
        const expired = slot.expired
        if (expired === undefined) {
          const scoring = slot.scoring
          const timeout = scoring !== undefined ? this.scoringOverdue(scoring.started, now) : slot.worker.overdue(now, this.limits)
          if (timeout === undefined) continue
          const found = { error: timeout, token: scoring !== undefined ? scoring.result : slot.worker.current, at: now }
          slot.expired = found
          actions.push(Fiber.interruptFork(fiber))
          // A close cannot be interrupted: past its timeout, the worker is given up at once.
          if (timeout.phase === "close") actions.push(this.abandon(slot, found))
        } else if (this.grace !== undefined && now - expired.at > this.grace) {
          actions.push(this.abandon(slot, expired))
        }
      }
      return actions.length === 0 ? Effect.void : Effect.all(actions, { discard: true })
    })
    return Effect.forever(Effect.zipRight(Effect.sleep(Duration.millis(period)), check))
  }

  private scoringOverdue(started: number, now: number): Scheduler.Timeout | undefined {
    const limit = this.limits.step
    return limit !== undefined && now - started > limit
      ? new Scheduler.Timeout({ phase: "reward", limit: "step", seconds: limit / 1000 })
      : undefined
  }
}

/**
 * Runs every row. Groups are emitted as they complete (not in row order); row failures as they
 * are met. Interrupting the stream interrupts the trajectories in flight, and their envs are closed;
 * `options.until` stops it gracefully (see {@link StreamOptions}).
 *
 * Concurrency is a fixed pool of `concurrency` workers pulling trajectories from the rows, so the
 * number of trajectories in flight (and of partly filled groups) stays bounded however large the
 * dataset is; at most `bufferSize` groups are ahead of the consumer. When the rows are a `Stream`
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
): Stream.Stream<Event, E, Inference> => runPool(config, prepareAll(config, rows), options, true)

/**
 * What {@link streamEvents} emits: turn events and the run's items.
 *
 * @since 0.1.0
 * @category models
 */
export type Event = Trajectory.TurnEvent | Item

const prepareAll = <E>(config: Config, rows: Rows<Row, E>): Rows<PreparedRow, E> =>
  Stream.StreamTypeId in rows
    ? Stream.map(rows as Stream.Stream<Either.Either<Row, RowError>, E>, (decoded) =>
      Either.flatMap(decoded, (row) => prepareRow(config, row)))
    : prepareRows(config, rows as Iterable<Either.Either<Row, RowError>>)

function* prepareRows(config: Config, rows: Iterable<Either.Either<Row, RowError>>): Generator<Either.Either<PreparedRow, RowError>> {
  for (const decoded of rows) yield Either.flatMap(decoded, (row) => prepareRow(config, row))
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
): Stream.Stream<Item, E, Inference> => runPool(config, rows, options, false) as Stream.Stream<Item, E, Inference>

const unbatch = (out: Item | ReadonlyArray<Trajectory.TurnEvent>): Chunk.Chunk<Event> =>
  Array.isArray(out) ? Chunk.unsafeFromArray(out as Array<Trajectory.TurnEvent>) : Chunk.of(out as Item)

const runPool = <E>(
  config: Config,
  rows: Rows<PreparedRow, E>,
  options: StreamOptions | undefined,
  withEvents: boolean
): Stream.Stream<Event, E, Inference> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const inference = yield* Inference
      const bufferSize = config.bufferSize ?? defaultBufferSize(config)
      const queue = yield* Effect.acquireRelease(
        Queue.bounded<Out>(Math.max(64, Math.min(bufferSize, 100_000))),
        Queue.shutdown
      )
      const tasks = Stream.StreamTypeId in rows
        ? new Tasks<E>(
          config.numGenerations,
          undefined,
          yield* Stream.toPull(rows as Stream.Stream<Either.Either<PreparedRow, RowError>, E>),
          bufferSize
        )
        : new Tasks<E>(
          config.numGenerations,
          (rows as Iterable<Either.Either<PreparedRow, RowError>>)[Symbol.iterator](),
          undefined,
          bufferSize
        )
      const closeMs = millis(config.timeouts?.close)
      // The trajectories' scopes live under this one. Its finalizer is added before the pool's, so
      // on interruption the workers stop first, then it closes every trajectory still open (and its
      // env), all at once (16 envs whose close took 200 ms took 3.2 s one after another), within the
      // close timeout when there is one; then the queue shuts down. (A finalizer runs uninterruptibly,
      // and so did the wait under `Effect.timeout`, which then could not end it: an env whose close
      // hung held the stop for ever, close timeout or not.)
      // One close timeout for the whole stop: what the pool's shutdown already waited of it (for
      // workers stuck in a close) is not given again here (a stop took twice the timeout).
      const closeTrajectories = (scope: Scope.CloseableScope, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
        const close = Scope.close(scope, exit)
        if (closeMs === undefined) return close
        const stoppedAt = pool.stoppedAt
        const left = stoppedAt === undefined ? closeMs : Math.max(0, closeMs - (performance.now() - stoppedAt))
        return Effect.flatMap(Effect.forkDaemon(close), (fiber) => waitAtMost(Fiber.await(fiber), left))
      }
      const trajectories = yield* Effect.acquireRelease(Scope.make(ExecutionStrategy.parallel), closeTrajectories)
      const pool: Pool<E> = new Pool<E>(config, inference, trajectories, tasks, queue, withEvents ? new EventSink(queue) : undefined)
      yield* Effect.addFinalizer(() => pool.shutdown())
      const scope = yield* Effect.scope
      yield* pool.start(scope)
      yield* Effect.forkIn(pool.end(), scope)
      if (options?.until !== undefined) {
        // An `until` that dies stops the run as well, and the stream fails with its defect after the
        // last group (it was dropped, and the run went on to its end).
        const until = Effect.onExit(options.until, (exit) => {
          if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) pool.failWith(exit.cause)
          return Exit.isSuccess(exit) || !Cause.isInterruptedOnly(exit.cause) ? pool.stop(Exit.isSuccess(exit)) : Effect.void
        })
        yield* Effect.forkIn(until, scope)
      }
      // With a bufferSize given, one element per pull, so that a group counts as pulled only when
      // the consumer asks for it (the exact bound of `bufferSize`). With the default (a large
      // buffer), whole chunks: measured back to back on workload 1 (c=64), one element per pull ran
      // 0.65-0.97x as fast. Events come in batches, each one chunk.
      const exact = config.bufferSize !== undefined
      const out = Stream.fromQueue(queue, exact ? { maxChunkSize: 1 } : undefined).pipe(
        Stream.takeWhile((out): out is Item | ReadonlyArray<Trajectory.TurnEvent> => out !== END),
        Stream.mapChunks((chunk): Chunk.Chunk<Event> => {
          if (chunk.length === 1) {
            const out = Chunk.unsafeHead(chunk)
            if (Array.isArray(out)) return Chunk.unsafeFromArray(out as Array<Trajectory.TurnEvent>)
            if ((out as Item)._tag === "Group") tasks.pulled()
            return chunk as Chunk.Chunk<Event>
          }
          let batches = false
          for (const out of chunk) {
            if (Array.isArray(out)) batches = true
            else if ((out as Item)._tag === "Group") tasks.pulled()
          }
          return batches ? Chunk.flatMap(chunk, unbatch) : chunk as Chunk.Chunk<Event>
        }),
        Stream.concat(Stream.suspend(() => {
          const failure = pool.failed
          return failure === undefined ? Stream.empty : Stream.failCause(failure)
        }))
      )
      return out
    })
  )

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
 * Builds the {@link Config} of a run (its scheduler instance lives in the current scope).
 *
 * @since 0.1.0
 * @category constructors
 */
export const config = <R>(rollout: Rollout<R>): Effect.Effect<Config, ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const o = rollout.options
    const numbers = {
      numGenerations: o.numGenerations ?? 8,
      maxTurns: o.maxTurns ?? 10,
      concurrency: o.concurrency ?? 64,
      seed: o.seed ?? 0
    }
    yield* validate(numbers)
    if (o.bufferSize !== undefined) yield* positiveInteger("bufferSize", o.bufferSize)
    yield* checkOptions(o)
    const columns = yield* Reward.columns(o.rewards ?? [], o.weights)
    const scheduler = o.scheduler ?? Scheduler.gym
    const instance = yield* scheduler.make({ options: o.schedulerOptions ?? {} })
    // The services the envs require are in the run's context (run and events require R), so
    // inside the run their constructors need only the trajectory's scope.
    const envs = o.envs as ReadonlyArray<Env.Definition>
    return {
      registry: Registry.add(Registry.empty, { envs }),
      scheduler: { definition: scheduler, instance },
      defaultEnv: o.defaultEnv ?? (envs.length === 1 ? envs[0].name : undefined),
      ...numbers,
      columns,
      sampling: o.sampling,
      chatTemplateKwargs: o.chatTemplateKwargs,
      timeouts: o.timeouts,
      retries: o.retries,
      bufferSize: o.bufferSize
    } satisfies Config
  })

/**
 * The library options that {@link validate} does not cover: the envs and the default one, the
 * retries, the timeouts and the sampling numbers, each refused before anything runs (an unknown
 * `defaultEnv` failed every row, a timeout of "banana" died in the pool, a negative one timed out
 * every step).
 */
const TIMEOUT_KEYS: ReadonlyArray<string> = ["reset", "step", "close", "trajectory"] satisfies ReadonlyArray<keyof Timeouts>

const checkOptions = <R>(o: Options<R>): Either.Either<void, RunConfigError> => {
  const refuse = (option: string, detail: string) => Either.left(new RunConfigError({ option, detail }))
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
  if (o.retries !== undefined) {
    const problem = wholeProblem(o.retries, 0)
    if (problem !== undefined) return refuse("retries", problem)
  }
  for (const [key, input] of Object.entries(o.timeouts ?? {})) {
    if (!TIMEOUT_KEYS.includes(key)) return refuse(`timeouts.${key}`, `unknown timeout (there are ${TIMEOUT_KEYS.join(", ")})`)
    if (input === undefined) continue
    if (positiveMillis(input) === undefined) {
      return refuse(`timeouts.${key}`, `must be a positive duration ("30 seconds", 500, Duration.seconds(30)), got ${describe(input).slice(0, 100)}`)
    }
  }
  for (const [key, value] of Object.entries(o.sampling ?? {})) {
    if (key === "stop" || key === "logprobs" || key === "structuredOutputsRegex" || value === undefined) continue
    if (typeof value !== "number" || !Number.isFinite(value)) {
      return refuse(`sampling.${key}`, `must be a finite number, got ${describe(value).slice(0, 100)}`)
    }
  }
  return Either.void
}

/**
 * What {@link run} takes as rows: decoded rows, rows that failed to decode (`Either`, as
 * `Row.decodeStream` gives them), or plain JSON values (a dataset row: `messages`, `env_config`,
 * other columns), numbered in the order they come.
 *
 * @since 0.1.0
 * @category models
 */
export type RowInput = Row | Either.Either<Row, RowError> | unknown

const isRow = (u: unknown): u is Row =>
  typeof u === "object" && u !== null && typeof (u as Row).file === "string" && typeof (u as Row).index === "number" &&
  Array.isArray((u as Row).messages) && typeof (u as Row).envConfig === "object" && typeof (u as Row).dataDict === "object"

const toRow = (value: unknown, index: number): Either.Either<Row, RowError> =>
  Either.isEither(value)
    ? (value as Either.Either<Row, RowError>)
    : isRow(value)
    ? Either.right(value)
    : decodeValue("rows", index, value)

const inputRows = <E, R2>(
  rows: Iterable<RowInput> | Stream.Stream<RowInput, E, R2>
): Effect.Effect<Rows<Row, E>, never, R2> =>
  Stream.StreamTypeId in rows
    ? Effect.map(Effect.context<R2>(), (context) =>
      Stream.provideContext(
        Stream.mapAccum(rows as Stream.Stream<RowInput, E, R2>, 0, (i, value) => [i + 1, toRow(value, i)]),
        context
      ))
    : Effect.succeed(numbered(rows as Iterable<RowInput>))

function* numbered(rows: Iterable<RowInput>): Generator<Either.Either<Row, RowError>> {
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
  Stream.unwrapScoped(
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
  Stream.unwrapScoped(
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
