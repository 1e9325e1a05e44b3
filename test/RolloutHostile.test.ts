/**
 * The pipeable run API (`Rollout.make` / `run` / `events`) under a hostile user: the repros of the
 * hostile pass of 2026-12-03, each of which failed before its fix (a stream that never ended, an
 * error never raised, a stop that hung or closed envs one at a time, a source's resource released
 * under its own read, settings accepted that failed every row or died later, a reply that was not
 * text taken as one).
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Duration, Effect, Exit, Fiber, Option, Stream } from "effect"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import * as OpenEnvPool from "../src/openenv/OpenEnvPool.js"
import * as OpenEnvScheduler from "../src/openenv/OpenEnvScheduler.js"
import * as Rollout from "../src/Rollout.js"
import { Counters, countingEnv, echoPolicy } from "./helpers.js"
import { clockSince, onTestClock } from "./testClock.js"

/** Runs a test on the TestClock: the run's timeouts and the test's sleeps pass in clock time. */
const clocked = <A, E, R>(effect: Effect.Effect<A, E, R>) => onTestClock(effect, { limit: "1 minute" })

/** Fails (instead of hanging the suite) when `effect` has not ended within `seconds`. */
const within = <A, E, R>(seconds: number, what: string, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.timeoutOption(effect, Duration.seconds(seconds)), (result) =>
    Option.isSome(result) ? Effect.succeed(result.value) : Effect.die(new Error(`${what}: still running after ${seconds} s`)))

/** An env whose close waits `closeMs` (or for ever: "hang") and whose steps take `stepMs`; counts closes at once. */
class Closing {
  created = 0
  closed = 0
  closing = 0
  maxClosing = 0
}
const closingEnv = (c: Closing, close: number | "hang", stepMs = 0) =>
  Env.define({
    name: "closing",
    make: () =>
      Effect.map(
        Effect.acquireRelease(Effect.sync(() => ++c.created), () =>
          Effect.suspend(() => {
            c.closing++
            c.maxClosing = Math.max(c.maxClosing, c.closing)
            const done = Effect.sync(() => {
              c.closing--
              c.closed++
            })
            return close === "hang" ? Effect.never : Effect.delay(done, Duration.millis(close))
          })),
        (): Env.Env => ({
          reset: () => Effect.succeed({ observation: "start", info: {} }),
          step: () => Effect.delay(Effect.succeed({ observation: "o", reward: 0, done: false, info: {} }), Duration.millis(stepMs))
        })
      )
  })

describe("Rollout.run / events, hostile (2026-12-03)", () => {
  it.live("an explicit bufferSize below the rows, concurrency above the generations: the stream ends after its last group (it waited for ever)", () =>
    Effect.gen(function*() {
      // [generations, concurrency, bufferSize, rows]
      const cases = [[1, 2, 1, 2], [4, 64, 1, 3], [2, 3, 1, 6], [1, 8, 4, 9]] as const
      for (const [numGenerations, concurrency, bufferSize, count] of cases) {
        for (const source of ["iterable", "stream"] as const) {
          for (const api of ["run", "events"] as const) {
            const counters = new Counters()
            const rollout = Rollout.make({ envs: [countingEnv(counters)], numGenerations, concurrency, bufferSize })
            const rows = Array.from({ length: count }, () => ({ env_config: { length: 2 } }))
            const input = source === "iterable" ? rows : Stream.fromIterable(rows)
            const stream: Stream.Stream<Rollout.Event, Rollout.ConfigError, Inference.Inference> = api === "run"
              ? Rollout.run(rollout)(input)
              : Rollout.events(rollout)(input)
            const items = yield* within(10, `${numGenerations}x${concurrency} buffer ${bufferSize} ${source} ${api}`, Stream.runCollect(stream))
            expect(items.filter(Rollout.isGroup).length).toBe(count)
            expect(counters.open).toBe(0)
          }
        }
      }
    }).pipe(Effect.provide(echoPolicy())), 60_000)

  it.live("with a bufferSize, a rows stream that fails: the groups before it, then its typed error (it was never raised)", () =>
    Effect.gen(function*() {
      class BadRows extends Error {}
      const counters = new Counters()
      const rows = Stream.concat(
        Stream.fromIterable(Array.from({ length: 6 }, () => ({ env_config: { length: 1 } }))),
        Stream.fail(new BadRows("row 7 cannot be read"))
      )
      const rollout = Rollout.make({ envs: [countingEnv(counters)], numGenerations: 2, concurrency: 8, bufferSize: 2 })
      let groups = 0
      const exit = yield* within(
        10,
        "the failing run",
        Effect.exit(Stream.runForEach(Rollout.run(rollout)(rows), (item) => Effect.sync(() => void (Rollout.isGroup(item) && groups++))))
      )
      assert(Exit.isFailure(exit))
      expect(Cause.findErrorOption(exit.cause).pipe(Option.getOrUndefined)).toBeInstanceOf(BadRows)
      expect(groups).toBe(6)
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())), 30_000)

  it.effect("a stop (take, interruption) while an env's close hangs ends within the close timeout (it hung for ever)", () =>
    Effect.gen(function*() {
      const c = new Closing()
      const rollout = Rollout.make({ envs: [closingEnv(c, "hang", 50)], numGenerations: 1, concurrency: 2, timeouts: { close: "300 millis" } })
      const rows = Array.from({ length: 4 }, () => ({ env_config: {} }))
      // a consumer that has enough: take(1) of a run whose trajectories never end (10 turns of 50 ms each, close hangs)
      const started = yield* Clock.currentTimeMillis
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(rollout)(rows)))
      yield* Effect.sleep(Duration.millis(120))
      yield* within(10, "the interruption", Fiber.interrupt(fiber))
      expect(c.created).toBeGreaterThan(0)
      // (well past the close timeout: the bound is what matters here, not the speed)
      expect(yield* clockSince(started)).toBeLessThan(8_000)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("a stop closes the envs in flight at once, not one after another", () =>
    Effect.gen(function*() {
      const c = new Closing()
      const rollout = Rollout.make({ envs: [closingEnv(c, 200, 1_000)], numGenerations: 1, concurrency: 16 })
      const rows = Array.from({ length: 16 }, () => ({ env_config: {} }))
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(rollout)(rows)))
      yield* Effect.sleep(Duration.millis(300))
      yield* within(20, "the interruption", Fiber.interrupt(fiber))
      expect(c.created).toBe(16)
      expect(c.closed).toBe(16)
      // every close under way together (one at a time took 16 x 200 ms)
      expect(c.maxClosing).toBe(16)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("a stop with a close timeout waits for the closes that end within it (on Effect 4 it waited for none: every env was still open)", () =>
    Effect.gen(function*() {
      const c = new Closing()
      const rollout = Rollout.make({
        envs: [closingEnv(c, 200, 1_000)],
        numGenerations: 1,
        concurrency: 4,
        timeouts: { close: "30 seconds" }
      })
      const rows = Array.from({ length: 4 }, () => ({ env_config: {} }))
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(rollout)(rows)))
      yield* Effect.sleep(Duration.millis(300))
      yield* within(20, "the interruption", Fiber.interrupt(fiber))
      expect(c.created).toBe(4)
      expect(c.closed).toBe(4)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("a stop while the rows stream is reading: its own finalizer runs after that read has ended, not under it", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      let reading = 0
      const rows = Stream.scoped(
        Stream.fromEffect(
          Effect.acquireRelease(Effect.sync(() => log.push("open")), () => Effect.sync(() => log.push(`release (reads under way: ${reading})`)))
        )
      ).pipe(
        Stream.flatMap(() =>
          Stream.range(0, 100).pipe(
            Stream.rechunk(1),
            Stream.mapEffect((i) =>
              Effect.sync(() => void reading++).pipe(
                Effect.andThen(Effect.sleep(Duration.millis(i < 2 ? 0 : 400))),
                Effect.ensuring(Effect.sync(() => void reading--)),
                Effect.as({ env_config: {} })
              )
            )
          )
        )
      )
      const counters = new Counters()
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(Rollout.make({ envs: [countingEnv(counters)], numGenerations: 1 }))(rows)))
      yield* Effect.sleep(Duration.millis(150))
      yield* within(10, "the interruption", Fiber.interrupt(fiber))
      expect(log).toEqual(["open", "release (reads under way: 0)"])
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("settings that would fail every row, die later or time out every step are typed errors before anything runs", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const env = countingEnv(counters, "a")
      const cases: ReadonlyArray<[Rollout.Options<never>, string]> = [
        [{ envs: [] }, "envs: must hold at least one env"],
        [{ envs: [env, countingEnv(counters, "a")] }, `envs: two envs are named "a"`],
        [{ envs: [env], defaultEnv: "zzz" }, `defaultEnv: unknown env "zzz" (envs: a)`],
        [{ envs: [env], retries: -1 }, "retries: must be a whole number >= 0, got -1"],
        [{ envs: [env], retries: Number.NaN }, "retries: must be a whole number >= 0, got NaN"],
        [{ envs: [env], timeouts: { step: -5 } }, "timeouts.step: must be a positive duration"],
        [{ envs: [env], timeouts: { step: "banana" as Duration.Input } }, "timeouts.step: must be a positive duration"],
        [{ envs: [env], timeouts: { steps: "1 second" } as Rollout.Timeouts }, "timeouts.steps: unknown timeout (there are reset, step, close, trajectory)"],
        [{ envs: [env], sampling: { temperature: "hot" as unknown as number } }, "sampling.temperature: must be a finite number, got \"hot\""],
        [{ envs: [env], sampling: { topP: Number.POSITIVE_INFINITY } }, "sampling.topP: must be a finite number"]
      ]
      for (const [options, message] of cases) {
        const exit = yield* Effect.exit(Stream.runCollect(Rollout.run(Rollout.make(options))([{ env_config: {} }])))
        assert(Exit.isFailure(exit))
        const error = Cause.findErrorOption(exit.cause).pipe(Option.getOrUndefined)
        expect(error?._tag).toBe("RunConfigError")
        expect(error?.message).toContain(message)
      }
      expect(counters.created).toBe(0)
      // what is fine stays fine
      const ok = yield* Stream.runCollect(
        Rollout.run(Rollout.make({ envs: [env], defaultEnv: "a", retries: 0, timeouts: { step: "1 second", close: 500 }, sampling: { temperature: 0.7 } }))(
          [{ env_config: { length: 1 } }]
        )
      )
      expect(ok.filter(Rollout.isGroup).length).toBe(1)
    }).pipe(Effect.provide(echoPolicy())))

  it.live("OpenEnvPool.layer refuses settings it cannot use with a typed error (a limit of 0 made every session wait for ever)", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[OpenEnvPool.Settings, string]> = [
        [{ maxConcurrentEnvs: 0 }, "maxConcurrentEnvs: must be a whole number >= 1, got 0"],
        [{ maxConcurrentEnvs: -1 }, "maxConcurrentEnvs: must be a whole number >= 1, got -1"],
        [{ maxConcurrentEnvs: 1.5 }, "maxConcurrentEnvs: must be a whole number >= 1, got 1.5"],
        [{ connectRetries: -1 }, "connectRetries: must be a whole number >= 0, got -1"],
        [{ replyTimeout: "banana" as Duration.Input }, "replyTimeout: must be a positive duration, got \"banana\""],
        [{ closeTimeout: 0 }, "closeTimeout: must be a positive duration, got 0"]
      ]
      for (const [settings, message] of cases) {
        const rollout = Rollout.make({ envs: [OpenEnvScheduler.env()], numGenerations: 1 })
        const exit = yield* within(
          10,
          JSON.stringify(settings),
          Effect.exit(Stream.runCollect(Rollout.run(rollout)([{ env_config: { base_url: "ws://127.0.0.1:9" } }])).pipe(Effect.provide(OpenEnvPool.layer(settings))))
        )
        assert(Exit.isFailure(exit))
        const error = Cause.findErrorOption(exit.cause).pipe(Option.getOrUndefined)
        expect(error).toBeInstanceOf(OpenEnvPool.SettingsError)
        expect(error?.message).toBe(`OpenEnvPool ${message}`)
      }
    }).pipe(Effect.provide(echoPolicy())), 60_000)

  it.effect("a policy whose reply is not text: a typed InferenceError (BadResponse) for that trajectory, not a number in the conversation", () =>
    Effect.gen(function*() {
      const replies: ReadonlyArray<[unknown, string]> = [
        [{ text: 5, finishReason: "stop" }, "the completion's text must be a string, got 5"],
        [undefined, "the completion is not an object: undefined"],
        [{ finishReason: "stop" }, "the completion's text must be a string, got undefined"]
      ]
      for (const [reply, detail] of replies) {
        const counters = new Counters()
        const policy = Inference.layerFunction("odd", () => Effect.succeed(reply as Inference.Completion))
        const items = yield* Stream.runCollect(Rollout.run(Rollout.make({ envs: [countingEnv(counters)], numGenerations: 1 }))([{ env_config: {} }])).pipe(
          Effect.provide(policy)
        )
        const record = items.filter(Rollout.isGroup)[0].records[0]
        const error = record.result.error
        assert(error instanceof Inference.InferenceError)
        expect(error.reason).toBe("BadResponse")
        expect(error.message).toBe(`odd: BadResponse: ${detail}`)
        expect(record.result.messages.every((m) => typeof m.content === "string")).toBe(true)
        expect(counters.open).toBe(0)
      }
    }))
})

describe("Rollout.run / events, hostile (2026-12-03, second pass)", () => {
  it.effect("one close timeout for a whole stop: envs stuck in a close and envs stuck in a step, all closes hanging (it took twice the timeout)", () =>
    Effect.gen(function*() {
      const c = new Closing()
      // rows 0 and 2 end at once and hang in their close; rows 1 and 3 hang in a step (10 s), then in their close
      const hanging = Env.define({
        name: "hanging",
        make: (config) =>
          Effect.map(
            Effect.acquireRelease(Effect.sync(() => ++c.created), () => Effect.never),
            (): Env.Env => ({
              reset: () => Effect.succeed({ observation: "start", info: {} }),
              step: () => Effect.delay(Effect.succeed({ observation: "o", reward: 0, done: true, info: {} }), Duration.millis(config.slow === true ? 10_000 : 0))
            })
          )
      })
      const rollout = Rollout.make({ envs: [hanging], numGenerations: 1, concurrency: 4, timeouts: { close: "2 seconds" } })
      const rows = Array.from({ length: 4 }, (_, i) => ({ env_config: { slow: i % 2 === 1 } }))
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(rollout)(rows)))
      yield* Effect.sleep(Duration.millis(150))
      const stopped = yield* Clock.currentTimeMillis
      yield* within(10, "the interruption", Fiber.interrupt(fiber))
      expect(c.created).toBe(4)
      // about 2 s (the close timeout), not 4
      expect(yield* clockSince(stopped)).toBeLessThan(3_300)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("Env.make whose async create never resolves: a stop ends it, a reset timeout alone ends it, and a late creation is closed once", () =>
    Effect.gen(function*() {
      let resolveLate: ((handlers: Env.Handlers) => void) | undefined
      let closes = 0
      const handlers: Env.Handlers = {
        reset: () => ({ observation: "hi", info: {} }),
        step: () => ({ observation: "o", reward: 1, done: true, info: {} }),
        close: () => void closes++
      }
      const def = Env.make({
        name: "k",
        create: (config: Env.EnvConfig) =>
          config.hang === true
            ? new Promise<Env.Handlers>(() => {})
            : config.late === true
            ? new Promise<Env.Handlers>((resolve) => void (resolveLate = resolve))
            : handlers
      })
      // the reset timeout alone (no close timeout): the hanging creation is that trajectory's Timeout
      const rows = [{ env_config: {} }, { env_config: { hang: true } }, { env_config: {} }]
      const items = yield* within(10, "the run", Stream.runCollect(Rollout.run(Rollout.make({ envs: [def], numGenerations: 1, concurrency: 2, timeouts: { reset: "200 millis" } }))(rows)))
      const errors = items.filter(Rollout.isGroup).map((g) => g.records[0].result.error?._tag ?? "ok")
      expect(errors.sort()).toEqual(["Timeout", "ok", "ok"])
      // a stop, no timeouts at all
      const fiber = yield* Effect.forkChild(Stream.runDrain(Rollout.run(Rollout.make({ envs: [def], numGenerations: 1 }))([{ env_config: { hang: true } }])))
      yield* Effect.sleep(Duration.millis(50))
      yield* within(10, "the interruption", Fiber.interrupt(fiber))
      // a creation that resolves after the stop: its env is closed, once
      closes = 0
      const late = yield* Effect.forkChild(Stream.runDrain(Rollout.run(Rollout.make({ envs: [def], numGenerations: 1 }))([{ env_config: { late: true } }])))
      yield* Effect.sleep(Duration.millis(50))
      yield* within(10, "the interruption", Fiber.interrupt(late))
      assert(resolveLate !== undefined)
      resolveLate(handlers)
      yield* Effect.sleep(Duration.millis(50))
      expect(closes).toBe(1)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("until lands while ended trajectories close their envs: their groups are still emitted (they were dropped, though done)", () =>
    Effect.gen(function*() {
      const c = new Closing()
      const rollout = Rollout.make({ envs: [closingEnv(c, 200)], numGenerations: 2, concurrency: 4, maxTurns: 1, timeouts: { close: "2 seconds" } })
      const rows = Array.from({ length: 4 }, () => ({ env_config: {} }))
      const items = yield* within(10, "the run", Stream.runCollect(Rollout.events(rollout, { until: Effect.sleep(Duration.millis(100)) })(rows)))
      const all = items
      // the first 4 trajectories (2 rows) were closing when the stop came
      expect(c.created).toBe(4)
      expect(all.filter(Rollout.isGroup).length).toBe(2)
      expect(all.filter((e) => Rollout.isTurnEvent(e) && e._tag === "End").length).toBe(4)
      expect(c.closed).toBe(4)
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)

  it.effect("an until that dies stops the run, and the stream fails with its defect after the last group (it was dropped, and the run went on)", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const rows = Array.from({ length: 200 }, () => ({ env_config: { length: 2 } }))
      const slowPolicy = Inference.layerFunction("slow", () => Effect.delay(Effect.succeed({ text: "x", finishReason: "stop" as const }), Duration.millis(20)))
      const exit = yield* within(
        20,
        "the run",
        Effect.exit(Stream.runCollect(Rollout.run(Rollout.make({ envs: [countingEnv(counters)], numGenerations: 1, concurrency: 4 }), { until: Effect.andThen(Effect.sleep(Duration.millis(100)), Effect.die(new Error("boom"))) })(rows))).pipe(
          Effect.provide(slowPolicy)
        )
      )
      assert(Exit.isFailure(exit))
      expect(Cause.pretty(exit.cause)).toContain("boom")
      expect(counters.created).toBeLessThan(200)
      expect(counters.open).toBe(0)
    }).pipe(clocked), 30_000)
})

describe("Rollout.run / events, hostile (2026-12-03, third pass: through the CLI)", () => {
  it.effect("until lands while ended trajectories close their envs and the closes run past the close timeout: their groups come, with Timeout(close) records (they were left out)", () =>
    Effect.gen(function*() {
      for (const stopAfter of [100, 450]) {
        const c = new Closing()
        const rollout = Rollout.make({ envs: [closingEnv(c, "hang")], numGenerations: 2, concurrency: 4, maxTurns: 1, timeouts: { close: "500 millis" } })
        const rows = Array.from({ length: 4 }, () => ({ env_config: {} }))
        const started = yield* Clock.currentTimeMillis
        const items = yield* within(10, "the run", Stream.runCollect(Rollout.run(rollout, { until: Effect.sleep(Duration.millis(stopAfter)) })(rows)))
        const groups = items.filter(Rollout.isGroup)
        expect(c.created).toBe(4)
        expect(groups.length).toBe(2)
        for (const group of groups) {
          for (const record of group.records) {
            expect(record.result.error?._tag).toBe("Timeout")
            expect((record.result.error as { readonly phase?: string }).phase).toBe("close")
          }
        }
        expect(yield* clockSince(started)).toBeLessThan(5_000)
      }
    }).pipe(Effect.provide(echoPolicy()), clocked), 30_000)
})
