/**
 * Issue 27, the final hostile pass (2026-12-04): repros of the defects found, each failing on main
 * at 85b7b95. Unit layer: no child process (the rollout server runs in this process).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Result, Stream } from "effect"
import * as Env from "../../src/Env.js"
import * as FrozenLake from "../../src/envs/FrozenLake.js"
import * as Inference from "../../src/Inference.js"
import { frozenLakeSolver } from "../../src/inference/Scripted.js"
import * as Policy from "../../src/Policy.js"
import * as Reward from "../../src/Reward.js"
import * as Rollout from "../../src/Rollout.js"
import * as RunSpec from "../../src/RunSpec.js"
import { start } from "../rollout-server/helpers.js"

const policy = Inference.layerFunction("ok", () => Effect.succeed({ text: "hi", finishReason: "stop" as const }))

/** Steps of 20 ms, never done by itself; a close of `closeMs` (from its row). */
const slowClose = Env.make({
  name: "slow_close",
  create: (config: Record<string, unknown>) => ({
    reset: () => ({ observation: "go", info: {} }),
    step: () =>
      new Promise<Env.StepResult>((resolve) =>
        setTimeout(() => resolve({ observation: "x", reward: 1, done: false, info: {} }), 20)
      ),
    close: () => new Promise<void>((resolve) => setTimeout(resolve, config.closeMs as number))
  })
})

describe("issue 27, final hostile pass: a graceful stop", () => {
  it.live("trajectories cut by `until` are in no group, also when their close runs past the close timeout (they were groups of Timeout records: the CLI wrote them and --resume kept them, never running those rows again)", () =>
    Effect.gen(function*() {
      const groupsAfterStop = (closeMs: number) =>
        Effect.gen(function*() {
          const stop = yield* Deferred.make<void>()
          const fiber = yield* Stream.fromIterable(Array.from({ length: 4 }, (_, i) => ({ env_config: { closeMs, i } }))).pipe(
            Rollout.events(
              Rollout.make({ envs: [slowClose], numGenerations: 2, maxTurns: 1000, concurrency: 8, timeouts: { close: "300 millis" } }),
              { until: Deferred.await(stop) }
            ),
            Stream.runCollect,
            Effect.forkChild
          )
          yield* Effect.sleep("200 millis") // every trajectory is mid-run (about 10 of its 1000 turns)
          yield* Deferred.succeed(stop, undefined)
          const items = Array.from(yield* Fiber.join(fiber))
          return {
            groups: items.filter((item) => item._tag === "Group").length,
            ends: items.filter((item) => item._tag === "End").length
          }
        })
      // a close within the timeout: the cut trajectories are in no group (as documented)
      expect(yield* groupsAfterStop(50)).toEqual({ groups: 0, ends: 0 })
      // a close past it: the same cut trajectories must not become groups either
      expect(yield* groupsAfterStop(1000)).toEqual({ groups: 0, ends: 0 })
    }).pipe(Effect.provide(policy)))
})

describe("issue 27, final hostile pass: one run spec", () => {
  it.live("the rollout server refuses a request's max_turns above the run spec's limit (10,000), as `--max-turns` and Rollout.make do (it ran 10,001 and 1e9)", () =>
    Effect.gen(function*() {
      const server = yield* start({ policy: "random" })
      for (const maxTurns of [10_001, 1e9]) {
        const response = yield* Effect.promise(() =>
          fetch(`${server.url}/v1/rollouts`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ requests: [{ env_config: { seed: 3 }, num_generations: 1, max_turns: maxTurns }] })
          }).then(async (r) => ({ status: r.status, text: await r.text() }))
        )
        expect(response.status, `max_turns ${maxTurns}`).toBe(400)
        expect(response.text).toContain("max_turns")
        expect(response.text).toContain("10000")
      }
    }))

  it.live("the rollout server refuses a request's num_generations above the run spec's limit (4,096), as its own --num-generations is refused (a server that takes 10,000 trajectories a request ran a group of 5,000)", () =>
    Effect.gen(function*() {
      const server = yield* start({ policy: "random", maxTrajectoriesInFlight: 10_000, maxRequestTrajectories: 10_000 })
      const response = yield* Effect.promise(() =>
        fetch(`${server.url}/v1/rollouts`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ requests: [{ env_config: { seed: 3 }, num_generations: 5000, max_turns: 2 }] })
        }).then(async (r) => ({ status: r.status, text: (await r.text()).slice(0, 300) }))
      )
      expect(response.status).toBe(400)
      expect(response.text).toContain("num_generations")
      expect(response.text).toContain("4096")
    }))

  it.effect("Rollout.make refuses an unknown option, as RunSpec.decode and its own `timeouts` do (a typo `numGeneration: 2` from JavaScript ran 8 generations silently)", () =>
    Effect.gen(function*() {
      const counted = Env.make({
        name: "plain",
        create: () => ({ reset: () => ({ observation: "go", info: {} }), step: () => ({ observation: "x", reward: 1, done: true, info: {} }) })
      })
      // a nested unknown key is refused, naming it
      const nested = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make({ envs: [counted], timeouts: { stpe: 5 } as never })),
        Stream.runCollect,
        Effect.flip
      )
      expect(nested.message).toContain("timeouts.stpe")
      // a top-level one is not
      const options = { envs: [counted], numGeneration: 2 } as unknown as Rollout.Options
      const top = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make(options)),
        Stream.runCollect,
        Effect.map((items) => `ran: ${items.length} group(s) of ${items[0]._tag === "Group" ? items[0].records.length : 0}`),
        Effect.catch((error) => Effect.succeed(error.message))
      )
      expect(top).toContain("numGeneration")
    }).pipe(Effect.provide(policy)))
})

describe("issue 27, final hostile pass: errors say where", () => {
  it.effect("an Env.make whose create returns nothing (a forgotten `return`) fails as the env's create (it was 'UnexpectedError: unexpected error in start: Cannot read properties of undefined (reading 'close')')", () =>
    Effect.gen(function*() {
      const forgot = Env.make({
        name: "forgot_return",
        create: (() => {
          // `return` forgotten
        }) as unknown as () => Env.Handlers
      })
      const items = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make({ envs: [forgot], numGenerations: 1 })),
        Stream.runCollect
      )
      const item = items[0]
      expect(item._tag).toBe("Group")
      const error = item._tag === "Group" ? item.records[0].error : undefined
      expect(error?._tag).toBe("EnvError")
      expect(error?.message).toContain("forgot_return")
      expect(error?.message).toContain("create")
    }).pipe(Effect.provide(policy)))
})

describe("issue 27, final hostile pass: a value of the wrong type is shown as what it is", () => {
  const message = (input: RunSpec.Input) => {
    const decoded = RunSpec.decode(input, "fields")
    return Result.isFailure(decoded) ? decoded.failure.message : "decoded"
  }

  it("a string where a number goes is quoted (numGenerations: \"8\" read 'must be a whole number >= 1, got 8')", () => {
    expect(message({ numGenerations: "8" })).toBe("numGenerations: must be a whole number >= 1, got \"8\"")
    expect(message({ seed: "1" })).toBe("seed: must be an integer, got \"1\"")
    expect(message({ sampling: { temperature: "0.7" } })).toBe("sampling.temperature: must be a finite number, got \"0.7\"")
    expect(message({ timeouts: { step: "5" } })).toContain("got \"5\"")
  })

  it("a single stop string (not a list) is not called empty (it read 'stop strings must not be empty')", () => {
    expect(message({ sampling: { stop: "</answer>" } })).not.toContain("empty")
    expect(message({ sampling: { stop: [""] } })).toContain("empty")
  })

  it.effect("an env's reward given as a string is shown quoted (reward \"1\" read 'reward must be a finite number, got 1')", () =>
    Effect.gen(function*() {
      const stringly = Env.make({
        name: "stringly",
        create: () => ({
          reset: () => ({ observation: "go", info: {} }),
          step: () => ({ observation: "x", reward: "1", done: true, info: {} }) as unknown as Env.StepResult
        })
      })
      const items = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make({ envs: [stringly], numGenerations: 1 })),
        Stream.runCollect
      )
      const item = items[0]
      const error = item._tag === "Group" ? item.records[0].error : undefined
      expect(error?.message).toContain("reward must be a finite number, got \"1\"")
    }).pipe(Effect.provide(policy)))
})

describe("issue 27, final hostile pass: more values shown as what they are, named as the front end spells them", () => {
  const plain = Env.make({
    name: "plain",
    create: () => ({ reset: () => ({ observation: "go", info: {} }), step: () => ({ observation: "x", reward: 1, done: true, info: {} }) })
  })

  it.effect("a reward function returning a string is shown quoted (it read 'must return a finite number, got 1')", () =>
    Effect.gen(function*() {
      const stringly = Reward.define({ name: "stringly", score: () => "1" as unknown as number })
      const items = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make({ envs: [plain], numGenerations: 1, rewards: [stringly] })),
        Stream.runCollect
      )
      const item = items[0]
      const error = item._tag === "Group" ? item.records[0].error : undefined
      expect(error?.message).toContain("got \"1\"")
    }).pipe(Effect.provide(policy)))

  it.effect("Rollout.make's schedulerOptions are named so, not as the command line's --scheduler-option (it read 'make failed: --scheduler-option foo: unknown option')", () =>
    Effect.gen(function*() {
      const error = yield* Stream.fromIterable([{ env_config: {} }]).pipe(
        Rollout.run(Rollout.make({ envs: [plain], numGenerations: 1, schedulerOptions: { foo: 1 } })),
        Stream.runCollect,
        Effect.flip
      )
      expect(error.message).toContain("schedulerOptions")
      expect(error.message).not.toContain("--scheduler-option")
    }).pipe(Effect.provide(policy)))

  it.effect("Policy.layer's options are named as the library's, not as the command line's --policy-option (it read '--policy-option foo: is unexpected')", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(Policy.layer(frozenLakeSolver, { foo: 1 })))
      expect(error.message).toContain("foo")
      expect(error.message).not.toContain("--policy-option")
    }).pipe(Effect.scoped))

  it.effect("a row's env_config number that is not finite is shown as what it is (FrozenLake's seed: Infinity, a JSON 1e400, read 'got null')", () =>
    Effect.gen(function*() {
      const items = yield* Stream.make({ env_config: { seed: Infinity } }, { env_config: { size: Number.NaN } }).pipe(
        Rollout.run(Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 1 })),
        Stream.runCollect
      )
      const messages = items.map((item) => (item._tag === "RowFailure" ? item.error.message : "ran"))
      expect(messages[0]).toContain("got Infinity")
      expect(messages[1]).toContain("got NaN")
    }).pipe(Effect.provide(policy)))
})
