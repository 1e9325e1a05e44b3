/**
 * The log line written directly (CompletionsLog.encodeLine's path for plain records) is the text
 * that building the line object (`toLine`) and stringifying it gives, byte for byte: over records
 * generated with awkward values (keys of every kind in infos, run keys in rollout_infos, -0, NaN
 * advantages, unicode and escapes in messages, bigints, undefined fields, typed errors).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Json from "../src/internal/Json.js"
import * as Rollout from "../src/Rollout.js"
import { UnexpectedError } from "../src/Scheduler.js"
import { randomPolicy, records, rows, runConfig } from "./helpers.js"

const general = (record: Rollout.TrajectoryRecord): string => Json.stringify(CompletionsLog.toLine(record))

/** Mostly `undefined` (so that most records take the direct path), sometimes a value. */
const rarely = <A>(arb: fc.Arbitrary<A>) =>
  fc.oneof({ arbitrary: fc.constant(undefined), weight: 29 }, { arbitrary: arb, weight: 1 })
const key = fc.oneof(
  fc.constantFrom("a", "b", "0", "12", "gym_done", "__proto__x", "é", "toString", "\n\"k"),
  fc.string({ maxLength: 4 }),
  rarely(fc.constantFrom("total_reward", "step_infos"))
).map((k) => k ?? "z")
/** A finite double mostly; NaN and the infinities (which JSON writes as null) sometimes. */
const double = fc.oneof(
  { arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }), weight: 99 },
  { arbitrary: fc.constantFrom(Number.NaN, Infinity, -Infinity), weight: 1 }
)
const leaf = fc.oneof(
  { arbitrary: fc.string({ maxLength: 8 }), weight: 40 },
  { arbitrary: fc.constantFrom("a\nb\"c\\", "\u2028", "\ud800", "😀"), weight: 10 },
  { arbitrary: double, weight: 40 },
  { arbitrary: fc.integer(), weight: 20 },
  { arbitrary: fc.constant(-0), weight: 10 },
  { arbitrary: fc.boolean(), weight: 10 },
  { arbitrary: fc.constant(null), weight: 10 },
  // what JSON cannot write as such: a bigint (written by the general path), undefined (left out, or null in an array)
  { arbitrary: fc.constant(undefined), weight: 3 },
  { arbitrary: fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }), weight: 3 }
)
const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: "small" }, leaf, fc.array(tie("value"), { maxLength: 3 }), fc.dictionary(key, tie("value"), { maxKeys: 3 }))
})).value
const info = fc.dictionary(key, json, { maxKeys: 4 })
const message = fc.record({ role: fc.constantFrom("system" as const, "user" as const, "assistant" as const), content: fc.string({ maxLength: 20 }) })
const ms = fc.oneof(fc.double({ min: 0, max: 1e6, noNaN: true }), fc.constant(0.0004999), fc.constant(1e-7))
const turn = fc.record({
  finishReason: fc.constantFrom("stop" as const, "length" as const),
  tokenIds: rarely(fc.array(fc.nat(), { maxLength: 2 })),
  logprobs: fc.constant(undefined),
  policyVersion: rarely(fc.nat())
})

const record = fc.record({
  row: fc.nat(),
  generation: fc.nat(),
  env: fc.option(fc.string({ maxLength: 5 }), { nil: undefined }),
  envConfig: info,
  messages: fc.array(message, { maxLength: 4 }),
  rewards: fc.option(fc.dictionary(key, double), { nil: undefined }),
  reward: fc.option(fc.oneof(double, fc.constant(-0)), { nil: undefined }),
  advantage: fc.option(fc.oneof(double, fc.constant(Number.NaN)), { nil: undefined }),
  rolloutInfos: info,
  totalReward: double,
  stepRewards: fc.array(double, { maxLength: 3 }),
  numTurns: fc.nat(20),
  resetInfo: fc.option(info, { nil: undefined }),
  stepInfos: fc.array(info, { maxLength: 3 }),
  endReason: fc.constantFrom("done" as const, "max_turns" as const, "error" as const),
  error: fc.option(fc.string({ maxLength: 6 }), { nil: undefined }),
  turns: fc.array(turn, { maxLength: 3 }),
  attempts: rarely(fc.integer({ min: 1, max: 3 })),
  timings: fc.record({ totalMs: ms, resetMs: ms, turns: fc.array(fc.record({ modelMs: ms, envMs: ms }), { maxLength: 3 }) })
}).map((r): Rollout.TrajectoryRecord => {
  const error = r.error === undefined ? undefined : new UnexpectedError({ phase: "model", detail: r.error })
  return {
    row: { index: r.row, envConfig: r.envConfig, messages: [], dataDict: {} } as unknown as Rollout.TrajectoryRecord["row"],
    rewards: r.rewards,
    reward: r.reward,
    advantage: r.advantage,
    error,
    ...(r.attempts === undefined ? {} : { attempts: r.attempts, attemptErrors: [] }),
    result: {
      id: `r${r.row}-g${r.generation}`,
      row: r.row,
      generation: r.generation,
      env: r.env,
      messages: r.messages,
      totalReward: r.totalReward,
      stepRewards: r.stepRewards,
      numTurns: r.numTurns,
      resetInfo: r.resetInfo,
      stepInfos: r.stepInfos,
      rolloutInfos: r.rolloutInfos,
      endReason: r.endReason,
      error,
      turns: r.turns,
      tokens: undefined,
      timings: r.timings
    }
  }
})

describe("log encoding: the direct path writes toLine's text", () => {
  it("for generated records (property)", () => {
    let direct = 0
    fc.assert(
      fc.property(record, (r) => {
        let expected: string | undefined
        try {
          expected = general(r)
        } catch {
          expected = undefined
        }
        let actual: string | undefined
        try {
          actual = CompletionsLog.encodeLine(r)
        } catch {
          actual = undefined
        }
        expect(actual).toBe(expected)
        if (CompletionsLog.encodesDirectly(r)) direct++
      }),
      { numRuns: 3000 }
    )
    // the direct path is what most generated records take (not only the general one)
    expect(direct).toBeGreaterThan(900)
  })

  it.scoped("for the lines of a FrozenLake run", () =>
    Effect.gen(function*() {
      const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 4 })
      const items = yield* Rollout.runAll(config, rows(Array.from({ length: 16 }, (_, i) => ({ env_config: { seed: i } }))))
      const all = records(items)
      expect(all.length).toBe(64)
      for (const r of all) expect(CompletionsLog.encodeLine(r)).toBe(general(r))
    }).pipe(Effect.provide(randomPolicy())))
})
