/**
 * Progress of a long run on stderr, only when stderr is a terminal (piped output stays clean).
 */
import { Effect, Fiber, Schedule } from "effect"
import type * as Summary from "../Summary.js"

export interface Snapshot {
  readonly accumulator: Summary.Accumulator
  readonly total: number
  readonly elapsedMs: number
}

const line = ({ accumulator, elapsedMs, total }: Snapshot): string => {
  const s = accumulator.summary(elapsedMs)
  const pct = total > 0 ? ` (${((s.trajectories / total) * 100).toFixed(0)}%)` : ""
  return `${s.trajectories}/${total}${pct}  ${Math.round(s.trajectoriesPerSecond)} traj/s  ` +
    `${Math.round(s.turnsPerSecond)} turns/s  mean reward ${s.meanReward.toFixed(3)}  failures ${s.failures}`
}

/** Runs `effect`, redrawing a progress line every 250 ms while it runs (on a terminal only). */
export const whileRunning = <A, E, R>(
  snapshot: () => Snapshot,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const stderr = process.stderr
  if (!stderr.isTTY) return effect
  const draw = Effect.sync(() => stderr.write(`\r\x1b[2K${line(snapshot())}`))
  return Effect.acquireUseRelease(
    // (interruptible: a fiber forked in the acquire, which cannot be interrupted, inherits that, and
    // the release's interrupt then waited for it forever: a run on a terminal never exited)
    Effect.forkDaemon(Effect.interruptible(Effect.repeat(draw, Schedule.spaced("250 millis")))),
    () => effect,
    (fiber) => Effect.zipRight(Fiber.interrupt(fiber), Effect.sync(() => stderr.write(`\r\x1b[2K`)))
  )
}
