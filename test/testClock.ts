/**
 * Runs an effect on the `TestClock`, moving the clock on until the effect ends: every timeout,
 * sleep and delay of the run engine (and of the test) happens in clock time, without waiting for
 * real. A run that does not end fails the test after `limit` of clock time.
 */
import { Clock, Duration, Effect, Fiber, Option, TestClock } from "effect"

export const onTestClock = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  options: { readonly limit?: Duration.DurationInput; readonly step?: Duration.DurationInput } = {}
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const limit = Duration.toMillis(Duration.decode(options.limit ?? "10 minutes"))
    const step = Duration.decode(options.step ?? "5 millis")
    const started = yield* Clock.currentTimeMillis
    const fiber = yield* Effect.fork(effect)
    for (;;) {
      const exit = yield* Fiber.poll(fiber)
      if (Option.isSome(exit)) return yield* exit.value
      if ((yield* Clock.currentTimeMillis) - started > limit) {
        yield* Fiber.interruptFork(fiber)
        return yield* Effect.dieMessage(`still running after ${limit} ms of clock time`)
      }
      yield* TestClock.adjust(step)
    }
  })

/** The clock's milliseconds since `since` (a reading of `Clock.currentTimeMillis`). */
export const clockSince = (since: number): Effect.Effect<number> => Effect.map(Clock.currentTimeMillis, (now) => now - since)
