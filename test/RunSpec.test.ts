/** The one run specification: decoded once by every front end, sent to the cluster's runners as JSON. */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Result } from "effect"
import * as RunSpec from "../src/RunSpec.js"

const failure = (result: Result.Result<RunSpec.RunSpec, RunSpec.RunConfigError>) =>
  Result.isFailure(result) ? result.failure.message : "decoded"

describe("RunSpec", () => {
  it("gives the defaults for what is not given", () => {
    const spec = Result.getOrThrow(RunSpec.decode({}, "fields"))
    expect(spec).toEqual({ numGenerations: 8, maxTurns: 10, concurrency: 64, seed: 0, retries: 0, timeouts: {}, sampling: {}, schedulerOptions: {} })
  })

  it("names a bad setting as the front end spells it", () => {
    expect(failure(RunSpec.decode({ numGenerations: 0 }, "flags"))).toMatch(/^--num-generations: /)
    expect(failure(RunSpec.decode({ numGenerations: 0 }, "fields"))).toMatch(/^numGenerations: /)
    expect(failure(RunSpec.decode({ timeouts: { step: -1 } }, "flags"))).toMatch(/^--step-timeout: must be a positive duration/)
    expect(failure(RunSpec.decode({ sampling: { topP: 2 } }, "fields"))).toMatch(/^sampling\.topP: /)
    expect(failure(RunSpec.decode({ retries: 101 }, "flags"))).toMatch(/^--trajectory-retries: /)
    expect(failure(RunSpec.decode({ rewardWeights: [1, Number.NaN] }, "flags"))).toMatch(/^--reward-weights: must be finite/)
  })

  it("caps every timeout at 1e9 seconds, as the command line's --step-timeout does, and says so (timeouts.step 1e300 ran)", () => {
    for (const key of ["reset", "step", "close", "trajectory"] as const) {
      expect(failure(RunSpec.decode({ timeouts: { [key]: 1e300 } }, "fields")))
        .toBe(`timeouts.${key}: must be at most 1e9 seconds, got 1e+300`)
    }
    expect(failure(RunSpec.decode({ timeouts: { step: "2000000000 seconds" } }, "flags"))).toMatch(/^--step-timeout: .*at most 1e9 seconds/)
    // not a duration, or not positive: said so, not the cap (a "1e9 seconds" read as over it: Effect reads no exponent)
    expect(failure(RunSpec.decode({ timeouts: { step: -1 } }, "fields"))).toBe(`timeouts.step: must be a positive duration ("30 seconds", 500, Duration.seconds(30)), got -1`)
    expect(failure(RunSpec.decode({ timeouts: { step: Duration.infinity } }, "fields"))).toMatch(/^timeouts\.step: must be at most 1e9 seconds, got /)
    expect(Result.isSuccess(RunSpec.decode({ timeouts: { step: "1000000000 seconds", trajectory: 1e12 } }, "fields"))).toBe(true)
  })

  it("names a scheduler option as the front end spells it", () => {
    expect(RunSpec.nameOf("schedulerOptions.max_concurrent_envs", "flags")).toBe("--scheduler-option max_concurrent_envs")
    expect(RunSpec.nameOf("schedulerOptions.max_concurrent_envs", "fields")).toBe("schedulerOptions.max_concurrent_envs")
    expect(RunSpec.nameOf("schedulerOptions", "flags")).toBe("--scheduler-option")
  })

  it("refuses an unknown setting, naming it and the known ones", () => {
    expect(failure(RunSpec.decode({ turns: 3 } as RunSpec.Input, "fields"))).toMatch(/^turns: unknown setting \(there are defaultEnv, numGenerations/)
    expect(failure(RunSpec.decode({ timeouts: { soon: 1 } }, "fields"))).toMatch(/^timeouts\.soon: unknown timeout/)
  })

  it("travels as JSON (toJson) and decodes back to the same run: timeouts in milliseconds", () => {
    const spec = Result.getOrThrow(RunSpec.decode({
      defaultEnv: "frozen_lake",
      numGenerations: 4,
      maxTurns: 3,
      concurrency: 7,
      seed: 9,
      retries: 2,
      bufferSize: 5,
      timeouts: { reset: "2 seconds", step: 250, trajectory: Duration.minutes(1) },
      sampling: { temperature: 0.7, topP: 0.9, stop: ["</s>"], logprobs: true },
      chatTemplateKwargs: { enable_thinking: false },
      schedulerOptions: { max_concurrent_envs: 3 },
      rewardWeights: [0.5, 1]
    }, "fields"))
    const json = RunSpec.toJson(spec)
    expect(JSON.parse(JSON.stringify(json))).toEqual(json)
    const back = Result.getOrThrow(RunSpec.decode(json, "flags"))
    expect(RunSpec.timeoutMillis(back.timeouts)).toEqual(RunSpec.timeoutMillis(spec.timeouts))
    expect(back.timeouts).toEqual({ reset: 2000, step: 250, trajectory: 60000 })
    expect({ ...back, timeouts: null }).toEqual({ ...spec, timeouts: null })
  })
})
