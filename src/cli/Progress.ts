/**
 * Progress of a long run on stderr, only when stderr is a terminal (piped output stays clean).
 */
import { Console, Effect, Fiber, Schedule } from "effect"
import type * as Summary from "../Summary.js"

export interface Snapshot {
  readonly accumulator: Summary.Accumulator
  readonly total: number
  readonly elapsedMs: number
}

/** The progress line, cut to `columns - 1` characters (a longer one wraps, and a redraw clears only its last row). */
const line = ({ accumulator, elapsedMs, total }: Snapshot, columns: number | undefined): string => {
  const s = accumulator.summary(elapsedMs)
  // (no total when it is not known: a dataset read from a pipe)
  const done = total > 0 ? `${s.trajectories}/${total} (${((s.trajectories / total) * 100).toFixed(0)}%)` : `${s.trajectories}`
  const text = `${done}  ${Math.round(s.trajectoriesPerSecond)} traj/s  ` +
    `${Math.round(s.turnsPerSecond)} turns/s  mean reward ${s.meanReward.toFixed(3)}  failures ${s.failures}`
  return columns !== undefined && columns > 1 && text.length > columns - 1 ? text.slice(0, columns - 1) : text
}

/**
 * What clears the progress line: the erase-line escape, or on a terminal that shows escapes as they
 * are (TERM=dumb: Emacs' shell, some CI log viewers; NO_COLOR is about colour, not this) spaces over
 * the last line drawn.
 */
const clearer = (stderr: NodeJS.WriteStream) => {
  const dumb = process.env.TERM === "dumb"
  let drawn = 0
  return {
    clear: () => (dumb ? `\r${" ".repeat(drawn)}\r` : "\r\x1b[2K"),
    drawn: (text: string) => {
      drawn = text.length
      return text
    },
    write: (text: string) => void stderr.write(text)
  }
}

/** `console` with the progress line cleared before each message to stderr (it was glued onto the line). */
const clearing = (console: Console.Console, line: ReturnType<typeof clearer>): Console.Console => ({
  ...console,
  error: (...args: ReadonlyArray<unknown>) => {
    line.write(line.clear())
    console.error(...args)
  },
  warn: (...args: ReadonlyArray<unknown>) => {
    line.write(line.clear())
    console.warn(...args)
  }
})

/** Runs `effect`, redrawing a progress line every 250 ms while it runs (on a terminal only). */
export const whileRunning = <A, E, R>(
  snapshot: () => Snapshot,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const stderr = process.stderr
  if (!stderr.isTTY) return effect
  const progress = clearer(stderr)
  const draw = Effect.sync(() => progress.write(progress.clear() + progress.drawn(line(snapshot(), stderr.columns))))
  return Effect.acquireUseRelease(
    // (interruptible: a fiber forked in the acquire, which cannot be interrupted, inherits that, and
    // the release's interrupt then waited for it forever: a run on a terminal never exited)
    Effect.forkDetach(Effect.interruptible(Effect.repeat(draw, Schedule.spaced("250 millis")))),
    () => Console.consoleWith((console) => Effect.provideService(effect, Console.Console, clearing(console, progress))),
    (fiber) => Effect.andThen(Fiber.interrupt(fiber), Effect.sync(() => progress.write(progress.clear())))
  )
}
