/**
 * One env from creation to close, instrumented for the checker: each call forked, timed, and its
 * fibers counted; the finalizers it registers counted; what it leaves running after close found.
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Logger, LogLevel, Metric, Option, References, Result, Scope } from "effect"
import type { Arbitrary } from "effect"
import type * as Env from "../../Env.js"
import { canonical, isRecord } from "../../internal/inspect.js"
import { describe } from "../../internal/lift.js"
import type * as Message from "../../Message.js"
import { afterStep, opening, withReply } from "../../Scheduler.js"
import type { Collector } from "./inspection.js"
import { cut, fieldsSnapshot, resetProblems, stepProblems } from "./inspection.js"

export interface Settings {
  readonly configs: ReadonlyArray<Env.EnvConfig>
  readonly runs: number
  readonly maxSteps: number
  readonly timeout: Duration.Duration
  readonly seed: number
  readonly replies: Arbitrary.Arbitrary<string> | ReadonlyArray<string>
  readonly resources: (() => ReadonlyArray<string>) | undefined
}


export type Outcome<A> =
  | { readonly _tag: "Ok"; readonly value: A }
  | { readonly _tag: "Failed"; readonly message: string; readonly error: unknown }
  | { readonly _tag: "Died"; readonly message: string }
  | { readonly _tag: "TimedOut"; readonly interrupted: boolean }

export const fromExit = <A, E>(exit: Exit.Exit<A, E>): Outcome<A> => {
  if (Exit.isSuccess(exit)) return { _tag: "Ok", value: exit.value }
  const failure = Cause.findErrorOption(exit.cause)
  if (Option.isSome(failure)) return { _tag: "Failed", message: describe(failure.value), error: failure.value }
  if (Cause.hasInterruptsOnly(exit.cause)) return { _tag: "Died", message: "it interrupted itself" }
  return { _tag: "Died", message: describe(Cause.squash(exit.cause)) }
}

export const outcomeText = (outcome: Outcome<unknown> | undefined, snapshot: string | undefined): string => {
  if (outcome === undefined) return "not reached"
  switch (outcome._tag) {
    case "Ok":
      return snapshot ?? "ok"
    case "Failed":
      return `failed: ${outcome.message}`
    case "Died":
      return `crashed: ${outcome.message}`
    case "TimedOut":
      return "timed out"
  }
}

export interface Scenario {
  readonly index: number
  readonly config: Env.EnvConfig
  readonly replies: ReadonlyArray<string>
  readonly request: Env.ResetRequest
  readonly prepared: Result.Result<Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>, Env.EnvConfigError>
}

export interface StepRecord {
  readonly reply: string
  readonly outcome: Outcome<unknown>
  readonly snapshot: Readonly<Record<string, string>> | undefined
  readonly text: string
  readonly mutatedMessages: boolean
}

export type EpisodeEnd = "running" | "done" | "max_steps" | "failed" | "malformed"

export interface CloseResult {
  readonly outcome: Outcome<void>
  readonly closeLogs: ReadonlyArray<string>
  readonly finalizers: number
  readonly finalizersRun: number
  readonly lateFinalizers: number
  readonly fibers: number
  readonly fibersStopped: boolean
  readonly resources: ReadonlyArray<string>
}

interface FinalizerRecord {
  runs: number
}

const SETTLE_ROUNDS = 10
const SETTLE_INTERVAL = Duration.millis(10)

const countOf = (names: ReadonlyArray<string>): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1)
  return counts
}

/** What is in `after` and not in `before`, as `Timeout ×2`. */
const extraResources = (before: ReadonlyArray<string>, after: ReadonlyArray<string>): Array<string> => {
  const was = countOf(before)
  const out: Array<string> = []
  for (const [name, n] of countOf(after)) {
    const extra = n - (was.get(name) ?? 0)
    if (extra > 0) out.push(extra === 1 ? name : `${name} ×${extra}`)
  }
  return out.sort()
}

export interface Context {
  readonly settings: Settings
  readonly definition: Env.Definition
  readonly collector: Collector
}

/** A finalizer as a scope holds it. */
export type Finalizer = (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<unknown>

/**
 * What {@link observeFinalizers} reports: each finalizer registered while the scope is open (the
 * finalizer returned is registered in its place), and each one registered after it closed (which
 * runs at once, with the scope's exit).
 */
export interface FinalizerObserver {
  readonly registered: (finalizer: Finalizer) => Finalizer
  readonly late: () => void
}

/** A scope (one of the keys a scope's finalizers are held under, for its child scopes). */
const isScope = (u: unknown): u is Scope.Scope =>
  typeof u === "object" && u !== null && "state" in u && "strategy" in u && "parent" in u

/**
 * Lets `observer` see every finalizer registered in `scope` (a real scope from `Scope.make`) and in
 * the child scopes forked from it (`Scope.fork`, as `Layer.build` in the env's scope does).
 *
 * Effect has no public way to observe this. A scope's `state` is public (its `Scope.State`: the
 * finalizers of an open scope, the exit of a closed one), and every way Effect registers a
 * finalizer (`Effect.addFinalizer`, `Effect.acquireRelease`, `Scope.addFinalizer(Exit)`,
 * `Scope.fork`) writes it there; so `state` is made an accessor on this one instance, and the open
 * states it is given are watched as they are written (their `finalizer`, and their `finalizers` map).
 * A closed scope runs a finalizer registered late at once, with the exit it reads from its closed
 * state: that read is the late registration. Finalizers keyed by a fiber (`Effect.forkScoped`'s
 * interruption of its fiber) are not counted; a child scope's are counted on the child. This is
 * the checker's only reliance on how Effect uses that state (effect is pinned exactly); the canary
 * tests "finalizers registered every public way are observed" (`test/check/EnvCheck.test.ts`) fail
 * if an upgrade changes it.
 */
export const observeFinalizers = (scope: Scope.Scope, observer: FinalizerObserver): void => {
  const entry = (key: unknown, finalizer: Finalizer): Finalizer => {
    if (isScope(key)) {
      observeFinalizers(key, observer)
      return finalizer
    }
    return Fiber.isFiber(key) ? finalizer : observer.registered(finalizer)
  }
  class ObservedMap extends Map<{}, Finalizer> {
    override set(key: {}, finalizer: Finalizer): this {
      return super.set(key, entry(key, finalizer))
    }
  }
  const observed = (state: Scope.Scope["state"]): Scope.Scope["state"] => {
    switch (state._tag) {
      case "Empty":
        return state
      case "Closed": {
        const exit = state.exit
        return {
          _tag: "Closed",
          get exit() {
            observer.late()
            return exit
          }
        }
      }
      case "Open": {
        // (the map of several finalizers starts with the first one, observed already)
        const adopt = (map: Map<{}, Finalizer>) => {
          const own = new ObservedMap()
          for (const [key, finalizer] of map) Map.prototype.set.call(own, key, finalizer)
          return own
        }
        if (state.finalizer !== undefined) state.finalizer = entry(state.finalizerKey, state.finalizer)
        if (state.finalizers !== undefined) state.finalizers = adopt(state.finalizers)
        return new Proxy(state, {
          set: (target, key, value) => {
            if (key === "finalizer" && value !== undefined) target.finalizer = entry(target.finalizerKey, value)
            else if (key === "finalizers" && value !== undefined) target.finalizers = adopt(value)
            else Reflect.set(target, key, value)
            return true
          }
        })
      }
    }
  }
  let current = observed(scope.state)
  Object.defineProperty(scope, "state", {
    get: () => current,
    set: (next: Scope.Scope["state"]) => {
      current = observed(next)
    },
    enumerable: true,
    configurable: true
  })
}

/**
 * The fibers an env starts in its calls: counted as they start and end (Effect's fiber runtime
 * metrics hook, provided to each call and inherited by every fiber forked in it), and the ones that
 * sleep kept (through the clock provided with it), so that those still running after close can be
 * interrupted. A forked fiber has no handle otherwise: Effect 4 has no supervisor.
 */
class FiberTracker implements Metric.FiberRuntimeMetricsService {
  private started = 0
  private ended = 0
  readonly sleeping = new Set<Fiber.Fiber<unknown, unknown>>()
  private readonly clock: Clock.Clock

  constructor(live: Clock.Clock) {
    const sleeping = this.sleeping
    this.clock = {
      currentTimeMillisUnsafe: () => live.currentTimeMillisUnsafe(),
      currentTimeMillis: live.currentTimeMillis,
      currentTimeNanosUnsafe: () => live.currentTimeNanosUnsafe(),
      currentTimeNanos: live.currentTimeNanos,
      monotonicTimeNanosUnsafe: () => live.monotonicTimeNanosUnsafe(),
      monotonicTimeNanos: live.monotonicTimeNanos,
      sleep: (duration) =>
        Effect.flatMap(Effect.fiber, (fiber) => {
          if (!sleeping.has(fiber)) {
            sleeping.add(fiber)
            fiber.addObserver(() => sleeping.delete(fiber))
          }
          return live.sleep(duration)
        })
    }
  }

  readonly recordFiberStart = (): void => {
    this.started++
  }

  readonly recordFiberEnd = (): void => {
    this.ended++
  }

  /** The fibers started in the env's calls that have not ended. */
  get running(): number {
    return this.started - this.ended
  }

  /** `effect` with its fibers tracked. */
  track<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> {
    return effect.pipe(Effect.provideService(Metric.FiberRuntimeMetrics, this), Effect.provideService(Clock.Clock, this.clock))
  }
}

/**
 * One env from creation to close, each call forked, timed and its fibers tracked. The env gets a
 * real scope whose finalizers are counted ({@link observeFinalizers}); the fibers the env starts are
 * counted, so that the ones still running after close are found (and stopped).
 */
export class Lifecycle {
  readonly steps: Array<StepRecord> = []
  readonly finalizers: Array<FinalizerRecord> = []
  created: Outcome<Env.Env> | undefined = undefined
  reset: Outcome<unknown> | undefined = undefined
  resetSnapshot: Readonly<Record<string, string>> | undefined = undefined
  resetText: string | undefined = undefined
  afterDone: { readonly reply: string; readonly outcome: Outcome<unknown> } | undefined = undefined
  end: EpisodeEnd = "running"
  closed: CloseResult | undefined = undefined
  private env: Env.Env | undefined = undefined
  private messages: Array<Message.Message> = []
  private lastError: Exit.Exit<never, unknown> | undefined = undefined
  private lateFinalizers = 0

  private constructor(
    readonly context: Context,
    readonly scenario: Scenario,
    private readonly scope: Scope.Closeable,
    private readonly fibers: FiberTracker,
    private readonly resourcesBefore: ReadonlyArray<string> | undefined
  ) {
    this.trackFinalizers(scope)
  }

  static make(context: Context, scenario: Scenario, probeResources: boolean): Effect.Effect<Lifecycle> {
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      const clock = yield* Clock.Clock
      if (probeResources) yield* outsideCallbacks
      const resources = probeResources ? sampleResources(context.settings) : undefined
      return new Lifecycle(context, scenario, scope, new FiberTracker(clock), resources)
    })
  }

  /** Counts each finalizer the env registers, runs of it, and ones registered after close. */
  private trackFinalizers(scope: Scope.Scope): void {
    observeFinalizers(scope, {
      registered: (finalizer) => {
        const record: FinalizerRecord = { runs: 0 }
        this.finalizers.push(record)
        return (exit) =>
          Effect.suspend(() => {
            record.runs++
            return finalizer(exit)
          })
      },
      late: () => {
        this.finalizers.push({ runs: 1 })
        this.lateFinalizers++
      }
    })
  }

  /**
   * Runs one call into the env in its own fiber (detached: a call that ignores its interruption
   * must not hold the check); a call that outlives the timeout is interrupted.
   */
  private timed<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<Outcome<A>> {
    const timeout = this.context.settings.timeout
    return Effect.gen({ self: this }, function*() {
      const fiber = yield* Effect.forkDetach(this.fibers.track(effect))
      const exit = yield* awaitWithin(Fiber.await(fiber), timeout)
      if (Option.isSome(exit)) return fromExit(exit.value)
      fiber.interruptUnsafe()
      const stopped = yield* awaitWithin(Fiber.await(fiber), timeout)
      return { _tag: "TimedOut", interrupted: Option.isSome(stopped) } as const
    })
  }

  create(): Effect.Effect<void> {
    return Effect.gen({ self: this }, function*() {
      const prepared = this.scenario.prepared
      if (Result.isFailure(prepared)) {
        const error = prepared.failure
        this.created = { _tag: "Failed", message: `env_config rejected: ${error.message}`, error }
      } else {
        this.created = yield* this.timed(Scope.provide(prepared.success, this.scope))
      }
      if (this.created._tag === "Ok") this.env = this.created.value
      else this.stop(this.created)
    })
  }

  resetEnv(): Effect.Effect<void> {
    return Effect.gen({ self: this }, function*() {
      const env = this.env
      if (env === undefined || this.end !== "running") return
      this.context.collector.stats.resets++
      const outcome = yield* this.timed(Effect.suspend(() => env.reset(this.scenario.request)))
      this.reset = outcome
      if (outcome._tag !== "Ok") return this.stop(outcome)
      // Taken now: a result the env mutates later must not blur the comparison of runs.
      this.resetSnapshot = fieldsSnapshot(outcome.value)
      this.resetText = canonical(outcome.value)
      const value = outcome.value
      if (resetProblems(value).reset !== undefined || !isRecord(value)) {
        this.end = "malformed"
        return
      }
      // The gym scheduler's conversation step (Scheduler.opening), so transcripts are what a run sees.
      this.messages.push(...opening({
        observation: value.observation as string,
        systemPrompt: typeof value.systemPrompt === "string" ? value.systemPrompt : undefined
      }))
    })
  }

  step(reply: string): Effect.Effect<void> {
    return Effect.gen({ self: this }, function*() {
      const env = this.env
      if (env === undefined || this.end !== "running" || this.reset?._tag !== "Ok") return
      const given = withReply(this.messages, reply)
      this.messages.push(given[given.length - 1])
      this.context.collector.stats.steps++
      const outcome = yield* this.timed(Effect.suspend(() => env.step(given)))
      const mine = this.messages
      const mutatedMessages = given.length !== mine.length ||
        given.some((m, i) => m !== mine[i] || m.content !== mine[i].content || m.role !== mine[i].role)
      const snapshot = outcome._tag === "Ok" ? fieldsSnapshot(outcome.value) : undefined
      this.steps.push({
        reply,
        outcome,
        snapshot,
        text: outcomeText(outcome, outcome._tag === "Ok" ? canonical(outcome.value) : undefined),
        mutatedMessages
      })
      if (outcome._tag !== "Ok") return this.stop(outcome)
      const value = outcome.value
      const problems = stepProblems("step", value)
      if (problems.step !== undefined || problems.done !== undefined || !isRecord(value)) {
        this.end = "malformed"
        return
      }
      if (value.done === true) {
        this.end = "done"
        return
      }
      this.messages = [...afterStep(this.messages, value.observation as string, false)]
      if (this.steps.length >= this.context.settings.maxSteps) this.end = "max_steps"
    })
  }

  /** One more step after the env said done (the gym scheduler never does this; other callers may). */
  stepAfterDone(reply: string): Effect.Effect<void> {
    return Effect.gen({ self: this }, function*() {
      const env = this.env
      if (env === undefined || this.end !== "done") return
      const given = withReply(this.messages, reply)
      this.context.collector.stats.steps++
      const outcome = yield* this.timed(Effect.suspend(() => env.step(given)))
      this.afterDone = { reply, outcome }
    })
  }

  private stop(outcome: Outcome<unknown>): void {
    this.end = "failed"
    this.lastError = outcome._tag === "Failed"
      ? Exit.fail(outcome.error)
      : outcome._tag === "Died"
      ? Exit.die(outcome.message)
      : Exit.interrupt()
  }

  /**
   * Closes the env's scope (with the exit a trajectory would close it with, or an interruption),
   * then looks for what outlived it: fibers still running, handles still open. Leaked fibers are
   * interrupted so that the check itself leaves nothing behind.
   */
  close(exit?: Exit.Exit<unknown, unknown>): Effect.Effect<CloseResult> {
    return Effect.gen({ self: this }, function*() {
      const closeLogs: Array<string> = []
      const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
        if (LogLevel.isGreaterThanOrEqualTo(logLevel, "Warn")) {
          closeLogs.push(Array.isArray(message) ? message.map((m) => describe(m)).join(" ") : describe(message))
        }
      })
      const closing = Effect.provideService(
        Scope.close(this.scope, exit ?? this.lastError ?? Exit.void),
        References.CurrentLoggers,
        new Set([capture])
      )
      const outcome = yield* this.timed(closing)
      let fibers = 0
      let resources: ReadonlyArray<string> = []
      // Only the first close failure of a config is reported: later ones need no waiting to confirm.
      const rounds = this.context.collector.hasFailure("close", this.scenario.index) ? 0 : SETTLE_ROUNDS
      for (let round = 0;; round++) {
        yield* outsideCallbacks
        fibers = this.fibers.running
        resources = this.resourcesBefore === undefined
          ? []
          : extraResources(this.resourcesBefore, sampleResources(this.context.settings) ?? this.resourcesBefore)
        if ((fibers === 0 && resources.length === 0) || round >= rounds) break
        // Give asynchronous releases (a socket's close callback, an interrupted fiber) time to land.
        yield* Effect.sleep(SETTLE_INTERVAL)
      }
      let fibersStopped = true
      if (fibers > 0) {
        // (only the fibers that sleep have a handle: one blocked for good cannot be interrupted)
        const leaked = [...this.fibers.sleeping]
        for (const fiber of leaked) fiber.interruptUnsafe()
        const stopped = yield* awaitWithin(Fiber.awaitAll(leaked), this.context.settings.timeout)
        fibersStopped = Option.isSome(stopped) && this.fibers.running === 0
      }
      const stats = this.context.collector.stats
      stats.finalizersRegistered += this.finalizers.length
      const finalizersRun = this.finalizers.filter((f) => f.runs > 0).length
      stats.finalizersRun += finalizersRun
      const result: CloseResult = {
        outcome,
        closeLogs,
        finalizers: this.finalizers.length,
        finalizersRun,
        lateFinalizers: this.lateFinalizers,
        fibers,
        fibersStopped,
        resources
      }
      this.closed = result
      return result
    })
  }

  /** The replies played so far (cut for the report). */
  repliesUpTo(steps: number): ReadonlyArray<string> {
    return this.steps.slice(0, steps).map((s) => cut(s.reply))
  }

  /** What the episode looked like, entry by entry, for comparing runs. */
  signature(): ReadonlyArray<{ readonly label: string; readonly text: string; readonly value: unknown }> {
    const entries: Array<{ label: string; text: string; value: unknown }> = [
      { label: "create", text: outcomeText(this.created, this.created?._tag === "Ok" ? "ok" : undefined), value: undefined }
    ]
    if (this.reset !== undefined) {
      const value = this.reset._tag === "Ok" ? this.reset.value : undefined
      entries.push({ label: "reset", text: outcomeText(this.reset, this.resetText), value })
    }
    this.steps.forEach((s, i) =>
      entries.push({ label: `step ${i + 1}`, text: s.text, value: s.outcome._tag === "Ok" ? s.outcome.value : undefined })
    )
    return entries
  }

  get timedOut(): boolean {
    return this.created?._tag === "TimedOut" || this.reset?._tag === "TimedOut" ||
      this.steps.some((s) => s.outcome._tag === "TimedOut") || this.afterDone?.outcome._tag === "TimedOut"
  }
}

/**
 * Waits for a fiber (or an effect) at most `duration`. Unlike `Effect.timeout`, which interrupts
 * its timer in the background, the timer is stopped before this returns: no timer of the check is
 * left pending to blur the next look at the process's open handles.
 */
const awaitWithin = <A>(waited: Effect.Effect<A>, duration: Duration.Duration): Effect.Effect<Option.Option<A>> =>
  Effect.gen(function*() {
    const timer = yield* Effect.forkChild(Effect.sleep(duration))
    const result = yield* Effect.raceFirst(Effect.map(waited, Option.some), Effect.as(Fiber.await(timer), Option.none()))
    yield* Fiber.interrupt(timer)
    return result
  })

/**
 * A turn of the scheduler, so that what follows runs outside the timer or I/O callback that resumed
 * this fiber (a fiber resumes inside it, and Node lists that timer as open while its callback runs).
 */
const outsideCallbacks = Effect.yieldNow

const sampleResources = (settings: Settings): ReadonlyArray<string> | undefined => {
  if (settings.resources === undefined) return undefined
  try {
    return settings.resources()
  } catch {
    return undefined
  }
}
