/**
 * A turn of the event loop, for work that runs long without one: the trajectory loop's answers
 * taken at once (`Trajectory`) and FrozenLake's map search in slices (`envs/FrozenLake`).
 */
import { Effect } from "effect"

/** Waits for the next turn of the event loop (timers, I/O and signals run); interruptible. */
export const nextTurn: Effect.Effect<void> = Effect.callback<void>((resume) => {
  if (typeof setImmediate === "function") {
    const handle = setImmediate(() => resume(Effect.void))
    return Effect.sync(() => clearImmediate(handle))
  }
  const handle = setTimeout(() => resume(Effect.void), 0)
  return Effect.sync(() => clearTimeout(handle))
})
