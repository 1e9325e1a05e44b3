/**
 * The service OpenEnv envs require: one concurrency limit per OpenEnv server, shared by every
 * trajectory of a run, and the client's settings. A server is its WebSocket URL normalized
 * ({@link serverKey}): `ws://localhost:8000/ws` and `ws://127.0.0.1:8000/ws` are one server.
 *
 * A trajectory takes its server's permit before it connects and gives it back when its scope
 * closes, after the session's own finalizer has closed the connection, so a server never sees more
 * sessions from the run than `maxConcurrentEnvs`. The limits are an `RcMap` of semaphores keyed by
 * server: a server's semaphore lives while trajectories use it.
 *
 * The `openenv` env (`OpenEnvScheduler.env`) requires this service; provide it with {@link layer}
 * when the run is built (the `openenv` scheduler builds one from its run options).
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Layer, RcMap, Schedule, Schema, type Scope, Semaphore } from "effect"
import * as Socket from "effect/socket/Socket"
import { positiveMillis } from "../internal/duration.js"
import { show } from "../internal/inspect.js"
import { waiting } from "../internal/waits.js"
import { wholeProblem } from "../internal/whole.js"
import * as OpenEnvClient from "./OpenEnvClient.js"
import type * as OpenEnvProtocol from "./OpenEnvProtocol.js"

/** A failure to open a session that a server starting or restarting gives. */
const isConnectFailure = (error: OpenEnvProtocol.OpenEnvError): boolean =>
  error.reason === "ConnectFailed" || error.reason === "ConnectTimeout" || error.reason === "ConnectionLost"

/**
 * @since 0.1.0
 * @category models
 */
export interface Settings {
  /** Sessions at once per server (default 4). */
  readonly maxConcurrentEnvs?: number | undefined
  readonly connectTimeout?: Duration.Input | undefined
  readonly replyTimeout?: Duration.Input | undefined
  readonly closeTimeout?: Duration.Input | undefined
  /** Reconnect and reset up to this many times when a server is full (default 0). */
  readonly capacityRetries?: number | undefined
  /** The first backoff of those retries (exponential, jittered; default 500 ms). */
  readonly capacityBackoff?: Duration.Input | undefined
  /**
   * Reconnect after a connection failure (refused, reset, lost before reset's reply) for this
   * long from the first failure (default 60 s: a server's restart under load took 22-31 s).
   */
  readonly connectRetryBudget?: Duration.Input | undefined
  /** At most this many of those reconnects (default: no limit but the budget). */
  readonly connectRetries?: number | undefined
  /** The first backoff of connection retries (default 250 ms). */
  readonly connectBackoff?: Duration.Input | undefined
  /** CAPACITY_REACHED retries while this run's own dropped sessions may hold the server's slots (default 20). */
  readonly orphanCapacityRetries?: number | undefined
  /** The WebSocket implementation (default Node's). */
  readonly webSocketConstructor?: Socket.WebSocketConstructor["Service"] | undefined
  /** Each MCP tool call's limit (default 30 s, as `Tool.toolkit`'s); a call past it ends its session. */
  readonly toolTimeout?: Duration.Input | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** Takes a permit of the server at `url`, held until the current scope closes (waiting stays interruptible). */
  readonly permit: (url: string) => Effect.Effect<void, never, Scope.Scope>
  /** The client's timeouts. */
  readonly client: OpenEnvClient.Options
  /**
   * One connect-and-reset's retry policy for the server at `url`: connection failures for
   * `connectRetryBudget` from the first failure (and at most `connectRetries` times);
   * CAPACITY_REACHED up to `capacityRetries`, or `orphanCapacityRetries` while this run's own
   * dropped sessions may hold the server's slots. Backoff: exponential from the smaller base,
   * jittered, at most 10 s.
   */
  readonly retryFor: (url: string) => {
    readonly retry: OpenEnvClient.CapacityRetry
    readonly retryWhile: (error: OpenEnvProtocol.OpenEnvError) => boolean
  }
  /** A session of this run to `url` was dropped after a reply timeout (the server may still hold it). */
  readonly orphaned: (url: string) => void
  readonly webSocketConstructor: Socket.WebSocketConstructor["Service"]
  /** Each MCP tool call's limit. */
  readonly toolTimeout: Duration.Duration
}

/**
 * @since 0.1.0
 * @category tags
 */
export class OpenEnvPool extends Context.Service<OpenEnvPool, Service>()("effect-gym/OpenEnvPool") {}

/**
 * A setting of {@link make} or {@link layer} that cannot be used (a limit of 0 made every session
 * wait for ever; a duration of "banana" died).
 *
 * @since 0.1.0
 * @category errors
 */
export class SettingsError extends Schema.TaggedError<SettingsError>("effect-gym/OpenEnvPool/SettingsError")(
  "OpenEnvPoolSettingsError",
  { setting: Schema.String, detail: Schema.String }
) {
  override get message(): string {
    return `OpenEnvPool ${this.setting}: ${this.detail}`
  }
}

const COUNTS = [
  ["maxConcurrentEnvs", 1],
  ["capacityRetries", 0],
  ["connectRetries", 0],
  ["orphanCapacityRetries", 0]
] as const
const DURATIONS = [
  "connectTimeout",
  "replyTimeout",
  "closeTimeout",
  "capacityBackoff",
  "connectBackoff",
  "connectRetryBudget",
  "toolTimeout"
] as const

/** Host names that are this machine's loopback: one server whichever of them a URL says. */
// (0.0.0.0 and [::] too: a client that connects to the unspecified address reaches this machine's loopback)
const isLoopback = (hostname: string): boolean =>
  hostname === "localhost" || hostname.endsWith(".localhost") || hostname === "127.0.0.1" ||
  hostname === "[::1]" || hostname === "[::ffff:7f00:1]" || hostname === "0.0.0.0" || hostname === "[::]"

/**
 * The server a WebSocket URL names, as the pool's limits are keyed: scheme, host and port as
 * WHATWG URL normalizes them (case, default port, `127.1`), the loopback's names (`localhost`,
 * `*.localhost`, `127.0.0.1`, `[::1]`, the unspecified `0.0.0.0` and `[::]`) as one, a name's
 * final dot aside, and the path. Two URLs with one key share a limit.
 * Other names are not resolved: a name and its address are two keys.
 *
 * @since 0.1.0
 * @category urls
 */
export const serverKey = (url: string): string => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return url
  }
  const secure = parsed.protocol === "wss:" || parsed.protocol === "https:"
  const port = parsed.port !== "" ? parsed.port : secure ? "443" : "80"
  // a fully qualified name's final dot (`localhost.`, `host.example.`) names the same host
  const hostname = parsed.hostname.endsWith(".") ? parsed.hostname.slice(0, -1) : parsed.hostname
  const host = isLoopback(hostname) ? "loopback" : hostname
  return `${secure ? "wss" : "ws"}://${host}:${port}${parsed.pathname.replace(/\/+$/, "")}`
}

/** The first setting that cannot be used, or `undefined`. */
const check = (settings: Settings): SettingsError | undefined => {
  for (const [setting, min] of COUNTS) {
    const value = settings[setting]
    const detail = value === undefined ? undefined : wholeProblem(value, min)
    if (detail !== undefined) return new SettingsError({ setting, detail })
  }
  for (const setting of DURATIONS) {
    const value = settings[setting]
    if (value === undefined) continue
    if (positiveMillis(value) === undefined) {
      return new SettingsError({ setting, detail: `must be a positive duration, got ${show(value, 80).slice(0, 100)}` })
    }
  }
  return undefined
}

/**
 * A pool in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (settings: Settings = {}): Effect.Effect<Service, SettingsError, Scope.Scope> =>
  Effect.gen(function*() {
    const problem = check(settings)
    if (problem !== undefined) return yield* problem
    const max = settings.maxConcurrentEnvs ?? 4
    const clock = yield* Clock.Clock
    const limits = yield* RcMap.make({ lookup: (_url: string) => Semaphore.make(max) })
    const webSocketConstructor = settings.webSocketConstructor ??
      (yield* Effect.provide(Effect.service(Socket.WebSocketConstructor), OpenEnvClient.layerWebSocketConstructor))
    const replyTimeout = settings.replyTimeout ?? Duration.seconds(60)
    const capacityRetries = settings.capacityRetries ?? 0
    const connectRetries = settings.connectRetries ?? Number.POSITIVE_INFINITY
    const connectBudget = Duration.toMillis(settings.connectRetryBudget ?? Duration.seconds(60))
    const orphanCapacityRetries = settings.orphanCapacityRetries ?? 20
    const base = Math.min(
      Duration.toMillis(settings.connectBackoff ?? Duration.millis(250)),
      Duration.toMillis(settings.capacityBackoff ?? Duration.millis(500))
    )
    /**
     * Sessions of this run the server may still hold: dropped after a reply timeout (the server,
     * frozen or slow, had not seen the close). A full server is then likely full of them, so
     * CAPACITY_REACHED is retried (up to `orphanCapacityRetries`) while any is recent.
     */
    const orphans = new Map<string, Array<number>>()
    const orphanWindow = 2 * Duration.toMillis(replyTimeout) + 60_000
    const recentOrphans = (key: string, now: number) => {
      const kept = (orphans.get(key) ?? []).filter((at) => now - at < orphanWindow)
      orphans.set(key, kept)
      return kept.length
    }
    return {
      // The RcMap's reference is released after the permit (finalizers run in reverse order).
      // the time until the permit comes is the trajectory's waiting, not its env's time (reset_wait_ms)
      permit: (url) => waiting(Effect.flatMap(RcMap.get(limits, serverKey(url)), (limit) => limit.takeScoped(1))),
      client: {
        connectTimeout: settings.connectTimeout ?? Duration.seconds(10),
        replyTimeout,
        closeTimeout: settings.closeTimeout ?? Duration.seconds(5)
      },
      retryFor: (url) => {
        const key = serverKey(url)
        let connectFailures = 0
        let capacityFailures = 0
        return {
          // The schedule decides each failure: its metadata has the error (input), and the time
          // since the first failure (elapsed) from the Clock.
          retry: Schedule.jittered(Schedule.min([Schedule.exponential(Duration.millis(base)), Schedule.spaced("10 seconds")])).pipe(
            Schedule.setInputType<OpenEnvProtocol.OpenEnvError>(),
            Schedule.while(({ elapsed, input, now }) => {
              if (isConnectFailure(input)) return ++connectFailures <= connectRetries && elapsed < connectBudget
              capacityFailures++
              return capacityFailures <= capacityRetries ||
                (recentOrphans(key, now) > 0 && capacityFailures <= orphanCapacityRetries)
            })
          ),
          retryWhile: (error) => isConnectFailure(error) || error.reason === "CapacityReached"
        }
      },
      orphaned: (url) => {
        const key = serverKey(url)
        const at = clock.currentTimeMillisUnsafe()
        const list = orphans.get(key)
        if (list === undefined) orphans.set(key, [at])
        else list.push(at)
      },
      webSocketConstructor,
      toolTimeout: Duration.fromInputUnsafe(settings.toolTimeout ?? Duration.seconds(30))
    } satisfies Service
  })

/**
 * The pool as a Layer, for runs whose rows select the `openenv` env.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (settings: Settings = {}): Layer.Layer<OpenEnvPool, SettingsError> =>
  Layer.effect(OpenEnvPool)(make(settings))
