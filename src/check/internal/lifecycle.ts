/**
 * One env from creation to close, instrumented for the checker: each call forked, timed and
 * supervised; the finalizers it registers counted; what it leaves running after close found.
 */
import {
  Cause,
  Duration,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  FastCheck,
  Fiber,
  FiberId,
  FiberRef,
  HashSet,
  Logger,
  LogLevel,
  Option,
  Scope,
  Supervisor
} from "effect"
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
  readonly replies: FastCheck.Arbitrary<string> | ReadonlyArray<string>
  readonly resources: (() => ReadonlyArray<string>) | undefined
}


export type Outcome<A> =
  | { readonly _tag: "Ok"; readonly value: A }
  | { readonly _tag: "Failed"; readonly message: string; readonly error: unknown }
  | { readonly _tag: "Died"; readonly message: string }
  | { readonly _tag: "TimedOut"; readonly interrupted: boolean }

export const fromExit = <A, E>(exit: Exit.Exit<A, E>): Outcome<A> => {
  if (Exit.isSuccess(exit)) return { _tag: "Ok", value: exit.value }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { _tag: "Failed", message: describe(failure.value), error: failure.value }
  if (Cause.isInterruptedOnly(exit.cause)) return { _tag: "Died", message: "it interrupted itself" }
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
  readonly prepared: Either.Either<Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>, Env.EnvConfigError>
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

/**
 * Lets `wrap` see (and wrap) every finalizer registered in `scope`, a real scope from `Scope.make`.
 *
 * Effect has no public way to observe this: every way it registers a finalizer
 * (`Effect.addFinalizer`, `Effect.acquireRelease`, `Scope.addFinalizer(Exit)`) ends in the scope's
 * `addFinalizer` method, which its published typings mark internal. That method (and `fork`, so that
 * the child scopes an env makes are observed too) is wrapped, on this one instance; no state of the scope is read or copied, so Effect's runtime, which reads a
 * scope's state directly (`forkScoped` registers its fiber there), sees the real scope. This is the
 * checker's only reliance on an Effect internal (effect is pinned exactly); the canary test
 * "finalizers registered every public way are observed" (`test/check/EnvCheck.test.ts`) fails if an
 * upgrade changes that path.
 */
export const observeFinalizers = (
  scope: Scope.CloseableScope,
  wrap: (finalizer: Scope.Scope.Finalizer) => Scope.Scope.Finalizer
): void => {
  const internal = scope as unknown as {
    readonly addFinalizer: (finalizer: Scope.Scope.Finalizer) => Effect.Effect<void>
    readonly fork: (strategy: ExecutionStrategy.ExecutionStrategy) => Effect.Effect<Scope.CloseableScope>
  }
  const register = internal.addFinalizer.bind(scope)
  Object.defineProperty(scope, "addFinalizer", {
    value: (finalizer: Scope.Scope.Finalizer) => Effect.suspend(() => register(wrap(finalizer)))
  })
  // A child scope (`Scope.fork`, as `Layer.build` in the env's scope makes) is closed by the parent
  // through its state, not through `addFinalizer`: the finalizers added to the child are observed
  // on the child itself.
  const fork = internal.fork.bind(scope)
  Object.defineProperty(scope, "fork", {
    value: (strategy: ExecutionStrategy.ExecutionStrategy) =>
      Effect.tap(fork(strategy), (child) => Effect.sync(() => observeFinalizers(child, wrap)))
  })
}

/**
 * One env from creation to close, each call forked, timed and supervised. The env gets a real scope
 * whose finalizers are counted ({@link observeFinalizers}); a supervisor records the fibers the env
 * starts, so that the ones still running after close are found (and stopped).
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
  private scopeClosed = false

  private constructor(
    readonly context: Context,
    readonly scenario: Scenario,
    private readonly scope: Scope.CloseableScope,
    private readonly supervisor: Supervisor.Supervisor<Array<Fiber.RuntimeFiber<unknown, unknown>>>,
    private readonly resourcesBefore: ReadonlyArray<string> | undefined
  ) {
    this.trackFinalizers(scope)
  }

  static make(context: Context, scenario: Scenario, probeResources: boolean): Effect.Effect<Lifecycle> {
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      const supervisor = yield* Supervisor.track
      const resources = probeResources ? sampleResources(context.settings) : undefined
      return new Lifecycle(context, scenario, scope, supervisor, resources)
    })
  }

  /** Counts each finalizer the env registers, runs of it, and ones registered after close. */
  private trackFinalizers(scope: Scope.CloseableScope): void {
    observeFinalizers(scope, (finalizer) => {
      const record: FinalizerRecord = { runs: 0 }
      this.finalizers.push(record)
      if (this.scopeClosed) this.lateFinalizers++
      return (exit) =>
        Effect.suspend(() => {
          record.runs++
          return finalizer(exit)
        })
    })
  }

  /** Runs one call into the env in its own fiber; a call that outlives the timeout is interrupted. */
  private timed<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<Outcome<A>> {
    const timeout = this.context.settings.timeout
    return Effect.gen(this, function*() {
      const fiber = yield* Effect.fork(Effect.supervised(effect, this.supervisor))
      const exit = yield* awaitWithin(Fiber.await(fiber), timeout)
      if (Option.isSome(exit)) return fromExit(exit.value)
      yield* Fiber.interruptAsFork(fiber, FiberId.none)
      const stopped = yield* awaitWithin(Fiber.await(fiber), timeout)
      return { _tag: "TimedOut", interrupted: Option.isSome(stopped) } as const
    })
  }

  create(): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const prepared = this.scenario.prepared
      if (Either.isLeft(prepared)) {
        this.created = { _tag: "Failed", message: `env_config rejected: ${prepared.left.message}`, error: prepared.left }
      } else {
        this.created = yield* this.timed(Scope.extend(prepared.right, this.scope))
      }
      if (this.created._tag === "Ok") this.env = this.created.value
      else this.stop(this.created)
    })
  }

  resetEnv(): Effect.Effect<void> {
    return Effect.gen(this, function*() {
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
    return Effect.gen(this, function*() {
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
    return Effect.gen(this, function*() {
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
      : Exit.interrupt(FiberId.none)
  }

  /**
   * Closes the env's scope (with the exit a trajectory would close it with, or an interruption),
   * then looks for what outlived it: fibers still running, handles still open. Leaked fibers are
   * interrupted so that the check itself leaves nothing behind.
   */
  close(exit?: Exit.Exit<unknown, unknown>): Effect.Effect<CloseResult> {
    return Effect.gen(this, function*() {
      const closeLogs: Array<string> = []
      const capture = Logger.make(({ logLevel, message }) => {
        if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) {
          closeLogs.push(Array.isArray(message) ? message.map((m) => describe(m)).join(" ") : describe(message))
        }
      })
      const closing = Effect.locally(
        Scope.close(this.scope, exit ?? this.lastError ?? Exit.void),
        FiberRef.currentLoggers,
        HashSet.make(capture)
      )
      const outcome = yield* this.timed(closing)
      this.scopeClosed = true
      let fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>> = []
      let resources: ReadonlyArray<string> = []
      // Only the first close failure of a config is reported: later ones need no waiting to confirm.
      const rounds = this.context.collector.hasFailure("close", this.scenario.index) ? 0 : SETTLE_ROUNDS
      for (let round = 0;; round++) {
        fibers = yield* this.supervisor.value
        resources = this.resourcesBefore === undefined
          ? []
          : extraResources(this.resourcesBefore, sampleResources(this.context.settings) ?? this.resourcesBefore)
        if ((fibers.length === 0 && resources.length === 0) || round >= rounds) break
        // Give asynchronous releases (a socket's close callback, an interrupted fiber) time to land.
        yield* Effect.sleep(SETTLE_INTERVAL)
      }
      let fibersStopped = true
      if (fibers.length > 0) {
        for (const fiber of fibers) yield* Fiber.interruptAsFork(fiber, FiberId.none)
        const stopped = yield* awaitWithin(Fiber.awaitAll(fibers), this.context.settings.timeout)
        fibersStopped = Option.isSome(stopped)
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
        fibers: fibers.length,
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
    const timer = yield* Effect.fork(Effect.sleep(duration))
    const result = yield* Effect.raceFirst(Effect.map(waited, Option.some), Effect.as(Fiber.await(timer), Option.none()))
    yield* Fiber.interrupt(timer)
    return result
  })

const sampleResources = (settings: Settings): ReadonlyArray<string> | undefined => {
  if (settings.resources === undefined) return undefined
  try {
    return settings.resources()
  } catch {
    return undefined
  }
}
