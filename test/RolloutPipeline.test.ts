import { assert, describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Stream } from "effect"
import * as Env from "../src/Env.js"
import * as Rollout from "../src/Rollout.js"
import * as Trajectory from "../src/Trajectory.js"
import { Counters, countingEnv, echoPolicy } from "./helpers.js"

describe("Rollout.make / run / events", () => {
  it.effect("take(10) starts at most 10 + bufferSize groups' trajectories", () =>
    Effect.gen(function*() {
      for (const bufferSize of [1, 3, 8]) {
        const counters = new Counters()
        const rollout = Rollout.make({
          envs: [countingEnv(counters)],
          numGenerations: 4,
          concurrency: 16,
          bufferSize
        })
        const rows = Array.from({ length: 80 }, () => ({ env_config: { length: 2 } }))
        const groups = yield* Stream.fromIterable(rows).pipe(Rollout.run(rollout), Stream.take(10), Stream.runCollect)
        expect(groups.length).toBe(10)
        expect(counters.created).toBeLessThanOrEqual((10 + bufferSize) * 4)
        expect(counters.open).toBe(0)
      }
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("defaults: the only env is the default, 8 generations, the env's reward", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const items = yield* Stream.fromIterable([{ env_config: {} }, { env_config: { length: 1 } }]).pipe(
        Rollout.run(Rollout.make({ envs: [countingEnv(counters)] })),
        Stream.runCollect
      )
      const groups = items.filter(Rollout.isGroup)
      expect(groups.map((g) => g.records.length)).toEqual([8, 8])
      for (const g of groups) for (const r of g.records) expect(r.rewards).toEqual({ gym_reward: r.result.totalReward })
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("a bad setting fails the stream with a typed error before anything runs", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const exit = yield* Effect.exit(
        Stream.runCollect(Rollout.run(Rollout.make({ envs: [countingEnv(counters)], concurrency: 0 }))([{}]))
      )
      assert(Exit.isFailure(exit))
      // named as the library's option (it named the command line's flag, --concurrency, before the run spec)
      expect(String(exit.cause)).toContain("RunConfigError: concurrency: must be a whole number >= 1, got 0")
      expect(counters.created).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("events: one stream, each event tagged; a trajectory's events fold into its record's result", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const rollout = Rollout.make({ envs: [countingEnv(counters)], numGenerations: 3, concurrency: 4 })
      const configs = [{ length: 3 }, { fail: "step", at: 2 }, { fail: "reset" }, { length: 1 }]
      const all = yield* Stream.fromIterable(configs.map((c) => ({ env_config: c }))).pipe(Rollout.events(rollout), Stream.runCollect)
      const groups = all.filter(Rollout.isGroup)
      const events = all.filter(Rollout.isTurnEvent)
      expect(groups.length).toBe(4)
      for (const group of groups) {
        for (const record of group.records) {
          const mine = events.filter((e) => e.trajectoryId === record.result.id)
          expect(mine.every((e) => e.row === record.result.row && e.generation === record.result.generation)).toBe(true)
          expect(mine.at(-1)?._tag).toBe("End")
          // every event of the trajectory comes before its group
          const groupAt = all.indexOf(group)
          for (const e of mine) expect(all.indexOf(e)).toBeLessThan(groupAt)
          const acc = new Trajectory.Accumulator(
            { id: record.result.id, row: record.result.row, generation: record.result.generation } as never
          )
          for (const e of mine) acc.add(e)
          const folded = acc.result()
          expect(folded.totalReward).toBe(record.result.totalReward)
          expect(folded.stepRewards).toEqual(record.result.stepRewards)
          expect(folded.numTurns).toBe(record.result.numTurns)
          expect(folded.endReason).toBe(record.result.endReason)
          expect(folded.error?._tag).toBe(record.result.error?._tag)
          expect(folded.messages).toEqual(record.result.messages)
        }
      }
      expect(counters.open).toBe(0)
    }).pipe(Effect.provide(echoPolicy())))

  it.effect("Trajectory.stream: End comes after the env is closed and carries a failure to close", () =>
    Effect.gen(function*() {
      const closing = Env.define({
        name: "bad_close",
        make: () =>
          Effect.as(
            Effect.addFinalizer(() => Effect.die(new Error("close broke"))),
            {
              reset: () => Effect.succeed({ observation: "hi", info: {} }),
              step: () => Effect.succeed({ observation: "bye", reward: 1, done: true, info: {} })
            } satisfies Env.Env
          )
      })
      const all = yield* Stream.make({ env_config: {} }).pipe(
        Rollout.events(Rollout.make({ envs: [closing], numGenerations: 1 })),
        Stream.runCollect
      )
      const end = all.find((e): e is Trajectory.End => e._tag === "End")
      expect(end?.error?._tag).toBe("UnexpectedError")
      expect(end?.reason).toBe("error")
    }).pipe(Effect.provide(echoPolicy())))
})

class Greeting extends Context.Service<Greeting, { readonly text: string; readonly made: Array<string> }>()("test/Greeting") {}

describe("Envs as services", () => {
  it.effect("an env constructor requires a service; the run requires it and a Layer provides it", () =>
    Effect.gen(function*() {
      const greeter = Env.define({
        name: "greeter",
        make: () =>
          Effect.map(Greeting, (greeting): Env.Env => {
            greeting.made.push(greeting.text)
            return {
              reset: () => Effect.succeed({ observation: greeting.text, info: {} }),
              step: () => Effect.succeed({ observation: "", reward: 1, done: true, info: {} })
            }
          })
      })
      // The definition's type says what it needs.
      const needs: Env.Definition<Greeting> = greeter
      const made: Array<string> = []
      const run = Stream.make({}, {}).pipe(Rollout.run(Rollout.make({ envs: [needs], numGenerations: 2 })))
      const items = yield* Stream.runCollect(run).pipe(
        Effect.provide(Layer.succeed(Greeting, { text: "hello from a service", made }))
      )
      const groups = items.filter(Rollout.isGroup)
      expect(groups.length).toBe(2)
      expect(made.length).toBe(4)
      expect(groups[0].records[0].result.messages[0].content).toBe("hello from a service")
    }).pipe(Effect.provide(echoPolicy())))
})
