/**
 * An OpenEnv client on a standard `WebSocket` (from `effect/socket`'s `Socket.WebSocketConstructor`):
 * one WebSocket connection to `<base_url>/ws` is one session (one env instance on the server).
 *
 * A session is a scoped resource: when its scope closes (success, failure or interruption) the
 * client sends `{"type":"close"}`, waits for the server to close the connection (so the server has
 * released its slot before the caller releases its own concurrency permit), and closes the socket.
 *
 * Replies carry no request id and come in request order, so a session that timed out waiting for a
 * reply, lost its connection, or received a frame it cannot match is dropped: every later call fails
 * with `Closed`, never with someone else's reply.
 *
 * The client depends on `Socket.WebSocketConstructor`; provide `NodeSocket.layerWebSocketConstructor`
 * (or use {@link layerWebSocketConstructor}) at the edge.
 *
 * @since 0.1.0
 */
import { Clock, Deferred, Duration, Effect, Exit, Layer, Result, type Schedule, Schema, Scope } from "effect"
import * as Socket from "effect/socket/Socket"
import * as Json from "../internal/Json.js"
import * as Redact from "../internal/redact.js"
import * as Issue from "../internal/issue.js"
import * as OpenEnvProtocol from "./OpenEnvProtocol.js"
import { OpenEnvError } from "./OpenEnvProtocol.js"

/**
 * Timeouts of a session. The defaults are the Python client's (connect 10 s, each reply 60 s).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly connectTimeout?: Duration.Input | undefined
  readonly replyTimeout?: Duration.Input | undefined
  /** How long closing waits for the server to close the connection before dropping it (default 5 s). */
  readonly closeTimeout?: Duration.Input | undefined
}

/**
 * The Node `WebSocketConstructor` (Node's own `WebSocket`), loaded when the layer is built, so that
 * the platform's socket module stays out of processes that never open a session (the CLI's startup).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWebSocketConstructor: Layer.Layer<Socket.WebSocketConstructor> = Layer.unwrap(
  Effect.map(Effect.promise(() => import("@effect/platform-node/NodeSocket")), (NodeSocket) => NodeSocket.layerWebSocketConstructor)
)

/**
 * A live session.
 *
 * @since 0.1.0
 * @category models
 */
export interface Session {
  /** The WebSocket URL. */
  readonly url: string
  /** Resets the env (`kwargs` such as `seed`, `episode_id`). */
  readonly reset: (kwargs?: OpenEnvProtocol.JsonObject) => Effect.Effect<OpenEnvProtocol.ObservationData, OpenEnvError>
  /** Sends one action (the action object itself, e.g. `{ message: "[1 2 3]" }`). */
  readonly step: (action: OpenEnvProtocol.JsonObject) => Effect.Effect<OpenEnvProtocol.ObservationData, OpenEnvError>
  readonly state: Effect.Effect<OpenEnvProtocol.StateData, OpenEnvError>
  /**
   * One MCP JSON-RPC request on the session (a `{"type":"mcp"}` frame: `tools/list`, `tools/call`),
   * answered on the session's own env. A JSON-RPC error is a reply like any other (`error`); a reply
   * whose `id` is not the request's is a `MalformedFrame`, and drops the session.
   */
  readonly mcp: (method: string, params?: OpenEnvProtocol.JsonObject) => Effect.Effect<McpReply, OpenEnvError>
  /** Closes the session now (it is closed with its scope anyway). Idempotent, never fails. */
  readonly close: Effect.Effect<void>
  /** Whether the session can still be used. */
  readonly isOpen: () => boolean
}

/**
 * A JSON-RPC response to {@link Session.mcp}: its `result`, or its `error`.
 *
 * @since 0.3.0
 * @category models
 */
export type McpReply =
  | { readonly _tag: "Result"; readonly result: unknown }
  | { readonly _tag: "Error"; readonly code: number; readonly message: string; readonly data: unknown }

/** The JSON-RPC response with `id`, or `undefined` for anything else. */
const mcpReplyOf = (data: unknown, id: number): McpReply | undefined => {
  if (!isObject(data) || data.id !== id) return undefined
  if ("result" in data && !("error" in data)) return { _tag: "Result", result: data.result }
  const error = data.error
  if (!isObject(error) || typeof error.code !== "number" || typeof error.message !== "string") return undefined
  return { _tag: "Error", code: error.code, message: error.message, data: error.data ?? null }
}

/** How the connection ended: the close event's code and reason, and the error event before it, if any. */
interface Ended {
  readonly code: number
  readonly reason: string
  /** The error event that came before the close (a failed handshake, a reset connection). */
  readonly error: unknown
  /** Whether this side closed the connection. */
  readonly local: boolean
}

const describeEnd = (end: Ended): string => {
  if (end.error !== undefined) {
    const message = (end.error as { readonly message?: unknown }).message
    return `the connection failed (${typeof message === "string" && message !== "" ? message : "error"})`
  }
  if (end.local) return "the connection was closed locally"
  return `the server closed the connection (code ${end.code}${end.reason ? `: ${end.reason}` : ""})`
}

/** The full decoder: used for every frame that is not a well-formed observation (for its exact error). */
const decodeFrame = Schema.decodeUnknownResult(Schema.fromJsonString(OpenEnvProtocol.ServerMessage), Issue.parseOptions)

const isObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * Decodes one server frame. The common reply, a well-formed `observation` frame, is checked by
 * hand (the same checks as the schema: an object `observation`, a boolean `done`, a number or null
 * `reward`, which defaults to `null`, excess properties kept); anything else goes through the
 * schema, so errors read the same.
 */
const decodeReply = (text: string): Result.Result<OpenEnvProtocol.ServerMessage, string> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  if (isObject(json) && json.type === "observation") {
    const data = json.data
    if (isObject(data) && isObject(data.observation) && typeof data.done === "boolean") {
      const reward = data.reward
      if (reward === undefined || reward === null || typeof reward === "number") {
        if (reward === undefined) data.reward = null
        return Result.succeed(json as unknown as OpenEnvProtocol.ServerMessage)
      }
    }
  }
  // Parsed already: only a text that is not JSON goes through the JSON schema, for its message.
  const decoded = json === undefined ? decodeFrame(text) : OpenEnvProtocol.decodeServerMessage(json, Issue.parseOptions)
  if (Result.isSuccess(decoded)) return Result.succeed(decoded.success)
  const issue = Issue.first(decoded.failure.issue)
  const where = issue.path.length === 0 ? "" : ` at ${issue.path.map(String).join(".")}`
  return Result.fail(`not a protocol frame${where}: ${issue.message}: ${text.slice(0, 200)}`)
}

/** The data of an `observation` reply (what `reset` and `step` wait for). */
const observationOf = (m: OpenEnvProtocol.ServerMessage): OpenEnvProtocol.ObservationData | undefined =>
  m.type === "observation" ? m.data : undefined

/** One request of a session: waiting for its turn, then sent and waiting for its reply. */
interface Call {
  /** The request type, for messages. */
  readonly type: string
  readonly text: string
  /** Whether the frame went out (the call is then the one the next frame answers). */
  sent: boolean
  /** When the reply is overdue (clock millis), once sent. */
  deadline: number
  /**
   * Settles the call with its reply frame or an error. When it fails, `beforeFailing` sees the error
   * first: the caller may resume at once (within this call), and must find the session as the error
   * left it.
   */
  readonly settle: (
    reply: string | Uint8Array | OpenEnvError,
    beforeFailing?: (error: OpenEnvError) => void
  ) => void
}


const CONNECTING = 0
const OPEN = 1
const BINARY = new Uint8Array(0)
const CLOSE_FRAME = JSON.stringify({ type: "close" })

/**
 * Opens a session: connects to `<baseUrl>/ws` and waits for the handshake. The session lives in
 * the current scope.
 *
 * Requests of a session go out one at a time, in call order (a later call waits until the earlier
 * one has its reply). A reply settles its request straight from the socket's message event: no
 * fiber, queue or timer per request. Reply timeouts are kept by one watchdog fiber per session,
 * which sleeps until the deadline of the request in flight (and waits for the next request when
 * there is none).
 *
 * @since 0.1.0
 * @category constructors
 */
export const connect = (
  baseUrl: string,
  options: Options = {}
): Effect.Effect<Session, OpenEnvError, Scope.Scope | Socket.WebSocketConstructor> =>
  Effect.gen(function*() {
    const url = OpenEnvProtocol.toWebSocketUrl(baseUrl)
    if (url === undefined) {
      return yield* new OpenEnvError({
        reason: "InvalidUrl",
        url: Redact.url(baseUrl),
        detail: "expected http(s)://host:port or ws(s)://host:port"
      })
    }
    // Credentials in the base URL (`http://user:KEY@host`) go as Basic auth, as Python's clients send
    // them (`openenv serve --api-key-env` takes the key as the password); the WebSocket URL has none.
    const { basic } = Redact.split(baseUrl)
    const authorization = basic === undefined
      ? undefined
      : { headers: { authorization: `Basic ${Buffer.from(`${basic[0]}:${basic[1]}`).toString("base64")}` } }
    const connectTimeout = Duration.fromInputUnsafe(options.connectTimeout ?? Duration.seconds(10))
    const replyTimeout = Duration.fromInputUnsafe(options.replyTimeout ?? Duration.seconds(60))
    const replyMillis = Math.max(0, Duration.toMillis(replyTimeout))
    const closeTimeout = Duration.fromInputUnsafe(options.closeTimeout ?? Duration.seconds(5))
    const fail = (reason: OpenEnvProtocol.ErrorReason, detail: string, cause?: unknown) =>
      new OpenEnvError({ reason, url, detail, ...(cause === undefined ? {} : { cause }) })
    const clock = yield* Clock.Clock
    const construct = yield* Socket.WebSocketConstructor

    let ws: Socket.WebSocketLike
    try {
      ws = authorization === undefined ? construct(url) : construct(url, authorization)
    } catch (error) {
      return yield* fail("ConnectFailed", "cannot connect", error)
    }

    let opened = false
    /** How the connection ended, once it has. */
    let end: Ended | undefined
    let errorEvent: unknown
    let closedLocally = false
    const ended = yield* Deferred.make<Ended>()
    /** The handshake's waiter, while connecting. */
    let handshake: ((result: Effect.Effect<void, OpenEnvError>) => void) | undefined

    /** Requests in call order; the first is in flight once sent. */
    const calls: Array<Call> = []
    /** Frames that came while no request was in flight (an unsolicited error before a close). */
    const early: Array<string | Uint8Array> = []
    /** Why the session cannot be used any more (set once). */
    let dropped: OpenEnvError | undefined
    let closing = false
    /** The reply watchdog, while it waits for a request to be sent. */
    let parked: ((wake: Effect.Effect<void>) => void) | undefined

    const closeSocket = (reason: string) => {
      if (ws.readyState === CONNECTING || ws.readyState === OPEN) {
        closedLocally = true
        ws.close(1000, reason)
      }
    }

    /** Drops the session: no later call may read a reply meant for an earlier one. */
    const drop = (error: OpenEnvError) => {
      if (dropped !== undefined) return
      dropped = error
      closeSocket("session dropped")
    }

    /** Settles the call in flight (the head of `calls`); drops the session when the error says so. */
    const finish = (reply: string | Uint8Array | OpenEnvError) => {
      const call = calls.shift()!
      call.settle(reply, (error) => {
        if (!error.sessionUsable) drop(error)
      })
    }

    /** Sends the next waiting request, or fails it when the session can no longer send. */
    const pump = () => {
      while (calls.length > 0 && !calls[0].sent) {
        const call = calls[0]
        if (dropped !== undefined) {
          calls.shift()
          call.settle(fail("Closed", `the session was dropped earlier (${dropped.reason}: ${dropped.detail})`))
          continue
        }
        let lost: OpenEnvError | undefined
        if (end !== undefined) {
          lost = fail("ConnectionLost", describeEnd(end))
        } else {
          try {
            ws.send(call.text)
          } catch (error) {
            lost = fail("ConnectionLost", "cannot write to the connection", error)
          }
        }
        call.sent = true
        call.deadline = clock.currentTimeMillisUnsafe() + replyMillis
        if (parked !== undefined) {
          const wake = parked
          parked = undefined
          wake(Effect.void)
        }
        // a server that closes right after the handshake (CAPACITY_REACHED) has already sent
        // the frame that explains why: it is the answer
        const frame = early.shift()
        if (frame !== undefined) finish(frame)
        else if (lost !== undefined) finish(lost)
        else return
      }
    }

    const onMessage = (event: Socket.WebSocketEvent) => {
      const data = typeof event.data === "string" ? event.data : BINARY
      if (calls.length > 0 && calls[0].sent) {
        finish(data)
        pump()
      } else {
        early.push(data)
      }
    }
    const onError = (event: unknown) => {
      errorEvent ??= (event as { readonly error?: unknown }).error ?? event
    }
    const onClose = (event: Socket.WebSocketEvent) => {
      if (end !== undefined) return
      end = { code: event.code ?? 1006, reason: event.reason ?? "", error: errorEvent, local: closedLocally }
      Deferred.doneUnsafe(ended, Exit.succeed(end))
      if (handshake !== undefined) {
        handshake(Effect.fail(fail("ConnectFailed", `cannot connect: ${describeEnd(end)}`, errorEvent)))
        handshake = undefined
      }
      if (calls.length > 0 && calls[0].sent) finish(fail("ConnectionLost", describeEnd(end)))
      pump()
    }
    const onOpen = () => {
      opened = true
      if (handshake !== undefined) {
        handshake(Effect.void)
        handshake = undefined
      }
    }
    // the error listener stays: an EventEmitter-based socket throws on an error nobody listens to
    ws.addEventListener("error", onError)
    ws.addEventListener("close", onClose)
    ws.addEventListener("message", onMessage)
    ws.addEventListener("open", onOpen)

    // Finalizers run uninterruptibly, and a timeout cannot cut short what it cannot interrupt: the
    // wait for the server's close is made interruptible so that `closeTimeout` holds in a finalizer.
    const awaitEnd = Effect.timeoutOption(Effect.interruptible(Deferred.await(ended)), closeTimeout)
    const close: Effect.Effect<void> = Effect.suspend(() => {
      if (closing) return Effect.asVoid(awaitEnd)
      closing = true
      const wasUsable = dropped === undefined
      if (wasUsable) dropped = fail("Closed", "the session was closed")
      pump()
      if (end !== undefined) return Effect.void
      if (!opened) {
        // no session yet: abort the handshake
        closeSocket("closed while connecting")
        return Effect.void
      }
      // A usable session asks the server to end it: the server releases its slot, then closes
      // the connection, so waiting for the close orders the two releases. A dropped session may
      // sit behind a hung request, so it closes the WebSocket directly.
      if (wasUsable && ws.readyState === OPEN) ws.send(CLOSE_FRAME)
      else closeSocket("session dropped")
      return Effect.flatMap(awaitEnd, (closed) =>
        closed._tag === "None" ? Effect.sync(() => closeSocket("close timeout")) : Effect.void)
    })

    // Whatever happens from here (a failed handshake, interruption), the socket closes with the scope.
    yield* Effect.addFinalizer(() => close)

    yield* Effect.callback<void, OpenEnvError>((resume) => {
      if (opened) return resume(Effect.void)
      if (end !== undefined) {
        return resume(Effect.fail(fail("ConnectFailed", `cannot connect: ${describeEnd(end)}`, end.error)))
      }
      handshake = resume
      return Effect.sync(() => {
        handshake = undefined
      })
    }).pipe(
      Effect.timeoutOrElse({
        duration: connectTimeout,
        orElse: () => Effect.fail(fail("ConnectTimeout", "no WebSocket handshake in time"))
      })
    )

    // One timer for the session's reply deadlines. The watchdog sleeps until the deadline of the
    // request in flight; a request sent meanwhile has a later deadline, which it sees when it wakes.
    // With no request in flight it parks until the next one is sent.
    const park = Effect.callback<void>((resume) => {
      parked = resume
      return Effect.sync(() => {
        parked = undefined
      })
    })
    const watchdog: Effect.Effect<void> = Effect.suspend(() => {
      const call = calls.length > 0 && calls[0].sent ? calls[0] : undefined
      if (call === undefined) return Effect.andThen(park, watchdog)
      const now = clock.currentTimeMillisUnsafe()
      if (now < call.deadline) return Effect.andThen(Effect.sleep(call.deadline - now), watchdog)
      finish(fail("ReplyTimeout", `no reply to ${call.type} within ${Duration.format(replyTimeout)}`))
      pump()
      return watchdog
    })
    yield* Effect.forkScoped(watchdog)

    const request = <A>(
      frame: OpenEnvProtocol.JsonObject,
      expect: (message: OpenEnvProtocol.ServerMessage) => A | undefined,
      expected: string
    ): Effect.Effect<A, OpenEnvError> =>
      Effect.callback<A, OpenEnvError>((resume) => {
        const type = String(frame.type)
        let text: string
        try {
          text = Json.stringify(frame)
        } catch (error) {
          return resume(Effect.fail(fail("ValidationError", "the request cannot be written as JSON", error)))
        }
        /** The caller's answer in a reply frame, or the error the frame is. */
        const answer = (reply: string | Uint8Array): Result.Result<A, OpenEnvError> => {
          if (typeof reply !== "string") return Result.fail(fail("MalformedFrame", "a binary frame (expected JSON text)"))
          const decoded = decodeReply(reply)
          if (Result.isFailure(decoded)) return Result.fail(fail("MalformedFrame", decoded.failure))
          const message = decoded.success
          if (message.type === "error") return Result.fail(OpenEnvProtocol.fromErrorFrame(url, message.data))
          const out = expect(message)
          return out === undefined
            ? Result.fail(fail("MalformedFrame", `expected ${expected} reply to ${type}, got ${message.type}`))
            : Result.succeed(out)
        }
        const settle: Call["settle"] = (reply, beforeFailing) => {
          const out = reply instanceof OpenEnvError ? Result.fail(reply) : answer(reply)
          if (Result.isSuccess(out)) return resume(Effect.succeed(out.success))
          beforeFailing?.(out.failure)
          resume(Effect.fail(out.failure))
        }
        const call: Call = { type, text, sent: false, deadline: 0, settle }
        calls.push(call)
        pump()
        return Effect.sync(() => {
          const at = calls.indexOf(call)
          if (at < 0) return
          calls.splice(at, 1)
          // an interrupted request may still get its reply later: the session cannot be trusted
          if (call.sent) drop(fail("Closed", "a request was interrupted while waiting for its reply"))
          pump()
        })
      })

    let rpcId = 0
    return {
      url,
      reset: (kwargs = {}) =>
        request({ type: "reset", data: kwargs }, observationOf, "observation"),
      step: (action) => request({ type: "step", data: action }, observationOf, "observation"),
      state: request({ type: "state" }, (m) => (m.type === "state" ? m.data : undefined), "state"),
      mcp: (method, params = {}) =>
        Effect.suspend(() => {
          const id = ++rpcId
          return request(
            { type: "mcp", data: { jsonrpc: "2.0", method, params, id } },
            (m) => (m.type === "mcp" ? mcpReplyOf(m.data, id) : undefined),
            `mcp (a JSON-RPC response with id ${id})`
          )
        }),
      close,
      isOpen: () => dropped === undefined && !closing
    }
  })

/**
 * What to do when the server is full (or, with `retryWhile`, other failures of connecting): reconnect
 * and reset again on this schedule (e.g.
 * `Schedule.exponential("200 millis").pipe(Schedule.intersect(Schedule.recurs(5)))`).
 *
 * @since 0.1.0
 * @category models
 */
export type CapacityRetry = Schedule.Schedule<unknown, OpenEnvError>

/**
 * Connects and resets, as one unit: when the server answers with `CAPACITY_REACHED` (it accepts
 * the handshake, then sends the error and closes), the attempt's connection is closed and, with a
 * `retry` schedule, a new connection is made after the schedule's delay. Other errors are not
 * retried. The session lives in the current scope; failed attempts are closed at once.
 *
 * @since 0.1.0
 * @category constructors
 */
export const connectAndReset = (
  baseUrl: string,
  kwargs: OpenEnvProtocol.JsonObject,
  options: Options & {
    readonly retry?: CapacityRetry | undefined
    /** Which failures the schedule retries (default: `CapacityReached` only). */
    readonly retryWhile?: ((error: OpenEnvError) => boolean) | undefined
  } = {}
): Effect.Effect<
  { readonly session: Session; readonly observation: OpenEnvProtocol.ObservationData },
  OpenEnvError,
  Scope.Scope | Socket.WebSocketConstructor
> =>
  Effect.gen(function*() {
    const parent = yield* Effect.scope
    const attempt = Effect.gen(function*() {
      const scope = yield* Scope.fork(parent, "sequential")
      return yield* Effect.gen(function*() {
        const session = yield* connect(baseUrl, options)
        const observation = yield* session.reset(kwargs)
        return { session, observation }
      }).pipe(
        Scope.provide(scope),
        Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
      )
    })
    return yield* options.retry === undefined
      ? attempt
      : Effect.retry(attempt, {
        schedule: options.retry,
        while: options.retryWhile ?? ((error) => error.reason === "CapacityReached")
      })
  })
