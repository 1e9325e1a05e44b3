/**
 * Envs in worker threads: an env that blocks its thread fails alone (a typed EnvError after the
 * timeout), its worker is replaced, the main thread keeps running meanwhile; results are the same
 * as in-process. The other envs of a replaced worker are moved and replayed (issue 28, items 8
 * and 18); a worker whose env only hangs (async) is not replaced at all.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Result, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Calculator from "../../src/envs/Calculator.js"
import * as EnvWorkers from "../../src/isolation/EnvWorkers.js"
import * as PluginLoader from "../../src/node/PluginLoader.js"

const plugin = path.resolve(import.meta.dirname, "../fixtures/plugins/blocking_envs.mjs")
const faults = path.resolve(import.meta.dirname, "../fixtures/plugins/faults.mjs")
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

  it.live("blocking in create or reset, and a worker that exits, are typed errors too; an env of that worker with no call in flight is moved", () =>
    Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, timeout: "800 millis" })
      const blocking = workers.registry(yield* PluginLoader.registry([plugin])).envs.get("blocking")!
      const create = yield* Effect.flip(Effect.scoped(Result.getOrThrow(blocking.prepare({ block: "create" }))))
      expect(create).toMatchObject({ phase: "create", details: { reason: "Timeout" } })
      const reset = yield* Effect.flip(Effect.scoped(Effect.flatMap(Result.getOrThrow(blocking.prepare({ block: "reset" })), (env) => env.reset(request))))
      expect(reset).toMatchObject({ phase: "reset", details: { reason: "Timeout" } })
      // two envs on one worker; one ends the thread: it fails as WorkerLost; the other, idle then,
      // is moved to a new worker and replayed, and its step is answered as it would have been
      const [bystander, exiting] = yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* Result.getOrThrow(blocking.prepare({}))
        const b = yield* Result.getOrThrow(blocking.prepare({}))
        yield* a.reset(request)
        yield* b.reset(request)
        const exiting = yield* Effect.flip(b.step([{ role: "assistant", content: "exit" }]))
        const bystander = yield* a.step([{ role: "assistant", content: "hello" }])
        return [bystander, exiting] as const
      }))
      expect(exiting).toMatchObject({ phase: "step", details: { reason: "WorkerLost" } })
      expect(exiting.message).toContain("exited unexpectedly")
      expect(bystander).toEqual({ observation: "heard hello (1 messages)", reward: 1, done: false, info: { turn: 1 } })
      expect(workers.stats).toMatchObject({ envs: 0, moved: 1, replaced: 3 })
    }).pipe(Effect.scoped))

  it.live("issue 28 #8: an env that blocks its worker fails alone; another env whose step waited behind it is moved, replayed, and answered", () =>
    Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, timeout: "1 second" })
      const blocking = workers.registry(yield* PluginLoader.registry([plugin])).envs.get("blocking")!
      yield* Effect.scoped(Effect.gen(function*() {
        const innocent = yield* Result.getOrThrow(blocking.prepare({ length: 10 }))
        const blocker = yield* Result.getOrThrow(blocking.prepare({}))
        const opened = yield* innocent.reset(request)
        yield* blocker.reset(request)
        const one: Array<{ role: "user" | "assistant"; content: string }> = [
          { role: "user", content: opened.observation },
          { role: "assistant", content: "one" }
        ]
        expect((yield* innocent.step(one)).info).toEqual({ turn: 1 })
        const two = [...one, { role: "user" as const, content: "heard one" }, { role: "assistant" as const, content: "two" }]
        // the blocker's step goes first; the innocent's is queued behind it on the same thread
        const [blocked, answered] = yield* Effect.all([
          Effect.flip(blocker.step([{ role: "assistant", content: "block" }])),
          Effect.suspend(() => innocent.step(two))
        ], { concurrency: "unbounded" })
        expect(blocked).toMatchObject({ phase: "step", details: { reason: "Timeout", timeout_ms: 1000 } })
        expect(blocked.message).toContain("the env's worker was terminated")
        // replayed (reset, step "one") on the new worker: the turn count goes on from there
        expect(answered).toEqual({ observation: "heard two (4 messages)", reward: 1, done: false, info: { turn: 2 } })
        expect(workers.stats).toMatchObject({ started: 2, replaced: 1, timedOut: 1, moved: 1 })
      }))
      expect(workers.stats.envs).toBe(0)
    }).pipe(Effect.scoped))

  it.live("an env whose replay answers differently (not deterministic) fails with WorkerLost instead of being moved", () =>
    Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, timeout: "800 millis" })
      const blocking = workers.registry(yield* PluginLoader.registry([plugin])).envs.get("blocking")!
      const lost = yield* Effect.scoped(Effect.gen(function*() {
        const random = yield* Result.getOrThrow(blocking.prepare({ random: true }))
        const blocker = yield* Result.getOrThrow(blocking.prepare({}))
        yield* random.reset(request)
        yield* Effect.flip(blocker.step([{ role: "assistant", content: "block" }]))
        return yield* Effect.flip(random.step([{ role: "assistant", content: "hi" }]))
      }))
      expect(lost).toMatchObject({ phase: "step", details: { reason: "WorkerLost" } })
      expect(lost.message).toContain("replaying its reset gave another answer")
    }).pipe(Effect.scoped))

  it.live("issue 28 #18: a close that hangs (async) fails its own scope with a Timeout; the worker is kept; its neighbours are closed", () =>
    Effect.gen(function*() {
      const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-workers-")), "envs.log")
      process.env.EFFECT_GYM_ENV_LOG = log
      const workers = yield* EnvWorkers.make({ plugins: [faults], workers: 1, closeTimeout: "500 millis" }).pipe(
        Effect.ensuring(Effect.sync(() => delete process.env.EFFECT_GYM_ENV_LOG))
      )
      const faulty = workers.registry(yield* PluginLoader.registry([faults])).envs.get("faulty")!
      const episode = (config: Record<string, unknown>) =>
        Effect.gen(function*() {
          const scope = yield* Scope.make()
          const env = yield* Scope.provide(Result.getOrThrow(faulty.prepare(config)), scope)
          yield* env.reset(request)
          yield* env.step([{ role: "assistant", content: "hi" }])
          return yield* Effect.exit(Scope.close(scope, Exit.void))
        })
      const closed = yield* Effect.all([episode({ fault: "hang_close" }), episode({}), episode({}), episode({}), episode({})], {
        concurrency: "unbounded"
      })
      expect(Exit.isFailure(closed[0])).toBe(true)
      if (Exit.isFailure(closed[0])) {
        expect(Cause.squash(closed[0].cause)).toMatchObject({ _tag: "EnvError", phase: "close", details: { reason: "Timeout" } })
      }
      expect(closed.slice(1).every(Exit.isSuccess)).toBe(true)
      const lines = fs.readFileSync(log, "utf8").trim().split("\n")
      expect([lines.filter((l) => l === "create").length, lines.filter((l) => l === "close").length]).toEqual([5, 4])
      // the worker answered its probe: it was not terminated, and serves the next env
      expect(workers.stats).toMatchObject({ started: 1, replaced: 0, timedOut: 1, moved: 0 })
      expect(Exit.isSuccess(yield* episode({}))).toBe(true)
    }).pipe(Effect.scoped))

  it.live("a close that blocks its thread: that env's close fails with a Timeout; an idle neighbour is moved and closed there", () =>
    Effect.gen(function*() {
      const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-workers-")), "envs.log")
      process.env.EFFECT_GYM_ENV_LOG = log
      // (kept while the test runs: the replacement worker is started later, with the environment of then)
      yield* Effect.addFinalizer(() => Effect.sync(() => delete process.env.EFFECT_GYM_ENV_LOG))
      const workers = yield* EnvWorkers.make({ plugins: [plugin], workers: 1, closeTimeout: "500 millis" })
      const blocking = workers.registry(yield* PluginLoader.registry([plugin])).envs.get("blocking")!
      const hung = yield* Scope.make()
      const kept = yield* Scope.make()
      yield* Effect.flatMap(Scope.provide(Result.getOrThrow(blocking.prepare({ block: "close" })), hung), (env) => env.reset(request))
      const neighbour = yield* Scope.provide(Result.getOrThrow(blocking.prepare({})), kept)
      yield* neighbour.reset(request)
      const closing = yield* Effect.exit(Scope.close(hung, Exit.void))
      expect(Exit.isFailure(closing) && Cause.squash(closing.cause)).toMatchObject({ phase: "close", details: { reason: "Timeout" } })
      expect(yield* neighbour.step([{ role: "assistant", content: "still here" }])).toMatchObject({ observation: "heard still here (1 messages)" })
      expect(Exit.isSuccess(yield* Effect.exit(Scope.close(kept, Exit.void)))).toBe(true)
      // created twice (the neighbour replayed in the new worker), closed once (there)
      const lines = fs.readFileSync(log, "utf8").trim().split("\n")
      expect(lines).toEqual(["create", "create", "create", "close"])
      expect(workers.stats).toMatchObject({ replaced: 1, moved: 1, envs: 0 })
    }).pipe(Effect.scoped))

  it.live("a plugin that does not load in a worker is an error when the pool starts", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(EnvWorkers.make({ plugins: [path.resolve(import.meta.dirname, "../fixtures/plugins/throws.mjs")], workers: 1 }))
      expect(error._tag).toBe("WorkerStartError")
      expect(error.message).toContain("throws.mjs")
    }).pipe(Effect.scoped))
})

describe("calculator in a worker thread (--isolate-envs)", () => {
  it.live("its tools cross the thread: specs from reset, tool messages from step", () =>
    Effect.scoped(Effect.gen(function*() {
      const workers = yield* EnvWorkers.make({ plugins: [], workers: 1, timeout: "10 seconds" })
      const registry = workers.registry(yield* PluginLoader.registry([]))
      const env = yield* Result.getOrThrow(registry.envs.get("calculator")!.prepare({ seed: 4 }))
      const reset = yield* env.reset({ trajectoryId: "t", seed: 1, messages: [], dataDict: {}, envConfig: { seed: 4 } })
      expect(reset.tools?.map((t) => t.name)).toEqual(["lookup", "calculate"])
      const item = Calculator.task(4, 3).order[0]
      const result = yield* env.step([
        { role: "user", content: reset.observation },
        {
          role: "assistant",
          content: "",
          tool_calls: [{ id: "c1", type: "function", function: { name: "lookup", arguments: JSON.stringify({ item: item.item }) } }]
        }
      ])
      expect(result.toolMessages).toEqual([{ role: "tool", content: String(item.price), tool_call_id: "c1", name: "lookup" }])
    })))
})
