/**
 * `waitAtMost` (src/internal/duration.ts), the bounded wait of the stops' finalizers: the limit holds
 * inside a finalizer (which runs uninterruptibly), and when the effect's own interruption is slow
 * (a database query's cancel with the database gone).
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
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
})
