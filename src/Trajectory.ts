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
import { Cause, Effect, Exit, Queue, Scope, Stream } from "effect"
import type * as Env from "./Env.js"
import { Inference } from "./Inference.js"
import type { Completion, SamplingParams, Service as InferenceService } from "./Inference.js"
import type * as Message from "./Message.js"
import { Accumulator, Emitter } from "./internal/trajectory/observers.js"
import { closeMachine, Machine, millisOf, runMachine } from "./internal/trajectory/machine.js"
import type { Instance, TrajectoryError, TrajectoryRequest, TurnResult } from "./Scheduler.js"
import type * as TokenSequence from "./TokenSequence.js"
import type * as Tool from "./Tool.js"

export {
  /**
   * Folds a trajectory's transitions into its result: the observer every trajectory has. `add`
   * takes events (to fold a stream of them); the loop calls the {@link Observer} methods directly.
   *
   * @since 0.1.0
   * @category folding
   */
  Accumulator,
  /**
   * A {@link Listener} that turns the transitions of one trajectory into {@link TurnEvent}s (tagged
   * with the trajectory) and gives each to `emit`. `drain` is `flush()` (none by default).
   *
   * @since 0.1.0
   * @category observers
   */
  Emitter
}

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
  /** Creating and resetting the env, without {@link waitMs}. */
  readonly envMs: number
  /** Of the start, the time spent waiting to be scheduled (a limit on envs); absent: none measured. */
  readonly waitMs?: number | undefined
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
  /** The time inside the env's answer, without {@link waitMs}. */
  readonly envMs: number
  /**
   * The time the answer waited to be taken up (behind other trajectories' work on the thread, or a
   * limit on envs) rather than spent in the env; absent: none measured.
   */
  readonly waitMs?: number | undefined
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
  /** Why the reply's text that looked like a tool call was kept as text (see `Completion.malformedToolCall`). */
  readonly malformedToolCall?: string | undefined
  /**
   * How many of the env's tool messages answering this turn's calls said what was wrong (begin
   * `Error:`, as `Tool.toolkit` answers a bad call); absent: none. Counted also for the last turn,
   * whose answer the conversation does not keep.
   */
  readonly toolErrors?: number | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface TurnTiming {
  readonly modelMs: number
  /** The time inside the env's answer (the scheduler's hooks included), without `waitMs`. */
  readonly envMs: number
  /**
   * The time the env's answer waited to be taken up: behind other trajectories' work (a Promise that
   * was settled when an env returned it) or a limit on envs. Absent or 0: none.
   */
  readonly waitMs?: number | undefined
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
  /** The tools offered to the model in this trajectory (absent: none), e.g. to re-render its conversation. */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
  readonly timings: {
    /** Creating and resetting the env, without `resetWaitMs`. */
    readonly resetMs: number
    /** Of the start, the time spent waiting (an OpenEnv server's permit, other trajectories' work); absent or 0: none. */
    readonly resetWaitMs?: number | undefined
    readonly turns: ReadonlyArray<TurnTiming>
    /** Sum of model, env and wait time (wall time is per run, not per trajectory, under concurrency). */
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
  /** `waitMs`: of the start, the time spent waiting to be scheduled (not in `envMs`). */
  reset(info: Env.Info, envMs: number, messages: ReadonlyArray<Message.Message>, waitMs?: number): void
  completion(turn: number, completion: Completion, modelMs: number): void
  /**
   * The env answered turn `turn` (through the scheduler's `onTurnEnd`); `done`: the trajectory ends
   * there. `waitMs`: the time the answer waited to be taken up (not in `envMs`).
   */
  step(turn: number, result: TurnResult, done: boolean, envMs: number, waitMs?: number): void
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
    Stream.runFold(events, () => new Accumulator(request), (acc, event) => {
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
  Stream.unwrap(
    Effect.gen(function*() {
      const inference = yield* Inference
      const queue = yield* Effect.acquireRelease(Queue.bounded<ReadonlyArray<TurnEvent>, Cause.Done>(1), Queue.shutdown)
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
          Effect.andThen(flush() ?? Effect.void, Queue.end(queue)))
      )
      return Stream.flattenIterable(Stream.fromQueue(queue))
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
  Effect.flatMap(Effect.zip(Scope.make(), Effect.clockWith(Effect.succeed)), ([scope, clock]) => {
    const machine = new Machine(request, options.scheduler, inference, options, scope, listener, millisOf(clock))
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        Effect.onInterrupt(restore(runMachine(machine)), () => Scope.close(scope, Exit.interrupt())),
        (end) => closeMachine(machine, scope, end.error)
      )
    )
  })

/**
 * Limits, in milliseconds, on the phases of a trajectory (absent: none), as a run's watchdog
 * applies them.
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
