/**
 * An OpenEnv-compatible server for any registered env, so Python OpenEnv clients (TRL, ms-swift)
 * can train against envs written in TypeScript.
 *
 * - `GET /ws`: one WebSocket connection is one session with its own env. Frames and error codes are
 *   the protocol's (see `Protocol`). The env is created at each `reset` in its own `Scope` (closing
 *   the previous one) and closed when the connection ends, however it ends. Sessions silent for
 *   `idleTimeout` are ended with a `SESSION_ERROR` frame, so half-open connections do not hold
 *   their slot forever.
 * - Over `maxConcurrentEnvs` sessions the handshake still succeeds; the server then sends an
 *   unsolicited `CAPACITY_REACHED` frame (`active_sessions`, `max_sessions`) and closes with 1000.
 * - `GET /health` (`{"status":"healthy"}`), `GET /metadata`, `GET /schema` (`action`,
 *   `observation`, `state` JSON schemas).
 *
 * Actions are `{"message": "<text>"}` (TextArena's shape, which the Sudoku scheduler and TRL's
 * TextArena client send). The text becomes an assistant message and the env is stepped with the
 * whole conversation, as the gym scheduler does. Observations: an env that carries an OpenEnv view
 * (an `openenv` property with `observation()` and `state()`, as the `sudoku` env does) sends its own
 * JSON; any other env sends TextArena's observation shape built from its text.
 *
 * Built on `@effect/platform`'s `HttpRouter` on `NodeHttpServer`: `HttpServerRequest.upgrade` gives
 * a `Socket` whose writer can send the capacity frame and a close (1000) right after the handshake,
 * which is all the protocol needs, so no raw `ws` server is used.
 *
 * @since 0.1.0
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Socket from "@effect/platform/Socket"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import {
  Cause,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  JSONSchema,
  ParseResult,
  Random,
  Schema,
  Scope
} from "effect"
import * as Http from "node:http"
import * as Env from "../Env.js"
import { isRecord } from "../internal/inspect.js"
import * as Json from "../internal/Json.js"
import * as Message from "../Message.js"
import * as OpenEnvProtocol from "./OpenEnvProtocol.js"
import { errorMessage } from "../internal/lift.js"

/**
 * The structured view an env may carry (as an `openenv` property of the live env) to answer with
 * its own observation JSON and state fields instead of the generic ones built from its text.
 *
 * @since 0.1.0
 * @category models
 */
export interface View {
  /** The observation after the latest reset or step. */
  readonly observation: () => OpenEnvProtocol.JsonObject
  /** Env-specific state fields, sent after `episode_id` and `step_count`. */
  readonly state: () => OpenEnvProtocol.JsonObject
}

const viewOf = (env: Env.Env): View | undefined => {
  const candidate = (env as { readonly openenv?: unknown }).openenv
  if (typeof candidate !== "object" || candidate === null) return undefined
  const view = candidate as Record<string, unknown>
  return typeof view.observation === "function" && typeof view.state === "function"
    ? (view as unknown as View)
    : undefined
}

/**
 * The action of a served env: the model's text.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Action = Schema.Struct({
  message: Schema.String,
  metadata: Schema.optional(OpenEnvProtocol.JsonObject)
})

/**
 * The observation of an env without its own view (TextArena's shape).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Observation = Schema.Struct({
  prompt: Schema.String,
  messages: Schema.Array(Schema.Struct({ sender_id: Schema.Number, content: Schema.String, category: Schema.String })),
  current_player_id: Schema.Number,
  legal_players: Schema.Array(Schema.Number),
  info: OpenEnvProtocol.JsonObject,
  system_prompt: Schema.optional(Schema.String)
})

const StateSchema = Schema.Struct(
  { episode_id: Schema.NullOr(Schema.String), step_count: Schema.Number },
  OpenEnvProtocol.JsonObject
)

/**
 * Live session counts, for tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Sessions {
  /** Sessions holding a slot now. */
  readonly active: number
  /** The most sessions ever active at once. */
  readonly maxSeen: number
  readonly accepted: number
  /** Connections turned away with `CAPACITY_REACHED`. */
  readonly rejected: number
  /** Sessions ended for being idle. */
  readonly reaped: number
  readonly max: number
}

class Counter implements Sessions {
  active = 0
  maxSeen = 0
  accepted = 0
  rejected = 0
  reaped = 0
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
      : Effect.async<string | Uint8Array>((resume) => {
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
  /** Sessions served at once; more get `CAPACITY_REACHED`. */
  readonly maxConcurrentEnvs: number
  /** Sessions with no frame for this long are ended (default 300 s; 0 never ends them). */
  readonly idleTimeout?: Duration.DurationInput | undefined
  /** How long a closing session waits for the client to close the connection (default 5 s). */
  readonly closeTimeout?: Duration.DurationInput | undefined
}

/**
 * The server as an HTTP app, before it is bound to a port.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenEnvServer {
  readonly app: HttpRouter.HttpRouter
  readonly sessions: Sessions
}

const errorFrame = (code: OpenEnvProtocol.ErrorCode, message: string, extra: OpenEnvProtocol.JsonObject = {}) => ({
  type: "error",
  data: { message, code, ...extra }
})

/**
 * Pydantic-style problems from a schema's parse error (the shape Python clients know), in
 * pydantic's order: problems with declared fields first, then extra fields.
 */
const validationIssues = (error: ParseResult.ParseError, input: unknown): Array<OpenEnvProtocol.ValidationIssue> =>
  ParseResult.ArrayFormatter.formatErrorSync(error).map((issue): OpenEnvProtocol.ValidationIssue => {
    const at = (path: ReadonlyArray<PropertyKey>) =>
      path.reduce<unknown>(
        (value, key) =>
          typeof value === "object" && value !== null ? (value as Record<PropertyKey, unknown>)[key] : undefined,
        input
      )
    const loc = issue.path.map((key) => (typeof key === "number" ? key : String(key)))
    switch (issue._tag) {
      case "Missing":
        return { type: "missing", loc, msg: "Field required", input: at(issue.path.slice(0, -1)) }
      case "Unexpected":
        return { type: "extra_forbidden", loc, msg: "Extra inputs are not permitted", input: at(issue.path) }
      default:
        return { type: "type_error", loc, msg: issue.message, input: at(issue.path) }
    }
  }).sort((a, b) => Number(a.type === "extra_forbidden") - Number(b.type === "extra_forbidden"))

const decodeAction = Schema.decodeUnknownEither(Action, { errors: "all", onExcessProperty: "error" })
const decodeReset = Schema.decodeUnknownEither(OpenEnvProtocol.ResetMessage, { errors: "all", onExcessProperty: "ignore" })
const decodeStep = Schema.decodeUnknownEither(OpenEnvProtocol.StepMessage, { errors: "all", onExcessProperty: "ignore" })
const ResetKwargs = Schema.Struct({
  seed: Schema.optional(Schema.NullOr(Schema.Int)),
  episode_id: Schema.optional(Schema.NullOr(Schema.String))
})
const decodeKwargs = Schema.decodeUnknownEither(ResetKwargs, { errors: "all", onExcessProperty: "ignore" })

/** The observation of an env that has no view of its own: its text, as a single-player game. */
const genericObservation = (text: string, info: Env.Info, systemPrompt?: string): OpenEnvProtocol.JsonObject => ({
  prompt: text,
  messages: [{ sender_id: -1, content: text, category: "MESSAGE" }],
  current_player_id: 0,
  legal_players: [0],
  info,
  ...(systemPrompt === undefined ? {} : { system_prompt: systemPrompt })
})

/** The action of a step: `{"message": "..."}`, the usual one, without the schema; anything else with it. */
const actionOf = (data: OpenEnvProtocol.JsonObject): Either.Either<typeof Action.Type, ParseResult.ParseError> => {
  const message = data.message
  if (typeof message === "string") {
    let keys = 0
    for (const key in data) if (Object.hasOwn(data, key)) keys++
    if (keys === 1) return Either.right({ message })
  }
  return decodeAction(data)
}

const pythonName = (value: unknown): string =>
  value === undefined || value === null ? "None" : typeof value === "string" ? value : Json.stringify(value)

/**
 * Builds the server's HTTP app. Fails when the env's config is not valid for it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<OpenEnvServer, Env.EnvConfigError> =>
  Effect.gen(function*() {
    const baseConfig: Env.EnvConfig = options.envConfig ?? {}
    // Fail now, not at the first reset, when the server's own config is wrong.
    yield* options.env.prepare(baseConfig)
    const counter = new Counter(options.maxConcurrentEnvs)
    const idleTimeout = Duration.decode(options.idleTimeout ?? Duration.seconds(300))
    const closeTimeout = Duration.decode(options.closeTimeout ?? Duration.seconds(5))
    const envName = options.env.name
    const clock = yield* Effect.clock

    const session = (socket: Socket.Socket): Effect.Effect<void> =>
      Effect.scoped(Effect.gen(function*() {
        const write = yield* socket.writer
        const frames = new Inbox()
        const ended = yield* Deferred.make<void>()
        yield* socket.runRaw((data) => frames.offer(data)).pipe(
          Effect.exit,
          Effect.zipRight(Deferred.succeed(ended, void 0)),
          Effect.forkScoped
        )
        /** Sends unless the connection is gone (the writer would wait for it forever). */
        const send = (frame: object | Socket.CloseEvent): Effect.Effect<void> =>
          Effect.raceFirst(
            Effect.ignore(write(Socket.isCloseEvent(frame) ? frame : Json.stringify(frame))),
            Deferred.await(ended)
          )
        /**
         * Sends a reply from the frame loop. The loop is raced with the end of the connection, so a
         * write that a closed socket would never take is interrupted with the loop: no race per reply.
         */
        const sendReply = (frame: object): Effect.Effect<void> => Effect.ignore(write(Json.stringify(frame)))
        const finish = (...last: ReadonlyArray<object>) =>
          Effect.gen(function*() {
            for (const frame of last) yield* send(frame)
            yield* send(new Socket.CloseEvent(1000))
            yield* Effect.ignore(Effect.timeout(Deferred.await(ended), closeTimeout))
          })

        if (!counter.tryAcquire()) {
          yield* finish(errorFrame(
            "CAPACITY_REACHED",
            `Server at capacity: ${counter.active}/${counter.max} sessions active. Cannot accept new connections.`,
            { active_sessions: counter.active, max_sessions: counter.max }
          ))
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

        // The env of the current episode lives in its own scope: a reset closes it and opens a new one.
        let envScope: Scope.CloseableScope | undefined
        let env: Env.Env | undefined
        let view: View | undefined
        /**
         * The conversation up to the last step's reply, and the observation that followed it (not
         * yet in `conversation`): each step copies the conversation once, not twice.
         */
        let conversation: ReadonlyArray<Message.Message> = []
        let observed: Message.Message | undefined
        let episodeId: string | null = null
        let stepCount = 0
        const closeEnv = Effect.suspend(() => {
          const scope = envScope
          envScope = undefined
          env = undefined
          view = undefined
          // A failing close is the env's problem, reported, not the session's.
          return scope === undefined
            ? Effect.void
            : Effect.catchAllCause(Scope.close(scope, Exit.void), (cause) => Effect.logWarning(errorMessage(Cause.squash(cause))))
        })
        yield* Effect.addFinalizer(() => closeEnv)

        type Next = "continue" | "close" | "fatal"
        const reply = (frame: object): Effect.Effect<Next> => Effect.as(sendReply(frame), "continue" as const)
        const invalid = (issues: Array<OpenEnvProtocol.ValidationIssue>) =>
          reply(errorFrame("VALIDATION_ERROR", "Invalid message", { errors: issues }))
        const executionError = (detail: string) => reply(errorFrame("EXECUTION_ERROR", `Execution error: ${detail}`))

        const reset = (data: OpenEnvProtocol.JsonObject): Effect.Effect<Next> =>
          Effect.gen(function*() {
            const kwargs = decodeKwargs(data)
            if (Either.isLeft(kwargs)) return yield* invalid(validationIssues(kwargs.left, data))
            const { episode_id: _episode, seed: _seed, ...overrides } = data
            const config: Env.EnvConfig = { ...baseConfig, ...overrides }
            const prepared = options.env.prepare(config)
            if (Either.isLeft(prepared)) {
              const path = prepared.left.path.split(".").slice(1)
              return yield* invalid([{
                type: "value_error",
                loc: path,
                msg: prepared.left.reason,
                input: path.length > 0 ? config[path[0]] : config
              }])
            }
            yield* closeEnv
            const scope = yield* Scope.make()
            envScope = scope
            const created = yield* Effect.either(Scope.extend(prepared.right, scope))
            if (Either.isLeft(created)) {
              yield* closeEnv
              yield* sendReply(errorFrame("FACTORY_ERROR", `Failed to create environment: ${created.left.detail}`))
              return "fatal" as const
            }
            const live = created.right
            const seed = kwargs.right.seed ?? (yield* Random.nextIntBetween(0, 2 ** 31 - 1))
            episodeId = kwargs.right.episode_id ?? crypto.randomUUID()
            stepCount = 0
            const out = yield* Effect.either(live.reset({
              trajectoryId: episodeId,
              seed,
              messages: [],
              dataDict: { ...data, env_config: config },
              envConfig: config
            }))
            if (Either.isLeft(out)) return yield* executionError(out.left.message)
            if (typeof out.right?.observation !== "string") {
              return yield* executionError("reset gave no text observation")
            }
            env = live
            view = viewOf(live)
            const systemPrompt = out.right.systemPrompt ?? undefined
            conversation = systemPrompt ? [Message.system(systemPrompt)] : []
            observed = Message.user(out.right.observation)
            const observation = view?.observation() ??
              genericObservation(out.right.observation, out.right.info ?? {}, systemPrompt || undefined)
            return yield* reply({ type: "observation", data: { observation, reward: 0, done: false } })
          })

        const step = (data: OpenEnvProtocol.JsonObject): Effect.Effect<Next> => {
          const action = actionOf(data)
          if (Either.isLeft(action)) return invalid(validationIssues(action.left, data))
          const live = env
          if (live === undefined) return executionError("no episode: send reset before step")
          const said = Message.assistant(action.right.message)
          const messages = observed === undefined ? [...conversation, said] : [...conversation, observed, said]
          return Effect.matchEffect(live.step(messages), {
            onFailure: (error) => executionError(error.message),
            onSuccess: (result) => {
              if (typeof result?.observation !== "string" || typeof result.done !== "boolean") {
                return executionError("step gave no text observation and done flag")
              }
              stepCount++
              conversation = messages
              observed = result.done ? undefined : Message.user(result.observation)
              const observation = view?.observation() ?? genericObservation(result.observation, result.info ?? {})
              const reward = typeof result.reward === "number" && Number.isFinite(result.reward) ? result.reward : null
              return reply({ type: "observation", data: { observation, reward, done: result.done } })
            }
          })
        }

        const handle = (data: string | Uint8Array): Effect.Effect<Next> => {
          if (typeof data !== "string") {
            return reply(errorFrame("INVALID_JSON", "Invalid JSON: binary frames are not supported"))
          }
          let frame: unknown
          try {
            frame = Json.parse(data)
          } catch (e) {
            return reply(errorFrame("INVALID_JSON", `Invalid JSON: ${errorMessage(e)}`))
          }
          if (!isRecord(frame)) {
            return invalid([{ type: "model_type", loc: [], msg: "Input should be an object", input: frame }])
          }
          const type = frame.type
          switch (type) {
            case "reset": {
              const message = decodeReset(frame)
              return Either.isLeft(message) ? invalid(validationIssues(message.left, frame)) : reset(message.right.data)
            }
            case "step": {
              // the usual frame, {"type":"step","data":{...}}, needs no schema to say so
              const data = frame.data
              if (isRecord(data)) return step(data)
              const message = decodeStep(frame)
              return Either.isLeft(message) ? invalid(validationIssues(message.left, frame)) : step(message.right.data)
            }
            case "state":
              return reply({
                type: "state",
                data: { episode_id: episodeId, step_count: stepCount, ...(view?.state() ?? {}) }
              })
            case "close":
              return Effect.succeed("close")
            default:
              return reply(errorFrame("UNKNOWN_TYPE", `Unknown message type: ${pythonName(type)}`))
          }
        }

        const IDLE = Symbol("idle")
        /** Whether a frame is being handled, and when the last one was (clock millis). */
        let busy = false
        let lastActive = clock.unsafeCurrentTimeMillis()
        // One frame at a time, in arrival order: replies go out in request order.
        // a bug in an env (a failure, a defect, a throw) must not take the server down: it becomes
        // this request's error
        const onDefect = (cause: Cause.Cause<never>): Effect.Effect<Next> =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause)
            : executionError(Cause.pretty(cause).split("\n")[0] ?? "unexpected failure")
        const handled = (next: Next): Effect.Effect<Next> => {
          busy = false
          lastActive = clock.unsafeCurrentTimeMillis()
          return next === "continue" ? loop : Effect.succeed(next)
        }
        const loop: Effect.Effect<Next> = Effect.flatMap(frames.take, (frame) => {
          busy = true
          return Effect.flatMap(Effect.catchAllCause(Effect.suspend(() => handle(frame)), onDefect), handled)
        })
        // One timer per session for idleness, not one per frame: it sleeps until the earliest time
        // the session could have been silent for `idleTimeout` (a whole timeout while a frame is
        // being handled) and looks again.
        const idleMillis = Duration.toMillis(idleTimeout)
        const idle: Effect.Effect<typeof IDLE> = Effect.suspend(() => {
          const wait = busy ? idleMillis : lastActive + idleMillis - clock.unsafeCurrentTimeMillis()
          return wait <= 0 ? Effect.succeed(IDLE) : Effect.zipRight(Effect.sleep(wait), idle)
        })

        const outcome = yield* Effect.raceFirst(
          Effect.as(Deferred.await(ended), "disconnected" as const),
          idleMillis > 0 ? Effect.raceFirst(loop, idle) : loop
        )
        if (outcome === "disconnected") return
        // The slot is free before the close goes out, so a client that waits for the close (as
        // this project's client does) can start its next session without meeting a full server.
        yield* closeEnv
        yield* release
        if (outcome === IDLE) {
          counter.reaped++
          yield* finish(errorFrame(
            "SESSION_ERROR",
            `Session closed after ${Duration.format(idleTimeout)} without a message`
          ))
        } else {
          yield* finish()
        }
      }))

    const ws = Effect.flatMap(
      Effect.either(HttpServerRequest.upgrade),
      (socket): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
        Either.isLeft(socket)
          ? Effect.succeed(HttpServerResponse.text("Expected a WebSocket upgrade", { status: 426 }))
          : Effect.as(session(socket.right), HttpServerResponse.empty())
    )

    const metadata = {
      name: envName,
      description: options.env.description,
      version: "0.1.0",
      max_concurrent_envs: options.maxConcurrentEnvs,
      server: "effect-gym"
    }
    const schemas = {
      action: JSONSchema.make(Action),
      observation: JSONSchema.make(Observation),
      state: JSONSchema.make(StateSchema)
    }
    const app = HttpRouter.empty.pipe(
      HttpRouter.get("/health", Effect.succeed(HttpServerResponse.unsafeJson({ status: "healthy" }))),
      // the live counts are this project's addition (monitoring, tests); Python clients ignore them
      HttpRouter.get(
        "/metadata",
        Effect.sync(() =>
          HttpServerResponse.unsafeJson({
            ...metadata,
            active_sessions: counter.active,
            max_seen_sessions: counter.maxSeen
          })
        )
      ),
      HttpRouter.get("/schema", Effect.succeed(HttpServerResponse.unsafeJson(schemas))),
      HttpRouter.get("/ws", ws)
    )
    return { app, sessions: counter }
  })

/**
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1 (local only). */
  readonly host?: string | undefined
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
}

/**
 * Serves an env until the scope closes (closing interrupts every session, which closes its env).
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: ServeOptions
): Effect.Effect<Running, Env.EnvConfigError | HttpServerError.ServeError, Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* make(options)
    const host = options.host ?? "127.0.0.1"
    const http = yield* NodeHttpServer.make(() => Http.createServer(), { host, port: options.port })
    yield* http.serve(server.app)
    const port = http.address._tag === "TcpAddress" ? http.address.port : options.port
    const shown = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shown}:${port}`, port, sessions: server.sessions }
  })
