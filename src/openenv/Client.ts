/**
 * An OpenEnv client on `@effect/platform`'s `Socket`: one WebSocket connection to `<base_url>/ws`
 * is one session (one env instance on the server).
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
import * as Socket from "@effect/platform/Socket"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import {
  Deferred,
  Duration,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  ParseResult,
  Queue,
  type Schedule,
  Schema,
  Scope
} from "effect"
import type * as Layer from "effect/Layer"
import * as Json from "../internal/Json.js"
import * as Protocol from "./Protocol.js"
import { OpenEnvError } from "./Protocol.js"

/**
 * Timeouts of a session. The defaults are the Python client's (connect 10 s, each reply 60 s).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly connectTimeout?: Duration.DurationInput | undefined
  readonly replyTimeout?: Duration.DurationInput | undefined
  /** How long closing waits for the server to close the connection before dropping it (default 5 s). */
  readonly closeTimeout?: Duration.DurationInput | undefined
}

/**
 * The Node `WebSocketConstructor` (the `ws` package on Node 20).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWebSocketConstructor: Layer.Layer<Socket.WebSocketConstructor> = NodeSocket.layerWebSocketConstructor

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
  readonly reset: (kwargs?: Protocol.JsonObject) => Effect.Effect<Protocol.ObservationData, OpenEnvError>
  /** Sends one action (the action object itself, e.g. `{ message: "[1 2 3]" }`). */
  readonly step: (action: Protocol.JsonObject) => Effect.Effect<Protocol.ObservationData, OpenEnvError>
  readonly state: Effect.Effect<Protocol.StateData, OpenEnvError>
  /** Closes the session now (it is closed with its scope anyway). Idempotent, never fails. */
  readonly close: Effect.Effect<void>
  /** Whether the session can still be used. */
  readonly isOpen: () => boolean
}

type Ended = Exit.Exit<void, Socket.SocketError>

const describeEnd = (exit: Ended): string => {
  if (Exit.isSuccess(exit)) return "the connection closed"
  const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (error === undefined) return "the connection was closed locally"
  if (error.reason === "Close") {
    return `the server closed the connection (code ${error.code}${error.closeReason ? `: ${error.closeReason}` : ""})`
  }
  return `the connection failed (${error.reason})`
}

const decodeFrame = Schema.decodeUnknownEither(Schema.parseJson(Protocol.ServerMessage), {
  onExcessProperty: "preserve"
})

/**
 * Opens a session: connects to `<baseUrl>/ws` and waits for the handshake. The session lives in
 * the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const connect = (
  baseUrl: string,
  options: Options = {}
): Effect.Effect<Session, OpenEnvError, Scope.Scope | Socket.WebSocketConstructor> =>
  Effect.gen(function*() {
    const url = Protocol.toWebSocketUrl(baseUrl)
    if (url === undefined) {
      return yield* new OpenEnvError({
        reason: "InvalidUrl",
        url: baseUrl,
        detail: "expected http(s)://host:port or ws(s)://host:port"
      })
    }
    const replyTimeout = Duration.decode(options.replyTimeout ?? Duration.seconds(60))
    const closeTimeout = Duration.decode(options.closeTimeout ?? Duration.seconds(5))
    const fail = (reason: Protocol.ErrorReason, detail: string, cause?: unknown) =>
      new OpenEnvError({ reason, url, detail, ...(cause === undefined ? {} : { cause }) })

    // Every close code is reported, so a close is always an error value that says how it ended.
    const socket = yield* Socket.makeWebSocket(url, {
      openTimeout: options.connectTimeout ?? Duration.seconds(10),
      closeCodeIsError: () => true
    })
    const write = yield* socket.writer
    const frames = yield* Queue.unbounded<string | Uint8Array>()
    const opened = yield* Deferred.make<void>()
    const ended = yield* Deferred.make<Ended>()
    // Frames are queued synchronously in arrival order; replies are matched by position.
    yield* socket.runRaw((data) => void Queue.unsafeOffer(frames, data), { onOpen: Deferred.succeed(opened, void 0) })
      .pipe(
        Effect.exit,
        Effect.flatMap((exit) => Deferred.succeed(ended, exit)),
        Effect.forkScoped
      )

    yield* Effect.raceFirst(
      Deferred.await(opened),
      Effect.flatMap(Deferred.await(ended), (exit) => {
        const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
        return Effect.fail(
          error?.reason === "OpenTimeout"
            ? fail("ConnectTimeout", "no WebSocket handshake in time", error)
            : fail("ConnectFailed", `cannot connect: ${describeEnd(exit)}`, error)
        )
      })
    )

    /** Why the session cannot be used any more (set once). */
    let dropped: OpenEnvError | undefined
    let closing = false
    const lock = yield* Effect.makeSemaphore(1)

    const connectionLost = Effect.flatMap(
      Deferred.await(ended),
      (exit) => Effect.fail(fail("ConnectionLost", describeEnd(exit)))
    )

    /** Writes unless the connection is gone (the socket's writer would wait for it forever). */
    const send = (chunk: string | Socket.CloseEvent): Effect.Effect<void, OpenEnvError> =>
      Effect.raceFirst(
        Effect.mapError(write(chunk), (error) => fail("ConnectionLost", "cannot write to the connection", error)),
        connectionLost
      )

    const nextFrame: Effect.Effect<string | Uint8Array, OpenEnvError> = Effect.flatMap(Queue.poll(frames), (ready) =>
      ready._tag === "Some"
        ? Effect.succeed(ready.value)
        : Effect.raceFirst(
          Queue.take(frames),
          // frames that arrived just before the close are still answers
          Effect.zipRight(
            Deferred.await(ended),
            Effect.flatMap(Queue.poll(frames), (late) =>
              late._tag === "Some"
                ? Effect.succeed(late.value)
                : connectionLost)
          )
        ))

    /** Drops the session: no later call may read a reply meant for an earlier one. */
    const drop = (error: OpenEnvError): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (dropped !== undefined) return Effect.void
        dropped = error
        return Effect.ignore(send(new Socket.CloseEvent(1000, "session dropped")))
      })

    const request = <A>(
      frame: Protocol.JsonObject,
      expect: (message: Protocol.ServerMessage) => A | undefined,
      expected: string
    ): Effect.Effect<A, OpenEnvError> =>
      lock.withPermits(1)(Effect.suspend(() => {
        if (dropped !== undefined) {
          return Effect.fail(fail("Closed", `the session was dropped earlier (${dropped.reason}: ${dropped.detail})`))
        }
        const text = Either.try(() => Json.stringify(frame))
        if (Either.isLeft(text)) {
          return Effect.fail(fail("ValidationError", "the request cannot be written as JSON", text.left))
        }
        return Effect.either(send(text.right)).pipe(
          // a server that closes right after the handshake (CAPACITY_REACHED) has already sent
          // the frame that explains why: read it rather than report a lost connection
          Effect.flatMap((sent) =>
            Either.isRight(sent)
              ? nextFrame
              : Effect.flatMap(Queue.poll(frames), (queued) =>
                queued._tag === "Some" ? Effect.succeed(queued.value) : Effect.fail(sent.left))
          ),
          Effect.timeoutFail({
            duration: replyTimeout,
            onTimeout: () =>
              fail("ReplyTimeout", `no reply to ${String(frame.type)} within ${Duration.format(replyTimeout)}`)
          }),
          Effect.flatMap((data): Effect.Effect<A, OpenEnvError> => {
            if (typeof data !== "string") {
              return Effect.fail(fail("MalformedFrame", "a binary frame (expected JSON text)"))
            }
            const decoded = decodeFrame(data)
            if (Either.isLeft(decoded)) {
              const issue = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)[0]
              const where = issue === undefined || issue.path.length === 0 ? "" : ` at ${issue.path.join(".")}`
              return Effect.fail(
                fail(
                  "MalformedFrame",
                  `not a protocol frame${where}: ${issue?.message ?? "invalid"}: ${data.slice(0, 200)}`
                )
              )
            }
            const message = decoded.right
            if (message.type === "error") return Effect.fail(Protocol.fromErrorFrame(url, message.data))
            const out = expect(message)
            return out === undefined
              ? Effect.fail(
                fail("MalformedFrame", `expected ${expected} reply to ${String(frame.type)}, got ${message.type}`)
              )
              : Effect.succeed(out)
          }),
          Effect.tapError((error) => (error.sessionUsable ? Effect.void : drop(error))),
          // an interrupted request may still get its reply later: the session cannot be trusted
          Effect.onInterrupt(() => drop(fail("Closed", "a request was interrupted while waiting for its reply")))
        )
      }))

    const close: Effect.Effect<void> = Effect.suspend(() => {
      if (closing) return Effect.ignore(Effect.timeout(Deferred.await(ended), closeTimeout))
      closing = true
      const wasUsable = dropped === undefined
      if (wasUsable) dropped = fail("Closed", "the session was closed")
      return Effect.gen(function*() {
        if (yield* Deferred.isDone(ended)) return
        // A usable session asks the server to end it: the server releases its slot, then closes
        // the connection, so waiting for the close orders the two releases. A dropped session may
        // sit behind a hung request, so it closes the WebSocket directly.
        yield* Effect.ignore(
          send(wasUsable ? Json.stringify({ type: "close" }) : new Socket.CloseEvent(1000, "session dropped"))
        )
        const closed = yield* Effect.timeout(Deferred.await(ended), closeTimeout).pipe(Effect.option)
        if (closed._tag === "None") yield* Effect.ignore(send(new Socket.CloseEvent(1000, "close timeout")))
      })
    })

    yield* Effect.addFinalizer(() => close)

    return {
      url,
      reset: (kwargs = {}) =>
        request({ type: "reset", data: kwargs }, (m) => (m.type === "observation" ? m.data : undefined), "observation"),
      step: (action) =>
        request({ type: "step", data: action }, (m) => (m.type === "observation" ? m.data : undefined), "observation"),
      state: request({ type: "state" }, (m) => (m.type === "state" ? m.data : undefined), "state"),
      close,
      isOpen: () => dropped === undefined && !closing
    }
  })

/**
 * What to do when the server is full: reconnect and reset again on this schedule (e.g.
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
  kwargs: Protocol.JsonObject,
  options: Options & { readonly retry?: CapacityRetry | undefined } = {}
): Effect.Effect<
  { readonly session: Session; readonly observation: Protocol.ObservationData },
  OpenEnvError,
  Scope.Scope | Socket.WebSocketConstructor
> =>
  Effect.gen(function*() {
    const parent = yield* Effect.scope
    const attempt = Effect.gen(function*() {
      const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
      return yield* Effect.gen(function*() {
        const session = yield* connect(baseUrl, options)
        const observation = yield* session.reset(kwargs)
        return { session, observation }
      }).pipe(
        Scope.extend(scope),
        Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
      )
    })
    return yield* options.retry === undefined
      ? attempt
      : Effect.retry(attempt, { schedule: options.retry, while: (error) => error.reason === "CapacityReached" })
  })
