/**
 * Envs in worker threads: an env that blocks its thread fails alone (a typed EnvError after the
 * timeout), its worker is replaced, the main thread keeps running meanwhile; results are the same
 * as in-process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import * as path from "node:path"
import * as EnvWorkers from "../../src/isolation/EnvWorkers.js"
import * as PluginLoader from "../../src/node/PluginLoader.js"

const plugin = path.resolve(import.meta.dirname, "../fixtures/plugins/blocking_envs.mjs")
const request = { trajectoryId: "t", seed: 1, messages: [], dataDict: {}, envConfig: {} }

/** Counts main-thread timer ticks while `effect` runs: a blocked main thread would count none. */
const ticking = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let ticks = 0
    const timer = setInterval(() => ticks++, 20)
    const out = yield* Effect.ensuring(effect, Effect.sync(() => clearInterval(timer)))
    return { out, ticks }
  })

describe("EnvWorkers", () => {
  it.live("an env blocked in a step fails after the timeout with a typed error; its worker is replaced; the main thread runs on", () =>
    Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, timeout: "1 second" })
      const registry = workers.registry(yield* PluginLoader.registry([plugin]))
      const blocking = registry.envs.get("blocking")!
      const play = (replies: ReadonlyArray<string>) =>
        Effect.scoped(Effect.gen(function*() {
          const env = yield* Result.getOrThrow(blocking.prepare({ length: 10 }))
          const reset = yield* env.reset(request)
          const out: Array<unknown> = [reset]
          let messages: Array<{ role: "user" | "assistant"; content: string }> = [{ role: "user", content: reset.observation }]
          for (const reply of replies) {
            messages = [...messages, { role: "assistant", content: reply }]
            const step = yield* Effect.result(env.step(messages))
            out.push(step)
            if (Result.isFailure(step)) break
            messages = [...messages, { role: "user", content: step.success.observation }]
          }
          return out
        }))
      const { out, ticks } = yield* ticking(play(["hi", "block", "never sent"]))
      expect(out[0]).toEqual({ observation: "say something", info: { thread: "worker" } })
      expect(out[1]).toEqual(Result.succeed({ observation: "heard hi (2 messages)", reward: 1, done: false, info: { turn: 1 } }))
      const failed = out[2] as Result.Result<never, { _tag: string; phase: string; details: unknown; message: string }>
      expect(Result.isFailure(failed)).toBe(true)
      if (Result.isFailure(failed)) {
        expect(failed.failure).toMatchObject({ _tag: "EnvError", env: "blocking", phase: "step", details: { reason: "Timeout", timeout_ms: 1000 } })
        expect(failed.failure.message).toContain("no answer within 1s: the env's worker was terminated")
      }
      expect(out.length).toBe(3)
      // the main thread kept running through the blocked second (a blocked thread counts no ticks)
      expect(ticks).toBeGreaterThan(10)
      expect(workers.stats).toMatchObject({ started: 1, replaced: 1, timedOut: 1, envs: 0 })
      // the next env gets a fresh worker; only the new messages went to the worker (it counts them all)
      const again = yield* play(["a", "b"])
      expect(again[2]).toEqual(Result.succeed({ observation: "heard b (4 messages)", reward: 1, done: false, info: { turn: 2 } }))
      expect(workers.stats).toMatchObject({ started: 2, replaced: 1, envs: 0 })
    }).pipe(Effect.scoped))

  it.live("blocking in create or reset, and a worker that exits, are typed errors too; other envs of a lost worker fail with WorkerLost", () =>
    Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, timeout: "800 millis" })
      const blocking = workers.registry(yield* PluginLoader.registry([plugin])).envs.get("blocking")!
      const create = yield* Effect.flip(Effect.scoped(Result.getOrThrow(blocking.prepare({ block: "create" }))))
      expect(create).toMatchObject({ phase: "create", details: { reason: "Timeout" } })
      const reset = yield* Effect.flip(Effect.scoped(Effect.flatMap(Result.getOrThrow(blocking.prepare({ block: "reset" })), (env) => env.reset(request))))
      expect(reset).toMatchObject({ phase: "reset", details: { reason: "Timeout" } })
      // two envs on one worker; one ends the thread: the other's next call fails as WorkerLost
      const [bystander, exiting] = yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* Result.getOrThrow(blocking.prepare({}))
        const b = yield* Result.getOrThrow(blocking.prepare({}))
        yield* a.reset(request)
        yield* b.reset(request)
        const exiting = yield* Effect.flip(b.step([{ role: "assistant", content: "exit" }]))
        const bystander = yield* Effect.flip(a.step([{ role: "assistant", content: "hello" }]))
        return [bystander, exiting] as const
      }))
      expect(exiting).toMatchObject({ phase: "step", details: { reason: "WorkerLost" } })
      expect(exiting.message).toContain("exited unexpectedly")
      expect(bystander).toMatchObject({ phase: "step", details: { reason: "WorkerLost" } })
      expect(workers.stats.envs).toBe(0)
    }).pipe(Effect.scoped))

  it.live("a plugin that does not load in a worker is an error when the pool starts", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(EnvWorkers.make({ plugins: [path.resolve(import.meta.dirname, "../fixtures/plugins/throws.mjs")], workers: 1 }))
      expect(error._tag).toBe("WorkerStartError")
      expect(error.message).toContain("throws.mjs")
    }).pipe(Effect.scoped))
})
