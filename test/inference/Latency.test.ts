/**
 * Hostile pass over the scripted policies' sleep (src/inference/internal/latency.ts; a timer shared
 * by the sleeps of one millisecond when this was written, the Clock's sleep since): latencies past
 * what a Node.js timer holds, thousands of sleeps in one millisecond interrupted (all, or some at
 * random), the TestClock (adjusted, set back and forth, interrupted).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { sleepOf } from "../../src/inference/internal/latency.js"

const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length

describe("the scripted policies' sleep, hostile", () => {
  it.live("a latency past 2^31-1 ms does not end after 1 ms (Node.js clamps such a timer to 1 ms, with a warning)", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const onWarning = (w: Error) => void warnings.push(w.name)
      process.on("warning", onWarning)
      try {
        for (const ms of [2 ** 31, 3e9, Number.MAX_SAFE_INTEGER]) {
          const sleep = yield* sleepOf(ms)
          const fiber = yield* Effect.forkChild(sleep)
          yield* Effect.sleep("60 millis")
          expect(fiber.pollUnsafe() === undefined, `${ms} ms ended early`).toBe(true)
          yield* Fiber.interrupt(fiber)
        }
        yield* Effect.sleep("10 millis")
        expect(warnings).not.toContain("TimeoutOverflowWarning")
      } finally {
        process.off("warning", onWarning)
      }
    }))

  it.live("20,000 sleeps in the same milliseconds, all interrupted: no timer left, promptly", () =>
    Effect.gen(function*() {
      const before = timers()
      const sleep = yield* sleepOf(60_000)
      const fibers = yield* Effect.forEach(Array.from({ length: 20_000 }), () => Effect.forkChild(sleep))
      yield* Effect.yieldNow
      const started = performance.now()
      yield* Fiber.interruptAll(fibers)
      const took = performance.now() - started
      expect(timers()).toBeLessThanOrEqual(before)
      // a hang guard, not a speed target (removing each waker by indexOf/splice is quadratic)
      expect(took).toBeLessThan(20_000)
    }), 60_000)

  it.live("thousands of sleeps, some interrupted at random moments: every other one wakes once, after its latency; no timer left", () =>
    Effect.gen(function*() {
      const before = timers()
      const sleeps = yield* Effect.forEach([3, 4, 5, 7], (ms) => Effect.map(sleepOf(ms), (sleep) => ({ ms, sleep })))
      let seed = 12345
      const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff
      for (let round = 0; round < 5; round++) {
        const runs = yield* Effect.forEach(Array.from({ length: 2000 }, (_, i) => i), (i) => {
          const { ms, sleep } = sleeps[i % sleeps.length]
          const started = performance.now()
          let woke = 0
          return Effect.map(
            Effect.forkChild(Effect.map(Effect.tap(sleep, () => Effect.sync(() => void woke++)), () => performance.now() - started)),
            (fiber) => ({ fiber, ms, woke: () => woke })
          )
        })
        // interrupt a random third, at random moments within the sleeps
        const interrupters = yield* Effect.forEach(runs.filter(() => rand() < 1 / 3), (run) =>
          Effect.forkChild(Effect.andThen(Effect.sleep(`${Math.floor(rand() * 8)} millis`), Fiber.interrupt(run.fiber))))
        for (const run of runs) {
          const exit = yield* Fiber.await(run.fiber)
          if (Exit.isSuccess(exit)) {
            expect(exit.value).toBeGreaterThanOrEqual(run.ms - 1)
            expect(run.woke()).toBe(1)
          } else {
            expect(Exit.hasInterrupts(exit)).toBe(true)
          }
        }
        // (their own sleeps are the Clock's timers, not the shared ones: done before the count)
        yield* Fiber.joinAll(interrupters)
      }
      // (other timers of the process come and go: a leaked one never goes, a passing one does)
      for (let i = 0; i < 100 && timers() > before; i++) yield* Effect.sleep("20 millis")
      expect(timers()).toBeLessThanOrEqual(before)
    }), 60_000)

  it.effect("under the TestClock: hundreds of sleeps (its adjust wakes each in turn), interrupted ones never wake, the clock set back then forth", () =>
    Effect.gen(function*() {
      const sleep = yield* sleepOf(30)
      const fibers = yield* Effect.forEach(Array.from({ length: 400 }), () => Effect.forkChild(sleep))
      yield* Fiber.interruptAll(fibers.filter((_, i) => i % 2 === 0))
      yield* TestClock.adjust("29 millis")
      for (const f of fibers.filter((_, i) => i % 2 === 1)) expect(f.pollUnsafe() === undefined).toBe(true)
      // set back: nothing wakes; forth past the end: the others wake
      yield* TestClock.setTime(0)
      for (const f of fibers.filter((_, i) => i % 2 === 1).slice(0, 50)) expect(f.pollUnsafe() === undefined).toBe(true)
      yield* TestClock.setTime(1_000)
      for (const [i, f] of fibers.entries()) {
        const exit = yield* Fiber.await(f)
        expect(i % 2 === 0 ? Exit.hasInterrupts(exit) : Exit.isSuccess(exit)).toBe(true)
      }
    }))
})
