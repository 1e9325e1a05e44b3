/**
 * The run engine under `Rollout.stream` and `Rollout.events`, built from Effect's own parts:
 *
 * - one producer fiber reads the rows and starts their trajectories, in row and generation order;
 *   a `Semaphore` of `concurrency` permits bounds the trajectories in flight, and one of
 *   `bufferSize` permits the groups started and not yet pulled by the consumer;
 * - each trajectory runs on a fiber of its own, in a `FiberSet`, and hands its permit back once its
 *   record is in its group (the group offered to the queue when it is complete), or once it is
 *   given up; the run ends when the rows are read and every permit is back;
 * - one watchdog fiber, sleeping on the `Clock`, finds the trajectories past a limit (each
 *   trajectory's phase and the time it entered it are plain fields of its state machine: a limit
 *   costs a trajectory no timer and no fiber), interrupts them, and gives up those that do not stop
 *   within the close timeout;
 * - a trajectory stopped by the watchdog is finished on a new fiber (its record with the `Timeout`,
 *   its env closed, or a retry), which takes its permit over.
 *
 * Guarantees (test/RolloutHostile.test.ts, test/RolloutSafety.test.ts are the oracle):
 * - taking a permit and starting a trajectory, and completing a group, are not interrupted
 *   halfway: a stop never loses a permit or a group that is complete;
 * - a stop (the consumer gone, an interruption) interrupts the trajectories in flight, closes their
 *   envs at once, and is bounded as a whole by the close timeout; a graceful stop (`until`) lets the
 *   trajectories that ended and are closing their envs finish, so their groups are still emitted;
 * - a failing source of rows, a dying `until` or a defect in the engine stops new work; what is in
 *   flight finishes, and the stream fails after its last group.
 */
import { Cause, Deferred, Duration, Effect, Exit, Fiber, FiberSet, Queue, Result, Scope, Semaphore, Stream } from "effect"
import type { Array as Arr, Clock } from "effect"
import type { Service as InferenceService } from "../../Inference.js"
import { Inference } from "../../Inference.js"
import type { Config, Event, Group, Item, PreparedRow, Rows, StreamOptions, TrajectoryRecord } from "../../Rollout.js"
import type { RowError } from "../../Row.js"
import type { Row } from "../../Row.js"
import * as Scheduler from "../../Scheduler.js"
import type * as Trajectory from "../../Trajectory.js"
import { check as checkEncodable, withEncodeError } from "../../CompletionsLog.js"
import { waitAtMost } from "../duration.js"
import { closeMachine, Machine, millisOf, Phase, runMachine } from "../trajectory/machine.js"
import { EventSink } from "./events.js"
import type { Out } from "./events.js"
import { needsRewardFunctions, request, scoreSync, scoreTrajectory, withAdvantages } from "./scoring.js"

/**
 * The default `bufferSize`: the groups `concurrency` trajectories have in flight, plus
 * `max(64, concurrency)` complete groups waiting for the consumer. Set a smaller one for bounded
 * work under `Stream.take` (a small buffer makes trajectories wait for a slow consumer: measured,
 * 1,024 x 8 FrozenLake at concurrency 1,024 ran ~0.75x as fast with
 * `2 * ceil(concurrency / numGenerations) + 8`).
 */
export const defaultBufferSize = (config: { readonly concurrency: number; readonly numGenerations: number }): number =>
  Math.ceil(config.concurrency / config.numGenerations) + Math.max(64, config.concurrency)

/** The group of a row being filled. */
interface GroupSlot {
  readonly row: Row
  readonly records: Array<TrajectoryRecord | undefined>
  remaining: number
}

/** One generation of a prepared row, with the attempts made so far. */
interface Task {
  readonly prepared: PreparedRow
  readonly generation: number
  readonly group: GroupSlot
  attempt: number
  errors: Array<Scheduler.TrajectoryError> | undefined
}

/** What the watchdog found past a limit, and which trajectory (machine or scoring) it was about. */
interface Expired {
  readonly error: Scheduler.Timeout
  readonly token: object | undefined
  readonly at: number
}

/**
 * A trajectory in flight on one fiber, as the watchdog sees it. A fiber that takes over a stopped
 * one's task gets a new flight (with the task's permit).
 */
class Flight {
  fiber: Fiber.Fiber<void> | undefined = undefined
  /** The attempt's state machine, from its start until its env is closed. */
  machine: Machine | undefined = undefined
  scope: Scope.Closeable | undefined = undefined
  /** Reward functions running over this result since `started`. */
  scoring: { readonly started: number; readonly result: Trajectory.TrajectoryResult } | undefined = undefined
  expired: Expired | undefined = undefined
  /** Its permit was handed back or over: at most once. */
  done = false
  /** Given up (stuck where it cannot be interrupted): whatever its fiber does later is ignored. */
  abandoned = false
  /**
   * It had ended and was closing its env when a graceful stop came (so it was not interrupted): its
   * record still completes its group. One that is closing because the stop cut it is in no group.
   */
  closingAtStop = false

  constructor(readonly task: Task) {}
}

const millis = (input: Duration.Input | undefined): number | undefined =>
  input === undefined ? undefined : Duration.toMillis(input)

const withTimeout = (result: Trajectory.TrajectoryResult, error: Scheduler.Timeout): Trajectory.TrajectoryResult =>
  result.error !== undefined ? result : { ...result, endReason: "error", error }

/** The delay before attempt `attempt` (2, 3, ...): 100 ms doubling, at most 5 s. */
const backoff = (attempt: number): Duration.Duration => Duration.millis(Math.min(100 * 2 ** (attempt - 2), 5000))

/** Asks `fiber` to stop, without waiting for it. */
const interruptFork = (fiber: Fiber.Fiber<unknown, unknown>): Effect.Effect<void> =>
  Effect.asVoid(Effect.forkDetach(Fiber.interrupt(fiber)))

class Run<E> {
  private readonly flights = new Set<Flight>()
  private stopping = false
  private graceful = false
  private draining = false
  private failure: Cause.Cause<E> | undefined = undefined
  private producer: Fiber.Fiber<void> | undefined = undefined
  /** When the run was stopped (the clock's milliseconds), if it was: one close timeout bounds a whole stop. */
  stoppedAt: number | undefined = undefined
  private readonly limits: Trajectory.TimeoutLimits
  /** How long a stopped trajectory may take to end before it is given up (the close timeout). */
  readonly grace: number | undefined
  private readonly options: Trajectory.Options
  private readonly retries: number
  private readonly now: () => number

  constructor(
    private readonly config: Config,
    private readonly inference: InferenceService,
    clock: Clock.Clock,
    /** The parent of every trajectory's scope: closing it closes what a stuck trajectory left open. */
    private readonly parent: Scope.Scope,
    private readonly fibers: FiberSet.FiberSet<void>,
    private readonly permits: Semaphore.Semaphore,
    /** Groups that may be started before the consumer pulls (released as it pulls them). */
    readonly room: Semaphore.Semaphore,
    /** Done when no trajectory will be started any more (the rows are read, or the run stopped). */
    private readonly produced: Deferred.Deferred<void>,
    private readonly queue: Queue.Queue<Out, E | Cause.Done>,
    private readonly sink: EventSink<E | Cause.Done> | undefined
  ) {
    const t = config.timeouts ?? {}
    this.limits = { reset: millis(t.reset), step: millis(t.step), close: millis(t.close), trajectory: millis(t.trajectory) }
    this.grace = this.limits.close
    this.options = {
      scheduler: config.scheduler.instance,
      sampling: config.sampling,
      chatTemplateKwargs: config.chatTemplateKwargs
    }
    this.retries = config.retries ?? 0
    this.now = millisOf(clock)
  }

  /** The run's failure, if a source of rows failed or something died (raised after the last group). */
  get failed(): Cause.Cause<E> | undefined {
    return this.failure
  }

  /** Every permit back: no trajectory in flight. */
  private get idle(): Effect.Effect<void> {
    return this.permits.withPermits(this.config.concurrency)(Effect.void)
  }

  // ---- the producer -------------------------------------------------------------------------

  /** Forks the producer, the end, and the watchdog (when there are limits) into `scope`. */
  start(rows: Rows<PreparedRow, E>, scope: Scope.Scope): Effect.Effect<void> {
    const read: Effect.Effect<void, E> = Stream.isStream(rows)
      ? Stream.runForEachWhile(rows, (row) => this.startRow(row))
      : this.readIterable(rows[Symbol.iterator]())
    const produce = Effect.ensuring(
      Effect.catchCause(read, (cause) =>
        Effect.sync(() => {
          if (!Cause.hasInterruptsOnly(cause)) this.fail(cause)
        })),
      Deferred.done(this.produced, Exit.void)
    )
    // The end: after the rows are read (or the run stopped) and every trajectory is done, and after
    // the groups they offered; the queue then ends, or fails with the run's failure.
    const end = Effect.andThen(
      Effect.andThen(Deferred.await(this.produced), this.idle),
      Effect.suspend(() => {
        const failure = this.failure
        const close = failure === undefined ? Queue.end(this.queue) : Queue.failCause(this.queue, failure)
        return Effect.andThen(this.sink?.flush() ?? Effect.void, close)
      })
    )
    const limits = Object.values(this.limits).filter((x): x is number => x !== undefined)
    const watchdog = limits.length === 0
      ? Effect.void
      : Effect.asVoid(Effect.forkIn(this.watch(Math.min(1000, Math.max(5, Math.min(...limits) / 10))), scope))
    return Effect.all([
      Effect.map(Effect.forkIn(produce, scope), (fiber) => {
        this.producer = fiber
      }),
      Effect.forkIn(end, scope),
      watchdog
    ], { discard: true })
  }

  private readIterable(iterator: Iterator<Result.Result<PreparedRow, RowError>>): Effect.Effect<void> {
    const loop: Effect.Effect<void> = Effect.suspend(() => {
      // (what an iterable of rows throws is a defect: it fails the run after what is in flight)
      const step = iterator.next()
      if (step.done === true) return Effect.void
      return Effect.flatMap(this.startRow(step.value), (more) => (more ? loop : Effect.void))
    })
    return loop
  }

  /** Starts a row's group (or emits its failure); `false` when no more rows should start. */
  private startRow(prepared: Result.Result<PreparedRow, RowError>): Effect.Effect<boolean> {
    if (this.stopping || this.draining) return Effect.succeed(false)
    if (Result.isFailure(prepared)) {
      const failure: Item = { _tag: "RowFailure", error: prepared.failure }
      return Effect.as(Effect.uninterruptible(Queue.offer(this.queue, failure)), true)
    }
    const n = this.config.numGenerations
    return Effect.andThen(
      this.room.take(1),
      Effect.suspend(() => {
        const group: GroupSlot = { row: prepared.success.row, records: new Array(n).fill(undefined), remaining: n }
        let generation = 0
        const next: Effect.Effect<boolean> = Effect.suspend(() => {
          if (this.stopping || this.draining) return Effect.succeed(false)
          if (generation >= n) return Effect.succeed(true)
          const task: Task = { prepared: prepared.success, generation: generation++, group, attempt: 1, errors: undefined }
          return Effect.andThen(this.startTrajectory(task), next)
        })
        return next
      })
    )
  }

  /**
   * Takes a permit and starts the task's trajectory with it, or gives it back when the run stopped
   * in the meantime: never one without the other, whatever interrupts.
   */
  private startTrajectory(task: Task): Effect.Effect<void> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.andThen(
        restore(this.permits.take(1)),
        Effect.suspend(() => {
          if (this.stopping || this.draining) return Effect.asVoid(this.permits.release(1))
          const flight = new Flight(task)
          return this.launch(flight, this.attempt(flight))
        })
      )
    )
  }

  /** Runs `body` for `flight` on a fiber of the set; whatever ends it is handled by {@link exited}. */
  private launch(flight: Flight, body: Effect.Effect<void>): Effect.Effect<void> {
    this.flights.add(flight)
    const fiber = FiberSet.run(this.fibers, Effect.onExit(Effect.interruptible(body), (exit) => this.exited(flight, exit)))
    return Effect.map(fiber, (fiber) => {
      flight.fiber = fiber
    })
  }

  // ---- a trajectory -------------------------------------------------------------------------

  /** Runs one attempt of the flight's task. */
  private attempt(flight: Flight): Effect.Effect<void> {
    const task = flight.task
    const req = request(this.config, task.prepared, task.generation)
    return Effect.flatMap(Scope.fork(this.parent, "sequential"), (scope) => {
      const listener = this.sink?.listener(req, task.attempt)
      const machine = new Machine(req, this.options.scheduler, this.inference, this.options, scope, listener, this.now)
      flight.machine = machine
      flight.scope = scope
      return Effect.flatMap(runMachine(machine), (end) =>
        Effect.flatMap(closeMachine(machine, scope, end.error), (result) => {
          if (flight.machine === machine) flight.machine = flight.scope = undefined
          return this.settle(flight, result)
        }))
    })
  }

  /** A finished attempt: run again when its error is transient and attempts are left; else scored. */
  private settle(flight: Flight, result: Trajectory.TrajectoryResult): Effect.Effect<void> {
    // A fiber given up by the watchdog that got going again: its task was finished by another.
    if (flight.abandoned) return Effect.interrupt
    const task = flight.task
    const error = result.error
    if (error !== undefined && task.attempt <= this.retries && Scheduler.isTransient(error)) {
      // A run that stops starts no new attempt: the group stays incomplete (a resume runs it again).
      if (this.stopping) return Effect.interrupt
      ;(task.errors ??= []).push(error)
      task.attempt++
      return Effect.andThen(Effect.sleep(backoff(task.attempt)), Effect.suspend(() => this.attempt(flight)))
    }
    const row = task.prepared.row
    if (!needsRewardFunctions(this.config, result)) return this.complete(flight, scoreSync(this.config, row, result))
    flight.scoring = { started: this.now(), result }
    return Effect.flatMap(scoreTrajectory(this.config, row, result), (record) => {
      flight.scoring = undefined
      return this.complete(flight, record)
    })
  }

  /**
   * A trajectory's final record into its group. Synchronous (so atomic) but for the group's offer:
   * the last record of a group is put and the group offered without a chance of interruption in
   * between, so a complete group is never lost to a stop.
   */
  private complete(flight: Flight, record: TrajectoryRecord): Effect.Effect<void> {
    if (flight.abandoned) return Effect.interrupt
    if (flight.task.group.remaining === 1) return Effect.uninterruptible(Effect.suspend(() => this.put(flight.task, record)))
    return this.put(flight.task, record)
  }

  private put(task: Task, record: TrajectoryRecord): Effect.Effect<void> {
    let out = task.attempt > 1 ? { ...record, attempts: task.attempt, attemptErrors: task.errors } : record
    const problem = checkEncodable(out)
    if (problem !== undefined) out = withEncodeError(out, problem)
    const group = task.group
    group.records[task.generation] = out
    if (--group.remaining > 0) return Effect.void
    const records = withAdvantages(group.records as Array<TrajectoryRecord>)
    const offer = Queue.offer(this.queue, { _tag: "Group", row: group.row, records } satisfies Group)
    const events = this.sink?.flush()
    return events === undefined ? offer : Effect.andThen(events, offer)
  }

  /** The flight's permit goes back (once). */
  private finish(flight: Flight): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (flight.done) return Effect.void
      flight.done = true
      this.flights.delete(flight)
      return Effect.asVoid(this.permits.release(1))
    })
  }

  /** A new flight takes over `flight`'s task and its permit, and runs `body`. */
  private takeOver(flight: Flight, body: (next: Flight) => Effect.Effect<void>): Effect.Effect<void> {
    flight.done = true
    this.flights.delete(flight)
    const next = new Flight(flight.task)
    return this.launch(next, body(next))
  }

  /** Closes the scope a trajectory left open (interrupted, or given up), without a result. */
  private discard(flight: Flight): Effect.Effect<void> {
    return Effect.suspend(() => {
      const scope = flight.scope
      const machine = flight.machine
      if (scope === undefined) return Effect.void
      // the trajectory stays in flight in its close, so that a close that hangs is seen too
      if (machine !== undefined) {
        machine.phase = Phase.Closing
        machine.mark = this.now()
      }
      return Effect.ensuring(
        Effect.exit(Scope.close(scope, Exit.interrupt())),
        Effect.sync(() => {
          if (flight.scope === scope) flight.machine = flight.scope = undefined
        })
      )
    })
  }

  /** Whatever ended a flight's fiber: its permit goes back, or to a fiber that finishes its task. */
  private exited(flight: Flight, exit: Exit.Exit<void>): Effect.Effect<void> {
    return Effect.suspend(() => {
      // A stuck trajectory that stopped at last: close what it left open; its task was taken over.
      if (flight.abandoned) return this.discard(flight)
      if (Exit.isSuccess(exit)) return this.finish(flight)
      if (Cause.hasInterruptsOnly(exit.cause)) {
        const expired = flight.expired
        if (expired !== undefined && !this.stopping) {
          // Stopped by the watchdog: a new fiber finishes the task first.
          return this.takeOver(flight, (next) => this.recover(next, flight, expired))
        }
        return Effect.andThen(this.discard(flight), this.finish(flight))
      }
      // A defect in the engine itself (a bug): no new work, and the run fails after what is in flight.
      this.fail(exit.cause as Cause.Cause<never>)
      return Effect.andThen(this.discard(flight), this.finish(flight))
    })
  }

  /**
   * What a fiber that takes over a stopped one's task does: the timed-out trajectory's result (its
   * env closed), or, when the interruption landed elsewhere than on the trajectory that timed out,
   * the task again.
   */
  private recover(next: Flight, stopped: Flight, expired: Expired): Effect.Effect<void> {
    const scoring = stopped.scoring
    if (scoring !== undefined && scoring.result === expired.token) {
      return this.settle(next, withTimeout(scoring.result, expired.error))
    }
    const machine = stopped.machine
    const scope = stopped.scope
    if (machine !== undefined && scope !== undefined && machine === expired.token) {
      if (machine.phase === Phase.Closing) {
        // its close is what ran past its limit: it is left alone
        const result = machine.stopWith(expired.error)
        machine.ended(result)
        return this.settle(next, result)
      }
      machine.stopWith(expired.error)
      next.machine = machine
      next.scope = scope
      return Effect.flatMap(closeMachine(machine, scope, expired.error), (result) => {
        if (next.machine === machine) next.machine = next.scope = undefined
        return this.settle(next, result)
      })
    }
    return Effect.andThen(this.discard(stopped), this.attempt(next))
  }

  /** The result of a trajectory given up at `expired`, if the trajectory it was about is still this flight's. */
  private resultOf(flight: Flight, expired: Expired): Trajectory.TrajectoryResult | undefined {
    const scoring = flight.scoring
    if (scoring !== undefined && scoring.result === expired.token) return withTimeout(scoring.result, expired.error)
    const machine = flight.machine
    return machine !== undefined && machine === expired.token ? machine.abandonedWith(expired.error) : undefined
  }

  /** A flight that did not stop within the close timeout: given up, its task finished by a new fiber. */
  private giveUp(flight: Flight, expired: Expired): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (flight.abandoned || flight.done) return Effect.void
      flight.abandoned = true
      if (!this.stopping) {
        const result = this.resultOf(flight, expired)
        return this.takeOver(flight, (next) => (result === undefined ? this.attempt(next) : this.settle(next, result)))
      }
      // after a graceful stop, a trajectory that had ended and whose close ran past its timeout
      // still gets its record (see giveUpAll); one the stop cut gets no result at all (taking it
      // told the listener of an End: a cut trajectory's End in the events, when this came first)
      if (!this.graceful || !flight.closingAtStop) return this.finish(flight)
      const result = this.resultOf(flight, expired)
      if (result === undefined) return this.finish(flight)
      const record = this.put(flight.task, scoreSync(this.config, flight.task.prepared.row, result))
      return Effect.ensuring(Effect.exit(Effect.uninterruptible(record)), this.finish(flight))
    })
  }

  // ---- stopping -----------------------------------------------------------------------------

  /** A failure from outside the engine (the run's `until` died): no new work; the stream fails with it after the last group. */
  failWith(cause: Cause.Cause<unknown>): void {
    this.fail(cause as Cause.Cause<never>)
  }

  private fail(cause: Cause.Cause<E>): void {
    this.failure = this.failure === undefined ? cause : Cause.combine(this.failure, cause)
    this.draining = true
  }

  /**
   * Stops the run: no new trajectory starts; those in flight are interrupted. A graceful stop (the
   * run's `until`) leaves the trajectories that have ended and are closing their envs to finish
   * (their close cannot be interrupted and is waited for anyway): their records still complete
   * their groups. A trajectory that does not stop within the close timeout is given up.
   */
  stop(graceful = false): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.stopping) return Effect.void
      this.stopping = true
      this.graceful = graceful
      this.stoppedAt = this.now()
      const fibers: Array<Fiber.Fiber<void>> = []
      if (this.producer !== undefined) fibers.push(this.producer)
      for (const flight of this.flights) {
        if (graceful && flight.machine?.phase === Phase.Closing) {
          flight.closingAtStop = true
          continue
        }
        if (flight.fiber !== undefined) fibers.push(flight.fiber)
      }
      const interrupt = Effect.andThen(
        Deferred.done(this.produced, Exit.void),
        Effect.forEach(fibers, interruptFork, { discard: true })
      )
      const grace = this.grace
      if (grace === undefined) return interrupt
      const giveUpAll = Effect.uninterruptible(Effect.suspend(() => this.giveUpAll()))
      return Effect.andThen(interrupt, Effect.asVoid(Effect.forkDetach(Effect.race(this.idle, Effect.delay(giveUpAll, grace)))))
    })
  }

  /**
   * After a stop: trajectories still running past the close timeout are given up. After a graceful
   * one, those that had ended and were closing their envs get their records first, with the
   * close's `Timeout` (as the watchdog gives them in a run that goes on), so their groups are still
   * emitted.
   */
  private giveUpAll(): Effect.Effect<void> {
    const records: Array<Effect.Effect<void>> = []
    const close = this.limits.close
    let released = 0
    for (const flight of this.flights) {
      const machine = flight.machine
      if (this.graceful && close !== undefined && !flight.abandoned && flight.closingAtStop && machine?.phase === Phase.Closing) {
        const result = machine.abandonedWith(new Scheduler.Timeout({ phase: "close", limit: "close", seconds: close / 1000 }))
        records.push(this.put(flight.task, scoreSync(this.config, flight.task.prepared.row, result)))
      }
      flight.abandoned = true
      if (!flight.done) {
        flight.done = true
        released++
      }
    }
    this.flights.clear()
    const release = Effect.asVoid(this.permits.release(released))
    return records.length === 0 ? release : Effect.ensuring(Effect.exit(Effect.all(records, { discard: true })), release)
  }

  /**
   * The stream's consumer is gone: shuts the queue down (a trajectory offering a group to it stops
   * waiting), stops the run, and waits (within the close timeout, when there is one) for its
   * trajectories, then for the rows' read under way, so that the rows stream's own finalizers run
   * after that read, not under it.
   */
  shutdown(): Effect.Effect<void> {
    const grace = this.grace
    const wait = grace === undefined ? this.idle : waitAtMost(this.idle, grace + 50)
    const read = Effect.suspend(() => {
      const producer = this.producer
      if (producer === undefined) return Effect.void
      const stop = Fiber.interrupt(producer)
      return grace === undefined ? Effect.asVoid(stop) : waitAtMost(stop, grace)
    })
    return Effect.andThen(Effect.andThen(Effect.andThen(Queue.shutdown(this.queue), this.stop()), wait), read)
  }

  // ---- the watchdog -------------------------------------------------------------------------

  /** Every `period` ms: interrupts trajectories past a limit, gives up those that did not stop. */
  private watch(period: number): Effect.Effect<void> {
    const check = Effect.suspend(() => {
      const now = this.now()
      const actions: Array<Effect.Effect<void>> = []
      for (const flight of this.flights) {
        const fiber = flight.fiber
        if (fiber === undefined || flight.abandoned) continue
        const expired = flight.expired
        if (expired === undefined) {
          const scoring = flight.scoring
          const timeout = scoring !== undefined ? this.scoringOverdue(scoring.started, now) : flight.machine?.overdue(now, this.limits)
          if (timeout === undefined) continue
          const found: Expired = { error: timeout, token: scoring !== undefined ? scoring.result : flight.machine, at: now }
          flight.expired = found
          actions.push(interruptFork(fiber))
          // A close cannot be interrupted: past its timeout, the trajectory is given up at once.
          if (timeout.phase === "close") actions.push(this.giveUp(flight, found))
        } else if (this.grace !== undefined && now - expired.at > this.grace) {
          actions.push(this.giveUp(flight, expired))
        }
      }
      return actions.length === 0 ? Effect.void : Effect.all(actions, { discard: true })
    })
    return Effect.forever(Effect.andThen(Effect.sleep(Duration.millis(period)), check))
  }

  private scoringOverdue(started: number, now: number): Scheduler.Timeout | undefined {
    const limit = this.limits.step
    return limit !== undefined && now - started > limit
      ? new Scheduler.Timeout({ phase: "reward", limit: "step", seconds: limit / 1000 })
      : undefined
  }

  /** The time left of the close timeout since the run stopped (all of it before a stop). */
  closeTimeLeft(): number | undefined {
    const close = this.limits.close
    if (close === undefined) return undefined
    const stoppedAt = this.stoppedAt
    return stoppedAt === undefined ? close : Math.max(0, close - (this.now() - stoppedAt))
  }
}

/**
 * The run of `rows`, as one stream of items (and of turn events, `withEvents`): see
 * `Rollout.stream`.
 */
export const runStream = <E>(
  config: Config,
  rows: Rows<PreparedRow, E>,
  options: StreamOptions | undefined,
  withEvents: boolean
): Stream.Stream<Event, E, Inference> =>
  Stream.unwrap(
    Effect.gen(function*() {
      const inference = yield* Inference
      const clock = yield* Effect.clockWith(Effect.succeed)
      const bufferSize = config.bufferSize ?? defaultBufferSize(config)
      const queue = yield* Effect.acquireRelease(
        Queue.bounded<Out, E | Cause.Done>(Math.max(64, Math.min(bufferSize, 100_000))),
        Queue.shutdown
      )
      // Closes a scope of the run within the close timeout left (when there is one), all that is
      // in it at once: the trajectories' scopes (what stuck trajectories left open), the fibers.
      // One close timeout for the whole stop: what the stop already waited of it is not given again.
      const closeWithin = (scope: Scope.Closeable, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
        const close = Scope.close(scope, exit)
        const left = run.closeTimeLeft()
        if (left === undefined) return close
        return Effect.flatMap(Effect.forkDetach(close), (fiber) => waitAtMost(Fiber.await(fiber), left))
      }
      const trajectories = yield* Effect.acquireRelease(Scope.make("parallel"), closeWithin)
      const fiberScope = yield* Effect.acquireRelease(Scope.make(), closeWithin)
      const fibers = yield* Scope.provide(FiberSet.make<void>(), fiberScope)
      const permits = yield* Semaphore.make(config.concurrency)
      const room = yield* Semaphore.make(bufferSize)
      const produced = yield* Deferred.make<void>()
      const sink = withEvents ? new EventSink(queue) : undefined
      const run: Run<E> = new Run<E>(config, inference, clock, trajectories, fibers, permits, room, produced, queue, sink)
      yield* Effect.addFinalizer(() => run.shutdown())
      yield* run.start(rows, fiberScope)
      if (options?.until !== undefined) {
        // An `until` that dies stops the run as well, and the stream fails with its defect after the
        // last group.
        const until = Effect.onExit(options.until, (exit) => {
          if (Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)) run.failWith(exit.cause)
          return Exit.isSuccess(exit) || !Cause.hasInterruptsOnly(exit.cause) ? run.stop(Exit.isSuccess(exit)) : Effect.void
        })
        yield* Effect.forkScoped(until)
      }
      // With a bufferSize given, one element per pull, so that a group counts as pulled only when
      // the consumer asks for it (the exact bound of `bufferSize`). With the default (a large
      // buffer), all that is in the queue at each pull: measured back to back on workload 1 (c=64),
      // one element per pull ran 0.65-0.97x as fast. Events come in batches, each one array.
      const items: Stream.Stream<Out, E> = config.bufferSize !== undefined
        ? Stream.fromEffectRepeat(Queue.take(queue))
        : Stream.fromQueue(queue)
      return Stream.mapArrayEffect(items, (outs): Effect.Effect<Arr.NonEmptyReadonlyArray<Event>> => {
        let groups = 0
        let batches = false
        for (const out of outs) {
          if (Array.isArray(out)) batches = true
          else if ((out as Item)._tag === "Group") groups++
        }
        const events = batches ? unbatch(outs) : outs as Arr.NonEmptyReadonlyArray<Event>
        return groups === 0 ? Effect.succeed(events) : Effect.as(run.room.release(groups), events)
      })
    })
  )

/** The items and events of a pull, with every batch of events flattened (batches are never empty). */
const unbatch = (outs: Arr.NonEmptyReadonlyArray<Out>): Arr.NonEmptyReadonlyArray<Event> => {
  const events: Array<Event> = []
  for (const out of outs) {
    if (Array.isArray(out)) {
      for (const event of out as ReadonlyArray<Trajectory.TurnEvent>) events.push(event)
    } else events.push(out as Item)
  }
  return events as unknown as Arr.NonEmptyReadonlyArray<Event>
}
