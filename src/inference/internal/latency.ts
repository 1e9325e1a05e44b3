/**
 * The fixed latency of the scripted policies: a sleep per model call. Under the live clock, the
 * sleeps that end in the same millisecond share one timer (a run at concurrency 1,024 with a 20 ms
 * latency starts ~50,000 sleeps a second, and `Effect.sleep` costs each one a clock lookup, a
 * Node.js `Timeout` and its closures: measured, ~17 µs of CPU per sleep against ~11 µs shared, with
 * 1,024 fibers sleeping 20 ms in a loop; see BENCHMARKS.md). Under any other `Clock` (a
 * `TestClock`), it is that clock's own `sleep`, so tests drive it without waiting.
 */
import { Duration, Effect } from "effect"
import type { Clock } from "effect"

/** The clock of a fiber that was given no other (the default services' clock). */
const liveClock: Clock.Clock = Effect.runSync(Effect.clockWith(Effect.succeed))

/** The sleeps ending in one millisecond: their wake-ups and their timer. */
interface Slot {
  readonly wakes: Array<() => void>
  readonly timer: ReturnType<typeof setTimeout>
}

/** Slots by the millisecond (of `performance.now()`, rounded up) their sleeps end at. */
const due = new Map<number, Slot>()

const fire = (at: number): void => {
  const slot = due.get(at)
  due.delete(at)
  if (slot === undefined) return
  const wakes = slot.wakes
  for (let i = 0; i < wakes.length; i++) wakes[i]()
}

/**
 * A sleep of at least `ms` milliseconds on a timer shared with the sleeps ending in the same
 * millisecond; interruptible (the last sleep of a slot to be interrupted clears its timer).
 */
const sharedSleep = (ms: number): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    const now = performance.now()
    const at = Math.ceil(now + ms)
    let slot = due.get(at)
    if (slot === undefined) {
      slot = { wakes: [], timer: setTimeout(fire, Math.max(1, Math.ceil(at - now)), at) }
      due.set(at, slot)
    }
    const wake = () => resume(Effect.void)
    const mine = slot
    mine.wakes.push(wake)
    return Effect.sync(() => {
      const i = mine.wakes.indexOf(wake)
      if (i < 0) return
      mine.wakes.splice(i, 1)
      if (mine.wakes.length === 0 && due.get(at) === mine) {
        due.delete(at)
        clearTimeout(mine.timer)
      }
    })
  })

/**
 * The sleep of `ms` milliseconds under the clock of the fiber that asks (once, when a policy is
 * made): shared timers under the live clock, that clock's `sleep` under another.
 */
export const sleepOf = (ms: number): Effect.Effect<Effect.Effect<void>> =>
  Effect.clockWith((clock) =>
    Effect.succeed(clock === liveClock && ms <= MAX_TIMER_MS ? sharedSleep(ms) : clock.sleep(Duration.millis(ms)))
  )

/**
 * The longest sleep given a shared timer: a Node.js timer holds at most 2^31 - 1 ms (a longer one
 * fired after 1 ms, with a TimeoutOverflowWarning), and the shared timer's delay is the sleep's
 * rounded up to the millisecond. Longer sleeps are the Clock's (which, as `Effect.sleep`, never ends
 * them: test/inference/Latency.test.ts).
 */
const MAX_TIMER_MS = 2 ** 31 - 2
