/**
 * What every route of this project's servers (the rollout server, the OpenEnv server) checks
 * before its handler runs, as one `HttpMiddleware` around the router, and the limits of the Node
 * HTTP server under it.
 *
 * - **Host** (DNS rebinding): a server bound to a loopback address answers only requests whose
 *   `Host` is a loopback name (`localhost`, `*.localhost`, `127.x.x.x`, `[::1]`) or one listed in
 *   `allowHosts`; a server bound elsewhere checks `Host` only when `allowHosts` is given.
 * - **Origin** (browsers): a request with an `Origin` header is refused unless it is same-origin
 *   (the `Origin`'s host is the request's `Host`) or listed in `corsOrigins` (`*`: any); allowed
 *   cross-origin requests get CORS headers, and their preflights are answered here. Non-browser
 *   clients (Python, curl, this project's clients) send no `Origin`.
 * - **Key**: with `apiKey`, every request needs it, as `Authorization: Bearer <key>`,
 *   `Authorization: Basic` with the key as password (what Python's `requests` and `websockets`
 *   send for a `http://user:<key>@host` URL), or `X-API-Key: <key>`. Compared in constant time, as
 *   SHA-256 digests.
 * - **Limits** ({@link createServer}): headers within `headerTimeout`, the body within
 *   `bodyTimeout` after them (a body dribbled a byte at a time is cut with 408), idle keep-alive
 *   connections closed after 5 s, at most `maxConnections` connections (more are dropped).
 *
 * A refused request is answered by the server's own error shape (`reject`), before any handler.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Redacted } from "effect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { createHash, timingSafeEqual } from "node:crypto"
import * as Http from "node:http"

/**
 * Why a request was refused, for the server's own error body.
 *
 * @since 0.1.0
 * @category models
 */
export interface Refusal {
  readonly status: 401 | 403
  readonly type: "unauthorized" | "forbidden_host" | "forbidden_origin"
  readonly message: string
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The address the server is bound to. */
  readonly host: string
  /** More `Host` names (or `name:port`) to answer to. */
  readonly allowHosts?: ReadonlyArray<string> | undefined
  /** Browser origins allowed cross-origin (`https://app.example`, or `*`). */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** Where the key may come as a Basic password (default: every path). */
  readonly basic?: ((pathname: string) => boolean) | undefined
  /** The server's error response for a refusal (and the request's path). */
  readonly reject: (refusal: Refusal, pathname: string) => HttpServerResponse.HttpServerResponse
}

/**
 * Whether an address or name is this machine only.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isLoopback = (host: string): boolean => {
  const name = host.toLowerCase().replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "")
  return name === "localhost" || name.endsWith(".localhost") || name === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name) || name === "::ffff:127.0.0.1"
}

/** The host name of a `Host` header (lower case, without the port; IPv6 in brackets). */
const hostName = (header: string): string | undefined => {
  const m = /^(\[[0-9a-f:.]*\]|[^:[\]]+)(?::(\d+))?$/i.exec(header.trim())
  return m?.[1].toLowerCase()
}

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

/**
 * A constant-time check of a request's key (bearer, basic password, or `X-API-Key`).
 *
 * @since 0.1.0
 * @category auth
 */
export const authorizer = (apiKey: Redacted.Redacted<string> | undefined) => {
  if (apiKey === undefined) {
    return (_headers: Readonly<Record<string, string | undefined>>, _options?: { readonly basic?: boolean }) => true
  }
  const expected = digest(Redacted.value(apiKey))
  return (headers: Readonly<Record<string, string | undefined>>, options: { readonly basic?: boolean } = {}): boolean => {
    let given: string | undefined
    const authorization = headers.authorization
    if (authorization !== undefined) {
      const bearer = /^Bearer +(\S+) *$/i.exec(authorization)
      const basic = options.basic === false ? null : /^Basic +([A-Za-z0-9+/=]+) *$/i.exec(authorization)
      if (bearer !== null) given = bearer[1]
      else if (basic !== null) {
        const decoded = Buffer.from(basic[1], "base64").toString("utf8")
        const colon = decoded.indexOf(":")
        given = colon < 0 ? undefined : decodeURIComponent(decoded.slice(colon + 1))
      }
    }
    given ??= headers["x-api-key"]
    // A missing key is compared too, so every request costs the same.
    return timingSafeEqual(digest(given ?? ""), expected) && given !== undefined
  }
}

const CORS_HEADERS = "authorization, content-type, accept, x-api-key"

/**
 * The checks as a middleware: refusals are answered with `reject`; allowed cross-origin
 * requests get their CORS headers.
 *
 * @since 0.1.0
 * @category middleware
 */
export const middleware = (options: Options) => {
  const loopback = isLoopback(options.host)
  const allowHosts = new Set((options.allowHosts ?? []).map((h) => h.toLowerCase()))
  const checkHost = loopback || allowHosts.size > 0
  const anyOrigin = (options.corsOrigins ?? []).includes("*")
  const origins = new Set((options.corsOrigins ?? []).map((o) => o.toLowerCase().replace(/\/+$/, "")))
  const authorized = authorizer(options.apiKey)

  const hostAllowed = (header: string | undefined): boolean => {
    if (!checkHost) return true
    if (header === undefined) return false
    const name = hostName(header)
    if (name === undefined) return false
    return (loopback && isLoopback(name)) || allowHosts.has(name) || allowHosts.has(header.trim().toLowerCase())
  }

  /** `undefined`: no Origin (not a browser, or same-origin GET); true: allowed; false: refused. */
  const originAllowed = (origin: string | undefined, host: string | undefined): boolean | undefined => {
    if (origin === undefined) return undefined
    const normalized = origin.toLowerCase().replace(/\/+$/, "")
    if (anyOrigin || origins.has(normalized)) return true
    let originHost: string
    try {
      originHost = new URL(normalized).host
    } catch {
      return false
    }
    return host !== undefined && originHost === host.trim().toLowerCase()
  }

  return <E, R>(
    app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest>
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest> =>
    HttpServerRequest.HttpServerRequest.use((request) => {
      const headers = request.headers
      const pathname = request.url.split("?")[0]
      if (!hostAllowed(headers.host)) {
        return Effect.succeed(options.reject({
          status: 403,
          type: "forbidden_host",
          message: `this server answers only to ${
            loopback ? "loopback names (localhost, 127.0.0.1, [::1])" : "its allowed hosts"
          }${allowHosts.size > 0 ? ` and ${[...allowHosts].join(", ")}` : ""}, not Host ${
            JSON.stringify(headers.host ?? "(none)")
          } (--allow-host to add one)`
        }, pathname))
      }
      const origin = headers.origin
      const allowed = originAllowed(origin, headers.host)
      if (allowed === false) {
        return Effect.succeed(options.reject({
          status: 403,
          type: "forbidden_origin",
          message: `cross-origin requests from ${JSON.stringify(origin)} are refused (--cors-origin to allow one)`
        }, pathname))
      }
      const cors = allowed === true && origin !== undefined
        ? { "access-control-allow-origin": origin, vary: "origin" }
        : undefined
      if (cors !== undefined && request.method === "OPTIONS" && headers["access-control-request-method"] !== undefined) {
        return Effect.succeed(HttpServerResponse.empty({
          status: 204,
          headers: {
            ...cors,
            "access-control-allow-methods": "GET, POST",
            "access-control-allow-headers": CORS_HEADERS,
            "access-control-max-age": "600"
          }
        }))
      }
      if (!authorized(headers, { basic: options.basic?.(pathname) ?? true })) {
        return Effect.succeed(HttpServerResponse.setHeaders(
          options.reject({
            status: 401,
            type: "unauthorized",
            message: "missing or wrong key (Authorization: Bearer <key>, or X-API-Key: <key>)"
          }, pathname),
          cors ?? {}
        ))
      }
      return cors === undefined ? app : Effect.map(app, HttpServerResponse.setHeaders(cors))
    })
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Limits {
  /** Time to receive a request's headers (default 30 s). */
  readonly headerTimeout?: Duration.Input | undefined
  /** Time to receive its body after the headers (default 30 s). */
  readonly bodyTimeout?: Duration.Input | undefined
  /** Connections open at once (default 1024); more are dropped as they come. */
  readonly maxConnections?: number | undefined
}

/** What Node itself answers at its `requestTimeout`. */
const REQUEST_TIMEOUT = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n"

/**
 * A Node HTTP server with the limits applied (checked every second, not Node's default 30 s).
 *
 * Node has no body timeout: its `requestTimeout` counts from the request's start, so with it alone
 * a body sent right after its headers had `headerTimeout + bodyTimeout` (61 s by default, not 30).
 * Each request's body gets its own timer from the moment its headers are in; `requestTimeout`
 * stays as the backstop.
 *
 * @since 0.1.0
 * @category constructors
 */
export const createServer = (limits: Limits = {}): Http.Server => {
  const headers = Math.max(1, Duration.toMillis(limits.headerTimeout ?? Duration.seconds(30)))
  const body = Math.max(0, Duration.toMillis(limits.bodyTimeout ?? Duration.seconds(30)))
  const server = Http.createServer({
    headersTimeout: headers,
    requestTimeout: headers + body,
    keepAliveTimeout: 5000,
    connectionsCheckingInterval: 1000
  })
  server.maxConnections = limits.maxConnections ?? 1024
  // A listener beside the app's: it only watches the body arrive (an upgrade has no 'request').
  // Not for 0 (no time after the headers) nor past 2^31 - 1 ms, where setTimeout fires at once.
  if (body > 0 && body <= 2 ** 31 - 1) server.on("request", watchBody(body))
  return server
}

/** Cuts a request whose body has not all arrived `ms` after its headers. */
const watchBody = (ms: number) => (request: Http.IncomingMessage, response: Http.ServerResponse) => {
  if (request.complete) return
  const timer = setTimeout(() => {
    if (request.complete) return
    const socket = request.socket
    // as Node answers at its requestTimeout: a 408 unless a response has begun, then the socket ends
    if (socket.writable && !response.headersSent) socket.write(REQUEST_TIMEOUT)
    socket.destroy()
  }, ms)
  const done = () => clearTimeout(timer)
  request.once("end", done)
  request.once("close", done)
}
