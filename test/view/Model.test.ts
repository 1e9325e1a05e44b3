import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import * as Model from "../../src/view/Model.js"
import { pack, unpack } from "../../src/view/Protocol.js"

const summary = (over: Partial<Model.Summary>): Model.Summary => ({
  line: 1,
  id: "r0-g0",
  row: 0,
  generation: 0,
  env: "frozen_lake",
  endReason: "done",
  reward: 1,
  envReward: 1,
  advantage: 0,
  turns: 2,
  totalMs: 3,
  modelMs: 1,
  envMs: 1,
  errorTag: null,
  errorMessage: null,
  tokens: false,
  config: "{\"seed\":0}",
  waitMs: 0,
  solved: null,
  rewards: null,
  truncated: null,
  completionTokens: null,
  completionChars: 0,
  ...over
})

describe("the report's model", () => {
  // (printable ASCII, as fast-check's strings were: a URL cannot carry a lone surrogate)
  const text = Schema.String.check(Schema.isPattern(/^[ -~]{1,8}$/))
  const between = (minimum: number, maximum: number) => Schema.isBetween({ minimum, maximum })
  const query = Schema.Struct({
    env: Schema.UndefinedOr(Schema.Literals(["frozen_lake", "sudoku", "a b&c=d"])),
    end: Schema.UndefinedOr(Schema.Literals(Model.END_REASONS)),
    tag: Schema.UndefinedOr(text),
    row: Schema.UndefinedOr(Schema.Int.check(between(0, 1000))),
    min: Schema.UndefinedOr(Schema.Finite.check(between(-5, 5))),
    max: Schema.UndefinedOr(Schema.Finite.check(between(-5, 5))),
    q: Schema.UndefinedOr(text),
    sort: Schema.Literals(Model.SORT_KEYS),
    dir: Schema.Literals(["asc", "desc"]),
    offset: Schema.Int.check(between(0, 10_000)),
    limit: Schema.Int.check(between(1, Model.MAX_LIMIT))
  })

  it.prop("every query survives its URL form (every view of the browser is addressable)", [query], ([q]) => {
    const normalized = { ...q, min: q.min === undefined ? undefined : Object.is(q.min, -0) ? 0 : q.min, max: q.max === undefined ? undefined : Object.is(q.max, -0) ? 0 : q.max }
    expect(Model.parseQuery(new URLSearchParams(Model.queryParams(normalized).toString()))).toEqual(normalized)
  })

  it("nonsense in the URL falls back to the defaults", () => {
    expect(Model.parseQuery(new URLSearchParams("end=nope&sort=evil&dir=x&offset=-3&limit=99999&min=abc&row=1.7"))).toEqual({
      ...Model.DEFAULT_QUERY,
      env: undefined,
      end: undefined,
      tag: undefined,
      row: 1,
      min: undefined,
      max: undefined,
      q: undefined,
      limit: Model.MAX_LIMIT
    })
  })

  it.prop("a summary survives its packed form", [Schema.Struct({ reward: Schema.NullOr(Schema.Finite), errorTag: Schema.NullOr(Schema.String), tokens: Schema.Boolean })], ([generated]) => {
    const over = { ...generated, reward: generated.reward !== null && Object.is(generated.reward, -0) ? 0 : generated.reward }
    // (-0 is not generated: JSON writes it as 0, so a log never holds it)
    const s = summary(over)
    expect(unpack(JSON.parse(JSON.stringify(pack(s))))).toEqual(s)
  })

  it("compares two logs row by row: the change of each row's mean reward, largest first; different env_configs flagged", () => {
    const a = [
      summary({ line: 1, row: 0, reward: 1 }),
      summary({ line: 2, row: 0, reward: 0 }),
      summary({ line: 3, row: 1, reward: 1 }),
      summary({ line: 4, row: 2, reward: 0 }),
      summary({ line: 5, row: 3, reward: null, errorTag: "EnvError" })
    ]
    const b = [
      summary({ line: 1, row: 0, reward: 1 }),
      summary({ line: 2, row: 1, reward: 0.25 }),
      summary({ line: 3, row: 2, reward: 1, config: "{\"seed\":9}" }),
      summary({ line: 4, row: 4, reward: 1 })
    ]
    const c = Model.compare(a, b, { sort: "change", dir: "desc", offset: 0, limit: 10 })
    expect(c.rows.map((r) => [r.row, r.delta])).toEqual([[2, 1], [1, -0.75], [0, 0.5]])
    expect(c).toMatchObject({ common: 3, onlyA: 1, onlyB: 1, improved: 2, worsened: 1, unchanged: 0, configDiffers: 1 })
    expect(c.rows[0].configDiffers).toBe(true)
    expect(Model.compare(a, b, { sort: "delta", dir: "asc", offset: 0, limit: 10 }).rows.map((r) => r.row)).toEqual([1, 0, 2])
    expect(Model.compare(a, b, { sort: "row", dir: "asc", offset: 1, limit: 1 }).rows.map((r) => r.row)).toEqual([1])
  })

  it("the overview bins long series, counts groups that teach nothing, keeps failures out of the means", () => {
    const many = Array.from({ length: 5000 }, (_, i) => summary({ line: i + 1, row: i, reward: i % 7 }))
    const o = Model.overview(many)
    expect(o.rewardByRow.x.length).toBeLessThanOrEqual(Model.MAX_POINTS)
    expect(o.rewardByRow.binned).toBe(3)
    expect(o.rewardHistogram.discrete).toBe(true)
    expect(o.rewardHistogram.counts.reduce((a, b) => a + b, 0)).toBe(5000)
    const groups = Model.overview([
      summary({ row: 0, reward: 1, advantage: 0 }),
      summary({ row: 0, reward: 1, advantage: 0 }),
      summary({ row: 1, reward: 1, advantage: 0.7 }),
      summary({ row: 1, reward: 0, advantage: -0.7 }),
      summary({ row: 1, reward: null, advantage: null, errorTag: "InferenceError", errorMessage: "503", endReason: "error" })
    ])
    expect(groups.advantageByGroup.flatGroups).toBe(1)
    expect(groups.meanReward).toBe(0.75)
    expect(groups.failuresByTag).toEqual([{ tag: "InferenceError", count: 1, examples: [{ line: 1, id: "r0-g0", message: "503" }] }])
    const continuous = Model.overview(Array.from({ length: 100 }, (_, i) => summary({ reward: i / 99 })))
    expect(continuous.rewardHistogram.discrete).toBe(false)
    expect(continuous.rewardHistogram.counts.length).toBe(30)
    expect(continuous.rewardHistogram.counts.reduce((a, b) => a + b, 0)).toBe(100)
  })
})
