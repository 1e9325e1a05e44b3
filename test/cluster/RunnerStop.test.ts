/**
 * A runner's stop is given up once its database has not answered for the limit (`joinStoppable`):
 * with the database down, the hand-over of its shards never ended, and a runner stopped by SIGHUP
 * (no one left to send a second signal) stayed behind. While the database answers, the stop is
 * waited for. (The same on a real PostgreSQL: test/cluster/Cluster.test.ts, "a runner stopped while
 * the database is down".)
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { joinStoppable } from "../../src/cli/RunnerCommand.js"

/** A runner whose stop (its finalizer) ends only when `release` is done. */
const runnerWithStop = (release: Deferred.Deferred<void>) =>
  Effect.scoped(Effect.andThen(Effect.addFinalizer(() => Deferred.await(release)), Effect.never))

describe("a runner's stop", () => {
  it.live("with the database down past the limit: given up (it waited forever)", () =>
    Effect.gen(function*() {
      const release = yield* Deferred.make<void>()
      const running = yield* Effect.forkDetach(runnerWithStop(release))
      let gaveUp = 0
      const job = yield* Effect.forkChild(joinStoppable(running, () => Date.now() - 60_000, 0.3, () => void gaveUp++))
      yield* Effect.sleep("100 millis")
      const stopped = Date.now()
      yield* Fiber.interrupt(job).pipe(Effect.timeout("5 seconds"))
      expect(Exit.hasInterrupts(yield* Fiber.await(job))).toBe(true)
      expect(gaveUp).toBe(1)
      expect(Date.now() - stopped).toBeGreaterThanOrEqual(250)
      yield* Deferred.succeed(release, undefined)
    }))

  it.live("while the database answers: the stop is waited for, however long", () =>
    Effect.gen(function*() {
      const release = yield* Deferred.make<void>()
      const running = yield* Effect.forkDetach(runnerWithStop(release))
      let gaveUp = 0
      const job = yield* Effect.forkChild(joinStoppable(running, () => undefined, 0.2, () => void gaveUp++))
      yield* Effect.sleep("100 millis")
      const stopping = yield* Effect.forkChild(Fiber.interrupt(job))
      yield* Effect.sleep("1 second")
      expect(stopping.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(stopping).pipe(Effect.timeout("5 seconds"))
      expect(gaveUp).toBe(0)
      expect((yield* Fiber.await(running))._tag).toBe("Failure")
    }))

  it.live("the database gone during the stop: the limit counts from when it went", () =>
    Effect.gen(function*() {
      const release = yield* Deferred.make<void>()
      const running = yield* Effect.forkDetach(runnerWithStop(release))
      let down: number | undefined
      let gaveUp = 0
      const job = yield* Effect.forkChild(joinStoppable(running, () => down, 0.3, () => void gaveUp++))
      yield* Effect.sleep("100 millis")
      const stopping = yield* Effect.forkChild(Fiber.interrupt(job))
      yield* Effect.sleep("500 millis")
      expect(gaveUp).toBe(0)
      down = Date.now()
      yield* Fiber.join(stopping).pipe(Effect.timeout("5 seconds"))
      expect(gaveUp).toBe(1)
      expect(Date.now() - down).toBeGreaterThanOrEqual(250)
      yield* Deferred.succeed(release, undefined)
    }))
})
