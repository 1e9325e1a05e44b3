/**
 * Durations given by user code, and waits bounded by one.
 */
import { Duration, Effect, Fiber, Option } from "effect"

/**
 * The milliseconds of `input` ("30 seconds", 500, a `Duration`) when it is a positive duration;
 * `undefined` when it is not a duration at all, or zero, or negative.
 */
export const positiveMillis = (input: unknown): number | undefined => {
  const ms = Option.map(Duration.fromInput(input as Duration.Input), Duration.toMillis)
  return Option.isSome(ms) && ms.value > 0 ? ms.value : undefined
}

/**
 * Waits for `effect` at most `limit`, whatever its outcome. The wait itself is made interruptible:
 * inside a finalizer (which runs uninterruptibly) `Effect.timeout` cannot end a wait it cannot
 * interrupt, and a stop waited for ever on a close that hung, close timeout or not. And it is
 * disconnected: at the limit `Effect.timeout` interrupts the effect and waits for that interruption
 * to finish, which an effect whose own interruption blocks (a database query's cancel, with the
 * database gone) would hold past the limit. So the effect runs in a detached fiber (interruptible
 * even when forked from a finalizer); the wait is for that fiber, and when the wait ends before it
 * (the limit, or an interruption), the fiber is interrupted without waiting for it to end.
 */
export const waitAtMost = (effect: Effect.Effect<unknown, unknown>, limit: Duration.Input): Effect.Effect<void> =>
  Effect.uninterruptible(
    Effect.flatMap(Effect.forkDetach(effect), (fiber) =>
      Effect.interruptible(Effect.timeout(Fiber.await(fiber), limit)).pipe(
        Effect.ensuring(Effect.sync(() => fiber.interruptUnsafe())),
        Effect.ignore
      ))
  )
