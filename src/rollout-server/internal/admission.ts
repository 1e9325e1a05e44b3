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
  /** Bytes of results encoded and not yet taken by their clients (every response's). */
  readonly bufferedBytes: number
  /** Responses cut because their client did not read them (write timeout, or a buffer limit). */
  readonly cutResponses: number
}

/**
 * The limits on results waiting for their clients: per response, in total, and how long a client
 * may take no bytes while some wait.
 *
 * @since 0.1.0
 * @category models
 */
export interface BufferLimits {
  readonly maxResponseBytes: number
  readonly maxBufferedBytes: number
  readonly writeTimeoutMs: number
}

export class State implements Stats {
  trajectoriesInFlight = 0
  requestsInFlight = 0
  admitted = 0
  completed = 0
  cancelled = 0
  rejected = 0
  draining = false
  bufferedBytes = 0
  cutResponses = 0
  /** A moving average of how long a group takes, for the 429 retry hint. */
  groupMs = 1000

  constructor(
    readonly maxInFlight: number,
    readonly maxRequest: number,
    readonly buffers: BufferLimits = {
      maxResponseBytes: Number.MAX_SAFE_INTEGER,
      maxBufferedBytes: Number.MAX_SAFE_INTEGER,
      writeTimeoutMs: Number.MAX_SAFE_INTEGER
    }
  ) {}

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
    // Results that wait for their clients count too: finished trajectories no longer hold a slot
    // of --concurrency, and clients that stop reading must not make room for more work. New work
    // waits from half the limit, so that work already admitted has room to finish (past the limit
    // itself, a response is cut).
    if (this.bufferedBytes >= this.buffers.maxBufferedBytes / 2) {
      this.rejected++
      return Result.fail(
        new ApiError({
          reason: "AtCapacity",
          detail: `${this.bufferedBytes} bytes of results wait for their clients to read them (new requests wait ` +
            `from half of --max-buffered-bytes, ${this.buffers.maxBufferedBytes}): retry later`,
          retryAfterMs: Math.max(1000, Math.round(this.groupMs))
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
