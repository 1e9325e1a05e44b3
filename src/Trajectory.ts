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
import { Cause, Effect, Option, Scope, Stream } from "effect"
import type * as Env from "./Env.js"
import { Inference } from "./Inference.js"
import type { Completion, SamplingParams, Service as InferenceService } from "./Inference.js"
import * as Message from "./Message.js"
import { describe } from "./internal/lift.js"
import { mixSeed } from "./internal/seed.js"
import type { Instance, Session, TrajectoryError, TrajectoryRequest, TurnContext, TurnResult } from "./Scheduler.js"
import { isTrajectoryError, UnexpectedError } from "./Scheduler.js"

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
  private readonly turns: Array<TurnOutput> = []
  private readonly timings: Array<{ modelMs: number; envMs: number }> = []
  private end: End | undefined = undefined

  constructor(readonly request: TrajectoryRequest) {}

  add(event: TurnEvent): void {
    switch (event._tag) {
      case "Reset":
        this.resetInfo = event.info
        this.resetMs = event.envMs
        break
      case "Completion":
        this.turns.push({
          finishReason: event.completion.finishReason,
          tokenIds: event.completion.tokenIds,
          logprobs: event.completion.logprobs
        })
        this.timings.push({ modelMs: event.modelMs, envMs: 0 })
        break
      case "Step":
        this.total += event.reward
        this.stepRewards.push(event.reward)
        this.stepInfos.push(event.info)
        if (event.rolloutInfos !== undefined) Object.assign(this.rolloutInfos, event.rolloutInfos)
        if (this.timings.length > 0) this.timings[this.timings.length - 1].envMs = event.envMs
        break
      case "End":
        this.end = event
        break
    }
  }

  result(): TrajectoryResult {
    const end = this.end
    if (end === undefined) throw new Error("Trajectory.Accumulator: result() before the End event")
    let totalMs = this.resetMs
    for (const t of this.timings) totalMs += t.modelMs + t.envMs
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
      turns: this.turns,
      timings: { resetMs: this.resetMs, turns: this.timings, totalMs }
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
  Finished
}

/**
 * The trajectory's state machine. Each call of `next` performs one transition and returns its
 * event; after `End` the machine is finished. Both drivers call exactly this.
 */
class Machine {
  phase = Phase.Start
  turn = 0
  messages: ReadonlyArray<Message.Message>
  session: Session | undefined = undefined
  context: TurnContext | undefined = undefined
  private endReason: EndReason = "done"
  private readonly sampling: SamplingParams

  constructor(
    readonly request: TrajectoryRequest,
    readonly scheduler: Instance,
    readonly inference: InferenceService,
    sampling: SamplingParams | undefined,
    readonly scope: Scope.Scope
  ) {
    this.messages = request.messages
    this.sampling = sampling ?? {}
  }

  get finished(): boolean {
    return this.phase === Phase.Finished
  }

  /** The next event; failures become an `End` event with the typed error. */
  next(): Effect.Effect<TurnEvent> {
    return this.guard(this.transition())
  }

  /** The next event, with failures left in the error channel. */
  transition(): Effect.Effect<TurnEvent, TrajectoryError> {
    switch (this.phase) {
      case Phase.Start:
        return this.start()
      case Phase.Model:
        return this.callModel()
      case Phase.Env:
        return this.turnEnd()
      case Phase.Done:
      case Phase.MaxTurns:
        return Effect.succeed(this.end(this.phase === Phase.Done ? "done" : "max_turns", undefined))
      case Phase.Finished:
        return Effect.dieMessage("Trajectory: next() after End")
    }
  }

  /** Where a failure happened: the phase does not advance until its transition succeeds. */
  private get phaseName(): string {
    return this.phase === Phase.Start ? "start" : this.phase === Phase.Model ? "model" : "turn_end"
  }

  /** Turns a failure or defect into the `End` event; interruption goes through. */
  guard<A>(effect: Effect.Effect<A, TrajectoryError>): Effect.Effect<A | End> {
    return Effect.catchAllCause(effect, (cause) =>
      Cause.isInterrupted(cause)
        ? Effect.failCause(cause as Cause.Cause<never>)
        : Effect.sync(() => this.end("error", toTrajectoryError(this.phaseName, cause))))
  }

  end(reason: EndReason, error: TrajectoryError | undefined): End {
    this.phase = Phase.Finished
    this.endReason = reason
    return { _tag: "End", reason, numTurns: this.turn, messages: this.messages, error }
  }

  get reason(): EndReason {
    return this.endReason
  }

  private start(): Effect.Effect<TurnEvent, TrajectoryError> {
    const started = now()
    return Effect.map(Scope.extend(this.scheduler.start(this.request), this.scope), (session): TurnEvent => {
      this.session = session
      this.messages = session.messages
      this.phase = Phase.Model
      this.turn = 1
      return { _tag: "Reset", messages: session.messages, info: session.info, envMs: now() - started }
    })
  }

  private callModel(): Effect.Effect<TurnEvent, TrajectoryError> {
    const started = now()
    const request = this.request
    return Effect.map(
      this.inference.chat({
        messages: this.messages,
        sampling: this.sampling,
        trajectoryId: request.id,
        turn: this.turn,
        seed: mixSeed(request.seed, this.turn)
      }),
      (completion): TurnEvent => {
        const messages = [...this.messages, Message.assistant(completion.text)]
        this.messages = messages
        this.context = { request, turn: this.turn, messages, completion }
        this.phase = Phase.Env
        return { _tag: "Completion", turn: this.turn, completion, modelMs: now() - started }
      }
    )
  }

  private turnEnd(): Effect.Effect<TurnEvent, TrajectoryError> {
    const started = now()
    const session = this.session!
    const context = this.context!
    return Effect.flatMap(session.onTurnEnd(context), (result: TurnResult) => {
      const done = result.done ?? session.checkFinished(context)
      const event = (envMs: number): Step => ({
        _tag: "Step",
        turn: context.turn,
        reward: result.reward ?? 0,
        done,
        observation: result.observation,
        info: result.info ?? {},
        rolloutInfos: result.rolloutInfos,
        envMs
      })
      if (done) {
        this.phase = Phase.Done
        return Effect.succeed(event(now() - started))
      }
      if (context.turn >= this.request.maxTurns) {
        this.phase = Phase.MaxTurns
        return Effect.succeed(event(now() - started))
      }
      return Effect.map(session.step(context, result), (messages): TurnEvent => {
        this.messages = messages
        this.turn++
        this.phase = Phase.Model
        return event(now() - started)
      })
    })
  }
}

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
      const machine = new Machine(request, options.scheduler, inference, options.sampling, scope)
      return Stream.repeatEffectOption(
        Effect.suspend(() => machine.finished ? Effect.fail(Option.none()) : machine.next())
      )
    })
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
  inference: InferenceService
): Effect.Effect<TrajectoryResult> =>
  Effect.acquireUseRelease(
    Scope.make(),
    (scope) => {
      const machine = new Machine(request, options.scheduler, inference, options.sampling, scope)
      const acc = new Accumulator(request)
      // The same transitions as the stream, chained directly; failures are caught once for the whole
      // trajectory (the machine knows the phase it failed in), not once per event.
      const onEvent = (event: TurnEvent): Effect.Effect<TrajectoryResult, TrajectoryError> => {
        acc.add(event)
        return machine.finished ? Effect.succeed(acc.result()) : Effect.flatMap(machine.transition(), onEvent)
      }
      return Effect.map(
        machine.guard(Effect.flatMap(Effect.suspend(() => machine.transition()), onEvent)),
        (last): TrajectoryResult => {
          // `last` is the result, or the End event the guard made from a failure.
          if ("_tag" in last) {
            acc.add(last)
            return acc.result()
          }
          return last
        }
      )
    },
    (scope, exit) => Scope.close(scope, exit)
  )
