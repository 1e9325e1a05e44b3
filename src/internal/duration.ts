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
 * Waits for `effect` at most `limit`, whatever its outcome, also inside a finalizer. The effect
 * runs in a detached fiber; the wait is for that fiber, and when the wait ends before it (the
 * limit, or an interruption of the caller), the fiber is interrupted without waiting for it to
 * end: at the limit `Effect.timeout` would interrupt the effect and wait for that interruption to
 * finish, which an effect whose own interruption blocks (a database query's cancel, with the
 * database gone) holds past the limit. The wait keeps the caller's interruptibility: inside a
 * finalizer (uninterruptible) `Effect.timeout` still ends it at the limit, while a region made
 * interruptible there would end at once, the fiber being interrupted already (Effect 4: a stop
 * waited for nothing); elsewhere the caller can interrupt it.
 */
export const waitAtMost = (effect: Effect.Effect<unknown, unknown>, limit: Duration.Input): Effect.Effect<void> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(Effect.forkDetach(effect), (fiber) =>
      restore(Effect.timeout(Fiber.await(fiber), limit)).pipe(
        Effect.ensuring(Effect.sync(() => fiber.interruptUnsafe())),
        Effect.ignore
      ))
  )
