/**
 * The summary of a run, folded from its items as they come.
 *
 * @since 0.1.0
 */
import type { Item } from "./Rollout.js"
import type { DriftReport } from "./TokenSequence.js"
import { formatDrift } from "./TokenSequence.js"

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
  /** Mean weighted reward of the trajectories that did not fail. */
  readonly meanReward: number
  /** Mean env (gym) total reward of the trajectories that did not fail. */
  readonly meanEnvReward: number
  readonly meanTurns: number
  readonly turns: number
  readonly failures: number
  readonly failuresByError: Readonly<Record<string, number>>
  readonly endReasons: Readonly<Record<string, number>>
  readonly badRows: number
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
  scored = 0
  rewardSum = 0
  envRewardSum = 0
  turns = 0
  failures = 0
  badRows = 0
  readonly failuresByError: Record<string, number> = {}
  readonly endReasons: Record<string, number> = { done: 0, max_turns: 0, error: 0 }
  readonly policyVersions: Record<string, number> = {}

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
      if (record.error !== undefined) {
        this.failures++
        this.failuresByError[record.error._tag] = (this.failuresByError[record.error._tag] ?? 0) + 1
        continue
      }
      this.scored++
      this.rewardSum += record.reward ?? 0
      this.envRewardSum += result.totalReward
      if (result.endReason === "done" && result.totalReward > 0) this.successes++
    }
  }

  summary(elapsedMs: number): Summary {
    const seconds = elapsedMs / 1000
    return {
      trajectories: this.trajectories,
      groups: this.groups,
      successes: this.successes,
      successRate: this.trajectories === 0 ? 0 : this.successes / this.trajectories,
      meanReward: this.scored === 0 ? 0 : this.rewardSum / this.scored,
      meanEnvReward: this.scored === 0 ? 0 : this.envRewardSum / this.scored,
      meanTurns: this.trajectories === 0 ? 0 : this.turns / this.trajectories,
      turns: this.turns,
      failures: this.failures,
      failuresByError: { ...this.failuresByError },
      endReasons: { ...this.endReasons },
      badRows: this.badRows,
      elapsedMs,
      turnsPerSecond: seconds > 0 ? this.turns / seconds : 0,
      trajectoriesPerSecond: seconds > 0 ? this.trajectories / seconds : 0,
      ...(Object.keys(this.policyVersions).length === 0 ? {} : { policyVersions: { ...this.policyVersions } })
    }
  }
}

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
  return [
    `trajectories   ${s.trajectories} (${s.groups} groups)`,
    `success rate   ${pct(s.successRate)} (${s.successes} ended done with a positive env reward)`,
    `mean reward    ${s.meanReward.toFixed(4)} (env ${s.meanEnvReward.toFixed(4)})`,
    `mean turns     ${s.meanTurns.toFixed(2)}`,
    `end reasons    ${reasons}`,
    `failures       ${s.failures}${failures === "" ? "" : ` (${failures})`}`,
    `bad rows       ${s.badRows}`,
    `elapsed        ${(s.elapsedMs / 1000).toFixed(2)} s`,
    `throughput     ${Math.round(s.turnsPerSecond)} turns/s, ${Math.round(s.trajectoriesPerSecond)} trajectories/s`,
    ...(s.titoCheck === undefined ? [] : [`tito check     ${formatDrift(s.titoCheck)}`]),
    ...(s.policyVersions === undefined ? [] : [`policy         ${formatVersions(s.policyVersions)}`])
  ].join("\n")
}
