/**
 * `waitAtMost` (src/internal/duration.ts), the bounded wait of the stops' finalizers: the limit holds
 * inside a finalizer (which runs uninterruptibly), and when the effect's own interruption is slow
 * (a database query's cancel with the database gone).
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber } from "effect"
import { waitAtMost } from "../src/internal/duration.js"

const timed = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const started = Date.now()
    yield* effect
    return Date.now() - started
  })

describe("waitAtMost", () => {
  it.live("inside a finalizer: an effect that never ends is given up at the limit", () =>
    Effect.gen(function*() {
      const took = yield* timed(Effect.scoped(Effect.addFinalizer(() => waitAtMost(Effect.never, "300 millis"))))
      expect(took).toBeLessThan(2_000)
    }))

  it.live("an effect whose interruption takes 5 s: given up at the limit, not after its interruption", () =>
    Effect.gen(function*() {
      const stubborn = Effect.onInterrupt(Effect.never, () => Effect.sleep(Duration.seconds(5)))
      const took = yield* timed(Effect.scoped(Effect.addFinalizer(() => waitAtMost(stubborn, "300 millis"))))
      expect(took).toBeLessThan(2_500)
    }), 20_000)

  it.live("an effect that ends (or fails) in time: its end is the wait's", () =>
    Effect.gen(function*() {
      let ran = false
      yield* waitAtMost(Effect.sync(() => void (ran = true)), "5 seconds")
      expect(ran).toBe(true)
      const took = yield* timed(waitAtMost(Effect.fail("no"), "5 seconds"))
      expect(took).toBeLessThan(2_500)
    }))

  it.live("in the finalizer of an interrupted fiber (a stop): the effect is waited for, up to the limit (Effect 4 ended an interruptible wait there at once)", () =>
    Effect.gen(function*() {
      let closed = false
      const close = Effect.andThen(Effect.sleep(Duration.millis(200)), Effect.sync(() => void (closed = true)))
      const fiber = yield* Effect.forkChild(Effect.ensuring(Effect.never, waitAtMost(close, "10 seconds")))
      yield* Effect.sleep(Duration.millis(20))
      yield* Fiber.interrupt(fiber)
      expect(closed).toBe(true)
    }))

  it.live("outside a finalizer, the caller can stop waiting", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(waitAtMost(Effect.never, "1 hour"))
      yield* Effect.sleep(Duration.millis(20))
      yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      expect(Exit.hasInterrupts(exit)).toBe(true)
    }))
})
