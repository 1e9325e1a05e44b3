import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Result, Schema, Stream } from "effect"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as Reward from "../src/Reward.js"
import * as Rollout from "../src/Rollout.js"
import * as RunSpec from "../src/RunSpec.js"
import * as Row from "../src/Row.js"
import { Counters, countingEnv, echoPolicy, randomPolicy, records, rows, runConfig, solverPolicy, withoutTimings } from "./helpers.js"

const frozenRows = (n: number, extra: Record<string, unknown> = {}) =>
  Array.from({ length: n }, (_, i) => ({ messages: [{ role: "user", content: "<placeholder>" }], env_config: { seed: i, ...extra } }))

/** A completions line without its timings (wall-clock measurements). */
const stableLine = (record: Rollout.TrajectoryRecord) => JSON.stringify(withoutTimings(CompletionsLog.toLine(record)))

describe("Rollout", () => {
  it.effect("expands each row into a group with group-normalised advantages", () =>
    Effect.gen(function*() {
      const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 6, concurrency: 5, maxTurns: 6 })
      const items = yield* Rollout.runAll(config, rows(frozenRows(20)))
      expect(items.length).toBe(20)
      for (const item of items) {
        expect(item._tag).toBe("Group")
        if (item._tag !== "Group") continue
        expect(item.records.map((r) => r.result.generation)).toEqual([0, 1, 2, 3, 4, 5])
        const want = Reward.advantages(item.records.map((r) => r.reward))
        expect(item.records.map((r) => r.advantage)).toEqual(want)
        // every generation of a row sees the same map
        const firstPrompts = new Set(item.records.map((r) => r.result.messages[1].content))
        expect(firstPrompts.size).toBe(1)
      }
      const all = records(items)
      expect(all.length).toBe(120)
      expect(all.some((r) => (r.advantage ?? 0) !== 0)).toBe(true)
    }).pipe(Effect.provide(solverPolicy({ epsilon: 0.4 }))))

  it.effect("a row's env_config.name overrides the run's default env", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "frozen_lake", numGenerations: 2 })
      const items = yield* Rollout.runAll(config, rows([{ env_config: { seed: 1 } }, { env_config: { name: "counting" } }]))
      const byRow = records(items)
      expect(byRow.filter((r) => r.result.row === 0).every((r) => r.result.env === "frozen_lake")).toBe(true)
      expect(byRow.filter((r) => r.result.row === 1).every((r) => r.result.env === "counting")).toBe(true)
      expect(counters.created).toBe(2)
    }).pipe(Effect.provide(randomPolicy())))

  it.effect("reports bad rows with file, line and field, and runs the other rows", () =>
    Effect.gen(function*() {
      const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 2 })
      const text = [
        JSON.stringify({ env_config: { seed: 1 } }),
        "{not json",
        JSON.stringify({ env_config: { name: "nope" } }),
        JSON.stringify({ env_config: { size: "big" } }),
        "",
        JSON.stringify({ messages: "hi" }),
        JSON.stringify([1, 2]),
        JSON.stringify({ env_config: { seed: 2 } })
      ].join("\n")
      const items = yield* Rollout.runAll(config, Row.decodeJsonl("data.jsonl", text))
      const failures = items.flatMap((i) => (i._tag === "RowFailure" ? [i.error] : []))
      expect(failures.map((e) => [e.line, e.path])).toEqual([
        [2, ""],
        [3, "env_config.name"],
        [4, "env_config.size"],
        [6, "messages"],
        [7, ""]
      ])
      expect(failures[0].message).toMatch(/^data\.jsonl:2: malformed JSON/)
      expect(failures[1].message).toContain("unknown env \"nope\"; registered: calculator, frozen_lake")
      expect(failures[2].message).toBe("data.jsonl:4: env_config.size: expected an integer (as Python int()), got \"big\" (env frozen_lake)")
      const ran = records(items)
      expect(ran.map((r) => r.result.row)).toEqual([0, 0, 7, 7])
    }).pipe(Effect.provide(randomPolicy())))

  it.effect("fault injection: over many trajectories every env is created once and closed exactly once", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({
        envs: [countingEnv(counters)],
        defaultEnv: "counting",
        numGenerations: 4,
        concurrency: 16,
        maxTurns: 4
      })
      const faults = ["none", "create", "reset", "step", "nan", "die_step"]
      const input = Array.from({ length: 150 }, (_, i) => ({
        env_config: { fail: faults[i % faults.length], at: 1 + (i % 3), length: 1 + (i % 6) }
      }))
      const policyFailures = new Set(Array.from({ length: 40 }, (_, i) => `r${i * 3}-g${i % 4}`))
      const items = yield* Rollout.runAll(config, rows(input)).pipe(
        Effect.provide(echoPolicy({ failIds: policyFailures, failTurn: 1 }))
      )
      const all = records(items)
      expect(all.length).toBe(600)
      expect(counters.open).toBe(0)
      expect([...counters.closedIds.values()].every((n) => n === 1)).toBe(true)
      const failed = all.filter((r) => r.error !== undefined)
      expect(failed.every((r) => r.result.endReason === "error" && r.reward === undefined && r.advantage === undefined))
        .toBe(true)
      expect(new Set(failed.map((r) => r.error!._tag))).toEqual(new Set(["EnvError", "UnexpectedError", "InferenceError"]))
      const fine = all.filter((r) => r.error === undefined)
      expect(fine.length).toBeGreaterThan(50)
      expect(fine.every((r) => r.result.endReason === "done" || r.result.endReason === "max_turns")).toBe(true)
    }))

  it.effect("interrupting a run mid-trajectory closes every env it opened", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", concurrency: 32 })
      const input = Array.from({ length: 100 }, (_, i) => ({ env_config: { length: 4, hang_at: i % 2 === 0 ? 3 : 99 } }))
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.stream(config, rows(input))))
      while (counters.steps < 200) yield* Effect.yieldNow
      expect(counters.open).toBeGreaterThan(0)
      yield* Fiber.interrupt(fiber)
      expect(counters.open).toBe(0)
      expect([...counters.closedIds.values()].every((n) => n === 1)).toBe(true)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("a consumer that stops early (take) stops the run and closes its envs", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", concurrency: 8 })
      const input = Array.from({ length: 2000 }, () => ({ env_config: { length: 3 } }))
      const firstThree = yield* Stream.runCollect(Stream.take(Rollout.stream(config, rows(input)), 3))
      expect(firstThree.length).toBe(3)
      expect(counters.open).toBe(0)
      // bounded by the output queue and the workers, not by the dataset
      expect(counters.created).toBeLessThan(1000)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("envs that take resources and fork scoped fibers from the context get their own trajectory's scope", () =>
    Effect.gen(function*() {
      let created = 0
      const closed = new Set<number>()
      const interrupted = new Set<number>()
      const env = Env.define({
        name: "resourceful",
        make: () =>
          Effect.gen(function*() {
            // creation takes a while (as connecting to a server would): other trajectories of the
            // same worker pool start meanwhile
            yield* Effect.sleep(1 + (created % 3))
            const id = yield* Effect.acquireRelease(Effect.sync(() => ++created), (id) => Effect.sync(() => closed.add(id)))
            // a background fiber for the env's lifetime (started before the env is used); its
            // interruption handler is in place before it says it runs (Effect 4 resumes the waiter
            // at once, inside `Deferred.succeed`: a stop that came then found no handler yet)
            const running = yield* Deferred.make<void>()
            yield* Effect.forkScoped(
              Effect.onInterrupt(
                Effect.andThen(Deferred.succeed(running, undefined), Effect.never),
                () => Effect.sync(() => interrupted.add(id))
              )
            )
            yield* Deferred.await(running)
            let turn = 0
            return {
              reset: () => Effect.succeed({ observation: `env ${id}`, info: { id } }),
              step: () => Effect.sync(() => ({ observation: "", reward: 0, done: ++turn >= 2, info: {} }))
            }
          })
      })
      const config = yield* runConfig({ envs: [env], defaultEnv: "resourceful", numGenerations: 3, concurrency: 4 })
      const openWhenEmitted: Array<number> = []
      yield* Stream.runForEach(Rollout.stream(config, rows(Array.from({ length: 30 }, () => ({})))), (item) =>
        Effect.sync(() => {
          if (item._tag !== "Group") return
          // every env of a finished group is already closed, its scoped fiber already interrupted
          for (const record of item.records) {
            const id = record.result.resetInfo!.id as number
            if (!closed.has(id) || !interrupted.has(id)) openWhenEmitted.push(id)
          }
        }))
      expect(created).toBe(90)
      expect(closed.size).toBe(90)
      expect(interrupted.size).toBe(90)
      expect(openWhenEmitted).toEqual([])
    }).pipe(Effect.provide(echoPolicy())))

  it("validates the run's numbers", () => {
    const ok = { numGenerations: 1, maxTurns: 1, concurrency: 1, seed: 0 }
    expect(Result.isSuccess(RunSpec.decode(ok, "flags"))).toBe(true)
    expect(Result.getFailure(RunSpec.decode({ ...ok, concurrency: 0 }, "flags")).pipe((o) => o._tag === "Some" && o.value.message))
      .toBe("--concurrency: must be a whole number >= 1, got 0")
    expect(Result.isFailure(RunSpec.decode({ ...ok, numGenerations: 1.5 }, "flags"))).toBe(true)
  })
})

describe("Rollout: seeded runs are reproducible (property)", () => {
  it.effect.prop(
    "the same run gives the same completions lines, whatever the concurrency",
    [Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 2 ** 31 - 1 })), Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 64 }))],
    ([seed, concurrency]) =>
      Effect.scoped(Effect.gen(function*() {
        const input = rows(frozenRows(12, { size: 5 }))
        const a = yield* runConfig({ defaultEnv: "frozen_lake", seed, numGenerations: 3, concurrency: 1 })
        const b = yield* runConfig({ defaultEnv: "frozen_lake", seed, numGenerations: 3, concurrency })
        const first = records(yield* Rollout.runAll(a, input)).map(stableLine)
        const second = records(yield* Rollout.runAll(b, input)).map(stableLine)
        expect(second).toEqual(first)
      })).pipe(Effect.provide(randomPolicy())),
    { arbitrary: { runs: 20 } }
  )
})
