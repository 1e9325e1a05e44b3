import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Context, Effect, Exit, Fiber, Layer, Result, Schema, Scope } from "effect"
import * as Builtins from "../../src/Builtins.js"
import * as EnvCheck from "../../src/check/EnvCheck.js"
import { observeFinalizers } from "../../src/check/internal/lifecycle.js"
import * as Env from "../../src/Env.js"
import { FrozenLake, Game } from "../../src/envs/FrozenLake.js"
import * as broken from "../fixtures/broken_envs.js"

const FROZEN_LAKE_ACTIONS = [
  "<action>up</action>",
  "<action>down</action>",
  "<action>left</action>",
  "<action>right</action>",
  "I will go down",
  "< action > RIGHT </action>"
]

/** Well-formed replies of each built-in env, so that episodes reach done and every check runs. */
const ACTIONS: Readonly<Record<string, ReadonlyArray<string | RegExp>>> = {
  frozen_lake: FROZEN_LAKE_ACTIONS,
  sudoku: [/^\[[1-9] [1-9] [1-9]\]$/, "I place [1 1 5]"],
  calculator: ["<answer>1</answer>", "The total is <answer>2000</answer>"]
}

/** The built-in envs that offer tools. */
const TOOL_ENVS = new Set(["calculator", "kv_store"])

/** Every check but `tools`, which only envs that offer tools run. */
const TEXT_CHECKS = EnvCheck.CHECKS.filter((c) => c !== "tools")

describe("EnvCheck: the built-in envs pass", () => {
  for (const definition of Builtins.registry.envs.values()) {
    it.live(`${definition.name} passes every check`, () =>
      Effect.gen(function*() {
        const report = yield* EnvCheck.check(definition, { actions: ACTIONS[definition.name] ?? [], seeds: 4 })
        expect(report.failures, EnvCheck.format(report)).toEqual([])
        expect(report.ok).toBe(true)
        expect(report.passed).toEqual(TOOL_ENVS.has(definition.name) ? EnvCheck.CHECKS : TEXT_CHECKS)
        expect(report.stats.envs).toBeGreaterThan(4 * 3)
        expect(report.stats.episodesDone).toBeGreaterThan(0)
      }))
  }

  it.live("frozen_lake passes with the default replies too (stepping after done is then never reached)", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check("frozen_lake", { maxSteps: 6 })
      expect(report.ok).toBe(true)
      expect(report.failures).toEqual([])
      expect(report.configs).toEqual([{ seed: 0 }, { seed: 1 }, { seed: 2 }])
      for (const check of ["create", "reset", "step", "reward", "done", "info", "determinism", "close", "timeout", "isolation"]) {
        expect(report.passed).toContain(check)
      }
    }))
})

interface BrokenCase {
  readonly env: Env.Definition
  readonly options?: EnvCheck.Options
  /** Every check that must fail, and nothing else. */
  readonly failed: ReadonlyArray<EnvCheck.CheckName>
  readonly message: string | RegExp
}

const CASES: ReadonlyArray<BrokenCase> = [
  {
    env: broken.nondeterministic,
    failed: ["determinism"],
    message: /^run 2 differs from run 1 at reset, observation ".*wind 0\.\d+" vs ".*wind 0\.\d+" \(same env_config, same replies, fresh envs/
  },
  {
    env: broken.countsInstances,
    failed: ["determinism"],
    message: /^run 2 differs from run 1 at reset, observation ".*\(game #\d+\)" vs ".*\(game #\d+\)".*state kept between instances/
  },
  {
    env: broken.throwsInStep,
    failed: ["step"],
    message: "step 2 failed: env throws_in_step: step failed: the ice cracked"
  },
  {
    env: broken.crashesInStep,
    failed: ["step"],
    message: "step 1 crashed: cannot read properties of undefined (reading 'board') (a defect: a throw or die inside Effect code; fail with EnvError instead)"
  },
  {
    env: broken.leaksFiber,
    failed: ["close"],
    message: /^1 fiber\(s\) started by the env were still running after its scope closed \(a resource acquired outside the scope: use Effect\.forkScoped or Effect\.acquireRelease\)/
  },
  {
    env: broken.skipsClose,
    failed: ["close"],
    message: "the env left open handles after its scope closed: Timeout (a resource acquired outside the scope, or a close that is skipped on this path) (abandoned after reset, right after reset)"
  },
  {
    env: broken.closeThrows,
    failed: ["close"],
    message: "close failed: env close_throws: close failed: disk full while saving the replay (run 1, after done at step 2)"
  },
  {
    env: broken.nanReward,
    failed: ["reward"],
    message: "step 1 returned reward NaN (number NaN): a reward must be a finite number"
  },
  {
    env: broken.cyclicInfo,
    failed: ["info"],
    message: "step 1 info is not JSON: info.self refers back to info (a cycle)"
  },
  {
    env: broken.functionInfo,
    failed: ["info"],
    message: "reset info is not JSON: info.score.compute is a function, which JSON drops"
  },
  {
    env: broken.mutatesInfo,
    failed: ["info"],
    message: "the result of step 1 had its info changed after it was returned (an object reused and mutated by later steps or close: return a fresh one)"
  },
  {
    env: broken.mutatesMessages,
    failed: ["step"],
    message: "step 1 changed the messages it was given (the conversation belongs to the caller: copy it before changing it)"
  },
  {
    env: broken.hangs,
    options: { timeout: "150 millis" },
    failed: ["timeout"],
    message: "step 2 did not answer within 150ms; it was interrupted"
  },
  {
    env: broken.hangs,
    options: { timeout: "150 millis", configs: [{ at: "reset" }] },
    failed: ["timeout"],
    message: "reset did not answer within 150ms; it was interrupted"
  },
  {
    env: broken.hangsPromise,
    options: { timeout: "150 millis", seeds: 1 },
    failed: ["timeout"],
    message: "step 1 did not answer within 150ms; it was interrupted"
  },
  {
    env: broken.sharesState,
    failed: ["isolation"],
    message: /^with another env with the same env_config alive at the same time, the env differs from a fresh env alone at step 2, observation "board \d+: 1 left" vs "board \d+: 0 left" \(state shared between instances/
  },
  {
    env: broken.doneNotBoolean,
    failed: ["done"],
    message: "step 1 returned done \"yes\" (string \"yes\"): done must be a boolean"
  },
  {
    env: broken.nonTextReset,
    failed: ["reset"],
    message: "reset returned a non-text observation (number 42)"
  },
  {
    env: broken.crashesAfterDone,
    failed: ["step-after-done"],
    message: "a step after done crashed: stepped a finished game (a defect: a throw or die inside Effect code; fail with EnvError instead)"
  },
  {
    env: broken.strictConfig,
    failed: ["create"],
    message: /^env_config rejected: env_config\.level: is missing \(env strict_config\)$/
  }
]

describe("EnvCheck: each broken env fails the right check with the right message", () => {
  it.live("the sound base of the broken envs passes", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(broken.countdown, { seeds: 2, runs: 2 })
      expect(report.failures).toEqual([])
      expect(report.passed).toEqual(TEXT_CHECKS)
      expect(report.skipped.map((s) => [s.check, s.reason])).toEqual([["tools", "the env offers no tools"]])
    }))

  for (const c of CASES) {
    it.live(`${c.env.name}: ${c.failed.join(", ")}`, () =>
      Effect.gen(function*() {
        const report = yield* EnvCheck.check(c.env, { runs: 2, ...(c.options?.configs ? {} : { seeds: 2 }), ...c.options }).pipe(
          Effect.ensuring(Effect.sync(broken.clearLeakedTimers))
        )
        expect(report.ok).toBe(false)
        expect(report.failed, EnvCheck.format(report)).toEqual(c.failed)
        const failure = report.failuresOf(c.failed[0])[0]
        if (typeof c.message === "string") expect(failure.message).toBe(c.message)
        else expect(failure.message).toMatch(c.message)
        expect(report.configs).toContainEqual(failure.config)
        expect(EnvCheck.format(report)).toContain(`FAIL  ${c.failed[0]}`)
      }))
  }

  it.live("the failure carries the offending config, the replies played and the output", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(broken.nanReward, { configs: [{ steps: 3, label: "x" }], replies: ["go", "stop"] })
      const [failure] = report.failuresOf("reward")
      expect(failure.config).toEqual({ steps: 3, label: "x" })
      expect(failure.configIndex).toBe(0)
      expect(failure.replies).toEqual(["go"])
      expect(failure.output).toBe("{\"observation\":\"2 left after \\\"go\\\"\",\"reward\":NaN,\"done\":false,\"info\":{\"left\":2}}")
      const text = EnvCheck.format(report)
      expect(text).toContain("  reward: step 1 returned reward NaN (number NaN): a reward must be a finite number\n" +
        "    env_config #0  {\"steps\":3,\"label\":\"x\"}\n" +
        "    replies        [\"go\"]\n" +
        "    output         {\"observation\":\"2 left after \\\"go\\\"\",\"reward\":NaN,\"done\":false,\"info\":{\"left\":2}}")
    }))

  it.live("a hung env is interrupted and still closed exactly once, every time", () =>
    Effect.gen(function*() {
      const before = broken.closes.count
      const report = yield* EnvCheck.check(broken.hangs, { seeds: 2, runs: 2, timeout: "100 millis" })
      expect(report.failed).toEqual(["timeout"])
      expect(report.passed).toContain("close")
      // one finalizer per env, each run once: 2 configs x (2 runs + 1 abandoned); isolation is skipped (it hung)
      expect(report.stats.envs).toBe(6)
      expect(report.stats.finalizersRegistered).toBe(6)
      expect(report.stats.finalizersRun).toBe(6)
      expect(broken.closes.count - before).toBe(6)
      expect(report.skipped.map((s) => s.check)).toContain("isolation")
    }))

  it.live("close runs exactly once per env when reset or step fails", () =>
    Effect.gen(function*() {
      const before = broken.failingCloses.count
      const report = yield* EnvCheck.check(broken.failsButCloses, { configs: [{ fail: "reset" }, { fail: "step" }], runs: 2 })
      expect(report.failed).toEqual(["reset", "step"])
      expect(report.failuresOf("reset")[0].message).toBe("reset failed: env fails_but_closes: reset failed: no board today")
      expect(report.failuresOf("step")[0].message).toBe("step 1 failed: env fails_but_closes: step failed: the board fell over")
      expect(report.passed).toContain("close")
      // 2 runs per config, then for the config whose reset works: the abandoned env and an interleaved pair
      expect(report.stats.envs).toBe(7)
      expect(broken.failingCloses.count - before).toBe(7)
      expect(report.stats.finalizersRegistered).toBe(7)
      expect(report.stats.finalizersRun).toBe(7)
    }))

  it.live("a sound Effect-native env with a scoped fiber and an acquired resource passes; each release runs once", () =>
    Effect.gen(function*() {
      const before = { ...broken.scopedResources }
      const report = yield* EnvCheck.check(broken.scopedEnv, { seeds: 2, runs: 2 })
      expect(report.failures).toEqual([])
      const acquired = broken.scopedResources.acquired - before.acquired
      expect(acquired).toBe(report.stats.envs)
      expect(broken.scopedResources.released - before.released).toBe(acquired)
      expect(report.stats.finalizersRun).toBe(report.stats.finalizersRegistered)
      expect(report.stats.finalizersRegistered).toBeGreaterThanOrEqual(acquired)
    }))

  it.live("a finalizer registered after the scope closed is reported", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(broken.lateFinalizer, { seeds: 1, runs: 1 })
      expect(report.failed).toEqual(["close"])
      expect(report.failuresOf("close")[0].message).toBe(
        "1 finalizer(s) were registered after the env's scope had closed (work the env started outlived it) (run 1, after done at step 2)"
      )
    }))

  it.live("an env whose close is skipped only on some paths is caught on those paths", () =>
    Effect.gen(function*() {
      // Episodes cut at the step limit (never done) skip close too, not only abandoned ones.
      const report = yield* EnvCheck.check(broken.skipsClose, { configs: [{ steps: 50 }], runs: 2, maxSteps: 3 }).pipe(
        Effect.ensuring(Effect.sync(broken.clearLeakedTimers))
      )
      expect(report.failuresOf("close")[0].message).toMatch(/\(run \d, after 3 steps without done\)$/)
    }))
})

describe("EnvCheck: options, determinism of the check, the report", () => {
  it.live("the check is deterministic: the same options give the same report", () =>
    Effect.gen(function*() {
      const options = { seeds: 2, runs: 2, seed: 7 }
      const first = yield* EnvCheck.check("frozen_lake", options)
      const second = yield* EnvCheck.check("frozen_lake", options)
      expect(EnvCheck.toJson(second)).toBe(EnvCheck.toJson(first))
      const other = yield* EnvCheck.check("frozen_lake", { ...options, seed: 8 })
      expect(other.stats).not.toEqual(first.stats)
    }))

  it.live("replies differ between configs but are the same for every run of one config", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const recorder = Env.make({
        name: "recorder",
        create: (config) => ({
          reset: () => ({ observation: "go", info: {} }),
          step: (messages) => {
            seen.push(`${config.seed}:${messages.at(-1)!.content}`)
            return { observation: "ok", reward: 0, done: false, info: {} }
          }
        })
      })
      yield* EnvCheck.check(recorder, { seeds: 2, runs: 3, maxSteps: 4 })
      // per config: 3 runs + 2 interleaved pairs that include it (itself twice, and a neighbour)
      const byConfig = (seed: number) => seen.filter((s) => s.startsWith(`${seed}:`))
      const runs0 = byConfig(0).slice(0, 12)
      expect(runs0.slice(0, 4)).toEqual(runs0.slice(4, 8))
      expect(runs0.slice(0, 4)).toEqual(runs0.slice(8, 12))
      expect(byConfig(1).slice(0, 4)).not.toEqual(runs0.slice(0, 4))
    }))

  it.live("configs as a list, as an arbitrary, or as seeds", () =>
    Effect.gen(function*() {
      const listed = yield* EnvCheck.check("frozen_lake", { configs: [{ seed: 5, size: 3 }], runs: 2 })
      expect(listed.configs).toEqual([{ seed: 5, size: 3 }])
      expect(listed.ok).toBe(true)
      const sampled = yield* EnvCheck.check("frozen_lake", {
        configs: EnvCheck.config(
          Schema.Struct({
            seed: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1000 })),
            size: Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 6 }))
          })
        ),
        seeds: 4,
        runs: 2
      })
      expect(sampled.configs.length).toBe(4)
      expect(sampled.ok).toBe(true)
      const seeds = yield* EnvCheck.check("frozen_lake", { seeds: 5, runs: 1 })
      expect(seeds.configs).toEqual([0, 1, 2, 3, 4].map((seed) => ({ seed })))
      expect(seeds.skipped.find((s) => s.check === "determinism")?.reason).toBe("runs is 1: there is nothing to compare")
    }))

  it.effect("bad options and unknown names are typed failures", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[EnvCheck.Options, string]> = [
        [{ runs: 0 }, "runs: must be a whole number >= 1, got 0"],
        [{ seeds: 1.5 }, "seeds: must be a whole number >= 1, got 1.5"],
        [{ maxSteps: -1 }, "maxSteps: must be a whole number >= 1, got -1"],
        [{ timeout: 0 }, "timeout: must be a positive duration"],
        [{ configs: [] }, "configs: no env_config to try"],
        [{ configs: [{ seed: 1 }], seeds: 2 }, "seeds: give a list of configs or a number of seeds, not both"],
        [{ configs: [[1, 2] as unknown as Env.EnvConfig] }, "configs: configs[0] must be an object, got an array"],
        [{ replies: [] }, "replies: no reply to play"]
      ]
      for (const [options, message] of cases) {
        const error = yield* Effect.flip(EnvCheck.check("frozen_lake", options))
        expect(error._tag).toBe("CheckOptionError")
        expect(error.message).toBe(message)
      }
      const unknown = yield* Effect.flip(EnvCheck.check("ghost"))
      expect(unknown._tag).toBe("NotRegistered")
      expect(unknown.message).toBe(`unknown env "ghost"; registered: ${[...Builtins.registry.envs.keys()].sort().join(", ")}`)
    }))

  it.effect("timeouts use the real clock, so a check also completes under it.effect's test clock", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(broken.hangsPromise, { seeds: 1, runs: 1, timeout: "50 millis" })
      expect(report.failed).toEqual(["timeout"])
    }))

  it.live("the report round-trips through its JSON schema", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(broken.cyclicInfo, { seeds: 1, runs: 2 })
      const json = EnvCheck.toJson(report)
      const decoded = Schema.decodeUnknownSync(EnvCheck.Report)(JSON.parse(json))
      expect(EnvCheck.toJson(decoded)).toBe(json)
      expect(decoded.failuresOf("info")[0].output).toContain("[cycle]")
      const text = EnvCheck.format(report)
      expect(text.split("\n")[0]).toBe("cyclic_info: FAILED, 1 of 12 checks (1 env_config × 2 runs, up to 16 steps, timeout 10s, seed 0)")
      expect(text).toMatch(/\n {2}ok {4}determinism {6}the same env_config/)
      expect(text).toMatch(/\n {2}FAIL {2}info {13}infos are JSON objects/)
    }))
})

describe("EnvCheck.transcript", () => {
  it.effect("plays replies through the env the way the gym scheduler does, and stops at done", () =>
    Effect.gen(function*() {
      const replies = ["<action>down</action>", "nonsense", "<action>right</action>", "<action>right</action>", "<action>down</action>", "<action>down</action>", "<action>right</action>"]
      const out = yield* EnvCheck.transcript(FrozenLake, { seed: 3 }, replies)
      const game = new Game({ size: 4, p: 0.8, seed: 3 })
      expect(out.reset).toEqual(Result.getOrThrow(game.reset(0)))
      for (const step of out.steps) {
        expect(step.result).toEqual(game.step([{ role: "assistant", content: step.reply }]))
      }
      expect(out.steps.length).toBeLessThanOrEqual(replies.length)
      expect(out.done).toBe(out.steps.at(-1)!.result.done)
      if (out.done) expect(out.steps.length).toBe(out.steps.findIndex((s) => s.result.done) + 1)
    }))

  it.effect("fails with the env's typed errors", () =>
    Effect.gen(function*() {
      const bad = yield* Effect.exit(EnvCheck.transcript(FrozenLake, { size: 1 }, []))
      expect(Exit.isFailure(bad) && bad.cause.reasons.length === 1 && bad.cause.reasons[0]._tag === "Fail" && bad.cause.reasons[0].error._tag)
        .toBe("EnvConfigError")
      const thrown = yield* Effect.flip(EnvCheck.transcript(broken.throwsInStep, {}, ["a", "b"]))
      expect(thrown.message).toBe("env throws_in_step: step failed: the ice cracked")
    }))

  it.effect.prop(
    "the same config and replies give the same transcript (frozen_lake)",
    [
      EnvCheck.config(
        Schema.Struct({
          seed: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
          size: Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 6 }))
        })
      ),
      EnvCheck.repliesFor(FROZEN_LAKE_ACTIONS)
    ],
    ([config, replies]) =>
      Effect.gen(function*() {
        const first = yield* EnvCheck.transcript(FrozenLake, config, replies)
        const second = yield* EnvCheck.transcript(FrozenLake, config, replies)
        expect(second).toEqual(first)
        expect(Result.isSuccess(FrozenLake.prepare(config))).toBe(true)
      }),
    { arbitrary: { runs: 40 } }
  )

  it("the properties' arbitraries are seeded: a fixed seed gives the same samples", () => {
    const a = Effect.runSync(Arbitrary.sampleEffect(EnvCheck.replies, { seed: 42, count: 20 }))
    const b = Effect.runSync(Arbitrary.sampleEffect(EnvCheck.replies, { seed: 42, count: 20 }))
    expect(b).toEqual(a)
  })
})

describe("EnvCheck: how Effect uses a scope's state, which it relies on (canary for an Effect upgrade)", () => {
  it.effect("finalizers registered every public way are observed, and the scope stays a real scope", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const seen: Array<string> = []
      const ran: Array<string> = []
      let registered = 0
      let late = 0
      observeFinalizers(scope, {
        registered: (finalizer) => {
          registered++
          return (exit) => Effect.andThen(Effect.sync(() => void seen.push(`ran ${registered}`)), finalizer(exit))
        },
        late: () => void late++
      })
      const program = Effect.gen(function*() {
        yield* Effect.addFinalizer(() => Effect.sync(() => void ran.push("addFinalizer")))
        yield* Effect.acquireRelease(Effect.void, () => Effect.sync(() => void ran.push("acquireRelease")))
        const own = yield* Effect.scope
        yield* Scope.addFinalizer(own, Effect.sync(() => void ran.push("Scope.addFinalizer")))
        yield* Scope.addFinalizerExit(own, () => Effect.sync(() => void ran.push("Scope.addFinalizerExit")))
        // forkScoped's interruption of its fiber is not counted as a finalizer of the env's
        return yield* Effect.forkScoped(Effect.never)
      })
      const fiber = yield* Scope.provide(program, scope)
      expect(registered).toBe(4)
      yield* Scope.close(scope, Exit.void)
      expect(ran).toEqual(["Scope.addFinalizerExit", "Scope.addFinalizer", "acquireRelease", "addFinalizer"])
      expect(seen).toHaveLength(4)
      expect(Exit.hasInterrupts(yield* Fiber.await(fiber))).toBe(true)
      // a finalizer added after close runs at once, and is still observed
      yield* Scope.addFinalizer(scope, Effect.sync(() => void ran.push("late")))
      expect([registered, late]).toEqual([4, 1])
      expect(ran.at(-1)).toBe("late")
    }))

  it.effect("finalizers added to a child scope (Scope.fork, Layer.build in the env's scope) are observed", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const ran: Array<string> = []
      let registered = 0
      observeFinalizers(scope, {
        registered: (finalizer) => {
          registered++
          return finalizer
        },
        late: () => {}
      })
      const child = yield* Scope.fork(scope, "sequential")
      yield* Scope.addFinalizer(child, Effect.sync(() => void ran.push("child")))
      class Resource extends Context.Service<Resource, number>()("Resource") {}
      yield* Scope.provide(
        Layer.build(Layer.effect(Resource, Effect.acquireRelease(Effect.succeed(1), () => Effect.sync(() => void ran.push("layer"))))),
        scope
      )
      expect(registered).toBeGreaterThanOrEqual(2)
      yield* Scope.close(scope, Exit.void)
      expect(ran).toEqual(["layer", "child"])
    }))
})
