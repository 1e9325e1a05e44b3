/**
 * Time a trajectory spent waiting to be scheduled while its env answered: behind a limit on envs
 * (an OpenEnv server's permits) or behind other trajectories' work on the one JavaScript thread.
 * The trajectory loop provides one {@link Waits} per trajectory while the env is created; env
 * adapters and pools that can tell waiting from working note it there, and the loop takes it out
 * of the env's time (`env_ms`) and reports it apart (`wait_ms`). Internal.
 */
import { Cause, Context, Effect, Exit, Fiber } from "effect"

/** One trajectory's waiting, noted since the loop last took it. */
export class Waits {
  ms = 0
  /** `now`: the trajectory's clock in milliseconds (the loop's own reading). */
  constructor(readonly now: () => number) {}

  take(): number {
    const ms = this.ms
    this.ms = 0
    return ms
  }
}

/** The current trajectory's {@link Waits}; `undefined` outside a trajectory (EnvCheck, the servers). */
export const CurrentWaits = Context.Reference<Waits | undefined>("effect-gym/internal/Waits", {
  defaultValue: () => undefined
})

/** `effect`, with the time until it starts noted as waiting (a permit, a slot). */
export const waiting = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.service(CurrentWaits), (waits) => {
    if (waits === undefined) return effect
    const started = waits.now()
    return Effect.map(effect, (a) => {
      waits.ms += waits.now() - started
      return a
    })
  })

/**
 * A Promise that user code returned, as an Effect, noting how long it waited to be taken up. A
 * Promise already settled when it was returned (an `async` method that did not await) did its
 * work in the call: the time until its callback runs is spent behind other trajectories' work
 * queued before it, i.e. waiting. One that settles later is the env's own time (its I/O) to the
 * end. Which it was is seen without reading the Promise's state: a settled Promise's callback is
 * queued at once, so it runs before a microtask queued after it; a pending one's runs after.
 */
export const settled = <A, E>(
  promise: PromiseLike<A>,
  waits: Waits,
  onError: (cause: unknown) => E
): Effect.Effect<A, E> =>
  Effect.callback<A, E>((resume) => {
    const returned = waits.now()
    let pending = false
    const note = () => {
      if (!pending) waits.ms += waits.now() - returned
    }
    try {
      promise.then(
        (a) => {
          note()
          resume(Effect.succeed(a))
        },
        (e) => {
          note()
          resume(Effect.suspend(() => Effect.fail(onError(e))))
        }
      )
    } catch (e) {
      resume(Effect.suspend(() => Effect.fail(onError(e))))
      return
    }
    queueMicrotask(() => {
      pending = true
    })
  })

/**
 * An env's answer that was not ready at once (an Effect-native env's `Effect.promise`, a
 * scheduler's hook), as {@link settled} does for a Promise: the answer runs at once as a child
 * fiber until it suspends; if it was ready then (its resumption already queued, as an
 * `Effect.promise` of a settled Promise is), the time until it runs is spent behind other
 * trajectories' work, i.e. waiting; one that comes later is the env's own time to the end. Nothing
 * is added when the answer's own adapters noted waiting (a Promise's {@link settled}, a pool's
 * permit). A suspension by a yield (`Effect.yieldNow`) counts as the env's time.
 *
 * A measured hot spot, on every answer that is not ready at once: the child's `pollUnsafe` and
 * `addObserver` cost 0.93 us per answer over running it in place (64 fibers, 200,000 `Effect.promise`
 * answers), where `Fiber.join` with `Effect.onInterrupt` cost 1.29 us.
 */
export const timed = <A, E, R>(effect: Effect.Effect<A, E, R>, waits: Waits): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.forkChild(effect, { startImmediately: true }), (fiber) => {
    const done = fiber.pollUnsafe()
    if (done !== undefined) return selfInterrupted(done)
    const suspended = waits.now()
    const noted = waits.ms
    let later = false
    queueMicrotask(() => {
      later = true
    })
    return Effect.callback<A, E>((resume) => {
      const remove = fiber.addObserver((exit) => {
        if (!later && waits.ms === noted) waits.ms += waits.now() - suspended
        resume(selfInterrupted(exit))
      })
      // interrupted while the answer is under way: the answer is interrupted and waited for
      return Effect.suspend(() => {
        remove()
        return Fiber.interrupt(fiber)
      })
    })
  })

/**
 * The answer's exit, where the answer interrupted itself (an `Effect.interrupt` in the env or a
 * tool: nothing else interrupts the child, whose observer is removed before the trajectory
 * interrupts it) as a defect saying so. Passed on as an interruption, it ended the trajectory as if
 * the run were stopping: the run gave no record of it and no error.
 */
const selfInterrupted = <A, E>(exit: Exit.Exit<A, E>): Effect.Effect<A, E> =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? Effect.die(new Error(SELF_INTERRUPTED)) : exit

/** What a trajectory that interrupted itself fails with (as an `UnexpectedError`). */
export const SELF_INTERRUPTED = "interrupted itself (an Effect.interrupt in the env, a tool, the policy or a hook)"
