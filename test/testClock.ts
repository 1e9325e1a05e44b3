/**
 * Runs an effect on the `TestClock`, moving the clock on until the effect ends: every timeout,
 * sleep and delay of the run engine (and of the test) happens in clock time, without waiting for
 * real. A run that does not end fails the test after `limit` of clock time.
 */
import { Clock, Duration, Effect } from "effect"
import { TestClock } from "effect/testing"

export const onTestClock = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  options: { readonly limit?: Duration.Input; readonly step?: Duration.Input } = {}
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const limit = Duration.toMillis(Duration.fromInputUnsafe(options.limit ?? "10 minutes"))
    const step = Duration.fromInputUnsafe(options.step ?? "5 millis")
    const started = yield* Clock.currentTimeMillis
    const fiber = yield* Effect.forkChild(effect)
    for (;;) {
      const exit = fiber.pollUnsafe()
      if (exit !== undefined) return yield* exit
      if ((yield* Clock.currentTimeMillis) - started > limit) {
        // (not waited for: a run that does not end may not stop either)
        fiber.interruptUnsafe()
        return yield* Effect.die(new Error(`still running after ${limit} ms of clock time`))
      }
      yield* TestClock.adjust(step)
    }
  })

/** The clock's milliseconds since `since` (a reading of `Clock.currentTimeMillis`). */
export const clockSince = (since: number): Effect.Effect<number> => Effect.map(Clock.currentTimeMillis, (now) => now - since)
