/**
 * The two observers of a trajectory's transitions: the fold into its result, and the emitter of
 * its turn events. Internal; `Trajectory` exports both.
 */
import type { Effect } from "effect"
import type * as Env from "../../Env.js"
import type { Completion } from "../../Inference.js"
import type * as Message from "../../Message.js"
import type { TrajectoryRequest, TurnResult } from "../../Scheduler.js"
import * as TokenSequence from "../../TokenSequence.js"
import type * as Tool from "../../Tool.js"
import type { End, EventTags, Listener, Observer, TrajectoryResult, TurnEvent, TurnOutput, TurnTiming } from "../../Trajectory.js"

const EMPTY_INFO: Env.Info = Object.freeze({})

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
  private resetWaitMs = 0
  private total = 0
  private readonly stepRewards: Array<number> = []
  private readonly stepInfos: Array<Env.Info> = []
  private rolloutInfos: Record<string, unknown> = {}
  /** Each turn's output only: a completion's prompt tokens are folded into `sequence`, not kept per turn. */
  private readonly outputs: Array<TurnOutput> = []
  private readonly sequence = new TokenSequence.Builder()
  /** model, env and wait milliseconds of each turn, flat: [model1, env1, wait1, model2, ...] */
  private readonly times: Array<number> = []
  private last: End | undefined = undefined
  /** The tools the session offered (set once it started). */
  tools: ReadonlyArray<Tool.Spec> | undefined = undefined

  constructor(readonly request: TrajectoryRequest) {}

  add(event: TurnEvent): void {
    switch (event._tag) {
      case "Reset":
        this.reset(event.info, event.envMs, undefined, event.waitMs)
        break
      case "Completion":
        this.completion(event.turn, event.completion, event.modelMs)
        break
      case "Step":
        this.fold(event.reward, event.info, event.rolloutInfos, event.envMs, event.waitMs ?? 0)
        break
      case "End":
        this.last = event
        break
    }
  }

  reset(info: Env.Info, envMs: number, _messages?: ReadonlyArray<Message.Message>, waitMs = 0): void {
    this.resetInfo = info
    this.resetMs = envMs
    this.resetWaitMs = waitMs
  }

  completion(_turn: number, completion: Completion, modelMs: number): void {
    const output: TurnOutput = completion.policyVersion === undefined
      ? { finishReason: completion.finishReason, tokenIds: completion.tokenIds, logprobs: completion.logprobs }
      : {
        finishReason: completion.finishReason,
        tokenIds: completion.tokenIds,
        logprobs: completion.logprobs,
        policyVersion: completion.policyVersion
      }
    this.outputs.push(
      completion.malformedToolCall === undefined ? output : { ...output, malformedToolCall: completion.malformedToolCall }
    )
    this.sequence.add(completion)
    this.times.push(modelMs, 0, 0)
  }

  step(_turn: number, result: TurnResult, _done: boolean, envMs: number, waitMs = 0): void {
    if (result.toolMessages !== undefined) this.countToolErrors(result.toolMessages)
    this.fold(result.reward ?? 0, result.info ?? EMPTY_INFO, result.rolloutInfos, envMs, waitMs)
  }

  /** The turn's tool messages that said what was wrong, on its output (see `TurnOutput.toolErrors`). */
  private countToolErrors(messages: ReadonlyArray<Message.Message>): void {
    let errors = 0
    for (const m of messages) if (m.role === "tool" && m.content.startsWith("Error:")) errors++
    const last = this.outputs.length - 1
    if (errors > 0 && last >= 0) this.outputs[last] = { ...this.outputs[last], toolErrors: errors }
  }

  end(end: End): void {
    this.last = end
  }

  private fold(
    reward: number,
    info: Env.Info,
    rolloutInfos: Readonly<Record<string, unknown>> | undefined,
    envMs: number,
    waitMs: number
  ): void {
    this.total += reward
    this.stepRewards.push(reward)
    this.stepInfos.push(info)
    if (rolloutInfos !== undefined) Object.assign(this.rolloutInfos, rolloutInfos)
    const n = this.times.length
    if (n > 0) {
      this.times[n - 2] = envMs
      this.times[n - 1] = waitMs
    }
  }

  result(): TrajectoryResult {
    const end = this.last
    if (end === undefined) throw new Error("Trajectory.Accumulator: result() before the End event")
    let totalMs = this.resetMs + this.resetWaitMs
    const timings: Array<TurnTiming> = []
    for (let i = 0; i < this.times.length; i += 3) {
      const waitMs = this.times[i + 2]
      timings.push(waitMs === 0 ? { modelMs: this.times[i], envMs: this.times[i + 1] } : { modelMs: this.times[i], envMs: this.times[i + 1], waitMs })
      totalMs += this.times[i] + this.times[i + 1] + waitMs
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
      ...(this.tools === undefined ? {} : { tools: this.tools }),
      timings: this.resetWaitMs === 0
        ? { resetMs: this.resetMs, turns: timings, totalMs }
        : { resetMs: this.resetMs, resetWaitMs: this.resetWaitMs, turns: timings, totalMs }
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

  reset(info: Env.Info, envMs: number, messages: ReadonlyArray<Message.Message>, waitMs = 0): void {
    const t = this.tags
    this.emit(waitMs === 0 ? { _tag: "Reset", ...t, messages, info, envMs } : { _tag: "Reset", ...t, messages, info, envMs, waitMs })
  }

  completion(turn: number, completion: Completion, modelMs: number): void {
    this.emit({ _tag: "Completion", ...this.tags, turn, completion, modelMs })
  }

  step(turn: number, result: TurnResult, done: boolean, envMs: number, waitMs = 0): void {
    this.emit({
      _tag: "Step",
      ...this.tags,
      turn,
      reward: result.reward ?? 0,
      done,
      observation: result.observation,
      info: result.info ?? EMPTY_INFO,
      rolloutInfos: result.rolloutInfos,
      envMs,
      ...(waitMs === 0 ? {} : { waitMs })
    })
  }

  end(end: End): void {
    this.emit({ ...end, ...this.tags })
  }

  drain(): Effect.Effect<void> | undefined {
    return this.flush()
  }
}
