/**
 * Admission: trajectories in flight over all requests, counted in one place. A request is admitted
 * or turned away in one synchronous step before any work starts (413 over the per-request limit,
 * 429 over the global one, 503 while draining); its reservation is released group by group, the
 * rest when the request ends. Shutdown waits on these counts.
 */
import { Duration, Effect, Result, Schedule } from "effect"
import { ApiError, shuttingDown } from "./http.js"

/**
 * Live counts, for `/info`, tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  readonly trajectoriesInFlight: number
  /** Requests being handled (until their response is written). */
  readonly requestsInFlight: number
  readonly admitted: number
  readonly completed: number
  /** Trajectories interrupted before they finished: their client left, or shutdown cut them. */
  readonly cancelled: number
  /** Requests turned away for capacity (429). */
  readonly rejected: number
  readonly draining: boolean
}

export class State implements Stats {
  trajectoriesInFlight = 0
  requestsInFlight = 0
  admitted = 0
  completed = 0
  cancelled = 0
  rejected = 0
  draining = false
  /** A moving average of how long a group takes, for the 429 retry hint. */
  groupMs = 1000

  constructor(readonly maxInFlight: number, readonly maxRequest: number) {}

  /** Admission: decided in one synchronous step, before any work starts. */
  admit(n: number): Result.Result<Reservation, ApiError> {
    if (this.draining) return Result.fail(shuttingDown())
    if (n > this.maxRequest) {
      return Result.fail(
        new ApiError({
          reason: "TooManyTrajectories",
          detail: `the request asks for ${n} trajectories; this server takes at most ${this.maxRequest} per request ` +
            `(--max-request-trajectories): split the batch`
        })
      )
    }
    if (this.trajectoriesInFlight + n > this.maxInFlight) {
      this.rejected++
      const retryAfterMs = Math.max(100, Math.round(this.groupMs))
      return Result.fail(
        new ApiError({
          reason: "AtCapacity",
          detail: `${this.trajectoriesInFlight} of ${this.maxInFlight} trajectories in flight; ${n} more do not fit: ` +
            `retry later`,
          retryAfterMs
        })
      )
    }
    this.trajectoriesInFlight += n
    this.admitted += n
    return Result.succeed(new Reservation(this, n, performance.now()))
  }
}

/** A request's admitted trajectories: released group by group, the rest when the request ends. */
export class Reservation {
  constructor(private readonly state: State, public remaining: number, private readonly started: number) {}

  finished(n: number): void {
    const k = Math.min(n, this.remaining)
    this.remaining -= k
    this.state.trajectoriesInFlight -= k
    this.state.completed += k
    this.state.groupMs = 0.8 * this.state.groupMs + 0.2 * (performance.now() - this.started)
  }

  close(): void {
    this.state.trajectoriesInFlight -= this.remaining
    this.state.cancelled += this.remaining
    this.remaining = 0
  }
}

/** Admits `n` trajectories for the current scope (the request's): what is left is released when it closes. */
export const admit = (state: State, n: number) =>
  Effect.acquireRelease(
    Effect.suspend(() => Effect.fromResult(state.admit(n))),
    (reservation) => Effect.sync(() => reservation.close())
  )

/**
 * Waits until `done()` holds, looking every 10 ms, for at most `within` (on the Clock); says
 * whether it held. A deadline in the schedule rather than `Effect.timeout`: shutdown runs in
 * finalizers, which cannot be interrupted, so a timeout could not stop the wait.
 */
export const waitUntil = (done: () => boolean, within: Duration.Duration): Effect.Effect<boolean> =>
  Effect.sync(done).pipe(
    Effect.repeat({ until: (held) => held, schedule: Schedule.spaced("10 millis").pipe(Schedule.upTo({ duration: within })) }),
    Effect.andThen(Effect.sync(done))
  )
