import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Result, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as Rollout from "../src/Rollout.js"
import * as Row from "../src/Row.js"
import * as Scheduler from "../src/Scheduler.js"
import * as Trajectory from "../src/Trajectory.js"
import { Counters, countingEnv, echoPolicy, runConfig } from "./helpers.js"

const setup = (counters: Counters, envConfig: Record<string, unknown>, maxTurns = 10) =>
  Effect.gen(function*() {
    const config = yield* runConfig({ envs: [countingEnv(counters)], defaultEnv: "counting", maxTurns })
    const row = Result.getOrThrow(Row.decodeValue("t.jsonl", 0, { env_config: envConfig }))
    const prepared = Result.getOrThrow(Rollout.prepareRow(config, row))
    return {
      request: Rollout.request(config, prepared, 0),
      options: { scheduler: config.scheduler.instance } satisfies Trajectory.Options
    }
  })


describe("Trajectory", () => {
  it.effect("streams Reset, then Completion and Step per turn, then End(done); the fold sums rewards", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const { options, request } = yield* setup(counters, { length: 3 })
      const events = yield* Stream.runCollect(Trajectory.stream(request, options))
      expect(events.map((e) => e._tag)).toEqual([
        "Reset",
        "Completion",
        "Step",
        "Completion",
        "Step",
        "Completion",
        "Step",
        "End"
      ])
      const result = yield* Trajectory.fold(request, Stream.fromIterable(events))
      expect(result.endReason).toBe("done")
      expect(result.totalReward).toBe(1.5)
      expect(result.stepRewards).toEqual([0.25, 0.25, 1])
      expect(result.numTurns).toBe(3)
      expect(result.resetInfo).toEqual({ id: 1 })
      expect(result.stepInfos).toEqual([{ turn: 1 }, { turn: 2 }, { turn: 3 }])
      expect(result.rolloutInfos).toEqual({ gym_done: true })
      expect(result.messages.map((m) => m.role)).toEqual([
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant"
      ])
      expect(result.messages[3].content).toBe("obs 1 after reply 1")
      expect(result.timings.turns.length).toBe(3)
      expect(counters.created).toBe(1)
      expect(counters.closed).toBe(1)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("ends with max_turns when the env is not done, and closes the env", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const { options, request } = yield* setup(counters, { length: 100 }, 4)
      const result = yield* Trajectory.run(request, options)
      expect(result.endReason).toBe("max_turns")
      expect(result.numTurns).toBe(4)
      expect(result.stepRewards.length).toBe(4)
      expect(counters.closed).toBe(1)
    }).pipe(Effect.provide(echoPolicy())))

  const failures: ReadonlyArray<[string, Record<string, unknown>, string, number]> = [
    ["create", { fail: "create" }, "EnvError", 0],
    ["reset", { fail: "reset" }, "EnvError", 0],
    ["step", { fail: "step", at: 2 }, "EnvError", 2],
    ["NaN reward", { fail: "nan", at: 1 }, "EnvError", 1],
    ["a defect in step", { fail: "die_step", at: 2 }, "UnexpectedError", 2]
  ]
  for (const [what, envConfig, tag, turns] of failures) {
    it.effect(`a failure in ${what} ends the trajectory with a typed error, and the env is closed`, () =>
      Effect.gen(function*() {
        const counters = new Counters()
        const { options, request } = yield* setup(counters, envConfig)
        const result = yield* Trajectory.run(request, options)
        expect(result.endReason).toBe("error")
        expect(result.error?._tag).toBe(tag)
        expect(result.numTurns).toBe(turns)
        expect(counters.open).toBe(0)
        if (what === "NaN reward") expect(result.error?.message).toContain("reward must be a finite number")
      }).pipe(Effect.provide(echoPolicy())))
  }

  it.effect("a model failure ends the trajectory with an InferenceError; the env is closed", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const { options, request } = yield* setup(counters, { length: 5 })
      const result = yield* Trajectory.run(request, options).pipe(
        Effect.provide(echoPolicy({ failIds: new Set([request.id]), failTurn: 2 }))
      )
      expect(result.endReason).toBe("error")
      expect(result.error?._tag).toBe("InferenceError")
      expect(result.error?.message).toContain("HTTP 500")
      // the failed model call of turn 2 is not a turn: one completed
      expect(result.numTurns).toBe(1)
      expect(counters.open).toBe(0)
    }))

  it.effect("interrupting a trajectory mid-step closes its env (run and stream)", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const { options, request } = yield* setup(counters, { length: 5, hang_at: 2 })
      const fiber = yield* Effect.forkChild(Trajectory.run(request, options))
      yield* Effect.yieldNow
      yield* TestClock.adjust(10)
      while (counters.steps < 2) yield* Effect.yieldNow
      expect(counters.open).toBe(1)
      yield* Fiber.interrupt(fiber)
      expect(counters.open).toBe(0)

      const streamFiber = yield* Effect.forkChild(Stream.runDrain(Trajectory.stream(request, options)))
      while (counters.steps < 4) yield* Effect.yieldNow
      expect(counters.open).toBe(1)
      yield* Fiber.interrupt(streamFiber)
      const exit = yield* Fiber.await(streamFiber)
      expect(Exit.hasInterrupts(exit)).toBe(true)
      expect(counters.open).toBe(0)
      expect([...counters.closedIds.values()].every((n) => n === 1)).toBe(true)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("a consumer that stops pulling early closes the env", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const { options, request } = yield* setup(counters, { length: 5 })
      const firstTwo = yield* Stream.runCollect(Stream.take(Trajectory.stream(request, options), 2))
      expect(firstTwo.length).toBe(2)
      expect(counters.created).toBe(1)
      expect(counters.closed).toBe(1)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("custom schedulers override hooks with Scheduler.extend", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const doubled = Scheduler.extend(Scheduler.gym, {
        name: "doubled",
        session: (base) => ({
          onTurnEnd: (context) => Effect.map(base.onTurnEnd(context), (r) => ({ ...r, reward: (r.reward ?? 0) * 2 })),
          checkFinished: (context) => context.turn >= 2
        })
      })
      const { request } = yield* setup(counters, { length: 5 })
      const instance = yield* doubled.make({ options: {} })
      const result = yield* Trajectory.run(request, { scheduler: instance })
      expect(result.stepRewards).toEqual([0.5, 0.5, 0.5, 0.5, 2])
      expect(result.endReason).toBe("done")
    }).pipe(Effect.provide(echoPolicy())))
})
