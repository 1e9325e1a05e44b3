/**
 * A rollout server's dashboard (`effect-gym serve` → `/dashboard`): requests and trajectories in
 * flight, rates, recent failures, pushed to the page by server-sent events (`/dashboard/events`)
 * once a second. The server mounts its routes behind its own authentication.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule, Stream, SubscriptionRef } from "effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as Scope from "effect/Scope"
import * as Html from "./Html.js"
import * as Live from "./Live.js"
import type { DashboardSnapshot } from "./Protocol.js"

/**
 * The live counts the dashboard reads (a rollout server's `Stats`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Counts {
  readonly requestsInFlight: number
  readonly trajectoriesInFlight: number
  readonly admitted: number
  readonly completed: number
  readonly cancelled: number
  readonly rejected: number
  readonly draining: boolean
}

/**
 * A failed trajectory as the dashboard lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Failure {
  readonly id: string
  readonly uuid?: string | undefined
  readonly env?: string | null | undefined
  readonly tag: string
  readonly message: string
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Dashboard {
  /** Records a failed trajectory (cheap: called from the server's hot path). */
  readonly failure: (failure: Failure) => void
  /** `GET /dashboard` (the page) and `GET /dashboard/events` (the snapshots), for the server's router. */
  readonly routes: ReadonlyArray<HttpRouter.Route>
  readonly snapshot: Effect.Effect<DashboardSnapshot>
}

const WINDOW_MS = 10_000

/**
 * Starts sampling `counts` every `interval` (1 s by default) in the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: {
  readonly counts: () => Counts
  readonly maxTrajectoriesInFlight?: number | undefined
  readonly title?: string | undefined
  readonly interval?: Duration.Input | undefined
  /** Failures listed (default 50). */
  readonly keep?: number | undefined
}): Effect.Effect<Dashboard, never, Scope.Scope> =>
  Effect.gen(function*() {
    const keep = options.keep ?? 50
    const recent: Array<DashboardSnapshot["recentFailures"][number]> = []
    let failed = 0
    const history: Array<{ at: number; completed: number; admitted: number }> = []

    const sample = Effect.sync((): DashboardSnapshot => {
      const at = Date.now()
      const c = options.counts()
      history.push({ at, completed: c.completed, admitted: c.admitted })
      while (history.length > 2 && history[0].at < at - WINDOW_MS) history.shift()
      const first = history[0]
      const seconds = (at - first.at) / 1000
      return {
        at,
        requestsInFlight: c.requestsInFlight,
        trajectoriesInFlight: c.trajectoriesInFlight,
        admitted: c.admitted,
        completed: c.completed,
        cancelled: c.cancelled,
        rejected: c.rejected,
        failed,
        draining: c.draining,
        completedPerSecond: seconds > 0 ? (c.completed - first.completed) / seconds : 0,
        admittedPerSecond: seconds > 0 ? (c.admitted - first.admitted) / seconds : 0,
        maxTrajectoriesInFlight: options.maxTrajectoriesInFlight ?? null,
        recentFailures: recent.slice()
      }
    })
    const state = yield* SubscriptionRef.make(yield* sample)
    yield* Effect.forkScoped(
      Effect.repeat(
        Effect.flatMap(sample, (s) => SubscriptionRef.set(state, s)),
        Schedule.spaced(options.interval ?? "1 second")
      )
    )

    const title = options.title ?? "effect-gym rollout server"
    const page = Html.assets.pipe(
      Effect.map((assets) =>
        HttpServerResponse.text(
          Html.page(assets, Html.configJson({ mode: "dashboard", events: "/dashboard/events", title }), title),
          { contentType: "text/html; charset=utf-8", headers: { "cache-control": "no-store" } }
        )
      ),
      Effect.catchTag("AssetsError", (error) => Effect.succeed(HttpServerResponse.text(error.message, { status: 500 })))
    )
    const routes = [
      HttpRouter.route("GET", "/dashboard", page),
      HttpRouter.route(
        "GET",
        "/dashboard/events",
        Effect.sync(() =>
          Live.response(Stream.map(SubscriptionRef.changes(state), (data) => ({ event: "snapshot", data })))
        )
      )
    ]
    return {
      failure: (f) => {
        failed++
        recent.unshift({ at: Date.now(), id: f.id, uuid: f.uuid ?? null, env: f.env ?? null, tag: f.tag, message: f.message })
        if (recent.length > keep) recent.pop()
      },
      routes,
      snapshot: SubscriptionRef.get(state)
    }
  })
