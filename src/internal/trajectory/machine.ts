/**
 * The trajectory's state machine and its one driver: the engine under `Trajectory.run`,
 * `Trajectory.stream` and every run's trajectories (`Rollout`). Internal.
 */
import { Cause, Effect, Exit, Option, Scope } from "effect"
import type { Clock } from "effect"
import { InferenceError, tokenState } from "../../Inference.js"
import type { ChatRequest, Completion, SamplingParams, Service as InferenceService, TokenState } from "../../Inference.js"
import type * as Message from "../../Message.js"
import type { Instance, Session, TrajectoryError, TrajectoryRequest, TurnContext, TurnResult } from "../../Scheduler.js"
import { isTrajectoryError, Timeout, UnexpectedError, withReply } from "../../Scheduler.js"
import type { End, EndReason, Listener, Options, TimeoutLimits, TrajectoryResult } from "../../Trajectory.js"
import { describe, stringify } from "../lift.js"
import { nextTurn } from "../nextTurn.js"
import { isReady } from "../ready.js"
import { mixSeed } from "../seed.js"
import { CurrentWaits, SELF_INTERRUPTED, timed, Waits } from "../waits.js"
import { Accumulator } from "./observers.js"

/**
 * The milliseconds of `clock`'s monotonic time, with the precision of its nanoseconds (timings of
 * steps that take microseconds are logged). Monotonic, not the wall clock: what is measured is
 * elapsed time (phases, timeouts), which a correction of the system's clock must not move; and it is
 * cheaper (one `hrtime` reading, against the wall clock's `hrtime`, `Date.now()` and BigInt
 * arithmetic: 48 against 122 ns a reading, measured with 2M readings of each in one process). Read at
 * every transition, inside the loop's synchronous fast path, where an Effect per reading would cost
 * a trip through the runtime: the one `unsafe` read of the engine's hot path.
 */
export const millisOf = (clock: Clock.Clock) => (): number => Number(clock.monotonicTimeNanosUnsafe()) / 1e6

/**
 * Turns answered at once (see `Machine.turns`) between two turns of the event loop (without them,
 * a run whose every answer is completed kept timers from firing for seconds: test/SyncFastPath).
 */
const SYNC_TURNS = 64

/** Turns answered at once since the last turn of the event loop, over all trajectories. */
let syncTurns = 0

/** A completion whose `text` is not a string. */
const badCompletion = (backend: string, completion: unknown): InferenceError =>
  new InferenceError({
    reason: "BadResponse",
    backend,
    detail: typeof completion !== "object" || completion === null
      ? `the completion is not an object: ${describe(completion).slice(0, 200)}`
      : `the completion's text must be a string, got ${describe((completion as { readonly text?: unknown }).text).slice(0, 200)}`
  })

/**
 * What is wrong with a completion's tool calls (a plugin backend's are not checked by a type at run
 * time, and a server may repeat an id), or `undefined`. Each needs an id, unique in the reply, and a
 * function name and arguments text.
 */
const toolCallsProblem = (toolCalls: unknown): string | undefined => {
  if (!Array.isArray(toolCalls)) {
    return `the completion's toolCalls must be a list, got ${(stringify(toolCalls) ?? String(toolCalls)).slice(0, 100)}`
  }
  const ids = new Set<string>()
  for (let i = 0; i < toolCalls.length; i++) {
    const call = toolCalls[i] as { readonly id?: unknown; readonly function?: { readonly name?: unknown; readonly arguments?: unknown } } | null
    if (typeof call?.id !== "string" || typeof call.function?.name !== "string" || typeof call.function.arguments !== "string") {
      return `toolCalls[${i}] must have a string id, function.name and function.arguments: ${describe(call).slice(0, 200)}`
    }
    if (ids.has(call.id)) return `toolCalls[${i}]: the id ${JSON.stringify(call.id)} is used twice in the reply`
    ids.add(call.id)
  }
  return undefined
}

export const toTrajectoryError = (phase: string, cause: Cause.Cause<unknown>): TrajectoryError => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure) && isTrajectoryError(failure.value)) return failure.value
  const squashed = Cause.squash(cause)
  if (isTrajectoryError(squashed)) return squashed
  return new UnexpectedError({ phase, detail: describe(squashed), cause: squashed })
}

/** Where a trajectory is: what the watchdog reads to know which limit applies. */
export const Phase = {
  Start: 0,
  Model: 1,
  Env: 2,
  Done: 3,
  MaxTurns: 4,
  Finished: 5,
  /** The trajectory ended; its scope (the env) is being closed. */
  Closing: 6
} as const

export type Phase = typeof Phase[keyof typeof Phase]

/**
 * The trajectory's state machine and its one driver, {@link Machine.runInto}: the steps chained in
 * a plain loop, each transition reported to the fold and (when there is one) a listener.
 */
export class Machine {
  phase: Phase = Phase.Start
  turn = 0
  messages: ReadonlyArray<Message.Message>
  session: Session | undefined = undefined
  /** The token sequence so far, for backends that generate from tokens (see `ChatRequest.previous`). */
  tokens: TokenState | undefined = undefined
  private readonly sampling: SamplingParams
  private readonly chatTemplateKwargs: Readonly<Record<string, unknown>> | undefined
  /** When the current phase started (what a watchdog measures phase timeouts from; one step's end is the next one's start). */
  mark = 0
  /** When the trajectory started (what the trajectory timeout is measured from). */
  startedAt = 0
  /** The fold of this trajectory's transitions. */
  readonly acc: Accumulator
  /** Waiting noted by the env's adapters and pools, taken out of the env's time (see `internal/waits`). */
  readonly waits: Waits
  /** The result, once the trajectory ended (kept while its scope closes). */
  result: TrajectoryResult | undefined = undefined

  constructor(
    readonly request: TrajectoryRequest,
    readonly scheduler: Instance,
    readonly inference: InferenceService,
    options: Options,
    readonly scope: Scope.Scope,
    /** An observer besides the fold (events), if any. */
    readonly listener: Listener | undefined,
    /** The clock's milliseconds ({@link millisOf}). */
    readonly now: () => number
  ) {
    this.messages = request.messages
    this.sampling = options.sampling ?? {}
    this.chatTemplateKwargs = options.chatTemplateKwargs
    this.acc = new Accumulator(request)
    this.waits = new Waits(now)
  }

  stamp(started: number): number {
    const t = this.now()
    this.mark = t
    return t - started
  }

  // ---- the steps ----------------------------------------------------------------------------

  /**
   * Starts the scheduler's session (creates and resets the env) in the trajectory's scope. A
   * scheduler whose `start` throws gives a defect, which fails this trajectory like any other.
   */
  startSession(): Effect.Effect<Session, TrajectoryError> {
    try {
      return timed(Scope.provide(Effect.provideService(this.scheduler.start(this.request), CurrentWaits, this.waits), this.scope), this.waits)
    } catch (defect) {
      return Effect.die(defect)
    }
  }

  callModel(): Effect.Effect<Completion, TrajectoryError> {
    const request: ChatRequest = {
      messages: this.messages,
      sampling: this.sampling,
      trajectoryId: this.request.id,
      turn: this.turn,
      seed: mixSeed(this.request.seed, this.turn),
      previous: this.tokens,
      chatTemplateKwargs: this.chatTemplateKwargs
    }
    const tools = this.session?.tools
    // (text trajectories' requests stay as they were: no tool fields at all)
    return this.inference.chat(
      tools === undefined ? request : { ...request, tools, toolChoice: this.session!.toolChoice ?? "auto" }
    )
  }

  // ---- the driver -----------------------------------------------------------------------------

  /**
   * Runs the whole trajectory, reporting each transition; its End (reported to the fold, not yet
   * to the listener, which gets it once the env is closed). Failures become an End with the typed
   * error; interruption goes through.
   */
  runInto(): Effect.Effect<End> {
    const acc = this.acc
    const listener = this.listener
    this.mark = this.startedAt = this.now()
    const started = this.mark
    return this.guard(Effect.flatMap(this.startSession(), (session) => {
      this.session = session
      this.messages = session.messages
      this.phase = Phase.Model
      this.turn = 1
      const waitMs = this.waited(this.stamp(started))
      const envMs = this.phaseMs - waitMs
      acc.reset(session.info, envMs, undefined, waitMs)
      acc.tools = session.tools
      if (listener !== undefined) listener.reset(session.info, envMs, session.messages, waitMs)
      return this.resume(this.drained())
    }))
  }

  /**
   * The turns from the model call on. While the model and the env answer at once (their Effects
   * are already-completed `Exit`s, as a scripted policy's and FrozenLake's are), the turns run here
   * in a plain loop, without a trip through the fiber runtime per step; the first answer that is
   * not ready goes on through the runtime (`Effect.flatMap`), and so does a failure. Every
   * {@link SYNC_TURNS} turns answered at once (counted over all trajectories), the fiber waits for
   * the next turn of the event loop, so that timers, I/O and signals still run and an interruption
   * still lands.
   */
  private turns(): Effect.Effect<End, TrajectoryError> {
    try {
      for (;;) {
        const modelStarted = this.mark
        const reply = this.callModel()
        if (!isReady(reply)) {
          return Effect.flatMap(reply, (completion) => this.resume(this.onReply(completion, modelStarted)))
        }
        const next = this.onReply(reply.value, modelStarted)
        if (next !== undefined) return next
        if (++syncTurns >= SYNC_TURNS) {
          syncTurns = 0
          return Effect.andThen(nextTurn, Effect.suspend(() => this.turns()))
        }
      }
    } catch (defect) {
      return Effect.die(defect)
    }
  }

  /** `next`, or the next turns when there is nothing to wait for. */
  private resume(next: Effect.Effect<End, TrajectoryError> | undefined): Effect.Effect<End, TrajectoryError> {
    return next ?? this.turns()
  }

  /**
   * The model replied: reports it and asks the env. `undefined` when the next turn can start at
   * once; else what to run (the env's answer to wait for, or the End).
   */
  private onReply(completion: Completion, modelStarted: number): Effect.Effect<End, TrajectoryError> | undefined {
    // (a policy's or a plugin backend's reply is not checked by a type at run time: `text: 5` went
    // into the conversation and the log as a number)
    if (typeof completion !== "object" || completion === null || typeof completion.text !== "string") {
      return Effect.fail(badCompletion(this.inference.name, completion))
    }
    if (completion.toolCalls !== undefined) {
      const problem = toolCallsProblem(completion.toolCalls)
      if (problem !== undefined) {
        return Effect.fail(new InferenceError({ reason: "BadResponse", backend: this.inference.name, detail: problem }))
      }
    }
    const context = this.replied(completion)
    const modelMs = this.stamp(modelStarted)
    this.acc.completion(context.turn, completion, modelMs)
    if (this.listener !== undefined) this.listener.completion(context.turn, completion, modelMs)
    const envStarted = this.mark
    const answer = this.session!.onTurnEnd(context)
    if (!isReady(answer)) {
      return Effect.flatMap(timed(answer, this.waits), (result) => this.resume(this.onAnswer(context, result, envStarted)))
    }
    return this.onAnswer(context, answer.value, envStarted)
  }

  /** The env answered: the End, or the next turn's messages (`undefined`: the next turn can start at once). */
  private onAnswer(
    context: TurnContext,
    result: TurnResult,
    envStarted: number
  ): Effect.Effect<End, TrajectoryError> | undefined {
    const session = this.session!
    const done = result.done ?? session.checkFinished(context)
    if (done || context.turn >= this.request.maxTurns) {
      this.phase = done ? Phase.Done : Phase.MaxTurns
      this.answered(context.turn, result, done, envStarted)
      return Effect.succeed(this.finish())
    }
    // A step that answers at once (the gym scheduler's appendObservation) runs without the fiber runtime.
    const stepped = session.step(context, result)
    if (isReady(stepped)) {
      this.answered(context.turn, result, false, envStarted)
      this.next(stepped.value)
      return this.drained()
    }
    return Effect.flatMap(timed(stepped, this.waits), (messages) => {
      this.answered(context.turn, result, false, envStarted)
      this.next(messages)
      return this.resume(this.drained())
    })
  }

  /** The listener's drain then the next turns, if it has one to run; `undefined` otherwise. */
  private drained(): Effect.Effect<End, TrajectoryError> | undefined {
    const drain = this.listener?.drain()
    return drain === undefined ? undefined : Effect.andThen(drain, Effect.suspend(() => this.turns()))
  }

  /** The model replied: append its message; the context of this turn's hooks. */
  private replied(completion: Completion): TurnContext {
    const messages = withReply(this.messages, completion.text, completion.toolCalls)
    this.messages = messages
    this.tokens = tokenState(completion, messages)
    this.phase = Phase.Env
    return { request: this.request, turn: this.turn, messages, completion }
  }

  /** Reports the env's answer to the turn (the Step transition). */
  private answered(turn: number, result: TurnResult, done: boolean, envStarted: number): void {
    const waitMs = this.waited(this.stamp(envStarted))
    const envMs = this.phaseMs - waitMs
    this.acc.step(turn, result, done, envMs, waitMs)
    if (this.listener !== undefined) this.listener.step(turn, result, done, envMs, waitMs)
  }

  /** The last phase's milliseconds, set by {@link waited}. */
  private phaseMs = 0

  /** Of a phase that took `ms`, the waiting noted (see `internal/waits`); `phaseMs` is `ms`. */
  private waited(ms: number): number {
    this.phaseMs = ms
    return Math.min(ms, this.waits.take())
  }

  private next(messages: ReadonlyArray<Message.Message>): void {
    this.messages = messages
    this.turn++
    this.phase = Phase.Model
  }

  end(reason: EndReason, error: TrajectoryError | undefined): End {
    // Turns the model completed: a failed model call is not a turn.
    const numTurns = this.phase === Phase.Model ? this.turn - 1 : this.turn
    this.phase = Phase.Finished
    const request = this.request
    const end: End = {
      _tag: "End",
      trajectoryId: request.id,
      row: request.row,
      generation: request.generation,
      attempt: 1,
      reason,
      numTurns,
      messages: this.messages,
      error
    }
    this.acc.end(end)
    return end
  }

  /** The End of a trajectory that finished normally. */
  finish(): End {
    return this.end(this.phase === Phase.Done ? "done" : "max_turns", undefined)
  }

  /** Where a failure happened: the phase does not advance until its step succeeds. */
  private get phaseName(): string {
    return this.phase === Phase.Start ? "start" : this.phase === Phase.Model ? "model" : "turn_end"
  }

  /**
   * The timeout this trajectory has run past at `at` (milliseconds, {@link millisOf}), if any:
   * its current phase's limit, or the whole trajectory's (which does not cover closing).
   */
  overdue(at: number, limits: TimeoutLimits): Timeout | undefined {
    let phase: Timeout["phase"]
    let limit: number | undefined
    let kind: Timeout["limit"]
    switch (this.phase) {
      case Phase.Start:
        phase = "reset"
        kind = "reset"
        limit = limits.reset
        break
      case Phase.Model:
        phase = "model"
        kind = "step"
        limit = undefined
        break
      case Phase.Env:
        phase = "step"
        kind = "step"
        limit = limits.step
        break
      case Phase.Closing:
        phase = "close"
        kind = "close"
        limit = limits.close
        break
      default:
        // between steps: nothing runs there that could hang
        return undefined
    }
    if (limit !== undefined && at - this.mark > limit) {
      return new Timeout({ phase, limit: kind, seconds: limit / 1000 })
    }
    const whole = limits.trajectory
    if (whole !== undefined && phase !== "close" && at - this.startedAt > whole) {
      return new Timeout({ phase, limit: "trajectory", seconds: whole / 1000 })
    }
    return undefined
  }

  /** The result of a trajectory stopped from outside with `error` (a timeout), from what it did so far. */
  stopWith(error: TrajectoryError): TrajectoryResult {
    if (this.result !== undefined) return withError(this.result, error)
    this.end("error", error)
    const result = this.acc.result()
    this.result = result
    return result
  }

  /**
   * Turns a failure or defect into the `End`; interruption from outside goes through. An
   * interruption by the trajectory's own fiber (an `Effect.interrupt` in a policy or a hook) is its
   * error: passed on, the run took it for its own stop and gave no record of the trajectory.
   */
  guard<A>(effect: Effect.Effect<A, TrajectoryError>): Effect.Effect<A | End> {
    return Effect.catchCause(effect, (cause) => {
      const ended = (cause: Cause.Cause<unknown>) => Effect.sync(() => this.end("error", toTrajectoryError(this.phaseName, cause)))
      if (!Cause.hasInterrupts(cause)) return ended(cause)
      return Effect.flatMap(Effect.fiberId, (self) => {
        const by = Cause.interruptors(cause)
        return Cause.hasInterruptsOnly(cause) && by.size > 0 && [...by].every((id) => id === self)
          ? ended(Cause.die(new Error(SELF_INTERRUPTED)))
          : Effect.failCause(cause as Cause.Cause<never>)
      })
    })
  }

  /**
   * The result of a trajectory whose fiber cannot be stopped (stuck in code that cannot be
   * interrupted), ended with `error`: a copy, since the stuck fiber may still touch its own.
   */
  abandonedWith(error: TrajectoryError): TrajectoryResult {
    const result = this.stopWith(error)
    this.ended(result)
    return {
      ...result,
      stepRewards: [...result.stepRewards],
      stepInfos: [...result.stepInfos],
      turns: [...result.turns],
      timings: { ...result.timings, turns: [...result.timings.turns] }
    }
  }

  /** Tells the listener the trajectory ended (after its scope closed), with its final result. */
  ended(result: TrajectoryResult): void {
    const listener = this.listener
    if (listener === undefined) return
    const request = this.request
    listener.end({
      _tag: "End",
      trajectoryId: request.id,
      row: request.row,
      generation: request.generation,
      attempt: 1,
      reason: result.endReason,
      numTurns: result.numTurns,
      messages: result.messages,
      error: result.error
    })
  }
}

/** Runs a machine's trajectory and folds it: its End (the result is kept on the machine). */
export const runMachine = (machine: Machine): Effect.Effect<End> =>
  Effect.map(machine.runInto(), (end) => {
    machine.result = machine.acc.result()
    return end
  })

/** The result with `error` as its error (the first failure of a trajectory is the one it keeps). */
export const withError = (result: TrajectoryResult, error: TrajectoryError): TrajectoryResult =>
  result.error !== undefined ? result : { ...result, endReason: "error", error }

/**
 * Closes a finished trajectory's scope (closing its env). A close that fails (a throwing or dying
 * finalizer) becomes the trajectory's error, unless it had one already. Finalizers cannot be
 * interrupted (`acquireRelease`'s, and the env adapters' close), so a run that stops waits for the
 * closes under way; one that hangs is given up by the run's watchdog after the close timeout.
 */
export const closeMachine = (
  machine: Machine,
  scope: Scope.Closeable,
  error: TrajectoryError | undefined
): Effect.Effect<TrajectoryResult> => {
  machine.phase = Phase.Closing
  machine.mark = machine.now()
  return Effect.matchCause(Scope.close(scope, error === undefined ? Exit.void : Exit.fail(error)), {
    onSuccess: () => {
      machine.phase = Phase.Finished
      machine.ended(machine.result!)
      return machine.result!
    },
    onFailure: (cause) => {
      machine.phase = Phase.Finished
      if (!Cause.hasInterruptsOnly(cause)) machine.result = withError(machine.result!, toTrajectoryError("close", cause))
      machine.ended(machine.result!)
      return machine.result!
    }
  })
}
