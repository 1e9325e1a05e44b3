/**
 * The fixed latency of the scripted policies: a sleep per model call, the Clock's own `sleep` (a
 * Node.js timer under the live clock; a `TestClock` drives it without waiting).
 *
 * Sleeps that ended in the same millisecond used to share one timer, written here by hand: on
 * Effect 3 a sleep cost ~17 us of CPU against ~11 us shared. On Effect 4 the Clock's own sleep is
 * cheaper and wakes sooner (the shared timer was set to the end rounded up to the millisecond, about
 * 1 ms later than asked): 1,024 fibers sleeping 20 ms 150 times reach 0.957-0.969 of the bound at
 * 3.8-4.4 us of CPU a sleep, against 0.888-0.907 at 5.5-6.4 us shared (4 alternated pairs, quiet
 * machine); the 20 ms workload through the command line gains 1-3.5% (BENCHMARKS.md).
 */
import { Duration, Effect } from "effect"

/**
 * The sleep of `ms` milliseconds under the clock of the fiber that asks (once, when a policy is
 * made). A latency past what one Node.js timer holds (2^31 - 1 ms) is waited by Effect in timers
 * one after the other, never cut to 1 ms as Node.js cuts such a timer (test/inference/Latency.test.ts).
 */
export const sleepOf = (ms: number): Effect.Effect<Effect.Effect<void>> =>
  Effect.clockWith((clock) => Effect.succeed(clock.sleep(Duration.millis(ms))))
