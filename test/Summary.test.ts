/**
 * The summary's figures (issue 29, item 6): each reward column's mean, the truncation rate and the
 * completion length, against the records they are computed from; a cluster's merged counts give
 * the same summary.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Reward from "../src/Reward.js"
import * as Rollout from "../src/Rollout.js"
import * as Summary from "../src/Summary.js"
import { randomPolicy, records, rows, runConfig } from "./helpers.js"

const run = (maxTurns: number) =>
  Effect.gen(function*() {
    const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 4, maxTurns, rewards: [Reward.format], weights: [0.5, 1] })
    return yield* Rollout.runAll(config, rows(Array.from({ length: 24 }, (_, i) => ({ env_config: { seed: i } }))))
  }).pipe(Effect.provide(randomPolicy()))

describe("summary figures", () => {
  it.effect("the mean of each reward column, the truncation rate and the completion length, as the records give them", () =>
    Effect.gen(function*() {
      const items = yield* run(3)
      const all = records(items)
      const accumulator = new Summary.Accumulator()
      for (const item of items) accumulator.add(item)
      const s = accumulator.summary(1000)
      const scored = all.filter((r) => r.error === undefined)
      const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
      expect(Object.keys(s.meanRewards).sort()).toEqual(["format", "gym_reward"])
      expect(s.meanRewards.format).toBeCloseTo(mean(scored.map((r) => r.rewards!.format)), 12)
      expect(s.meanRewards.gym_reward).toBeCloseTo(mean(scored.map((r) => r.result.totalReward)), 12)
      const byMaxTurns = all.filter((r) => r.result.endReason === "max_turns").length
      expect(byMaxTurns).toBeGreaterThan(0)
      expect([s.truncated, s.truncatedByMaxTurns, s.truncatedByLength]).toEqual([byMaxTurns, byMaxTurns, 0])
      expect(s.truncationRate).toBeCloseTo(byMaxTurns / all.length, 12)
      const chars = all.map((r) => r.result.messages.filter((m) => m.role === "assistant").reduce((n, m) => n + m.content.length, 0))
      expect(s.meanCompletionChars).toBeCloseTo(mean(chars), 12)
      // (a scripted policy gives no token ids)
      expect(s.meanCompletionTokens).toBeNull()
      const text = Summary.format(s)
      expect(text).toContain(`truncated      ${(s.truncationRate * 100).toFixed(1)}% (${byMaxTurns}: max_turns ${byMaxTurns}, length 0)`)
      expect(text).toMatch(/^reward columns format \d\.\d{4}, gym_reward \d\.\d{4} \(means\)$/m)
      expect(text).toMatch(/^completion     \d+\.\d characters per trajectory/m)
      // a cluster's counts, folded per group on runners and merged here: the same summary
      const merged = new Summary.Accumulator()
      for (const item of items) {
        const one = new Summary.Accumulator()
        one.add(item)
        merged.merge(JSON.parse(JSON.stringify(one)))
      }
      expect(merged.summary(1000)).toEqual(s)
    }))

  it.effect("a last reply cut by the token limit (finish reason length) is truncated; token counts where every turn has ids", () =>
    Effect.gen(function*() {
      const items = yield* run(10)
      const group = items.find((item) => item._tag === "Group")!
      if (group._tag !== "Group") throw new Error("no group")
      const [first, second, ...rest] = group.records
      const cut: Rollout.TrajectoryRecord = {
        ...first,
        result: { ...first.result, endReason: "done", turns: first.result.turns.map((t, i, a) => i === a.length - 1 ? { ...t, finishReason: "length", tokenIds: [1, 2, 3] } : { ...t, tokenIds: [4] }) }
      }
      const accumulator = new Summary.Accumulator()
      accumulator.add({ ...group, records: [cut, second, ...rest] })
      const s = accumulator.summary(1000)
      expect(s.truncatedByLength).toBe(1)
      expect(s.meanCompletionTokens).toBe(3 + (cut.result.turns.length - 1))
    }))

  it.effect("solved: the env's is_success on the last step, counted apart from a positive reward (Sudoku's partial boards)", () =>
    Effect.gen(function*() {
      const items = yield* run(10)
      const all = records(items)
      const reached = all.filter((r) => r.result.stepInfos.at(-1)?.status === "goal").length
      expect(reached).toBeGreaterThan(0)
      const accumulator = new Summary.Accumulator()
      for (const item of items) accumulator.add(item)
      const s = accumulator.summary(1000)
      // FrozenLake says it on every step
      expect([s.solved, s.solvedReported]).toEqual([reached, all.filter((r) => r.result.stepInfos.length > 0).length])
      expect(s.solvedRate).toBeCloseTo(reached / all.length, 12)
      expect(Summary.format(s)).toContain(`solved         ${(s.solvedRate! * 100).toFixed(1)}% (${reached} of ${all.length}: the env's is_success`)
      // a positive reward that is not a solved episode: the success rate counts it, solved does not
      const group = items.find((item) => item._tag === "Group")!
      if (group._tag !== "Group") throw new Error("no group")
      const partial = (r: Rollout.TrajectoryRecord): Rollout.TrajectoryRecord => ({
        ...r,
        error: undefined,
        result: { ...r.result, endReason: "done", error: undefined, totalReward: 0.4, stepInfos: [...r.result.stepInfos.slice(0, -1), { is_success: false }] }
      })
      const one = new Summary.Accumulator()
      one.add({ ...group, records: group.records.map(partial) })
      const p = one.summary(1)
      expect([p.successes, p.solved, p.solvedRate]).toEqual([group.records.length, 0, 0])
      // no env that says: null, and no line
      const silent = new Summary.Accumulator()
      silent.add({ ...group, records: group.records.map((r) => ({ ...r, result: { ...r.result, stepInfos: [] } })) })
      expect([silent.summary(1).solved, silent.summary(1).solvedRate]).toEqual([null, null])
      expect(Summary.format(silent.summary(1))).not.toContain("solved")
    }))

  it("--json's keys are snake_case, as the log's; the keys of its records (columns, tags) are kept", () => {
    const accumulator = new Summary.Accumulator()
    accumulator.rewardSums.gymReward = 2
    accumulator.failuresByError.EnvError = 1
    accumulator.scored = 1
    const json = Summary.toJson(accumulator.summary(2000))
    expect(Object.keys(json).filter((k) => /[A-Z]/.test(k))).toEqual([])
    expect(json).toMatchObject({
      success_rate: 0,
      mean_reward: 0,
      mean_rewards: { gymReward: 2 },
      failures_by_error: { EnvError: 1 },
      turns_per_second: 0,
      elapsed_ms: 2000,
      solved: null,
      solved_rate: null,
      bad_rows: 0
    })
  })
})
