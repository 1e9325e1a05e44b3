/**
 * Completed Effects, used without running them. `Effect.succeed(a)` is a successful `Exit` (an
 * Exit is an Effect), so a step that can answer at once returns one, and the trajectory loop takes
 * its value directly instead of going through the fiber runtime (see `Trajectory`'s `Machine.turns`).
 * Only public APIs: should a later Effect make `Effect.succeed` something else than an `Exit`, the
 * check is false and everything takes the ordinary path (test/SyncFastPath.test.ts would say so).
 */
import { Exit } from "effect"
import type { Effect } from "effect"

/** Whether `effect` has completed successfully already (a successful `Exit`): its value is `.value`. */
export const isReady = <A, E, R>(effect: Effect.Effect<A, E, R>): effect is Exit.Success<A, E> & Effect.Effect<A, E, R> =>
  Exit.isExit(effect) && Exit.isSuccess(effect)
