/**
 * A trajectory is a `Stream` of turn events: `Reset`, then per turn a `Completion` (the model's
 * reply) and a `Step` (the env's answer), then one `End` with its reason. Folding the events gives
 * the {@link TrajectoryResult}: messages, total reward, per-step rewards, infos and timings.
 *
 * One driver runs a trajectory: a plain loop over the trajectory's transitions (start the session,
 * call the model, let the env answer) that reports each transition to {@link Observer}s. The fold
 * ({@link Accumulator}) is one observer; an event listener is another. {@link run} folds;
 * {@link stream} is an adapter over the same loop that emits the events it reports (a `Stream` per
 * trajectory costs far more than the loop itself, so a run's events are one stream for the whole
 * run: `Rollout.events`).
 *
 * A failure never fails the stream: it ends the trajectory with reason `error` and the typed error.
 * The env lives in the trajectory's scope, so it is closed exactly once when the trajectory ends,
 * fails, or is interrupted.
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, ExecutionStrategy, Exit, FiberId, FiberRef, Option, Queue, Scope, Stream } from "effect"
import type * as Env from "./Env.js"
import { Inference, InferenceError } from "./Inference.js"
import { tokenState } from "./Inference.js"
import type { Completion, SamplingParams, Service as InferenceService, TokenState } from "./Inference.js"
import * as Message from "./Message.js"
import { describe } from "./internal/lift.js"
import { nextTurn } from "./internal/nextTurn.js"
import { isReady } from "./internal/ready.js"
import { ScopeSlot } from "./internal/scopeSlot.js"
import { mixSeed } from "./internal/seed.js"
import type { Instance, Session, TrajectoryError, TrajectoryRequest, TurnContext, TurnResult } from "./Scheduler.js"
import { isTrajectoryError, Timeout, UnexpectedError, withReply } from "./Scheduler.js"
import * as TokenSequence from "./TokenSequence.js"

/**
 * @since 0.1.0
 * @category models
 */
export type EndReason = "done" | "max_turns" | "error"

/**
 * What every turn event carries: which trajectory it belongs to.
 *
 * @since 0.1.0
 * @category events
 */
export interface EventTags {
  /** The trajectory's id (`r<row>-g<generation>`). */
  readonly trajectoryId: string
  readonly row: number
  readonly generation: number
  /** The attempt of the trajectory (1, or more when a run retries it after a transient error). */
  readonly attempt: number
}

/**
 * The session started: the first prompt and the reset info.
 *
 * @since 0.1.0
 * @category events
 */
export interface Reset extends EventTags {
  readonly _tag: "Reset"
  readonly messages: ReadonlyArray<Message.Message>
  readonly info: Env.Info
  readonly envMs: number
}

/**
 * The model replied.
 *
 * @since 0.1.0
 * @category events
 */
export interface CompletionEvent extends EventTags {
  readonly _tag: "Completion"
  readonly turn: number
  readonly completion: Completion
  readonly modelMs: number
}

/**
 * The env (through the scheduler's `onTurnEnd`) answered the reply.
 *
 * @since 0.1.0
 * @category events
 */
export interface Step extends EventTags {
  readonly _tag: "Step"
  readonly turn: number
  readonly reward: number
  readonly done: boolean
  readonly observation: string | undefined
  readonly info: Env.Info
  readonly rolloutInfos: Readonly<Record<string, unknown>> | undefined
  readonly envMs: number
}

/**
 * The trajectory ended. `messages` is the final conversation. An event listener gets it after the
 * trajectory's env is closed, so `error` includes a failure to close.
 *
 * @since 0.1.0
 * @category events
 */
export interface End extends EventTags {
  readonly _tag: "End"
  readonly reason: EndReason
  readonly numTurns: number
  readonly messages: ReadonlyArray<Message.Message>
  readonly error: TrajectoryError | undefined
}

/**
 * @since 0.1.0
 * @category events
 */
export type TurnEvent = Reset | CompletionEvent | Step | End

/**
 * Per-turn output of the model, kept for training: token ids and logprobs when the backend gives
 * them (the loss mask is 1 for every model token).
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnOutput {
  readonly finishReason: Completion["finishReason"]
  readonly tokenIds: ReadonlyArray<number> | undefined
  readonly logprobs: ReadonlyArray<number> | undefined
  /** The policy version the turn was sampled with, when the backend's weights are versioned. */
  readonly policyVersion?: number | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface TurnTiming {
  readonly modelMs: number
  readonly envMs: number
}

/**
 * @since 0.1.0
 * @category models
 */
export interface TrajectoryResult {
  readonly id: string
  readonly row: number
  readonly generation: number
  readonly env: string | undefined
  readonly messages: ReadonlyArray<Message.Message>
  readonly totalReward: number
  readonly stepRewards: ReadonlyArray<number>
  readonly numTurns: number
  readonly resetInfo: Env.Info | undefined
  readonly stepInfos: ReadonlyArray<Env.Info>
  /** Merged `rolloutInfos` of every turn (the last value of each key wins, as in the reference). */
  readonly rolloutInfos: Readonly<Record<string, unknown>>
  readonly endReason: EndReason
  readonly error: TrajectoryError | undefined
  readonly turns: ReadonlyArray<TurnOutput>
  /**
   * The whole trajectory as one token sequence (prompt, then sampled and inserted tokens with a
   * loss mask), when every turn was generated from tokens; otherwise why not. Absent when the
   * backend says nothing about tokens (scripted policies).
   */
  readonly tokens?: TokenSequence.Outcome | undefined
  readonly timings: {
    readonly resetMs: number
    readonly turns: ReadonlyArray<TurnTiming>
    /** Sum of model and env time (wall time is per run, not per trajectory, under concurrency). */
    readonly totalMs: number
  }
}

// ---------------------------------------------------------------------------------------------
// Observers and the fold
// ---------------------------------------------------------------------------------------------

/**
 * What the trajectory loop reports, transition by transition. Methods are called synchronously on
 * the trajectory's fiber, in order: `reset` once (unless the start failed), then per turn
 * `completion` and `step` (`step` only when the env answered), then `end` once.
 *
 * @since 0.1.0
 * @category observers
 */
export interface Observer {
  reset(info: Env.Info, envMs: number, messages: ReadonlyArray<Message.Message>): void
  completion(turn: number, completion: Completion, modelMs: number): void
  /** The env answered turn `turn` (through the scheduler's `onTurnEnd`); `done`: the trajectory ends there. */
  step(turn: number, result: TurnResult, done: boolean, envMs: number): void
  end(end: End): void
}

/**
 * An observer besides the fold, for a trajectory's events. `end` is called after the trajectory's
 * env is closed (with a failure to close as its error). `drain`, asked after every transition, may
 * return an Effect the loop runs before it goes on (to hand buffered events to a consumer, with
 * backpressure).
 *
 * @since 0.1.0
 * @category observers
 */
export interface Listener extends Observer {
  drain(): Effect.Effect<void> | undefined
}

/**
 * Folds a trajectory's transitions into its result: the observer every trajectory has. `add`
 * takes events (to fold a stream of them); the loop calls the {@link Observer} methods directly.
 *
 * @since 0.1.0
 * @category folding
 */
export class Accumulator implements Observer {
  private resetInfo: Env.Info | undefined = undefined
  private resetMs = 0
  private total = 0
  private readonly stepRewards: Array<number> = []
  private readonly stepInfos: Array<Env.Info> = []
  private rolloutInfos: Record<string, unknown> = {}
  /** Each turn's output only: a completion's prompt tokens are folded into `sequence`, not kept per turn. */
  private readonly outputs: Array<TurnOutput> = []
  private readonly sequence = new TokenSequence.Builder()
  /** model and env milliseconds of each turn, flat: [model1, env1, model2, env2, ...] */
  private readonly times: Array<number> = []
  private last: End | undefined = undefined

  constructor(readonly request: TrajectoryRequest) {}

  add(event: TurnEvent): void {
    switch (event._tag) {
      case "Reset":
        this.reset(event.info, event.envMs)
        break
      case "Completion":
        this.completion(event.turn, event.completion, event.modelMs)
        break
      case "Step":
        this.fold(event.reward, event.info, event.rolloutInfos, event.envMs)
        break
      case "End":
        this.last = event
        break
    }
  }

  reset(info: Env.Info, envMs: number): void {
    this.resetInfo = info
    this.resetMs = envMs
  }

  completion(_turn: number, completion: Completion, modelMs: number): void {
    this.outputs.push(
      completion.policyVersion === undefined
        ? { finishReason: completion.finishReason, tokenIds: completion.tokenIds, logprobs: completion.logprobs }
        : {
          finishReason: completion.finishReason,
          tokenIds: completion.tokenIds,
          logprobs: completion.logprobs,
          policyVersion: completion.policyVersion
        }
    )
    this.sequence.add(completion)
    this.times.push(modelMs, 0)
  }

  step(_turn: number, result: TurnResult, _done: boolean, envMs: number): void {
    this.fold(result.reward ?? 0, result.info ?? EMPTY_INFO, result.rolloutInfos, envMs)
  }

  end(end: End): void {
    this.last = end
  }

  private fold(
    reward: number,
    info: Env.Info,
    rolloutInfos: Readonly<Record<string, unknown>> | undefined,
    envMs: number
  ): void {
    this.total += reward
    this.stepRewards.push(reward)
    this.stepInfos.push(info)
    if (rolloutInfos !== undefined) Object.assign(this.rolloutInfos, rolloutInfos)
    if (this.times.length > 0) this.times[this.times.length - 1] = envMs
  }

  result(): TrajectoryResult {
    const end = this.last
    if (end === undefined) throw new Error("Trajectory.Accumulator: result() before the End event")
    let totalMs = this.resetMs
    const timings: Array<TurnTiming> = []
    for (let i = 0; i < this.times.length; i += 2) {
      timings.push({ modelMs: this.times[i], envMs: this.times[i + 1] })
      totalMs += this.times[i] + this.times[i + 1]
    }
    return {
      id: this.request.id,
      row: this.request.row,
      generation: this.request.generation,
      env: this.request.env?.name,
      messages: end.messages,
      totalReward: this.total,
      stepRewards: this.stepRewards,
      numTurns: end.numTurns,
      resetInfo: this.resetInfo,
      stepInfos: this.stepInfos,
      rolloutInfos: this.rolloutInfos,
      endReason: end.reason,
      error: end.error,
      turns: this.outputs,
      tokens: this.sequence.result(),
      timings: { resetMs: this.resetMs, turns: timings, totalMs }
    }
  }
}

/**
 * A {@link Listener} that turns the transitions of one trajectory into {@link TurnEvent}s (tagged
 * with the trajectory) and gives each to `emit`. `drain` is `flush()` (none by default).
 *
 * @since 0.1.0
 * @category observers
 */
export class Emitter implements Listener {
  private readonly tags: EventTags

  constructor(
    request: TrajectoryRequest,
    private readonly emit: (event: TurnEvent) => void,
    private readonly flush: () => Effect.Effect<void> | undefined = () => undefined,
    attempt = 1
  ) {
    this.tags = { trajectoryId: request.id, row: request.row, generation: request.generation, attempt }
  }

  reset(info: Env.Info, envMs: number, messages: ReadonlyArray<Message.Message>): void {
    const t = this.tags
    this.emit({ _tag: "Reset", ...t, messages, info, envMs })
  }

  completion(turn: number, completion: Completion, modelMs: number): void {
    this.emit({ _tag: "Completion", ...this.tags, turn, completion, modelMs })
  }

  step(turn: number, result: TurnResult, done: boolean, envMs: number): void {
    this.emit({
      _tag: "Step",
      ...this.tags,
      turn,
      reward: result.reward ?? 0,
      done,
      observation: result.observation,
      info: result.info ?? EMPTY_INFO,
      rolloutInfos: result.rolloutInfos,
      envMs
    })
  }

  end(end: End): void {
    this.emit({ ...end, ...this.tags })
  }

  drain(): Effect.Effect<void> | undefined {
    return this.flush()
  }
}

const EMPTY_INFO: Env.Info = Object.freeze({})

/**
 * Folds a stream of turn events into the result.
 *
 * @since 0.1.0
 * @category folding
 */
export const fold = <E, R>(
  request: TrajectoryRequest,
  events: Stream.Stream<TurnEvent, E, R>
): Effect.Effect<TrajectoryResult, E, R> =>
  Effect.map(
    Stream.runFold(events, new Accumulator(request), (acc, event) => {
      acc.add(event)
      return acc
    }),
    (acc) => acc.result()
  )

// ---------------------------------------------------------------------------------------------
// The engine: one state machine, one driver
// ---------------------------------------------------------------------------------------------

/**
 * What a trajectory needs besides its request.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly scheduler: Instance
  readonly sampling?: SamplingParams | undefined
  /** Variables of the model's chat template for every call (`ChatRequest.chatTemplateKwargs`). */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
}

const now = (): number => performance.now()

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

const toTrajectoryError = (phase: string, cause: Cause.Cause<unknown>): TrajectoryError => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure) && isTrajectoryError(failure.value)) return failure.value
  const squashed = Cause.squash(cause)
  if (isTrajectoryError(squashed)) return squashed
  return new UnexpectedError({ phase, detail: describe(squashed), cause: squashed })
}

const enum Phase {
  Start,
  Model,
  Env,
  Done,
  MaxTurns,
  Finished,
  /** The trajectory ended; its scope (the env) is being closed. */
  Closing
}

/**
 * The trajectory's state machine and its one driver, {@link Machine.runInto}: the steps chained in
 * a plain loop, each transition reported to the fold and (when there is one) a listener.
 */
class Machine {
  phase = Phase.Start
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
  /** The result, once the trajectory ended (kept while its scope closes). */
  result: TrajectoryResult | undefined = undefined

  constructor(
    readonly request: TrajectoryRequest,
    readonly scheduler: Instance,
    readonly inference: InferenceService,
    options: Options,
    readonly scope: Scope.Scope,
    readonly slot: ScopeSlot | undefined,
    /** An observer besides the fold (events), if any. */
    readonly listener: Listener | undefined
  ) {
    this.messages = request.messages
    this.sampling = options.sampling ?? {}
    this.chatTemplateKwargs = options.chatTemplateKwargs
    this.acc = new Accumulator(request)
  }

  stamp(started: number): number {
    const t = now()
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
      const slot = this.slot
      if (slot === undefined) return Scope.extend(this.scheduler.start(this.request), this.scope)
      // The fiber's context already holds the slot: point it at this trajectory's scope.
      slot.current = this.scope
      return this.scheduler.start(this.request) as Effect.Effect<Session, TrajectoryError>
    } catch (defect) {
      return Effect.die(defect)
    }
  }

  callModel(): Effect.Effect<Completion, TrajectoryError> {
    return this.inference.chat({
      messages: this.messages,
      sampling: this.sampling,
      trajectoryId: this.request.id,
      turn: this.turn,
      seed: mixSeed(this.request.seed, this.turn),
      previous: this.tokens,
      chatTemplateKwargs: this.chatTemplateKwargs
    })
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
    this.mark = this.startedAt = now()
    const started = this.mark
    return this.guard(Effect.flatMap(this.startSession(), (session) => {
      this.session = session
      this.messages = session.messages
      this.phase = Phase.Model
      this.turn = 1
      const envMs = this.stamp(started)
      acc.reset(session.info, envMs)
      if (listener !== undefined) listener.reset(session.info, envMs, session.messages)
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
          return Effect.zipRight(nextTurn, Effect.suspend(() => this.turns()))
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
    const context = this.replied(completion)
    const modelMs = this.stamp(modelStarted)
    this.acc.completion(context.turn, completion, modelMs)
    if (this.listener !== undefined) this.listener.completion(context.turn, completion, modelMs)
    const envStarted = this.mark
    const answer = this.session!.onTurnEnd(context)
    if (!isReady(answer)) {
      return Effect.flatMap(answer, (result) => this.resume(this.onAnswer(context, result, envStarted)))
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
    return Effect.flatMap(stepped, (messages) => {
      this.answered(context.turn, result, false, envStarted)
      this.next(messages)
      return this.resume(this.drained())
    })
  }

  /** The listener's drain then the next turns, if it has one to run; `undefined` otherwise. */
  private drained(): Effect.Effect<End, TrajectoryError> | undefined {
    const drain = this.listener?.drain()
    return drain === undefined ? undefined : Effect.zipRight(drain, Effect.suspend(() => this.turns()))
  }

  /** The model replied: append its message; the context of this turn's hooks. */
  private replied(completion: Completion): TurnContext {
    const messages = withReply(this.messages, completion.text)
    this.messages = messages
    this.tokens = tokenState(completion, messages)
    this.phase = Phase.Env
    return { request: this.request, turn: this.turn, messages, completion }
  }

  /** Reports the env's answer to the turn (the Step transition). */
  private answered(turn: number, result: TurnResult, done: boolean, envStarted: number): void {
    const envMs = this.stamp(envStarted)
    this.acc.step(turn, result, done, envMs)
    if (this.listener !== undefined) this.listener.step(turn, result, done, envMs)
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
   * The timeout this trajectory has run past at `at` (milliseconds, `performance.now()`), if any:
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

  /** Turns a failure or defect into the `End`; interruption goes through. */
  guard<A>(effect: Effect.Effect<A, TrajectoryError>): Effect.Effect<A | End> {
    return Effect.catchAllCause(effect, (cause) =>
      Cause.isInterrupted(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.sync(() => this.end("error", toTrajectoryError(this.phaseName, cause))))
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

/**
 * The trajectory as a stream of turn events: an adapter over the same loop as {@link run}, which
 * emits what the loop reports. The env is created when the stream starts and closed before its
 * `End` event (or when the stream is interrupted). For a run's events use `Rollout.events`: one
 * stream for all trajectories costs far less than a stream per trajectory.
 *
 * @since 0.1.0
 * @category constructors
 */
export const stream = (
  request: TrajectoryRequest,
  options: Options
): Stream.Stream<TurnEvent, never, Inference> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const inference = yield* Inference
      const queue = yield* Effect.acquireRelease(Queue.bounded<ReadonlyArray<TurnEvent> | null>(1), Queue.shutdown)
      let buffer: Array<TurnEvent> = []
      const flush = (): Effect.Effect<void> | undefined => {
        if (buffer.length === 0) return undefined
        const out = buffer
        buffer = []
        return Queue.offer(queue, out)
      }
      const emitter = new Emitter(request, (event) => buffer.push(event), flush)
      yield* Effect.forkScoped(
        Effect.flatMap(runWith(request, options, inference, emitter), () =>
          Effect.zipRight(flush() ?? Effect.void, Queue.offer(queue, null)))
      )
      return Stream.fromQueue(queue, { maxChunkSize: 1 }).pipe(
        Stream.takeWhile((events): events is ReadonlyArray<TurnEvent> => events !== null),
        Stream.flattenIterables
      )
    })
  )

/**
 * Runs a trajectory to its result (the loop, folded). The env is closed before this Effect
 * completes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const run = (
  request: TrajectoryRequest,
  options: Options
): Effect.Effect<TrajectoryResult, never, Inference> =>
  Effect.flatMap(Inference, (inference) => runWith(request, options, inference))

/**
 * {@link run} with the inference service given directly (no context lookup per trajectory), and
 * optionally a listener for the trajectory's transitions.
 *
 * @since 0.1.0
 * @category constructors
 */
export const runWith = (
  request: TrajectoryRequest,
  options: Options,
  inference: InferenceService,
  listener?: Listener | undefined
): Effect.Effect<TrajectoryResult> =>
  // The scope is empty until the scheduler starts, so nothing can leak before `onExit` is in place;
  // this is lighter than acquireUseRelease, whose masks stay on the fiber's stack for the whole
  // trajectory.
  Effect.flatMap(Scope.make(), (scope) => {
    const machine = new Machine(request, options.scheduler, inference, options, scope, undefined, listener)
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        Effect.onInterrupt(restore(runMachine(machine)), () => Scope.close(scope, Exit.interrupt(FiberId.none))),
        (end) => closeMachine(machine, scope, end.error)
      )
    )
  })

/** Runs a machine's trajectory and folds it: its End (the result is kept on the machine). */
const runMachine = (machine: Machine): Effect.Effect<End> =>
  Effect.map(machine.runInto(), (end) => {
    machine.result = machine.acc.result()
    return end
  })

/** The result with `error` as its error (the first failure of a trajectory is the one it keeps). */
const withError = (result: TrajectoryResult, error: TrajectoryError): TrajectoryResult =>
  result.error !== undefined ? result : { ...result, endReason: "error", error }

/**
 * Closes a finished trajectory's scope (closing its env). A close that fails (a throwing or dying
 * finalizer) becomes the trajectory's error, unless it had one already. Finalizers cannot be
 * interrupted (`acquireRelease`'s, and the env adapters' close), so a run that stops waits for the
 * closes under way; one that hangs is given up by the run's watchdog after the close timeout.
 */
const closeMachine = (
  machine: Machine,
  scope: Scope.CloseableScope,
  error: TrajectoryError | undefined
): Effect.Effect<TrajectoryResult> => {
  machine.phase = Phase.Closing
  machine.mark = now()
  return Effect.matchCause(Scope.close(scope, error === undefined ? Exit.void : Exit.fail(error)), {
    onSuccess: () => {
      machine.phase = Phase.Finished
      machine.ended(machine.result!)
      return machine.result!
    },
    onFailure: (cause) => {
      machine.phase = Phase.Finished
      if (!Cause.isInterruptedOnly(cause)) machine.result = withError(machine.result!, toTrajectoryError("close", cause))
      machine.ended(machine.result!)
      return machine.result!
    }
  })
}

/**
 * Limits, in milliseconds, on the phases of a trajectory (absent: none). See {@link Worker.overdue}.
 *
 * @since 0.1.0
 * @category models
 */
export interface TimeoutLimits {
  /** Creating and resetting the env (the scheduler's start). */
  readonly reset?: number | undefined
  /** The env's answer to one turn (the scheduler's `onTurnEnd` and `step` hooks). */
  readonly step?: number | undefined
  /** Closing the trajectory's scope (its env). */
  readonly close?: number | undefined
  /** The whole trajectory, model calls included (not its close). */
  readonly trajectory?: number | undefined
}

/**
 * Runs many trajectories one after the other on one fiber, for a run's worker pool:
 * - the trajectory's scope is reached through one {@link ScopeSlot} that the worker's context holds
 *   (`provide` puts it there once), instead of a context update per trajectory;
 * - each trajectory's scope is a child of `parent`, closed as soon as the trajectory ends; if the
 *   worker is interrupted, closing `parent` closes it (or {@link Worker.recover} does). No
 *   finalizer frame stays on the fiber's stack for the trajectory's whole life (with thousands of
 *   trajectories waiting on a model, those frames are a good part of the memory in flight).
 * - a watchdog reads {@link Worker.overdue} to find a trajectory past its timeouts: it costs the
 *   trajectory nothing (no timer or fiber per call), the machine's phase and clock are enough.
 *
 * `parent` must be closed only after the worker has stopped.
 *
 * @since 0.1.0
 * @category constructors
 */
export class Worker {
  private readonly slot: ScopeSlot
  private machine: Machine | undefined = undefined
  /** The closeable scope of the trajectory in flight (the machine sees it as a plain scope). */
  private scope: Scope.CloseableScope | undefined = undefined

  constructor(readonly inference: InferenceService, readonly parent: Scope.Scope) {
    this.slot = new ScopeSlot(parent)
  }

  /**
   * Puts the slot in the context of the current fiber for the rest of its life (a plain update, so
   * no frame stays on the stack while the worker runs): use it on a fiber dedicated to the worker.
   */
  provide<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, Scope.Scope>> {
    const slot = this.slot
    return Effect.zipRight(
      FiberRef.update(FiberRef.currentContext, (context) => Context.add(context, Scope.Scope, slot)),
      effect as Effect.Effect<A, E, Exclude<R, Scope.Scope>>
    )
  }

  /**
   * Runs one trajectory and closes its scope, reporting its transitions to `listener` too (when
   * given). Never fails: failures, defects and a failing close are the result's error. A worker
   * interrupted in the middle of it finishes the trajectory with {@link recover}, or closes it with
   * {@link discard}.
   */
  run(request: TrajectoryRequest, options: Options, listener?: Listener | undefined): Effect.Effect<TrajectoryResult> {
    return Effect.flatMap(Scope.fork(this.parent, ExecutionStrategy.sequential), (scope) => {
      const machine = new Machine(request, options.scheduler, this.inference, options, scope, this.slot, listener)
      this.machine = machine
      this.scope = scope
      return Effect.flatMap(runMachine(machine), (end) =>
        Effect.map(closeMachine(machine, scope, end.error), (result) => {
          if (this.machine === machine) this.machine = this.scope = undefined
          return result
        }))
    })
  }

  /** The trajectory in flight (an opaque token: the same value while the same trajectory runs). */
  get current(): object | undefined {
    return this.machine
  }

  /** Whether the trajectory in flight has ended and its scope (its env) is being closed. */
  get closing(): boolean {
    return this.machine?.phase === Phase.Closing
  }

  /** The timeout the trajectory in flight has run past at `at` (`performance.now()`), if any. */
  overdue(at: number, limits: TimeoutLimits): Timeout | undefined {
    return this.machine?.overdue(at, limits)
  }

  /**
   * For a worker whose fiber was interrupted in the middle of a trajectory: ends that trajectory
   * with `error` (its result keeps what happened so far) and closes its scope, unless the scope was
   * already closing (then the close is what failed, and it is left alone).
   */
  recover(error: TrajectoryError): Effect.Effect<TrajectoryResult> | undefined {
    const machine = this.machine
    const scope = this.scope
    if (machine === undefined || scope === undefined) return undefined
    if (machine.phase === Phase.Closing) {
      this.machine = this.scope = undefined
      const result = machine.stopWith(error)
      machine.ended(result)
      return Effect.succeed(result)
    }
    machine.stopWith(error)
    // The machine stays in flight while its scope closes, so that a close that hangs is seen too.
    return Effect.map(closeMachine(machine, scope, error), (result) => {
      if (this.machine === machine) this.machine = this.scope = undefined
      return result
    })
  }

  /**
   * For a worker whose fiber cannot be stopped (stuck in code that cannot be interrupted): the result
   * of its trajectory ended with `error`, as a copy (the stuck fiber may still touch its own).
   */
  abandon(error: TrajectoryError): TrajectoryResult | undefined {
    const machine = this.machine
    if (machine === undefined) return undefined
    // The scope stays: the stuck fiber closes it (`discard`) if it ever gets out.
    this.machine = undefined
    const result = machine.stopWith(error)
    machine.ended(result)
    return {
      ...result,
      stepRewards: [...result.stepRewards],
      stepInfos: [...result.stepInfos],
      turns: [...result.turns],
      timings: { ...result.timings, turns: [...result.timings.turns] }
    }
  }

  /**
   * Closes the scope of a trajectory left in flight (by an interruption) without a result; the
   * trajectory stays in flight (in its close) until then, so that a close that hangs is seen too.
   */
  discard(): Effect.Effect<void> {
    const machine = this.machine
    const scope = this.scope
    if (scope === undefined) {
      this.machine = undefined
      return Effect.void
    }
    if (machine !== undefined) {
      machine.phase = Phase.Closing
      machine.mark = now()
    }
    const done = () => {
      if (this.scope === scope) this.machine = this.scope = undefined
    }
    return Effect.matchCause(Scope.close(scope, Exit.interrupt(FiberId.none)), { onFailure: done, onSuccess: done })
  }
}

/**
 * A {@link Worker} (kept as a function for existing callers).
 *
 * @since 0.1.0
 * @category constructors
 */
export const worker = (inference: InferenceService, parent: Scope.Scope): Worker => new Worker(inference, parent)
