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
})
