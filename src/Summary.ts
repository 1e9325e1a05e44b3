/**
 * The summary of a run, folded from its items as they come.
 *
 * @since 0.1.0
 */
import type { ToolParserChoice } from "./Inference.js"
import { successOf } from "./Env.js"
import type { Item } from "./Rollout.js"
import type { TrajectoryResult } from "./Trajectory.js"
import type { DriftReport } from "./TokenSequence.js"
import { formatDrift } from "./TokenSequence.js"
import { snakeCase } from "./internal/Json.js"
import { replyChars } from "./internal/replyChars.js"

/**
 * A signal that stops a run gracefully: Ctrl-C, a `kill`, or the terminal closing (a hangup).
 *
 * @since 0.1.0
 * @category models
 */
export type StopSignal = "SIGINT" | "SIGTERM" | "SIGHUP"

/**
 * @since 0.1.0
 * @category models
 */
export interface Summary {
  readonly trajectories: number
  readonly groups: number
  /** Trajectories that ended `done` with a positive env reward. */
  readonly successes: number
  readonly successRate: number
  /**
   * Trajectories that did not fail and whose env said the episode was solved (`is_success: true` in
   * the last step's info, see `Env.SUCCESS_KEY`); `null` when no trajectory's env said either way.
   */
  readonly solved: number | null
  /** `solved` over all trajectories; `null` as `solved`. */
  readonly solvedRate: number | null
  /** Trajectories whose last step's info said whether they were solved. */
  readonly solvedReported: number
  /** Mean weighted reward of the trajectories that did not fail. */
  readonly meanReward: number
  /** Mean env (gym) total reward of the trajectories that did not fail. */
  readonly meanEnvReward: number
  readonly meanTurns: number
  /**
   * The mean of each reward column (the reward functions', then `gym_reward`) over the trajectories
   * that did not fail, by column.
   */
  readonly meanRewards: Readonly<Record<string, number>>
  /** Trajectories cut off rather than finished: ended by `max_turns`, or whose last reply ran out of tokens (`length`). */
  readonly truncated: number
  readonly truncatedByMaxTurns: number
  readonly truncatedByLength: number
  readonly truncationRate: number
  /** Completion tokens per trajectory (all its replies), over the trajectories whose every turn has token ids; `null` without any. */
  readonly meanCompletionTokens: number | null
  /** Characters of the model's replies per trajectory, over all trajectories. */
  readonly meanCompletionChars: number
  readonly turns: number
  readonly failures: number
  readonly failuresByError: Readonly<Record<string, number>>
  /** One message per error tag (the first met), so that a failure is never only a count. */
  readonly failureExamples: Readonly<Record<string, string>>
  readonly endReasons: Readonly<Record<string, number>>
  readonly badRows: number
  /** Groups with a failed trajectory left out of the log (`--failed-groups drop`). */
  readonly droppedGroups: number
  /** Complete groups found in the log and kept (`--resume`); not counted in the other figures. */
  readonly resumedGroups: number
  /** The signal that stopped the run, or `null` when it ran to its end. */
  readonly interrupted: StopSignal | null
  readonly elapsedMs: number
  readonly turnsPerSecond: number
  readonly trajectoriesPerSecond: number
  /** The drift check (`--tito-check`), when it ran. */
  readonly titoCheck?: DriftReport | undefined
  /**
   * Turns per policy version they were sampled with, when the backend's weights are versioned
   * (absent otherwise): an asynchronous trainer drops samples older than it accepts.
   */
  readonly policyVersions?: Readonly<Record<string, number>> | undefined
  /**
   * Tool use, when any trajectory called a tool or wrote a call that could not be parsed (absent
   * otherwise): `calls` in the replies, `errors` answered by a tool message saying what was wrong
   * (one that begins `Error:`, as `Tool.toolkit` answers a bad call), `malformed` replies whose call
   * was kept as text.
   */
  readonly tools?: { readonly calls: number; readonly errors: number; readonly malformed: number } | undefined
  /** The parser that read tool calls out of reply text, and what chose it, when the run offered tools. */
  readonly toolParser?: ToolParserChoice | undefined
}

/**
 * Counts a trajectory's turns by the policy version each was sampled with into `counts`.
 *
 * @since 0.2.0
 * @category folding
 */
export const countPolicyVersions = (
  counts: Record<string, number>,
  turns: ReadonlyArray<{ readonly policyVersion?: number | undefined }>
): void => {
  for (const turn of turns) {
    if (turn.policyVersion !== undefined) counts[turn.policyVersion] = (counts[turn.policyVersion] ?? 0) + 1
  }
}

/**
 * Adds items one at a time; `summary(elapsedMs)` at any point.
 *
 * @since 0.1.0
 * @category folding
 */
export class Accumulator {
  trajectories = 0
  groups = 0
  successes = 0
  solved = 0
  solvedReported = 0
  scored = 0
  rewardSum = 0
  envRewardSum = 0
  turns = 0
  failures = 0
  badRows = 0
  droppedGroups = 0
  resumedGroups = 0
  interrupted: StopSignal | null = null
  readonly failuresByError: Record<string, number> = {}
  readonly failureExamples: Record<string, string> = {}
  readonly endReasons: Record<string, number> = { done: 0, max_turns: 0, error: 0 }
  readonly rewardSums: Record<string, number> = {}
  truncatedByMaxTurns = 0
  truncatedByLength = 0
  completionTokens = 0
  tokenTrajectories = 0
  completionChars = 0
  readonly policyVersions: Record<string, number> = {}
  toolCalls = 0
  toolErrors = 0
  malformedToolCalls = 0

  add(item: Item): void {
    if (item._tag === "RowFailure") {
      this.badRows++
      return
    }
    this.groups++
    for (const record of item.records) {
      const result = record.result
      this.trajectories++
      this.turns += result.numTurns
      this.endReasons[result.endReason] = (this.endReasons[result.endReason] ?? 0) + 1
      countPolicyVersions(this.policyVersions, result.turns)
      this.addTurns(result)
      const success = successOf(result.stepInfos[result.stepInfos.length - 1])
      if (success !== undefined) this.solvedReported++
      if (record.error !== undefined) {
        this.failures++
        const tag = record.error._tag
        this.failuresByError[tag] = (this.failuresByError[tag] ?? 0) + 1
        this.failureExamples[tag] ??= `${record.result.id}: ${record.error.message}`
        continue
      }
      this.scored++
      if (record.rewards !== undefined) {
        for (const [column, value] of Object.entries(record.rewards)) {
          this.rewardSums[column] = (this.rewardSums[column] ?? 0) + (Number.isFinite(value) ? value : 0)
        }
      }
      this.rewardSum += record.reward ?? 0
      this.envRewardSum += result.totalReward
      if (result.endReason === "done" && result.totalReward > 0) this.successes++
      if (success === true) this.solved++
    }
  }

  /**
   * A trajectory's tool use, truncation and completion length: one pass over its messages and one
   * over its turns.
   */
  private addTurns(result: TrajectoryResult): void {
    for (const m of result.messages) {
      if (m.tool_calls !== undefined) this.toolCalls += m.tool_calls.length
      this.completionChars += replyChars(m)
    }
    const turns = result.turns
    let tokens = 0
    let everyTurnHasIds = turns.length > 0
    for (const turn of turns) {
      if (turn.malformedToolCall !== undefined) this.malformedToolCalls++
      if (turn.toolErrors !== undefined) this.toolErrors += turn.toolErrors
      if (turn.tokenIds === undefined) everyTurnHasIds = false
      else tokens += turn.tokenIds.length
    }
    if (everyTurnHasIds) {
      this.tokenTrajectories++
      this.completionTokens += tokens
    }
    if (result.endReason === "max_turns") this.truncatedByMaxTurns++
    else if (result.endReason !== "error" && turns.length > 0 && turns[turns.length - 1].finishReason === "length") {
      this.truncatedByLength++
    }
  }

  /**
   * Adds another accumulator's counts (its plain fields, e.g. sent as JSON by a cluster runner
   * that folded one group): the same as having added its items here. `interrupted` and
   * `resumedGroups` stay this run's.
   *
   * @since 0.3.0
   */
  merge(other: Readonly<Partial<Record<keyof Accumulator, unknown>>>): void {
    const num = (x: unknown): number => (typeof x === "number" && Number.isFinite(x) ? x : 0)
    const counts = (into: Record<string, number>, from: unknown): void => {
      if (typeof from !== "object" || from === null) return
      for (const [key, value] of Object.entries(from)) into[key] = (into[key] ?? 0) + num(value)
    }
    this.trajectories += num(other.trajectories)
    this.groups += num(other.groups)
    this.successes += num(other.successes)
    this.solved += num(other.solved)
    this.solvedReported += num(other.solvedReported)
    this.scored += num(other.scored)
    this.rewardSum += num(other.rewardSum)
    this.envRewardSum += num(other.envRewardSum)
    this.turns += num(other.turns)
    this.failures += num(other.failures)
    this.badRows += num(other.badRows)
    this.droppedGroups += num(other.droppedGroups)
    this.toolCalls += num(other.toolCalls)
    this.toolErrors += num(other.toolErrors)
    this.malformedToolCalls += num(other.malformedToolCalls)
    this.truncatedByMaxTurns += num(other.truncatedByMaxTurns)
    this.truncatedByLength += num(other.truncatedByLength)
    this.completionTokens += num(other.completionTokens)
    this.tokenTrajectories += num(other.tokenTrajectories)
    this.completionChars += num(other.completionChars)
    counts(this.rewardSums, other.rewardSums)
    counts(this.failuresByError, other.failuresByError)
    counts(this.endReasons, other.endReasons)
    counts(this.policyVersions, other.policyVersions)
    if (typeof other.failureExamples === "object" && other.failureExamples !== null) {
      for (const [key, value] of Object.entries(other.failureExamples)) {
        if (typeof value === "string") this.failureExamples[key] ??= value
      }
    }
  }

  summary(elapsedMs: number): Summary {
    const seconds = elapsedMs / 1000
    return {
      trajectories: this.trajectories,
      groups: this.groups,
      successes: this.successes,
      successRate: this.trajectories === 0 ? 0 : this.successes / this.trajectories,
      solved: this.solvedReported === 0 ? null : this.solved,
      solvedRate: this.solvedReported === 0 ? null : this.solved / this.trajectories,
      solvedReported: this.solvedReported,
      meanReward: this.scored === 0 ? 0 : this.rewardSum / this.scored,
      meanEnvReward: this.scored === 0 ? 0 : this.envRewardSum / this.scored,
      meanTurns: this.trajectories === 0 ? 0 : this.turns / this.trajectories,
      meanRewards: Object.fromEntries(
        Object.entries(this.rewardSums).map(([column, sum]) => [column, this.scored === 0 ? 0 : sum / this.scored])
      ),
      truncated: this.truncatedByMaxTurns + this.truncatedByLength,
      truncatedByMaxTurns: this.truncatedByMaxTurns,
      truncatedByLength: this.truncatedByLength,
      truncationRate: this.trajectories === 0 ? 0 : (this.truncatedByMaxTurns + this.truncatedByLength) / this.trajectories,
      meanCompletionTokens: this.tokenTrajectories === 0 ? null : this.completionTokens / this.tokenTrajectories,
      meanCompletionChars: this.trajectories === 0 ? 0 : this.completionChars / this.trajectories,
      turns: this.turns,
      failures: this.failures,
      failuresByError: { ...this.failuresByError },
      failureExamples: { ...this.failureExamples },
      endReasons: { ...this.endReasons },
      badRows: this.badRows,
      droppedGroups: this.droppedGroups,
      resumedGroups: this.resumedGroups,
      interrupted: this.interrupted,
      elapsedMs,
      turnsPerSecond: seconds > 0 ? this.turns / seconds : 0,
      trajectoriesPerSecond: seconds > 0 ? this.trajectories / seconds : 0,
      ...(Object.keys(this.policyVersions).length === 0 ? {} : { policyVersions: { ...this.policyVersions } }),
      ...(this.toolCalls === 0 && this.malformedToolCalls === 0
        ? {}
        : { tools: { calls: this.toolCalls, errors: this.toolErrors, malformed: this.malformedToolCalls } })
    }
  }
}

/**
 * The summary as `--json` prints it: its keys in snake_case, as the completions log's
 * (`success_rate`, `mean_rewards`, `turns_per_second`). The keys inside its records are data (reward
 * columns, error tags, end reasons, policy versions) and stay as they are; the nested objects'
 * own keys are single words, but the tool parser's (`chosen_by`).
 *
 * @since 0.4.0
 * @category formatting
 */
export const toJson = (s: Summary): Record<string, unknown> =>
  Object.fromEntries(Object.entries(s).map(([key, value]) => [
    snakeCase(key),
    key === "toolParser" && value !== undefined ? { name: s.toolParser!.name, chosen_by: s.toolParser!.chosenBy } : value
  ]))

/** `versions 3-5 (turns: v3 12, v4 40, v5 8)`. */
const formatVersions = (counts: Readonly<Record<string, number>>): string => {
  const versions = Object.keys(counts).map(Number).sort((a, b) => a - b)
  const range = versions.length === 1 ? `version ${versions[0]}` : `versions ${versions[0]}-${versions.at(-1)}`
  return `${range} (turns: ${versions.map((v) => `v${v} ${counts[v]}`).join(", ")})`
}

/**
 * The summary as a few readable lines.
 *
 * @since 0.1.0
 * @category formatting
 */
export const format = (s: Summary): string => {
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`
  const reasons = Object.entries(s.endReasons).map(([k, v]) => `${k} ${v}`).join(", ")
  const failures = Object.entries(s.failuresByError).map(([k, v]) => `${k} ${v}`).join(", ")
  const examples = Object.entries(s.failureExamples).map(([tag, message]) => `  ${tag}: ${truncate(message, 200)}`)
  const lines = [
    `trajectories   ${s.trajectories} (${s.groups} groups)`,
    // (not "success rate": Sudoku's shaped rewards are positive for most unfinished boards, and 93.8%
    // read as solved where 42.2% were; `solved` below is the env's own word)
    `positive reward ${pct(s.successRate)} (${s.successes} ended done with a positive env reward)`,
    ...(s.solved === null || s.solvedRate === null ? [] : [
      `solved         ${pct(s.solvedRate)} (${s.solved} of ${s.trajectories}: the env's is_success, said by ${s.solvedReported})`
    ]),
    `mean reward    ${s.meanReward.toFixed(4)} (env ${s.meanEnvReward.toFixed(4)})`,
    ...(Object.keys(s.meanRewards).length < 2 ? [] : [
      `reward columns ${Object.entries(s.meanRewards).map(([column, mean]) => `${column} ${mean.toFixed(4)}`).join(", ")} (means)`
    ]),
    `mean turns     ${s.meanTurns.toFixed(2)}`,
    `truncated      ${pct(s.truncationRate)} (${s.truncated}: max_turns ${s.truncatedByMaxTurns}, length ${s.truncatedByLength})`,
    `completion     ${
      s.meanCompletionTokens === null ? "" : `${s.meanCompletionTokens.toFixed(1)} tokens, `
    }${s.meanCompletionChars.toFixed(1)} characters per trajectory (the model's replies)`,
    `end reasons    ${reasons}`,
    `failures       ${s.failures}${failures === "" ? "" : ` (${failures})`}`,
    ...examples,
    `bad rows       ${s.badRows}`
  ]
  if (s.droppedGroups > 0) lines.push(`dropped groups ${s.droppedGroups} (with a failed trajectory; not written)`)
  if (s.resumedGroups > 0) lines.push(`resumed        ${s.resumedGroups} complete groups kept from the log`)
  lines.push(
    `elapsed        ${(s.elapsedMs / 1000).toFixed(2)} s`,
    `throughput     ${Math.round(s.turnsPerSecond)} turns/s, ${Math.round(s.trajectoriesPerSecond)} trajectories/s`,
    ...(s.titoCheck === undefined ? [] : [`tito check     ${formatDrift(s.titoCheck)}`]),
    ...(s.policyVersions === undefined ? [] : [`policy         ${formatVersions(s.policyVersions)}`]),
    ...(s.tools === undefined ? [] : [
      `tool calls     ${s.tools.calls} (${s.tools.errors} answered with an error, ${s.tools.malformed} malformed kept as text)`
    ]),
    ...(s.toolParser === undefined ? [] : [`tool parser    ${s.toolParser.name}, from ${s.toolParser.chosenBy}`])
  )
  if (s.interrupted !== null) {
    lines.push(`interrupted    by ${s.interrupted}: the groups finished are written; --resume runs the rest`)
  }
  return lines.join("\n")
}

const truncate = (text: string, max: number): string => (text.length > max ? `${text.slice(0, max - 3)}...` : text)
