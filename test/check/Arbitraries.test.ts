import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Effect, Result, Schema } from "effect"
import * as EnvCheck from "../../src/check/EnvCheck.js"
import { Config as FrozenLakeConfig, FrozenLake } from "../../src/envs/FrozenLake.js"
import { canonical, jsonProblem, show } from "../../src/internal/inspect.js"

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
const ASTRAL = /[\u{10000}-\u{10ffff}]/u
const COMBINING = /\p{M}/u
const RTL = /[\p{Script=Hebrew}\p{Script=Arabic}\u200f\u202e\u2067\u2069\u061c]/u
const UNUSUAL_SPACE = /[\u00a0\u2003\u3000\u2028\u200b\ufeff]/
const UNUSUAL = new RegExp(`${ASTRAL.source}|${COMBINING.source}|${RTL.source}|${UNUSUAL_SPACE.source}`, "u")

const sample = <A>(arbitrary: Arbitrary.Arbitrary<A>, n = 300) =>
  Effect.runSync(Arbitrary.sampleEffect(arbitrary, { seed: 1, count: n }))

describe("Arbitraries: each produces what it claims", () => {
  const list = ["<action>up</action>", "<action>down</action>", "wait"]

  it.prop("actions(strings) gives only the given strings", [EnvCheck.actions(list)], ([action]) => {
    expect(list).toContain(action)
  })

  it.prop(
    "actions(patterns) gives strings that match a pattern",
    [EnvCheck.actions([/^\[[1-9] [1-9] [1-9]\]$/, /^<action>(up|down)<\/action>$/])],
    ([action]) => {
      expect(/^\[[1-9] [1-9] [1-9]\]$/.test(action) || /^<action>(up|down)<\/action>$/.test(action)).toBe(true)
    }
  )

  it("actions([]) falls back to common action-like replies", () => {
    const words = new RegExp(`\\b(${EnvCheck.COMMON_ACTION_WORDS.join("|")})\\b`)
    for (const reply of sample(EnvCheck.actions([]))) expect(reply).toMatch(words)
  })

  it.prop("blank gives empty or whitespace/invisible-only strings", [EnvCheck.blank], ([text]) => {
    expect(text).toMatch(/^[\s\u200b]*$/)
  })

  it.prop("junk gives well-formed text", [EnvCheck.junk], ([text]) => {
    expect(typeof text).toBe("string")
    expect(LONE_SURROGATE.test(text)).toBe(false)
  })

  it.prop("long gives well-formed texts of at least LONG_MIN_LENGTH units", [EnvCheck.long], ([text]) => {
    expect(text.length).toBeGreaterThanOrEqual(EnvCheck.LONG_MIN_LENGTH)
    expect(LONE_SURROGATE.test(text)).toBe(false)
  }, { arbitrary: { runs: 30 } })

  it.prop("unicode gives well-formed text with at least one unusual piece", [EnvCheck.unicode], ([text]) => {
    expect(LONE_SURROGATE.test(text)).toBe(false)
    expect(text).toMatch(UNUSUAL)
  })

  it("unicode covers astral characters, combining marks, right-to-left text and unusual whitespace", () => {
    const texts = sample(EnvCheck.unicode)
    for (const pattern of [ASTRAL, COMBINING, RTL, UNUSUAL_SPACE]) {
      expect(texts.some((t) => pattern.test(t)), pattern.source).toBe(true)
    }
  })

  it("reply mixes every kind: action-like, junk, empty, very long, unicode", () => {
    const replies = sample(EnvCheck.reply, 600)
    expect(replies.some((r) => r === "")).toBe(true)
    expect(replies.some((r) => r.length >= EnvCheck.LONG_MIN_LENGTH)).toBe(true)
    expect(replies.some((r) => ASTRAL.test(r))).toBe(true)
    expect(replies.some((r) => /<action>\w+<\/action>/.test(r))).toBe(true)
    expect(replies.some((r) => /<\/?(action|answer|think)>/.test(r) && !/^<action>\w+<\/action>$/.test(r))).toBe(true)
  })

  it.prop("replies gives 1 to 10 replies", [EnvCheck.replies], ([replies]) => {
    expect(replies.length).toBeGreaterThanOrEqual(1)
    expect(replies.length).toBeLessThanOrEqual(10)
  })

  it("repliesFor mixes well-formed actions with the default mix", () => {
    const replies = sample(EnvCheck.repliesFor(list, { minLength: 3, maxLength: 3 }), 100)
    expect(replies.every((r) => r.length === 3)).toBe(true)
    const flat = replies.flat()
    expect(flat.filter((r) => list.includes(r)).length).toBeGreaterThan(flat.length / 3)
    expect(flat.some((r) => !list.includes(r))).toBe(true)
  })

  const Configs = Schema.Struct({
    seed: Schema.Int.check(Schema.isBetween({ minimum: -1000, maximum: 1000 })),
    size: Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 8 })),
    p: Schema.Number.check(Schema.isBetween({ minimum: 0.5, maximum: 1 }))
  })

  it.prop("config(schema) gives configs the schema accepts, and so does the env", [EnvCheck.config(Configs)], ([config]) => {
    expect(Result.isSuccess(Schema.decodeUnknownResult(Configs)(config))).toBe(true)
    expect(Result.isSuccess(Schema.decodeUnknownResult(FrozenLakeConfig)(config))).toBe(true)
    expect(Result.isSuccess(FrozenLake.prepare(config))).toBe(true)
  })

  it.prop(
    "config(schema) gives encoded values: what a dataset row holds",
    [EnvCheck.config(Schema.Struct({ n: Schema.NumberFromString, tags: Schema.Array(Schema.Trim) }))],
    ([config]) => {
      expect(typeof config.n).toBe("string")
      expect(Number.isNaN(Number(config.n)) && config.n !== "NaN").toBe(false)
      expect(config.tags.every((t) => t === t.trim())).toBe(true)
    }
  )
})

describe("inspect: JSON problems, canonical text, rendering", () => {
  it.prop("any JSON value has no problem", [Schema.Json], ([value]) => {
    expect(jsonProblem(value, "info")).toBeUndefined()
  })

  it("names the first problem and its path", () => {
    const cyclic: Record<string, unknown> = { a: [1, 2] }
    ;(cyclic.a as Array<unknown>).push({ back: cyclic })
    const cases: ReadonlyArray<[unknown, string | undefined]> = [
      [{ x: NaN }, "info.x is NaN, which JSON cannot hold (it is written as null)"],
      [{ x: [1, -Infinity] }, "info.x[1] is -Infinity, which JSON cannot hold (it is written as null)"],
      [{ f: () => 1 }, "info.f is a function, which JSON drops"],
      [{ list: [undefined] }, "info.list[0] is undefined, which JSON writes as null"],
      [{ "odd key": new Map() }, "info[\"odd key\"] is a Map, which JSON writes as {}"],
      [{ s: new Set([1]) }, "info.s is a Set, which JSON writes as {}"],
      [{ sym: Symbol("x") }, "info.sym is a symbol, which JSON drops"],
      [cyclic, "info.a[2].back refers back to info (a cycle)"],
      [{ big: 12345678901234567890n, when: new Date(0), missing: undefined }, undefined]
    ]
    for (const [value, problem] of cases) expect(jsonProblem(value, "info")).toBe(problem)
    const shared = { leaf: 1 }
    expect(jsonProblem({ a: shared, b: shared }, "info")).toBeUndefined()
    const throwing = { get boom(): number { throw new Error("getter exploded") } }
    expect(jsonProblem(throwing, "info")).toBe("info cannot be written as JSON: getter exploded")
  })

  it.prop("canonical text ignores key order and keeps what JSON would lose", [Schema.Json], ([value]) => {
    const reversed = (v: unknown): unknown =>
      Array.isArray(v)
        ? v.map(reversed)
        : typeof v === "object" && v !== null
        ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reversed(x)]))
        : v
    expect(canonical(reversed(value))).toBe(canonical(value))
  })

  it("canonical text tells NaN, null, undefined and a string apart", () => {
    const texts = [NaN, null, undefined, "NaN", Infinity, () => 1].map((x) => canonical({ x }))
    expect(new Set(texts).size).toBe(texts.length)
  })

  it("show renders non-JSON values for what they are, and cuts long strings", () => {
    const cyclic: Record<string, unknown> = { n: NaN }
    cyclic.self = cyclic
    expect(show(cyclic)).toBe("{\"n\":NaN,\"self\":[cycle]}")
    expect(show({ f: function named() {} })).toBe("{\"f\":[function named]}")
    expect(show("x".repeat(50), 10)).toBe("\"xxxxxxxxxx…(+40 chars)\"")
    expect(show("😀😀", 3)).toBe("\"😀…(+2 chars)\"")
  })
})
