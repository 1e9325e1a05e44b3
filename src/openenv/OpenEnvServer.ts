/**
 * An OpenEnv-compatible server for any registered env, so Python OpenEnv clients (TRL, ms-swift)
 * and OpenEnv's own tools can use envs written in TypeScript.
 *
 * - `GET /ws`: one WebSocket connection is one session with its own env (the protocol's frames and
 *   error codes, see `OpenEnvProtocol`), plus `{"type":"mcp"}` frames (JSON-RPC on the session).
 *   Over `maxConcurrentEnvs` sessions the handshake succeeds, then `CAPACITY_REACHED` and a close.
 * - `POST /reset`, `POST /step`, `GET /state`: the HTTP simulation endpoints (each request builds a
 *   fresh env and closes it, as the Python server does).
 * - `POST /mcp`: JSON-RPC 2.0 (`tools/list`, `tools/call`, `openenv/session/create|close`).
 * - `GET /health`, `GET /metadata` (exactly OpenEnv's `EnvironmentMetadata`), `GET /schema`,
 *   `GET /openapi.json` (built from the env's schemas), `GET /docs` (the routes as a page, made
 *   here: no script from elsewhere), `GET /sessions` (live counts; this project's addition).
 *
 * Behaviour follows the Python server by default (a step or state before reset plays on a fresh
 * env, a /ws reset's kwargs are not type-checked while HTTP /reset's body is a `ResetRequest`,
 * sessions are never reaped for idleness); `requireReset`, `strictReset` and `idleTimeout` are the
 * stricter variants. Every env call has `callTimeout`: a
 * call that does not answer ends its session (`SESSION_ERROR`, then a close). Frames over
 * `maxFrameBytes` close the connection (1009). Every route is behind `HttpGuard` (Host, Origin,
 * an optional key).
 *
 * Actions are `{"message": "<text>"}` (TextArena's shape): the text becomes an assistant message
 * and the env is stepped with the whole conversation, as the gym scheduler does. An env that
 * carries an OpenEnv view (an `openenv` property with `observation()` and `state()`, as `sudoku`
 * does) sends its own JSON; any other env sends TextArena's observation shape built from its text.
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Cause, Clock, Deferred, Duration, Effect, type Redacted, Result, Schema, Scope } from "effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerError from "effect/http/HttpServerError"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Socket from "effect/socket/Socket"
import type * as Env from "../Env.js"
import * as HttpGuard from "../http/HttpGuard.js"
import { isRecord } from "../internal/inspect.js"
import * as Json from "../internal/Json.js"
import { Episode, type Failure, invalid, type View as EpisodeView } from "./internal/episode.js"
import { parseClientJson, resetRequest, validationIssues } from "./internal/issues.js"
import * as Mcp from "./internal/mcp.js"
import * as OpenApi from "./internal/openapi.js"
import * as OpenEnvProtocol from "./OpenEnvProtocol.js"

/**
 * The structured view an env may carry (as an `openenv` property of the live env) to answer with
 * its own observation JSON and state fields instead of the generic ones built from its text.
 *
 * @since 0.1.0
 * @category models
 */
export type View = EpisodeView

/**
 * The action of a served env: the model's text.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Action = Schema.Struct({
  message: Schema.String,
  metadata: Schema.optionalKey(OpenEnvProtocol.JsonObject)
})

/**
 * The observation of an env without its own view (TextArena's shape).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Observation = Schema.Struct({
  prompt: Schema.String,
  messages: Schema.Array(Schema.Struct({ sender_id: Schema.Finite, content: Schema.String, category: Schema.String })),
  current_player_id: Schema.Finite,
  legal_players: Schema.Array(Schema.Finite),
  info: OpenEnvProtocol.JsonObject,
  system_prompt: Schema.optionalKey(Schema.String)
})

const StateSchema = Schema.StructWithRest(
  Schema.Struct({ episode_id: Schema.NullOr(Schema.String), step_count: Schema.Finite }),
  [OpenEnvProtocol.JsonObject]
)

/**
 * Live session counts, for tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Sessions {
  /** Sessions holding a slot now (WebSocket and MCP). */
  readonly active: number
  /** The most sessions ever active at once. */
  readonly maxSeen: number
  readonly accepted: number
  /** Connections turned away with `CAPACITY_REACHED`. */
  readonly rejected: number
  /** Sessions ended for being idle. */
  readonly reaped: number
  /** Sessions ended because an env call did not answer in time. */
  readonly stuck: number
  readonly max: number
}

class Counter implements Sessions {
  active = 0
  maxSeen = 0
  accepted = 0
  rejected = 0
  reaped = 0
  stuck = 0
  constructor(readonly max: number) {}

  /** Takes a slot when one is free (check and increment in one synchronous step). */
  tryAcquire(): boolean {
    if (this.active >= this.max) {
      this.rejected++
      return false
    }
    this.active++
    this.accepted++
    if (this.active > this.maxSeen) this.maxSeen = this.active
    return true
  }

  release(): void {
    this.active--
  }
}

/**
 * The frames of one session, in arrival order, for its one reader: a plain array and the reader's
 * callback while it waits (cheaper per frame than a `Queue`, which makes a `Deferred` per wait).
 */
class Inbox {
  private readonly frames: Array<string | Uint8Array> = []
  private waiting: ((frame: Effect.Effect<string | Uint8Array>) => void) | undefined

  offer(frame: string | Uint8Array): void {
    const waiting = this.waiting
    if (waiting === undefined) {
      this.frames.push(frame)
    } else {
      this.waiting = undefined
      waiting(Effect.succeed(frame))
    }
  }

  readonly take: Effect.Effect<string | Uint8Array> = Effect.suspend(() =>
    this.frames.length > 0
      ? Effect.succeed(this.frames.shift()!)
      : Effect.callback<string | Uint8Array>((resume) => {
        this.waiting = resume
        return Effect.sync(() => {
          if (this.waiting === resume) this.waiting = undefined
        })
      })
  )
}


/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The env to serve. */
  readonly env: Env.Definition
  /** Its `env_config` (reset kwargs other than `seed` and `episode_id` override fields of it). */
  readonly envConfig?: Env.EnvConfig | undefined
  /** Sessions served at once (WebSocket and MCP); more get `CAPACITY_REACHED`. */
  readonly maxConcurrentEnvs: number
  /** Sessions with no message for this long are ended (default 0: never, as the Python server). */
  readonly idleTimeout?: Duration.Input | undefined
  /** How long a closing session waits for the client to close the connection (default 5 s). */
  readonly closeTimeout?: Duration.Input | undefined
  /** How long an env's create, reset or step may take; then its session ends (default 60 s). */
  readonly callTimeout?: Duration.Input | undefined
  /**
   * More time the server's own timer gives a call beyond `callTimeout`, for envs that enforce
   * `callTimeout` themselves (isolated envs: a call that waited behind another env's blocked
   * thread is moved to another worker and replayed, which takes longer; default 0).
   */
  readonly callGrace?: Duration.Input | undefined
  /** A step or state before any reset is an error (default: played on a fresh env, as Python does). */
  readonly requireReset?: boolean | undefined
  /** Reset's `seed` must be an integer >= 0 and `episode_id` a string (default: any value). */
  readonly strictReset?: boolean | undefined
  /** The largest frame a client may send (default 16 MiB, uvicorn's); larger closes with 1009. */
  readonly maxFrameBytes?: number | undefined
  /** The address the server is bound to (a loopback one checks `Host`; default 127.0.0.1). */
  readonly host?: string | undefined
  readonly allowHosts?: ReadonlyArray<string> | undefined
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  /** When set, every request needs it (see `HttpGuard`: bearer, basic password or `X-API-Key`). */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** The env's version in `/metadata` (default 1.0.0). */
  readonly version?: string | undefined
}

/**
 * The server as an HTTP app, before it is bound to a port.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenEnvServer {
  readonly app: Effect.Effect<
    HttpServerResponse.HttpServerResponse,
    never,
    HttpServerRequest.HttpServerRequest | Scope.Scope
  >
  readonly sessions: Sessions
  /** Ends every session (their envs are closed). Also run when the scope closes. */
  readonly shutdown: Effect.Effect<void>
}

/** `maxFrameBytes`' default: uvicorn's 16 MiB. */
const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

/**
 * The largest `maxFrameBytes`: a text frame is decoded into one string, and V8's strings hold at
 * most 2^29 - 24 code units.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_FRAME_BYTES_LIMIT = 2 ** 29 - 24

const errorFrame = (failure: Failure) => ({
  type: "error",
  data: { message: failure.message, code: failure.code, ...failure.extra }
})

const decodeAction = Schema.decodeUnknownResult(Action, { errors: "all", onExcessProperty: "error", reportInput: true })
const decodeReset = Schema.decodeUnknownResult(OpenEnvProtocol.ResetMessage, { errors: "all", onExcessProperty: "error", reportInput: true })
const decodeStep = Schema.decodeUnknownResult(OpenEnvProtocol.StepMessage, { errors: "all", onExcessProperty: "error", reportInput: true })
const decodeBare = Schema.decodeUnknownResult(
  Schema.Struct({ type: Schema.String }),
  { errors: "all", onExcessProperty: "error", reportInput: true }
)

/** The action of a step: `{"message": "..."}`, the usual one, without the schema; anything else with it. */
const actionOf = (data: OpenEnvProtocol.JsonObject): Result.Result<typeof Action.Type, Schema.SchemaError> => {
  const message = data.message
  if (typeof message === "string") {
    let keys = 0
    for (const key in data) if (Object.hasOwn(data, key)) keys++
    if (keys === 1) return Result.succeed({ message })
  }
  return decodeAction(data)
}

const pythonName = (value: unknown): string =>
  value === undefined || value === null ? "None" : typeof value === "string" ? value : Json.stringify(value)

const jsonResponse = (value: unknown, status = 200) =>
  HttpServerResponse.text(Json.stringify(value), { status, contentType: "application/json" })

/**
 * Builds the server's HTTP app in the current scope (MCP sessions live there). Fails when the
 * env's config is not valid for it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<OpenEnvServer, Env.EnvConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const baseConfig: Env.EnvConfig = options.envConfig ?? {}
    // Fail now, not at the first reset, when the server's own config is wrong.
    yield* Effect.fromResult(options.env.prepare(baseConfig))
    const counter = new Counter(options.maxConcurrentEnvs)
    const idleTimeout = Duration.fromInputUnsafe(options.idleTimeout ?? Duration.zero)
    const closeTimeout = Duration.fromInputUnsafe(options.closeTimeout ?? Duration.seconds(5))
    const maxFrame = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
    const settings = {
      env: options.env,
      baseConfig,
      callTimeout: Duration.fromInputUnsafe(options.callTimeout ?? Duration.seconds(60)),
      callGrace: Duration.fromInputUnsafe(options.callGrace ?? Duration.zero),
      requireReset: options.requireReset === true,
      strictReset: options.strictReset === true
    }
    const clock = yield* Clock.Clock
    const serverScope = yield* Effect.scope
    /** Failed at shutdown: every session ends. */
    const stopping = yield* Deferred.make<void>()
    const closing = yield* Deferred.make<void>()

    const capacityFailure = (): Failure => ({
      code: "CAPACITY_REACHED",
      message: `Server at capacity: ${counter.active}/${counter.max} sessions active. Cannot accept new connections.`,
      extra: { active_sessions: counter.active, max_sessions: counter.max },
      fatal: true
    })

    // MCP-managed sessions (openenv/session/create), in the server's scope.
    const mcpSessions = new Map<string, { readonly episode: Episode; lastActive: number }>()
    const closeMcp = (id: string) =>
      Effect.suspend(() => {
        const session = mcpSessions.get(id)
        if (session === undefined) return Effect.succeed(false)
        mcpSessions.delete(id)
        counter.release()
        return Effect.as(session.episode.close, true)
      })
    yield* Effect.addFinalizer(() => Effect.forEach([...mcpSessions.keys()], closeMcp, { discard: true }))
    const sessions: Mcp.Sessions = {
      create: Effect.gen(function*() {
        if (!counter.tryAcquire()) return { capacity: { active: counter.active, max: counter.max } }
        const episode = new Episode(settings)
        const started = yield* Effect.result(episode.open)
        if (Result.isFailure(started)) {
          counter.release()
          yield* episode.close
          return { failure: started.failure }
        }
        const id = crypto.randomUUID()
        mcpSessions.set(id, { episode, lastActive: clock.currentTimeMillisUnsafe() })
        return { id }
      }),
      close: closeMcp,
      get: (id) => mcpSessions.get(id)?.episode,
      touch: (id) => {
        const session = mcpSessions.get(id)
        if (session !== undefined) session.lastActive = clock.currentTimeMillisUnsafe()
      },
      fresh: (use) => Effect.acquireUseRelease(Effect.sync(() => new Episode(settings)), use, (e) => e.close)
    }
    const idleMillis = Duration.toMillis(idleTimeout)
    if (idleMillis > 0) {
      const reap = Effect.suspend(() => {
        const now = clock.currentTimeMillisUnsafe()
        const stale = [...mcpSessions].filter(([, s]) => now - s.lastActive > idleMillis).map(([id]) => id)
        counter.reaped += stale.length
        return Effect.forEach(stale, closeMcp, { discard: true })
      })
      yield* Effect.forkIn(
        Effect.forever(Effect.andThen(Effect.sleep(Duration.millis(Math.max(100, idleMillis / 4))), reap)),
        serverScope
      )
    }

    const session = (socket: Socket.Socket): Effect.Effect<void> =>
      Effect.scoped(Effect.gen(function*() {
        // The WebSocket handshake: a connection that goes before it ends here.
        const reader = yield* Effect.result(socket.reader)
        if (Result.isFailure(reader)) return
        const { write } = yield* socket.writer
        const frames = new Inbox()
        const ended = yield* Deferred.make<void>()
        // Frames in arrival order until the connection ends (a close, clean or not, fails the pull).
        yield* Effect.forever(Effect.map(reader.success.pull, (batch) => {
          for (const frame of batch) frames.offer(frame)
        })).pipe(
          Effect.exit,
          Effect.andThen(Deferred.succeed(ended, void 0)),
          Effect.forkScoped
        )
        /** Sends unless the connection is gone (the writer would wait for a new one forever). */
        const send = (frame: object | Socket.CloseEvent): Effect.Effect<void> =>
          Effect.raceFirst(
            Effect.ignore(write(Socket.isCloseEvent(frame) ? frame : Json.stringify(frame))),
            Deferred.await(ended)
          )
        /** A reply from the frame loop (raced with the connection's end as a whole). */
        const sendReply = (frame: object): Effect.Effect<void> => Effect.ignore(write(Json.stringify(frame)))
        const finish = (code: number, ...last: ReadonlyArray<object>) =>
          Effect.gen(function*() {
            for (const frame of last) yield* send(frame)
            yield* send(new Socket.CloseEvent(code))
            yield* Effect.timeoutOption(Deferred.await(ended), closeTimeout)
          })

        if (!counter.tryAcquire()) {
          yield* finish(1000, errorFrame(capacityFailure()))
          return
        }
        let released = false
        const release = Effect.sync(() => {
          if (!released) {
            released = true
            counter.release()
          }
        })
        yield* Effect.addFinalizer(() => release)
        const episode = new Episode(settings)
        yield* Effect.addFinalizer(() => episode.close)
        // the session's id, for the MCP methods that name it (as the Python server's session ids)
        const bound = { id: crypto.randomUUID(), episode }

        type Next = "continue" | "close" | { readonly fatal: Failure } | { readonly tooLarge: number }
        const reply = (frame: object): Effect.Effect<Next> => Effect.as(sendReply(frame), "continue" as const)
        const answer = <A>(effect: Effect.Effect<A, Failure>, frame: (a: A) => object): Effect.Effect<Next> =>
          Effect.matchEffect(effect, {
            onFailure: (failure): Effect.Effect<Next> =>
              failure.fatal ? Effect.succeed({ fatal: failure }) : reply(errorFrame(failure)),
            onSuccess: (a) => reply(frame(a))
          })
        const observation = (data: OpenEnvProtocol.ObservationData) => ({ type: "observation", data })

        const handle = (data: string | Uint8Array): Effect.Effect<Next> => {
          // bytes, as the limit says (a string's length counts UTF-16 units, fewer than its UTF-8 bytes)
          const size = typeof data === "string" ? Buffer.byteLength(data, "utf8") : data.length
          if (size > maxFrame) return Effect.succeed({ tooLarge: size })
          if (typeof data !== "string") {
            return reply(errorFrame({ code: "INVALID_JSON", message: "Invalid JSON: binary frames are not supported", fatal: false }))
          }
          // (a frame nested past any real one is refused before a schema or an error message walks it)
          const parsed = parseClientJson(data)
          if (Result.isFailure(parsed)) {
            return reply(errorFrame({ code: "INVALID_JSON", message: `Invalid JSON: ${parsed.failure}`, fatal: false }))
          }
          const frame = parsed.success
          if (!isRecord(frame)) {
            return reply(errorFrame(invalid([{ type: "model_type", loc: [], msg: "Input should be an object", input: frame }])))
          }
          const type = frame.type
          switch (type) {
            case "reset": {
              const message = decodeReset(frame)
              if (Result.isFailure(message)) return reply(errorFrame(invalid(validationIssues(message.failure, frame))))
              return answer(episode.reset(message.success.data), observation)
            }
            case "step": {
              // the usual frame, {"type":"step","data":{...}}, needs no schema to say so
              let data = frame.data
              if (!isRecord(data) || Object.keys(frame).length !== 2) {
                const message = decodeStep(frame)
                if (Result.isFailure(message)) return reply(errorFrame(invalid(validationIssues(message.failure, frame))))
                data = message.success.data
              }
              const action = actionOf(data as OpenEnvProtocol.JsonObject)
              if (Result.isFailure(action)) return reply(errorFrame(invalid(validationIssues(action.failure, data))))
              return answer(episode.step(action.success.message), observation)
            }
            case "state": {
              const message = decodeBare(frame)
              if (Result.isFailure(message)) return reply(errorFrame(invalid(validationIssues(message.failure, frame))))
              return answer(episode.state, (state) => ({ type: "state", data: state }))
            }
            case "close":
              return Effect.succeed("close")
            case "mcp": {
              const rpc = isRecord(frame.data) ? Mcp.parseRequest(frame.data) : Result.fail(
                Mcp.error(null, Mcp.INVALID_REQUEST, "Invalid request: data should be an object")
              )
              const response = Result.isFailure(rpc) ? Effect.succeed(rpc.failure) : Mcp.handle(rpc.success, sessions, bound)
              return Effect.flatMap(response, (data) => reply({ type: "mcp", data }))
            }
            default:
              return reply(errorFrame({ code: "UNKNOWN_TYPE", message: `Unknown message type: ${pythonName(type)}`, fatal: false }))
          }
        }

        const IDLE = Symbol("idle")
        /** Whether a frame is being handled, and when the last one was (clock millis). */
        let busy = false
        let lastActive = clock.currentTimeMillisUnsafe()
        // a bug in an env (a defect, a throw) must not take the server down: it is this request's error
        const onDefect = (cause: Cause.Cause<never>): Effect.Effect<Next> =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : reply(errorFrame({ code: "EXECUTION_ERROR", message: Cause.pretty(cause).split("\n")[0] ?? "unexpected failure", fatal: false }))
        const handled = (next: Next): Effect.Effect<Next> => {
          busy = false
          lastActive = clock.currentTimeMillisUnsafe()
          return next === "continue" ? loop : Effect.succeed(next)
        }
        // One frame at a time, in arrival order: replies go out in request order.
        const loop: Effect.Effect<Next> = Effect.flatMap(frames.take, (frame) => {
          busy = true
          return Effect.flatMap(Effect.catchCause(Effect.suspend(() => handle(frame)), onDefect), handled)
        })
        // One timer per session for idleness: it sleeps until the earliest time the session could
        // have been silent for `idleTimeout` (a whole timeout while a frame is being handled).
        const idle: Effect.Effect<typeof IDLE> = Effect.suspend(() => {
          const wait = busy ? idleMillis : lastActive + idleMillis - clock.currentTimeMillisUnsafe()
          return wait <= 0 ? Effect.succeed(IDLE) : Effect.andThen(Effect.sleep(wait), idle)
        })

        const outcome = yield* Effect.raceFirst(
          Effect.as(Deferred.await(ended), "disconnected" as const),
          Effect.raceFirst(
            Effect.as(Deferred.await(stopping), "stopping" as const),
            idleMillis > 0 ? Effect.raceFirst(loop, idle) : loop
          )
        )
        if (outcome === "disconnected") return
        const ending = outcome as Exclude<typeof outcome, "disconnected" | "continue">
        // The slot is free before the close goes out, so a client that waits for the close (as
        // this project's client does) can start its next session without meeting a full server.
        yield* episode.close
        yield* release
        if (ending === IDLE) {
          counter.reaped++
          yield* finish(1000, errorFrame({
            code: "SESSION_ERROR",
            message: `Session closed after ${Duration.format(idleTimeout)} without a message`,
            fatal: true
          }))
        } else if (ending === "stopping") {
          yield* finish(1001, errorFrame({ code: "SESSION_ERROR", message: "the server is shutting down", fatal: true }))
        } else if (ending === "close") {
          yield* finish(1000)
        } else if ("tooLarge" in ending) {
          yield* send(new Socket.CloseEvent(1009, `message too big: ${ending.tooLarge} bytes (limit ${maxFrame})`))
          yield* Effect.timeoutOption(Deferred.await(ended), closeTimeout)
        } else {
          if (ending.fatal.code === "SESSION_ERROR") counter.stuck++
          yield* finish(1000, errorFrame(ending.fatal))
        }
      }))

    const ws = Effect.flatMap(
      HttpServerRequest.HttpServerRequest,
      (request): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
        Effect.flatMap(Effect.result(request.upgrade), (socket) =>
          Result.isFailure(socket)
            ? Effect.succeed(HttpServerResponse.text("Expected a WebSocket upgrade", { status: 426 }))
            : Deferred.isDone(closing).pipe(
              Effect.flatMap((done) =>
                done
                  ? Effect.succeed(HttpServerResponse.text("Shutting down", { status: 503 }))
                  : Effect.as(session(socket.success), HttpServerResponse.empty())
              )
            ))
    )

    const version = options.version ?? "1.0.0"
    const metadata = {
      name: options.env.name,
      description: options.env.description || `${options.env.name} environment`,
      readme_content: null,
      version,
      author: null,
      documentation_url: null
    }
    // (closed objects, as pydantic's `extra="forbid"` models are)
    const jsonSchema = (schema: Schema.Top): Record<string, unknown> => ({
      ...Schema.toJsonSchemaDocument(schema, { onExcessProperty: "error" }).schema
    })
    const schemas = {
      action: jsonSchema(Action),
      observation: jsonSchema(Observation),
      state: jsonSchema(StateSchema)
    }
    const openapi = OpenApi.document({
      env: options.env.name,
      description: metadata.description,
      version: "1.0.0",
      action: schemas.action,
      observation: schemas.observation,
      state: schemas.state
    })

    const docsPage = OpenApi.page(openapi, `${metadata.name} - API docs`)

    /** FastAPI's 422 body: `{"detail": [problems]}` with `loc` from `body`. */
    const unprocessable = (issues: ReadonlyArray<OpenEnvProtocol.ValidationIssue>) =>
      jsonResponse({ detail: issues }, 422)
    const simulation = <A>(effect: Effect.Effect<A, Failure>) =>
      Effect.match(effect, {
        onFailure: (failure) =>
          failure.code === "VALIDATION_ERROR"
            ? unprocessable(((failure.extra?.errors ?? []) as Array<OpenEnvProtocol.ValidationIssue>).map((issue) => ({
              ...issue,
              loc: ["body", ...issue.loc]
            })))
            : jsonResponse({ detail: failure.message }, 500),
        onSuccess: (value) => jsonResponse(value)
      })
    const bodyJson = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
      Effect.map(Effect.result(request.text), (text): Result.Result<unknown, string> => {
        if (Result.isFailure(text)) return Result.fail("the body could not be read")
        if (text.success.trim() === "") return Result.succeed(undefined)
        return parseClientJson(text.success)
      }))
    const jsonError = (detail: string) =>
      unprocessable([{ type: "json_invalid", loc: ["body"], msg: `JSON decode error: ${detail}`, input: {} }])

    const resetRoute = Effect.flatMap(bodyJson, (body) => {
      if (Result.isFailure(body)) return Effect.succeed(jsonError(body.failure))
      const kwargs = body.success === undefined ? {} : body.success
      if (!isRecord(kwargs)) {
        return Effect.succeed(unprocessable([{ type: "model_attributes_type", loc: ["body"], msg: "Input should be a valid dictionary", input: kwargs }]))
      }
      // the body is OpenEnv's ResetRequest, checked as FastAPI does (a /ws reset's data is not)
      const checked = resetRequest(kwargs)
      if (Result.isFailure(checked)) {
        return Effect.succeed(unprocessable(checked.failure.map((issue) => ({ ...issue, loc: ["body", ...issue.loc] }))))
      }
      return sessions.fresh((episode) => simulation(episode.reset(checked.success)))
    })
    const stepRoute = Effect.flatMap(bodyJson, (body) => {
      if (Result.isFailure(body)) return Effect.succeed(jsonError(body.failure))
      const request = body.success
      if (!isRecord(request) || !isRecord(request.action)) {
        return Effect.succeed(unprocessable([{
          type: "missing",
          loc: ["body", "action"],
          msg: "Field required",
          input: request ?? null
        }]))
      }
      const action = actionOf(request.action)
      if (Result.isFailure(action)) {
        return Effect.succeed(unprocessable(validationIssues(action.failure, request.action, ["body", "action"])))
      }
      return sessions.fresh((episode) => simulation(episode.step(action.success.message)))
    })
    const stateRoute = sessions.fresh((episode) => simulation(episode.state))
    const mcpRoute = Effect.flatMap(bodyJson, (body) => {
      if (Result.isFailure(body)) return Effect.succeed(jsonResponse(Mcp.error(null, Mcp.PARSE_ERROR)))
      const rpc = Mcp.parseRequest(body.success ?? null)
      if (Result.isFailure(rpc)) return Effect.succeed(jsonResponse(rpc.failure))
      return Effect.map(Mcp.handle(rpc.success, sessions), jsonResponse)
    })

    const router = yield* HttpRouter.make
    yield* router.addAll([
      HttpRouter.route("GET", "/health", Effect.succeed(jsonResponse({ status: "healthy" }))),
      HttpRouter.route("GET", "/metadata", Effect.succeed(jsonResponse(metadata))),
      HttpRouter.route("GET", "/schema", Effect.succeed(jsonResponse(schemas))),
      HttpRouter.route("GET", "/openapi.json", Effect.succeed(jsonResponse(openapi))),
      HttpRouter.route("GET", "/docs", Effect.succeed(HttpServerResponse.text(docsPage, { contentType: "text/html; charset=utf-8" }))),
      HttpRouter.route(
        "GET",
        "/sessions",
        Effect.sync(() =>
          jsonResponse({
            active_sessions: counter.active,
            max_sessions: counter.max,
            max_seen_sessions: counter.maxSeen,
            accepted: counter.accepted,
            rejected: counter.rejected,
            reaped: counter.reaped,
            stuck: counter.stuck
          })
        )
      ),
      HttpRouter.route("POST", "/reset", resetRoute),
      HttpRouter.route("POST", "/step", stepRoute),
      HttpRouter.route("GET", "/state", stateRoute),
      HttpRouter.route("POST", "/mcp", mcpRoute),
      HttpRouter.route("GET", "/ws", ws)
    ])
    const notFound = (error: unknown) =>
      HttpServerError.isHttpServerError(error) && error.reason._tag === "RouteNotFound"
    const routes = router.asHttpEffect().pipe(
      Effect.catchCause((cause) => {
        // (an interruption only: no failure to type)
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const error = Cause.findErrorOption(cause)
        if (error._tag === "Some" && notFound(error.value)) return Effect.succeed(jsonResponse({ detail: "Not Found" }, 404))
        return Effect.as(
          Effect.logError("OpenEnv server: unexpected error", cause),
          jsonResponse({ detail: "Internal Server Error" }, 500)
        )
      })
    )
    const app: OpenEnvServer["app"] = HttpGuard.middleware({
      host: options.host ?? "127.0.0.1",
      allowHosts: options.allowHosts,
      corsOrigins: options.corsOrigins,
      apiKey: options.apiKey,
      reject: (refused) => jsonResponse({ detail: refused.message, type: refused.type }, refused.status)
    })(routes)

    const shutdown = Effect.gen(function*() {
      yield* Deferred.succeed(closing, void 0)
      yield* Deferred.succeed(stopping, void 0)
      yield* Effect.forEach([...mcpSessions.keys()], closeMcp, { discard: true })
    })
    yield* Effect.addFinalizer(() => shutdown)
    return { app, sessions: counter, shutdown }
  })

/**
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options, HttpGuard.Limits {
  /** 0 picks a free port. */
  readonly port: number
}

/**
 * A running server.
 *
 * @since 0.1.0
 * @category models
 */
export interface Running {
  /** `http://host:port`, the `base_url` clients use. */
  readonly url: string
  readonly port: number
  readonly sessions: Sessions
  /** Stops accepting connections and ends every session (also run when the scope closes). */
  readonly shutdown: Effect.Effect<void>
}

/**
 * Serves an env until the scope closes. Closing it stops accepting connections, ends every
 * session (`SESSION_ERROR`, close 1001; their envs are closed) and then closes what is left.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: ServeOptions
): Effect.Effect<Running, Env.EnvConfigError | HttpServerError.ServeError, Scope.Scope> =>
  Effect.gen(function*() {
    // The HTTP server lives in an inner scope, closed after the sessions have ended: the platform's
    // WebSocket server (made at the first upgrade, in the HTTP server's scope) waits for its
    // clients when it closes, so the sessions must end first.
    const inner = yield* Scope.fork(yield* Effect.scope, "sequential")
    const server = yield* Scope.provide(make(options), inner)
    const host = options.host ?? "127.0.0.1"
    const node = HttpGuard.createServer(options)
    const http = yield* Scope.provide(
      NodeHttpServer.make(() => node, {
        host,
        port: options.port,
        // (`closeTimeout` is ws's since 8.18, not in its type definitions)
        websocket: {
          // ws's own cap (100 MiB by default) would cut frames below a larger maxFrameBytes
          maxPayload: options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
          // a client that never answers the close handshake is dropped after this, not ws's 30 s
          closeTimeout: Duration.toMillis(Duration.fromInputUnsafe(options.closeTimeout ?? Duration.seconds(5)))
        } as NodeHttpServer.Options["websocket"]
      }),
      inner
    )
    yield* Scope.provide(http.serve(server.app), inner)
    // Stop accepting, end the sessions (their WebSockets close), disconnect the rest.
    const shutdown = yield* Effect.cached(Effect.gen(function*() {
      yield* Effect.sync(() => {
        node.close()
        node.closeIdleConnections()
      })
      yield* server.shutdown
      yield* Effect.sleep("50 millis")
      yield* Effect.sync(() => node.closeAllConnections())
    }))
    yield* Effect.addFinalizer(() => shutdown)
    const port = "port" in http.address ? http.address.port : options.port
    const shown = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shown}:${port}`, port, sessions: server.sessions, shutdown }
  })
