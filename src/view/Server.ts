/**
 * The viewer's HTTP server (`effect-gym view FILE`, `effect-gym run --view`): the page and its
 * JSON API on `effect/http`'s `HttpRouter`, bound to 127.0.0.1.
 *
 * - `GET /`: the page (script and styles inlined).
 * - `GET /api/meta`, `/api/overview?log=N`, `/api/trajectories?log=N&env=&end=&tag=&row=&min=&max=&q=&sort=&dir=&offset=&limit=`,
 *   `/api/trajectory?log=N&line=L`, `/api/compare?sort=&dir=&offset=&limit=`.
 * - `GET /api/events`: server-sent events: `state` (index versions, indexing, a live run's progress)
 *   whenever it changes.
 *
 * The logs are indexed in the background once the server listens: the page opens at once and shows
 * what is indexed so far. A log being written (a run with `--view`) is re-read every `interval`.
 * Requests whose `Host` is not this machine are refused (a page elsewhere cannot reach the logs
 * through DNS rebinding).
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Cause, Duration, Effect, Equal, Schedule, Stream, SubscriptionRef } from "effect"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerError from "effect/http/HttpServerError"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import * as Json from "../internal/Json.js"
import * as Html from "./Html.js"
import * as Live from "./Live.js"
import * as Model from "./Model.js"
import type { RunProgress } from "./Protocol.js"
import type * as LogIndex from "./LogIndex.js"
import type * as Renderer from "./Renderer.js"
import * as Viewer from "./Viewer.js"
import { ViewError } from "./Viewer.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly viewer: Viewer.Viewer
  /** A live run's progress, sampled every `interval`. */
  readonly progress?: Effect.Effect<RunProgress> | undefined
  /** How often a live log is re-read and the state sampled (default 500 ms). */
  readonly interval?: Duration.Input | undefined
  readonly title?: string | undefined
}

/**
 * What `/api/events` sends as `state`.
 *
 * @since 0.1.0
 * @category models
 */
export interface State {
  readonly versions: ReadonlyArray<number>
  readonly indexing: boolean
  readonly progress: RunProgress | null
}

const json = (value: unknown, status = 200) =>
  HttpServerResponse.text(Json.stringify(value), {
    status,
    contentType: "application/json",
    headers: { "cache-control": "no-store" }
  })

const failure = (status: number, type: string, message: string) => json({ error: { type, message } }, status)

const STATUS: Record<ViewError["reason"], number> = { NotFound: 404, BadRequest: 400, Unreadable: 500 }

const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"])

/** The host name of a `Host` header (without the port). */
const hostName = (header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const m = /^(\[[^\]]*\]|[^:]+)(?::\d+)?$/.exec(header.trim().toLowerCase())
  return m?.[1]
}

/**
 * The server as an HTTP app, with its state (changes are pushed to `/api/events`). The logs start
 * indexing in the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options) =>
  Effect.gen(function*() {
    const viewer = options.viewer
    const assets = yield* Html.assets
    const interval = options.interval ?? "500 millis"
    const sample = Effect.gen(function*() {
      const progress = options.progress === undefined ? null : yield* options.progress
      return {
        versions: viewer.logs.map((log) => log.version),
        indexing: viewer.logs.some((log) => log.meta().indexing),
        progress
      } satisfies State
    })
    const state = yield* SubscriptionRef.make<State>(yield* sample)

    // Index in the background; a live log is re-read on every tick. Reading errors end up in the
    // log's problems, never in a failed server.
    const tick = Effect.gen(function*() {
      yield* viewer.update.pipe(Effect.catch((error) => Effect.logWarning(`view: ${error.message}`)))
      const next = yield* sample
      const current = yield* SubscriptionRef.get(state)
      if (!Equal.equals(Json.stringify(next), Json.stringify(current))) yield* SubscriptionRef.set(state, next)
    })
    yield* Effect.forkScoped(Effect.repeat(tick, Schedule.spaced(interval)))

    const page = Html.page(
      assets,
      Html.configJson({ mode: "server", api: "api" }),
      options.title ?? `effect-gym view: ${viewer.logs.map((l) => l.meta().name).join(" vs ")}`
    )

    const params = HttpServerRequest.HttpServerRequest.useSync((request) => new URL(request.url, "http://view").searchParams)
    const logParam = Effect.flatMap(params, (p) => Effect.fromResult(viewer.log(Number(p.get("log") ?? "0"))))
    const progressNow = Effect.map(SubscriptionRef.get(state), (s) => s.progress)

    // (a list of its own: given inline to addAll, the routes' error types were inferred as any)
    const routeList = [
      HttpRouter.route("GET", "/", HttpServerResponse.text(page, { contentType: "text/html; charset=utf-8" })),
      HttpRouter.route("GET", "/favicon.ico", HttpServerResponse.empty({ status: 204 })),
      HttpRouter.route("GET", "/api/meta", Effect.map(progressNow, (progress) => json(viewer.meta(progress)))),
      HttpRouter.route("GET", "/api/overview", Effect.map(logParam, (log) => json(viewer.overview(log)))),
      HttpRouter.route(
        "GET",
        "/api/trajectories",
        Effect.gen(function*() {
          const log = yield* logParam
          const query = Model.parseQuery(yield* params)
          const page = yield* Effect.mapError(viewer.trajectories(log, query), (e) =>
            new ViewError({ reason: "Unreadable", detail: e.message }))
          return json(page)
        })
      ),
      HttpRouter.route(
        "GET",
        "/api/trajectory",
        Effect.gen(function*() {
          const log = yield* logParam
          const line = Number((yield* params).get("line"))
          if (!Number.isInteger(line) || line < 1) {
            return yield* new ViewError({ reason: "BadRequest", detail: "line: expected a line number (1-based)" })
          }
          return json(yield* viewer.trajectory(log, line))
        })
      ),
      HttpRouter.route(
        "GET",
        "/api/compare",
        Effect.flatMap(params, (p) => Effect.map(Effect.fromResult(viewer.compare(Model.parseCompareOptions(p))), json))
      ),
      HttpRouter.route(
        "GET",
        "/api/events",
        Effect.sync(() => Live.response(Stream.map(SubscriptionRef.changes(state), (data) => ({ event: "state", data }))))
      )
    ]
    const routes = yield* HttpRouter.toHttpEffect(HttpRouter.addAll(routeList))

    const app = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const host = hostName(request.headers.host)
      if (host === undefined || !LOCAL_HOSTS.has(host)) {
        return failure(403, "forbidden_host", `this viewer answers only to 127.0.0.1 / localhost, not ${request.headers.host ?? "(no Host)"}`)
      }
      return yield* routes
    }).pipe(
      Effect.catchTag("ViewError", (error) => Effect.succeed(failure(STATUS[error.reason], error.reason, error.message))),
      Effect.catchReason(
        "HttpServerError",
        "RouteNotFound",
        (reason) => Effect.succeed(failure(404, "not_found", `no route ${reason.request.method} ${reason.request.url}`))
      ),
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.as(
            Effect.logError("view: unexpected error", cause),
            failure(500, "internal_error", "unexpected error (see the viewer's output)")
          )
      )
    )
    return { app, state }
  })

/**
 * A running viewer.
 *
 * @since 0.1.0
 * @category models
 */
export interface Running {
  readonly url: string
  readonly port: number
}

/**
 * Serves the viewer on `host:port` (127.0.0.1 by default; port 0 picks a free one) until the scope
 * closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: Options & { readonly port: number; readonly host?: string | undefined }
): Effect.Effect<Running, HttpServerError.ServeError | Html.AssetsError, Scope.Scope> =>
  Effect.gen(function*() {
    const { app } = yield* make(options)
    const host = options.host ?? "127.0.0.1"
    const node = Http.createServer()
    const http = yield* NodeHttpServer.make(() => node, { host, port: options.port })
    yield* http.serve(app)
    // Event streams never end by themselves: close their connections when the server stops.
    yield* Effect.addFinalizer(() => Effect.sync(() => node.closeAllConnections()))
    const port = http.address._tag === "UnixPathAddress" ? options.port : http.address.port
    return { url: `http://${host.includes(":") ? `[${host}]` : host}:${port}/`, port }
  })

/**
 * The live page of a run in progress (`effect-gym run --view`): the run's log, re-read as it
 * grows, and its progress, sampled every `interval`. Call `finish` when the run has ended (its log
 * is complete: an unfinished last line is then torn).
 *
 * @since 0.1.0
 * @category constructors
 */
export const serveRun = (options: {
  readonly file: string
  readonly port: number
  readonly host?: string | undefined
  readonly progress: Effect.Effect<RunProgress>
  readonly renderers?: Renderer.Registry | undefined
  readonly interval?: Duration.Input | undefined
  readonly version?: string | undefined
}): Effect.Effect<
  Running & { readonly finish: Effect.Effect<void, LogIndex.LogError> },
  HttpServerError.ServeError | Html.AssetsError | LogIndex.LogError,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const viewer = yield* Viewer.make({
      files: [options.file],
      live: true,
      renderers: options.renderers,
      version: options.version
    })
    const running = yield* serve({
      viewer,
      port: options.port,
      host: options.host,
      progress: options.progress,
      interval: options.interval,
      title: `effect-gym run: ${options.file}`
    })
    return { ...running, finish: viewer.finish }
  })
