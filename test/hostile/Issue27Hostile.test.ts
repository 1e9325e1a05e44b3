/**
 * Issue 27 (Effect 4 port, new run engine, one RunSpec) under a hostile user, 2026-12-03: the
 * repros of the defects found, each failing before its fix. Unit layer: no child process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Result, Schema, Stream } from "effect"
import * as Env from "../../src/Env.js"
import * as Reward from "../../src/Reward.js"
import * as Rollout from "../../src/Rollout.js"
import * as RunSpec from "../../src/RunSpec.js"
import * as Api from "../../src/rollout-server/Api.js"
import { Counters, countingEnv, echoPolicy } from "../helpers.js"

const failure = (result: Result.Result<RunSpec.RunSpec, RunSpec.RunConfigError>) =>
  Result.isFailure(result) ? result.failure.message : "decoded"

/** The first line of the run's failure (or "ok"). */
const runOnce = (rollout: Rollout.Rollout<never>, rows = 1) =>
  Stream.range(0, rows - 1).pipe(
    Stream.map((seed) => ({ env_config: { seed } })),
    Rollout.run(rollout),
    Stream.runCollect,
    Effect.exit,
    Effect.provide(echoPolicy())
  )

const firstLine = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isSuccess(exit) ? "ok" : Cause.pretty(exit.cause).split("\n")[0]

describe("issue 27, hostile (2026-12-03)", () => {
  it("RunSpec.decode with flag names: a key named after an Object.prototype member is an unknown setting (it threw 'Schema validation failed')", () => {
    for (const key of ["constructor", "toString", "hasOwnProperty", "__proto__"]) {
      const input = JSON.parse(`{"${key}": 1}`) as RunSpec.Input
      expect(() => RunSpec.decode(input, "flags")).not.toThrow()
      expect(failure(RunSpec.decode(input, "flags"))).toMatch(new RegExp(`^${key}: unknown setting`))
    }
  })

  it.effect("Rollout.make: a bad `weights` is refused as `weights`, duplicate `rewards` as `rewards` (it said rewardWeights / --reward-weights / --reward-funcs)", () =>
    Effect.gen(function*() {
      const env = countingEnv(new Counters())
      const nan = yield* runOnce(Rollout.make({ envs: [env], weights: [Number.NaN] }))
      expect(firstLine(nan)).toMatch(/RunConfigError: weights: /)
      const count = yield* runOnce(Rollout.make({ envs: [env], weights: [1, 2, 3] }))
      expect(firstLine(count)).toMatch(/RewardConfigError: weights: 3 weight\(s\) given for 1/)
      const short = Reward.define({ name: "short", score: () => 1 } as never)
      const twice = yield* runOnce(Rollout.make({ envs: [env], rewards: [short, short] }))
      expect(firstLine(twice)).toMatch(/RewardConfigError: rewards: column short given twice/)
    }))

  it("a NaN or an overflowing number is described as what it is, not as null (rewardWeights: [NaN] read 'got [null]'; the server's num_generations 1e309 read 'got null')", () => {
    expect(failure(RunSpec.decode({ rewardWeights: [Number.NaN] }, "fields"))).not.toMatch(/null/)
    const body = JSON.parse(`{"requests":[{"num_generations":1e309}]}`)
    const decoded = Schema.decodeUnknownResult(Api.RolloutBatch)(body)
    expect(Result.isFailure(decoded)).toBe(true)
    if (Result.isFailure(decoded)) expect(String(decoded.failure)).not.toMatch(/got null/)
  })

  it.effect("an env whose make throws fails its trajectories, as a throwing step does, not the whole run (it stopped the run: 'internal error: boom')", () =>
    Effect.gen(function*() {
      const throwing = Env.define({
        name: "throwing",
        make: (): Effect.Effect<Env.Env, Env.EnvError> => {
          throw new Error("boom in make")
        }
      })
      const exit = yield* runOnce(Rollout.make({ envs: [throwing], numGenerations: 2 }), 2)
      expect(firstLine(exit)).toBe("ok")
      if (Exit.isSuccess(exit)) {
        const items = Array.from(exit.value)
        expect(items).toHaveLength(2)
        for (const item of items) {
          expect(item._tag).toBe("Group")
          if (item._tag === "Group") for (const record of item.records) expect(record.error).toBeDefined()
        }
      }
    }))
})
