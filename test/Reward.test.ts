import { describe, expect, it } from "@effect/vitest"
import { Effect, Result, Schema } from "effect"
import * as Reward from "../src/Reward.js"
import type { TrajectoryResult } from "../src/Trajectory.js"

const trajectory = (completion: string, totalReward = 1): TrajectoryResult => ({
  id: "r0-g0",
  row: 0,
  generation: 0,
  env: "x",
  messages: [{ role: "user", content: "q" }, { role: "assistant", content: completion }],
  totalReward,
  stepRewards: [totalReward],
  numTurns: 1,
  resetInfo: {},
  stepInfos: [{}],
  rolloutInfos: {},
  endReason: "done",
  error: undefined,
  turns: [],
  timings: { resetMs: 0, turns: [], totalMs: 0 }
})

const formatScore = (text: string) =>
  Effect.runSync(Reward.format.score({ completion: text, messages: [], dataDict: {}, trajectory: trajectory(text) }))

describe("Reward", () => {
  it("format: <think>...</think> then <answer>...</answer>, whole reply, dot matches newline", () => {
    expect(formatScore("<think>a</think><answer>b</answer>")).toBe(1)
    expect(formatScore("<think>multi\nline</think>\n  <answer>x\ny</answer>")).toBe(1)
    expect(formatScore("<think></think>\u3000<answer></answer>")).toBe(1) // Python \s includes U+3000
    expect(formatScore(" <think>a</think><answer>b</answer>")).toBe(0)
    expect(formatScore("<think>a</think><answer>b</answer>\n")).toBe(0) // the reference anchors at the very end
    expect(formatScore("<think>a</think>x<answer>b</answer>")).toBe(0)
    expect(formatScore("<answer>b</answer>")).toBe(0)
    expect(formatScore("<think>a</think>\ufeff<answer>b</answer>")).toBe(0) // U+FEFF is not \s in Python
  })

  it("columns: functions then gym_reward; weights one per column, gym last", () => {
    const cols = Result.getOrThrow(Reward.columns([Reward.format], [0.2, 1.0]))
    expect(cols.names).toEqual(["format", "gym_reward"])
    expect(Reward.weighted(cols, { format: 1, gym_reward: 0.5 })).toBeCloseTo(0.7)
    const defaults = Result.getOrThrow(Reward.columns([Reward.format]))
    expect(defaults.weights).toEqual([1, 1])
    const mismatch = Result.flip(Reward.columns([Reward.format], [1])).pipe(Result.getOrThrow)
    expect(mismatch.message).toBe(
      "--reward-weights: 1 weight(s) given for 2 reward column(s) (format, gym_reward); give one per column, the gym_reward weight last"
    )
    expect(Result.isFailure(Reward.columns([Reward.format, Reward.format]))).toBe(true)
  })

  it.effect("score: each function on the last reply, then the env total", () =>
    Effect.gen(function*() {
      const length = Reward.define({ name: "length", score: ({ completion }) => completion.length })
      const cols = Result.getOrThrow(Reward.columns([Reward.format, length]))
      const scores = yield* Reward.score(cols, trajectory("<think>a</think><answer>b</answer>", 0.5), {})
      expect(scores).toEqual({ format: 1, length: 34, gym_reward: 0.5 })
    }))

  it.effect("a reward function that throws or returns a non-number is a RewardError", () =>
    Effect.gen(function*() {
      const throws = Reward.define({ name: "throws", score: () => { throw new Error("bad") } })
      const nan = Reward.define({ name: "nan", score: async () => NaN })
      for (const f of [throws, nan]) {
        const error = yield* Effect.flip(Reward.score(Result.getOrThrow(Reward.columns([f])), trajectory("x"), {}))
        expect(error._tag).toBe("RewardError")
        expect(error.reward).toBe(f.name)
      }
    }))

  it("advantages: (r - mean) / (sample std + 1e-4); failed ones excluded", () => {
    const adv = Reward.advantages([1, 0, 0, 1])
    const std = Math.sqrt(1 / 3)
    expect(adv).toEqual([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.5 / (std + 1e-4)])
    expect(Reward.advantages([1, 1, 1])).toEqual([0, 0, 0])
    expect(Reward.advantages([2])).toEqual([0])
    expect(Reward.advantages([1, undefined, 0])).toEqual([
      0.5 / (Math.SQRT1_2 + 1e-4),
      undefined,
      -0.5 / (Math.SQRT1_2 + 1e-4)
    ])
  })

  it.prop("advantages of a group sum to zero and keep the order of rewards", [
    Schema.Array(Schema.Finite.check(Schema.isBetween({ minimum: -100, maximum: 100 }))).check(Schema.isBetweenLength(2, 32))
  ], ([rewards]) => {
    const adv = Reward.advantages(rewards) as Array<number>
    expect(Math.abs(adv.reduce((a, b) => a + b, 0))).toBeLessThan(1e-6 * rewards.length * 100)
    for (let i = 0; i < rewards.length; i++) {
      for (let j = 0; j < rewards.length; j++) {
        if (rewards[i] < rewards[j]) expect(adv[i]).toBeLessThanOrEqual(adv[j])
      }
    }
  })
})
