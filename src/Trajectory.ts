/**
 * A trajectory is a `Stream` of turn events: `Reset`, then per turn a `Completion` (the model's
 * reply) and a `Step` (the env's answer), then one `End` with its reason. Folding the events gives
 * the {@link TrajectoryResult}: messages, total reward, per-step rewards, infos and timings.
 *
 * {@link stream} and {@link run} are two drivers of one engine (the same transitions, the same
 * fold): `stream` pulls one event at a time and is what pipelines compose; `run` drives the same
 * transitions in a plain loop with no per-event stream machinery, which is what a large run uses.
 *
 * A failure never fails the stream: it ends the trajectory with reason `error` and the typed error.
 * The env lives in the trajectory's scope, so it is closed exactly once when the trajectory ends,
 * fails, or is interrupted.
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, ExecutionStrategy, Exit, FiberId, FiberRef, Option, Scope, Stream } from "effect"
import type * as Env from "./Env.js"
import { Inference } from "./Inference.js"
import { tokenState } from "./Inference.js"
import type { Completion, SamplingParams, Service as InferenceService, TokenState } from "./Inference.js"
import * as Message from "./Message.js"
import { describe } from "./internal/lift.js"
import { ScopeSlot } from "./internal/scopeSlot.js"
import { mixSeed } from "./internal/seed.js"
import type { Instance, Session, TrajectoryError, TrajectoryRequest, TurnContext, TurnResult } from "./Scheduler.js"
import { appendObservation, isTrajectoryError, nextMessages, Timeout, UnexpectedError } from "./Scheduler.js"
import * as TokenSequence from "./TokenSequence.js"

/**
 * @since 0.1.0
 * @category models
 */
export type EndReason = "done" | "max_turns" | "error"

/**
 * The session started: the first prompt and the reset info.
 *
 * @since 0.1.0
 * @category events
 */
export interface Reset {
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
export interface CompletionEvent {
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
export interface Step {
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
 * The trajectory ended. `messages` is the final conversation.
 *
 * @since 0.1.0
 * @category events
 */
export interface End {
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
// The fold
// ---------------------------------------------------------------------------------------------

/**
 * Folds events into a result. One instance per trajectory; `add` every event in order, then
 * `result()` after `End`.
 *
 * @since 0.1.0
 * @category folding
 */
export class Accumulator {
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
  private end: End | undefined = undefined

  constructor(readonly request: TrajectoryRequest) {}

  add(event: TurnEvent): void {
    switch (event._tag) {
      case "Reset":
        this.reset(event.info, event.envMs)
        break
      case "Completion":
        this.completion(event.completion, event.modelMs)
        break
      case "Step":
        this.step(event.reward, event.info, event.rolloutInfos, event.envMs)
        break
      case "End":
        this.end = event
        break
    }
  }

  // The fields of each event, without the event object (the run driver calls these directly).
  reset(info: Env.Info, envMs: number): void {
    this.resetInfo = info
    this.resetMs = envMs
  }

  completion(completion: Completion, modelMs: number): void {
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

  step(
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
    const end = this.end
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
// The engine: one state machine, two drivers
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

const EMPTY_INFO: Env.Info = Object.freeze({})

/**
 * The trajectory's state machine. Its steps (`started`, `replied`, `answered`) hold all of the
 * logic; the stream driver wraps each in an event per pull, the run driver chains them directly.
 */
class Machine {
  phase = Phase.Start
  turn = 0
  messages: ReadonlyArray<Message.Message>
  session: Session | undefined = undefined
  context: TurnContext | undefined = undefined
  /** The token sequence so far, for backends that generate from tokens (see `ChatRequest.previous`). */
  tokens: TokenState | undefined = undefined
  private readonly sampling: SamplingParams
  private readonly chatTemplateKwargs: Readonly<Record<string, unknown>> | undefined
  /**
   * When the run driver chains steps back to back, one step's end time is the next one's start,
   * which halves the clock reads. The stream driver reads the clock at each start, because time
   * between pulls belongs to the consumer.
   */
  chained = false
  /** When the current phase started (what a watchdog measures phase timeouts from). */
  mark = 0
  /** When the trajectory started (what the trajectory timeout is measured from). */
  startedAt = 0
  /** Whether the last answered turn ended the trajectory (its Step event's `done`). */
  lastDone = false
  /** The fold of this trajectory's events so far (set by the driver that runs it). */
  acc: Accumulator | undefined = undefined
  /** The result, once the trajectory ended (kept while its scope closes). */
  result: TrajectoryResult | undefined = undefined

  constructor(
    readonly request: TrajectoryRequest,
    readonly scheduler: Instance,
    readonly inference: InferenceService,
    options: Options,
    readonly scope: Scope.Scope,
    readonly slot?: ScopeSlot | undefined
  ) {
    this.messages = request.messages
    this.sampling = options.sampling ?? {}
    this.chatTemplateKwargs = options.chatTemplateKwargs
  }

  get finished(): boolean {
    return this.phase === Phase.Finished
  }

  startTime(): number {
    return this.chained ? this.mark : now()
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

  started(session: Session): void {
    this.session = session
    this.messages = session.messages
    this.phase = Phase.Model
    this.turn = 1
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

  /** The model replied: append its message; the context of this turn's hooks. */
  replied(completion: Completion): TurnContext {
    const messages = [...this.messages, Message.assistant(completion.text)]
    this.messages = messages
    this.tokens = tokenState(completion, messages)
    const context: TurnContext = { request: this.request, turn: this.turn, messages, completion }
    this.context = context
    this.phase = Phase.Env
    return context
  }

  /**
   * The env answered (through `onTurnEnd`): whether the trajectory ends, and otherwise the next
   * turn's messages (`undefined` when it ends).
   */
  answered(context: TurnContext, result: TurnResult): Effect.Effect<void, TrajectoryError> | undefined {
    const session = this.session!
    const done = result.done ?? session.checkFinished(context)
    this.lastDone = done
    if (done) {
      this.phase = Phase.Done
      return undefined
    }
    if (context.turn >= this.request.maxTurns) {
      this.phase = Phase.MaxTurns
      return undefined
    }
    // The gym scheduler's step only appends the observation: do it inline, no Effect needed.
    if (session.step === appendObservation) {
      this.next(nextMessages(context, result))
      return Effect.void
    }
    return Effect.map(session.step(context, result), (messages) => this.next(messages))
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
    return { _tag: "End", reason, numTurns, messages: this.messages, error }
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
    const acc = this.acc ?? new Accumulator(this.request)
    acc.add(this.end("error", error))
    const result = acc.result()
    this.result = result
    return result
  }

  /** Turns a failure or defect into the `End` event; interruption goes through. */
  guard<A>(effect: Effect.Effect<A, TrajectoryError>): Effect.Effect<A | End> {
    return Effect.catchAllCause(effect, (cause) =>
      Cause.isInterrupted(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.sync(() => this.end("error", toTrajectoryError(this.phaseName, cause))))
  }

  // ---- the stream driver: one event per pull -----------------------------------------------

  /** The next event; failures become an `End` event with the typed error. */
  nextEvent(): Effect.Effect<TurnEvent> {
    this.mark = now()
    if (this.phase === Phase.Start) this.startedAt = this.mark
    switch (this.phase) {
      case Phase.Start: {
        const started = now()
        return this.guard(Effect.map(this.startSession(), (session): TurnEvent => {
          this.started(session)
          return { _tag: "Reset", messages: session.messages, info: session.info, envMs: this.stamp(started) }
        }))
      }
      case Phase.Model: {
        const started = now()
        return this.guard(Effect.map(this.callModel(), (completion): TurnEvent => {
          const context = this.replied(completion)
          return { _tag: "Completion", turn: context.turn, completion, modelMs: this.stamp(started) }
        }))
      }
      case Phase.Env: {
        const started = now()
        const context = this.context!
        return this.guard(Effect.flatMap(this.session!.onTurnEnd(context), (result) => {
          const step = (): TurnEvent => stepEvent(context, result, this.lastDone, this.stamp(started))
          const more = this.answered(context, result)
          return more === undefined ? Effect.sync(step) : Effect.map(more, step)
        }))
      }
      case Phase.Done:
      case Phase.MaxTurns:
        return Effect.succeed(this.finish())
      case Phase.Finished:
      case Phase.Closing:
        return Effect.dieMessage("Trajectory: next event after End")
    }
  }

  // ---- the run driver: the steps chained, folded as they happen ----------------------------

  /** Runs the whole trajectory into `acc` (without the End, which the caller adds). */
  runInto(acc: Accumulator): Effect.Effect<End> {
    this.chained = true
    this.mark = this.startedAt = now()
    const started = this.mark
    const turn: Effect.Effect<End, TrajectoryError> = Effect.suspend(() => {
      const modelStarted = this.mark
      return Effect.flatMap(this.callModel(), (completion) => {
        const context = this.replied(completion)
        acc.completion(completion, this.stamp(modelStarted))
        const envStarted = this.mark
        return Effect.flatMap(this.session!.onTurnEnd(context), (result) => {
          const more = this.answered(context, result)
          if (more === undefined || more === Effect.void) {
            this.record(acc, result, envStarted)
            return more === undefined ? Effect.succeed(this.finish()) : turn
          }
          return Effect.flatMap(more, () => {
            this.record(acc, result, envStarted)
            return turn
          })
        })
      })
    })
    return this.guard(Effect.flatMap(this.startSession(), (session) => {
      this.started(session)
      acc.reset(session.info, this.stamp(started))
      return turn
    })) as Effect.Effect<End>
  }

  /** Folds the env's answer into `acc` (the fields of the Step event {@link stepEvent} builds). */
  private record(acc: Accumulator, result: TurnResult, envStarted: number): void {
    acc.step(result.reward ?? 0, result.info ?? EMPTY_INFO, result.rolloutInfos, this.stamp(envStarted))
  }
}

const stepEvent = (context: TurnContext, result: TurnResult, done: boolean, envMs: number): Step => ({
  _tag: "Step",
  turn: context.turn,
  reward: result.reward ?? 0,
  done,
  observation: result.observation,
  info: result.info ?? EMPTY_INFO,
  rolloutInfos: result.rolloutInfos,
  envMs
})

/**
 * The trajectory as a stream of turn events. The env is created when the stream is first pulled and
 * closed when it ends (or is interrupted).
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
      const scope = yield* Effect.scope
      const machine = new Machine(request, options.scheduler, inference, options, scope)
      return events(machine)
    })
  )

/** The events of a machine, one per pull. */
const events = (machine: Machine): Stream.Stream<TurnEvent> =>
  Stream.repeatEffectOption(
    Effect.suspend(() => machine.finished ? Effect.fail(Option.none()) : machine.nextEvent())
  )

/**
 * Runs a trajectory to its result: the same transitions and fold as {@link stream}, driven by a
 * plain loop. The env is closed before this Effect completes.
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
 * {@link run} with the inference service given directly (no context lookup per trajectory).
 *
 * @since 0.1.0
 * @category constructors
 */
export const runWith = (
  request: TrajectoryRequest,
  options: Options,
  inference: InferenceService,
  slot?: ScopeSlot | undefined
): Effect.Effect<TrajectoryResult> =>
  // The scope is empty until the scheduler starts, so nothing can leak before `onExit` is in place;
  // this is lighter than acquireUseRelease, whose masks stay on the fiber's stack for the whole
  // trajectory.
  Effect.flatMap(Scope.make(), (scope) => {
    const machine = new Machine(request, options.scheduler, inference, options, scope, slot)
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        Effect.onInterrupt(restore(runMachine(machine)), () => Scope.close(scope, Exit.interrupt(FiberId.none))),
        ([end]) => closeMachine(machine, scope, end.error)
      )
    )
  })

/** Runs a machine's trajectory with the run driver and folds it: its End and its result. */
const runMachine = (machine: Machine): Effect.Effect<readonly [End, TrajectoryResult]> => {
  const acc = new Accumulator(machine.request)
  machine.acc = acc
  return Effect.map(machine.runInto(acc), (end) => {
    acc.add(end)
    const result = acc.result()
    machine.result = result
    return [end, result] as const
  })
}

/** Runs a machine's trajectory with the stream driver (one event per pull) and folds it. */
const foldMachine = (machine: Machine): Effect.Effect<readonly [End, TrajectoryResult]> => {
  const acc = new Accumulator(machine.request)
  machine.acc = acc
  let end: End | undefined
  return Effect.map(
    Stream.runForEach(events(machine), (event) =>
      Effect.sync(() => {
        acc.add(event)
        if (event._tag === "End") end = event
      })),
    () => {
      const result = acc.result()
      machine.result = result
      return [end!, result] as const
    }
  )
}

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
      return machine.result!
    },
    onFailure: (cause) => {
      machine.phase = Phase.Finished
      const result = machine.result!
      if (Cause.isInterruptedOnly(cause)) return result
      machine.result = withError(result, toTrajectoryError("close", cause))
      return machine.result
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
   * Runs one trajectory (with the loop driver, or the stream driver folded) and closes its scope.
   * Never fails: failures, defects and a failing close are the result's error. A worker interrupted
   * in the middle of it finishes the trajectory with {@link recover}, or closes it with
   * {@link discard}.
   */
  run(request: TrajectoryRequest, options: Options, driver: "loop" | "stream" = "loop"): Effect.Effect<TrajectoryResult> {
    return Effect.flatMap(Scope.fork(this.parent, ExecutionStrategy.sequential), (scope) => {
      const machine = new Machine(request, options.scheduler, this.inference, options, scope, this.slot)
      this.machine = machine
      this.scope = scope
      return Effect.flatMap(driver === "stream" ? foldMachine(machine) : runMachine(machine), ([end]) =>
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
      return Effect.succeed(machine.stopWith(error))
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
