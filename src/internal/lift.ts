import { Effect } from "effect"
import { settled, type Waits } from "./waits.js"

/** A value, a Promise of it, or an Effect of it: what user-written hooks and env methods return. */
export type MaybeEffect<A> = A | PromiseLike<A> | Effect.Effect<A, unknown>

/** Whether `u` is a Promise or another thenable (what user code may return for a value). */
export const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

/**
 * Runs user code that may return a value, a Promise or an Effect (or throw), and maps every failure
 * and defect through `onError`. Interruption is never caught.
 */
export const liftMaybe = <A, E>(
  thunk: () => MaybeEffect<A>,
  onError: (cause: unknown) => E,
  /** Where a Promise's wait to be taken up is noted (see `settled`), when the caller measures it. */
  waits?: Waits | undefined
): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    let out: MaybeEffect<A>
    try {
      out = thunk()
    } catch (cause) {
      return Effect.fail(onError(cause))
    }
    if (Effect.isEffect(out)) {
      return (out as Effect.Effect<A, unknown>).pipe(
        Effect.mapError(onError),
        Effect.catchDefect((defect) => Effect.fail(onError(defect)))
      )
    }
    if (isPromiseLike(out)) {
      if (waits !== undefined) return settled(out as PromiseLike<A>, waits, onError)
      return Effect.tryPromise({ try: () => out as PromiseLike<A>, catch: onError })
    }
    return Effect.succeed(out)
  })

const NON_FINITE = "\u2063non-finite:"

/**
 * `JSON.stringify`, but with NaN and ±Infinity written as such (JSON writes them as `null`, so a
 * message about `[NaN]` or a body's `1e309` read "got [null]").
 */
export const stringify = (value: unknown): string | undefined =>
  JSON.stringify(value, (_key, v: unknown) => typeof v === "number" && !Number.isFinite(v) ? `${NON_FINITE}${v}` : v)
    ?.replace(new RegExp(`"${NON_FINITE}([^"]+)"`, "g"), "$1")

/** A readable one-line description of a thrown value or failure. */
export const describe = (cause: unknown): string => {
  if (cause instanceof Error) return cause.message
  if (typeof cause === "string") return cause
  try {
    return stringify(cause) ?? String(cause)
  } catch {
    return String(cause)
  }
}

/** The message of a thrown value: an Error's message, anything else as `String` gives it. */
export const errorMessage = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/** Whether `u` is a tagged error with one of the given tags (works across module copies). */
export const hasTag = (u: unknown, tags: ReadonlySet<string>): boolean =>
  typeof u === "object" && u !== null && tags.has((u as { _tag?: unknown })._tag as string)
