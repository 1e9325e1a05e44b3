/** Hostile-user regressions for comparing two logs that do not hold the same rows. */
import { describe, expect, it } from "@effect/vitest"
import * as Model from "../../src/view/Model.js"
import type { Summary } from "../../src/view/Model.js"

const summary = (over: Partial<Summary> & { line: number; row: number }): Summary => ({
  id: `r${over.row}-g0`,
  generation: 0,
  env: "frozen_lake",
  endReason: over.reward === null ? "error" : "done",
  reward: 0,
  envReward: over.reward ?? 0,
  advantage: 0,
  turns: 1,
  totalMs: 1,
  modelMs: 0.5,
  envMs: 0.5,
  errorTag: null,
  errorMessage: null,
  tokens: false,
  config: "{}",
  waitMs: 0,
  solved: null,
  rewards: null,
  truncated: null,
  completionTokens: null,
  completionChars: 0,
  ...over
})

describe("comparing logs with different rows", () => {
  it("the headline means and their change are over the rows in both logs, not each log's own rows", () => {
    // A: 100 rows, mostly failing; B: a partial re-run of its first 2 rows, with the same rewards
    const a = Array.from({ length: 100 }, (_, row) => summary({ line: row + 1, row, reward: row < 2 ? 1 : 0 }))
    const b = [summary({ line: 1, row: 0, reward: 1 }), summary({ line: 2, row: 1, reward: 1 })]
    const c = Model.compare(a, b, { sort: "change", dir: "desc", offset: 0, limit: 10 })
    expect(c).toMatchObject({ common: 2, onlyA: 98, onlyB: 0, improved: 0, worsened: 0, unchanged: 2 })
    // no row changed: the change is 0 (it said +0.98 with A's mean over its 100 rows)
    expect(c.meanA).toBe(1)
    expect(c.meanB).toBe(1)
    expect(c.successRateA).toBe(1)
    // no row in common: no means to compare
    const none = Model.compare(a, [summary({ line: 1, row: 500, reward: 1 })], { sort: "change", dir: "desc", offset: 0, limit: 10 })
    expect(none).toMatchObject({ common: 0, meanA: null, meanB: null })
  })
})
