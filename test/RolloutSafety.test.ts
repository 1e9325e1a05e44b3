/**
 * Nothing lost, nothing hangs (issue 11), at the level of `Rollout.stream`: every failure inside a
 * trajectory is that trajectory's record, the pool never loses a worker, timeouts stop what hangs
 * (and close its env), transient failures are retried, and a stop keeps every complete group.
 *
 * Every run here is bounded by `within`, so a run that hangs (as on main before this work) fails
 * its test instead of stalling the suite.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Deferred, Effect, Exit, Fiber, Option, Result, Stream } from "effect"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import * as Reward from "../src/Reward.js"
import * as Rollout from "../src/Rollout.js"
import * as RunSpec from "../src/RunSpec.js"
import * as Row from "../src/Row.js"
import * as Scheduler from "../src/Scheduler.js"
import { Counters, countingEnv, echoPolicy, records, rows, runConfig } from "./helpers.js"
import { onTestClock } from "./testClock.js"

/** Fails the test (instead of hanging it) when the run does not end. */
const within = <A, E, R>(effect: Effect.Effect<A, E, R>, seconds = 20) =>
  Effect.timeoutOrElse(effect, {
    duration: `${seconds} seconds`,
    orElse: () => Effect.fail(new Error(`the run did not end within ${seconds} s`))
  })

const collect = (config: Rollout.Config, input: ReadonlyArray<unknown>) =>
  within(Stream.runCollect(Rollout.stream(config, rows(input))))

/** {@link collect} on the TestClock: the run's timeouts, retries' delays and sleeps pass in clock time. */
const collectOnClock = (config: Rollout.Config, input: ReadonlyArray<unknown>) =>
  onTestClock(Stream.runCollect(Rollout.stream(config, rows(input))), { limit: "1 minute" })

/** An env made from handlers (as a user writes one), counting creates and closes. */
const handlersEnv = (name: string, counters: Counters, handlers: (config: Env.EnvConfig) => Partial<Env.Handlers>) =>
  Env.make({
    name,
    create: (config) => {
      counters.created++
      let turn = 0
      const base: Env.Handlers = {
        reset: () => ({ observation: "start", info: {} }),
        step: () => {
          turn++
          return { observation: `turn ${turn}`, reward: 1, done: turn >= 2, info: { turn } }
        },
        close: () => void counters.closed++
      }
      return { ...base, ...handlers(config) }
    }
  })

describe("Rollout: a failure anywhere in a trajectory is its record, and the run ends", () => {
  it.live("finalizers that throw or die, rewards that throw or die, hooks that throw: each trajectory gets its typed error", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const closeThrows = handlersEnv("close_throws", counters, () => ({
        close: () => {
          counters.closed++
          throw new Error("close exploded")
        }
      }))
      const finalizerDies = Env.define({
        name: "finalizer_dies",
        make: () =>
          Effect.gen(function*() {
            yield* Effect.acquireRelease(Effect.sync(() => counters.created++), () => Effect.die(new Error("finalizer died")))
            return {
              reset: () => Effect.succeed({ observation: "start", info: {} }),
              step: () => Effect.succeed({ observation: "end", reward: 1, done: true, info: {} })
            }
          })
      })
      const config = yield* runConfig({
        envs: [closeThrows, finalizerDies, countingEnv(counters)],
        defaultEnv: "counting",
        numGenerations: 2,
        concurrency: 3
      })
      const items = yield* collect(config, [
        { env_config: { name: "close_throws" } },
        { env_config: { name: "finalizer_dies" } },
        { env_config: { length: 2 } },
        { env_config: { name: "close_throws" } }
      ])
      const all = records(items)
      expect(all.length).toBe(8)
      const byRow = (row: number) => all.filter((r) => r.result.row === row)
      for (const record of [...byRow(0), ...byRow(3)]) {
        assert(record.error instanceof Env.EnvError)
        expect([record.error.phase, record.error.detail, record.result.endReason]).toEqual(["close", "close exploded", "error"])
        // what the trajectory did is kept
        expect(record.result.numTurns).toBe(2)
      }
      for (const record of byRow(1)) {
        assert(record.error instanceof Scheduler.UnexpectedError)
        expect([record.error.phase, record.error.detail]).toEqual(["close", "finalizer died"])
      }
      expect(byRow(2).map((r) => [r.error, r.reward])).toEqual([[undefined, 1.25], [undefined, 1.25]])
    }).pipe(Effect.provide(echoPolicy())))

  it.live("reward functions that throw or die (not made with Reward.define) fail their trajectory only", () =>
    Effect.gen(function*() {
      const throws: Reward.Definition = {
        name: "throws",
        description: "",
        score: () => {
          throw new Error("reward threw")
        }
      }
      const dies: Reward.Definition = { name: "dies", description: "", score: () => Effect.die(new Error("reward died")) }
      const counters = new Counters()
      for (const reward of [throws, dies]) {
        const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", rewards: [reward], numGenerations: 3 })
        const all = records(yield* collect(config, [{}, {}, {}]))
        expect(all.length).toBe(9)
        for (const record of all) {
          assert(record.error instanceof Reward.RewardError)
          expect(record.error.message).toBe(`reward ${reward.name}: ${reward.name === "throws" ? "reward threw" : "reward died"}`)
        }
      }
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("a scheduler whose start or hooks throw (not returning an Effect) fails those trajectories", () =>
    Effect.gen(function*() {
      const startThrows = Scheduler.define({
        name: "start_throws",
        make: () =>
          Effect.succeed({
            name: "start_throws",
            start: () => {
              throw new Error("start exploded")
            }
          })
      })
      const hookThrows = Scheduler.extend(Scheduler.gym, {
        name: "hook_throws",
        session: () => ({
          onTurnEnd: () => {
            throw new Error("onTurnEnd exploded")
          }
        })
      })
      const counters = new Counters()
      for (const scheduler of [startThrows, hookThrows]) {
        const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", scheduler, concurrency: 2 })
        const all = records(yield* collect(config, [{}, {}]))
        expect(all.length).toBe(8)
        for (const record of all) {
          assert(record.error instanceof Scheduler.UnexpectedError)
          expect(record.error.detail).toBe(scheduler === startThrows ? "start exploded" : "onTurnEnd exploded")
        }
      }
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("values JSON cannot hold fail their trajectory with EncodeError naming the field; big integers stay exact", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const cyclic: Record<string, unknown> = { a: 1 }
      cyclic.self = cyclic
      const infos: Record<string, Env.Info> = {
        cycle: { state: cyclic },
        nan: { score: Number.NaN },
        infinity: { score: -Infinity },
        function: { callback: () => 1 },
        map: { table: new Map([[1, 2]]) },
        bigint: { id: 2n ** 70n }
      }
      const env = handlersEnv("infos", counters, (config) => ({
        step: () => ({ observation: "end", reward: 1, done: true, info: infos[config.kind as string] })
      }))
      const config = yield* runConfig({ envs: [env], defaultEnv: "infos", numGenerations: 2, concurrency: 4 })
      const kinds = Object.keys(infos)
      const items = yield* collect(config, kinds.map((kind) => ({ env_config: { kind } })))
      const all = records(items)
      expect(all.length).toBe(kinds.length * 2)
      const errorOf = (kind: string) => all.find((r) => r.result.row === kinds.indexOf(kind))!.error
      expect(errorOf("cycle")?.message).toBe(
        "cannot write the log line: rollout_infos.step_infos[0].state.self refers back to rollout_infos.step_infos[0].state (a cycle)"
      )
      expect(errorOf("nan")?.message).toBe(
        "cannot write the log line: rollout_infos.step_infos[0].score is NaN, which JSON cannot hold (it is written as null)"
      )
      expect(errorOf("infinity")).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.step_infos[0].score" })
      expect(errorOf("function")).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.step_infos[0].callback" })
      expect(errorOf("map")).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.step_infos[0].table" })
      expect(errorOf("bigint")).toBeUndefined()
      // every line can be written, and parses back; the big integer is written exactly
      const text = items.flatMap((item) => (item._tag === "Group" ? [CompletionsLog.groupText(item)] : [])).join("")
      const lines = text.trim().split("\n")
      expect(lines.length).toBe(kinds.length * 2)
      for (const line of lines) JSON.parse(line)
      expect(text).toContain(`"id":${2n ** 70n}`)
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))
})

describe("Rollout: timeouts stop what hangs, and close its env", () => {
  const hanging = (counters: Counters) =>
    handlersEnv("hanging", counters, (config) => ({
      reset: () => (config.hang === "reset" ? new Promise(() => {}) : { observation: "start", info: {} }),
      step: () => (config.hang === "step" ? Effect.never : { observation: "end", reward: 1, done: true, info: {} }),
      close: () => {
        if (config.hang === "close") return new Promise<void>(() => {})
        counters.closed++
      }
    }))

  it.effect("a hung reset, step or close ends its trajectory with Timeout naming the phase; the run goes on", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [hanging(counters)], defaultEnv: "hanging", numGenerations: 2, concurrency: 2 })
      const timeouts: Rollout.Timeouts = { reset: "200 millis", step: "200 millis", close: "300 millis" }
      const input = [{ env_config: { hang: "reset" } }, { env_config: { hang: "step" } }, { env_config: { hang: "close" } }, {}]
      const all = records(yield* collectOnClock({ ...config, timeouts }, input))
      expect(all.length).toBe(8)
      const tags = all.map((r) => r.error === undefined ? "ok" : `${r.error._tag}:${(r.error as Scheduler.Timeout).phase}`)
      expect(tags).toEqual(["Timeout:reset", "Timeout:reset", "Timeout:step", "Timeout:step", "Timeout:close", "Timeout:close", "ok", "ok"])
      expect(all[2].error?.message).toBe("the env step took longer than the step timeout (0.2 s)")
      // the reset and step timeouts closed their envs; the hung closes are the two still open
      expect(counters.created).toBe(8)
      expect(counters.closed).toBe(6)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("the limits are the Clock's: ten minutes' step and close timeouts pass on the TestClock, with nothing waited for real", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [hanging(counters)], defaultEnv: "hanging", numGenerations: 1, concurrency: 2 })
      const timeouts: Rollout.Timeouts = { step: "10 minutes", close: "10 minutes" }
      const started = yield* Clock.currentTimeMillis
      const all = records(
        yield* onTestClock(
          Stream.runCollect(Rollout.stream({ ...config, timeouts }, rows([{ env_config: { hang: "step" } }, {}]))),
          { limit: "30 minutes", step: "10 seconds" }
        )
      )
      expect(all.map((r) => r.error?.message ?? "ok")).toEqual(["the env step took longer than the step timeout (600 s)", "ok"])
      // the ten minutes passed in clock time: the step's limit, plus at most a step of the test's clock
      const elapsed = (yield* Clock.currentTimeMillis) - started
      expect(elapsed).toBeGreaterThanOrEqual(600_000)
      expect(elapsed).toBeLessThan(600_000 + 20_000)
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("an env call that cannot be interrupted is abandoned after the close timeout: its record is written, a new worker goes on", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const stuck = Env.define({
        name: "stuck",
        make: (config) =>
          Effect.succeed({
            reset: () => Effect.succeed({ observation: "start", info: {} }),
            step: () =>
              config.stuck === true
                ? Effect.uninterruptible(Effect.never)
                : Effect.succeed({ observation: "end", reward: 1, done: true, info: {} })
          })
      })
      const config = yield* runConfig({ envs: [stuck], defaultEnv: "stuck", numGenerations: 1, concurrency: 1 })
      const timeouts: Rollout.Timeouts = { step: "150 millis", close: "150 millis" }
      const input = [{ env_config: { stuck: true } }, {}, {}, { env_config: { stuck: true } }, {}]
      const all = records(yield* collectOnClock({ ...config, timeouts }, input))
      expect(all.map((r) => r.error?._tag ?? "ok")).toEqual(["Timeout", "ok", "ok", "Timeout", "ok"])
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("the trajectory timeout covers model calls", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", numGenerations: 2 })
      const all = records(yield* collectOnClock({ ...config, timeouts: { trajectory: "200 millis" } }, [{}]).pipe(
        Effect.provide(Inference.layerFunction("hangs", () => Effect.never))
      ))
      for (const record of all) {
        assert(record.error instanceof Scheduler.Timeout)
        expect([record.error.phase, record.error.limit]).toEqual(["model", "trajectory"])
        expect(record.result.resetInfo).toEqual({ id: expect.any(Number) })
      }
      expect(counters.open).toBe(0)
    }))

  it.effect("a reward function that hangs is stopped by the step timeout", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const hangs = Reward.define({ name: "hangs", score: () => Effect.never })
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", rewards: [hangs], numGenerations: 2 })
      const all = records(yield* collectOnClock({ ...config, timeouts: { step: "150 millis" } }, [{}]))
      expect(all.map((r) => [r.error?._tag, (r.error as Scheduler.Timeout).phase])).toEqual([["Timeout", "reward"], ["Timeout", "reward"]])
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))
})

describe("Rollout: transient failures are retried with a fresh env and the same seed", () => {
  it.effect("retries only transient errors, records the attempts, and ends as a clean run would", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const attempts = new Map<string, number>()
      const flaky = handlersEnv("flaky", counters, (config) => {
        let id = ""
        let turn = 0
        return {
          reset: (request) => {
            id = request.trajectoryId
            attempts.set(id, (attempts.get(id) ?? 0) + 1)
            return { observation: `start ${request.seed}`, info: {} }
          },
          step: () => {
            turn++
            if (turn === 1 && (attempts.get(id) ?? 0) <= Number(config.fails ?? 0)) {
              throw Object.assign(new Error(config.permanent === true ? "broken" : "connection reset"), {
                transient: config.permanent !== true
              })
            }
            return { observation: `turn ${turn}`, reward: turn, done: turn >= 2, info: {} }
          }
        }
      })
      const config = yield* runConfig({ envs: [flaky], defaultEnv: "flaky", numGenerations: 2 })
      const input = [{ env_config: { fails: 2 } }, { env_config: { fails: 3 } }, { env_config: { fails: 1, permanent: true } }, {}]
      const all = records(yield* collectOnClock({ ...config, retries: 2 }, input))
      const row = (i: number) => all.filter((r) => r.result.row === i)
      // two failures, then success on the third attempt
      for (const r of row(0)) {
        expect([r.error, r.attempts, r.attemptErrors?.map((e) => e.message)]).toEqual([
          undefined,
          3,
          ["env flaky: step failed: connection reset", "env flaky: step failed: connection reset"]
        ])
      }
      // out of attempts: the last error stays
      for (const r of row(1)) expect([r.error?._tag, r.attempts]).toEqual(["EnvError", 3])
      // not transient: no retry
      for (const r of row(2)) expect([r.error?._tag, r.attempts]).toEqual(["EnvError", undefined])
      // the retried trajectory is the one a clean run gives (fresh env, same seed), attempts aside
      const clean = records(yield* collectOnClock(config, [{}])).map((r) => r.result.messages)
      expect(row(0).map((r) => r.result.messages)).toEqual(clean)
      const line = JSON.parse(CompletionsLog.encodeLine(row(0)[0]))
      expect([line.attempts, line.attempt_errors.map((e: { _tag: string }) => e._tag)]).toEqual([3, ["EnvError", "EnvError"]])
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("a timeout is transient: a hung step is retried", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      let calls = 0
      const hangsOnce = handlersEnv("hangs_once", counters, () => ({
        step: () => (++calls === 1 ? new Promise(() => {}) : { observation: "end", reward: 1, done: true, info: {} })
      }))
      const config = yield* runConfig({ envs: [hangsOnce], defaultEnv: "hangs_once", numGenerations: 1 })
      const [record] = records(yield* collectOnClock({ ...config, retries: 1, timeouts: { step: "150 millis" } }, [{}]))
      expect([record.error, record.attempts, record.attemptErrors?.[0]._tag]).toEqual([undefined, 2, "Timeout"])
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))
})

describe("Rollout: stopping and failing sources keep what is complete", () => {
  it.live("until: a graceful stop emits every complete group, closes the envs in flight, and ends the stream", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const slow = handlersEnv("slow", counters, () => ({
        step: () => Effect.as(Effect.sleep("5 millis"), { observation: "end", reward: 1, done: true, info: {} })
      }))
      const config = yield* runConfig({ envs: [slow], defaultEnv: "slow", numGenerations: 4, concurrency: 8 })
      const stop = yield* Deferred.make<void>()
      const groups: Array<Rollout.Group> = []
      const fiber = yield* Effect.forkChild(within(Stream.runForEach(
        Rollout.stream(config, rows(Array.from({ length: 1000 }, () => ({}))), { until: Deferred.await(stop) }),
        (item) => Effect.sync(() => item._tag === "Group" && groups.push(item))
      )))
      while (groups.length < 5) yield* Effect.sleep("5 millis")
      yield* Deferred.succeed(stop, undefined)
      yield* Fiber.join(fiber)
      expect(groups.length).toBeGreaterThanOrEqual(5)
      expect(groups.length).toBeLessThan(1000)
      expect(groups.every((g) => g.records.length === 4 && g.records.every((r) => r.error === undefined))).toBe(true)
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("a source of rows that stalls (a FIFO's writer that stays open): a stop or a consumer that has enough ends the stream; the stall is not waited for", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", numGenerations: 2, concurrency: 4 })
      const stalling = () => Stream.concat(Stream.fromIterable(rows(Array.from({ length: 3 }, () => ({})))), Stream.never)
      // a stop: the groups read are emitted, then the stream ends (it waited for the stalled read forever)
      const stop = yield* Deferred.make<void>()
      const groups: Array<Rollout.Item> = []
      const fiber = yield* Effect.forkChild(within(Stream.runForEach(
        Rollout.stream(config, stalling(), { until: Deferred.await(stop) }),
        (item) => Effect.sync(() => groups.push(item))
      ), 10))
      while (groups.length < 3) yield* Effect.sleep("5 millis")
      yield* Deferred.succeed(stop, undefined)
      yield* Fiber.join(fiber)
      expect(groups.length).toBe(3)
      // a consumer that takes what it needs and goes
      const taken = yield* within(Stream.runCollect(Stream.take(Rollout.stream(config, stalling()), 2)), 10)
      expect(taken.length).toBe(2)
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("a source of rows that fails: what was read runs to the end, then the stream fails with its error", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", numGenerations: 2, concurrency: 4 })
      const good = Stream.fromIterable(rows(Array.from({ length: 6 }, () => ({}))))
      const failing = Stream.concat(good, Stream.fail("disk on fire"))
      const groups: Array<Rollout.Item> = []
      const exit = yield* Effect.exit(within(Stream.runForEach(Rollout.stream(config, failing), (item) => Effect.sync(() => groups.push(item)))))
      assert(Exit.isFailure(exit))
      expect(Cause.findErrorOption(exit.cause)).toEqual(Option.some("disk on fire"))
      expect(groups.length).toBe(6)
      expect(counters.open).toBe(0)
      // an iterable that throws: a defect, raised after the rows read before it
      function* throwing() {
        yield* rows([{}, {}])
        throw new Error("iterator exploded")
      }
      const seen: Array<Rollout.Item> = []
      const died = yield* Effect.exit(within(Stream.runForEach(Rollout.stream(config, throwing()), (item) => Effect.sync(() => seen.push(item)))))
      expect(seen.length).toBe(2)
      assert(died._tag === "Failure")
      expect(String(died.cause)).toContain("iterator exploded")
    }).pipe(Effect.provide(echoPolicy())))

  it.live("a Stream of rows gives the same lines as the same rows in memory", () =>
    Effect.gen(function*() {
      const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 3, concurrency: 5 })
      const input = Array.from({ length: 30 }, (_, i) => ({ env_config: { seed: i } }))
      const text = input.map((row) => JSON.stringify(row)).join("\n")
      const bytes = Stream.fromIterable(Array.from({ length: Math.ceil(text.length / 7) }, (_, i) => new TextEncoder().encode(text.slice(i * 7, i * 7 + 7))))
      const line = (r: Rollout.TrajectoryRecord) => JSON.stringify({ ...CompletionsLog.toLine(r), timings: null })
      const fromMemory = records(yield* collect(config, input)).map(line)
      const fromStream = records(yield* within(Stream.runCollect(Rollout.stream(config, Row.decodeStream("d", bytes))))).map(line)
      expect(fromStream).toEqual(fromMemory)
    }).pipe(Effect.provide(echoPolicy())))
})

describe("Rollout: sizes are bounded, with the reason", () => {
  it("num-generations, concurrency and max-turns have upper bounds", () => {
    const ok = { numGenerations: 8, maxTurns: 10, concurrency: 64, seed: 0 }
    const message = (config: typeof ok) => Result.match(RunSpec.decode(config, "flags"), { onFailure: (e) => e.message, onSuccess: () => "ok" })
    expect(message(ok)).toBe("ok")
    expect(message({ ...ok, numGenerations: 1e9 })).toBe(
      `--num-generations: must be at most 4096, got 1000000000: ${Rollout.LIMITS.numGenerations.reason}`
    )
    expect(message({ ...ok, concurrency: 10_000_000 })).toMatch(/^--concurrency: must be at most 100000, got 10000000: /)
    expect(message({ ...ok, maxTurns: 1e6 })).toMatch(/^--max-turns: must be at most 10000, got 1000000: /)
  })
})
