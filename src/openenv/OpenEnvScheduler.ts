/**
 * The `openenv` scheduler: trajectories against OpenEnv servers (the reference's
 * `OpenEnvScheduler`), built on the gym scheduler's hooks.
 *
 * Each trajectory opens one OpenEnv session (a WebSocket connection) to its row's
 * `env_config.base_url`, resets it with `env_config.reset_kwargs`, and steps it with each model
 * reply. The session is adapted into the core `Env` contract and driven by `Scheduler.gymSession`,
 * so rewards, `done`, `rollout_infos` and closing behave exactly as for local envs.
 *
 * One concurrency limit per server (per WebSocket URL), shared by every trajectory of the run
 * (`max_concurrent_envs`, default 4): a trajectory holds its permit from before it connects until
 * its connection is closed, so the server never sees more sessions than the limit from this run.
 * (The reference creates its semaphore per call, which limits nothing.)
 *
 * Row `env_config`: `base_url` (`http(s)://host:port`, the WebSocket is `ws(s)://host:port/ws`),
 * `reset_kwargs` (an object, default `{}`; `seed` defaults to the row's seed and `episode_id` to the
 * trajectory id), `system_message` (optional system prompt).
 *
 * Scheduler options (`--scheduler-option key=value`, and `--max-concurrent-envs N`):
 * `max_concurrent_envs` (4), `connect_timeout_s` (10), `reply_timeout_s` (60), `close_timeout_s` (5),
 * `capacity_retries` (0: a full server fails the trajectory; N: reconnect and reset up to N times
 * with exponential backoff from `capacity_backoff_ms`, 500).
 *
 * {@link make} builds variants: other `parseAction` / `formatObservation`, and per-trajectory
 * `session` overrides that see the live OpenEnv session (the Sudoku scheduler of the examples is
 * one).
 *
 * @since 0.1.0
 */
import * as Socket from "@effect/platform/Socket"
import type { Context } from "effect"
import { Duration, Effect, Either, ParseResult, Schedule, Schema, Scope } from "effect"
import * as Env from "../Env.js"
import { isRecord } from "../internal/inspect.js"
import * as Message from "../Message.js"
import * as Scheduler from "../Scheduler.js"
import * as OpenEnvClient from "./OpenEnvClient.js"
import * as OpenEnvProtocol from "./OpenEnvProtocol.js"
import { isWhole } from "../internal/whole.js"

/**
 * Default `parseAction`: the model's reply as an action object. A ``` code fence is stripped; a
 * JSON object is the action as it is; any other JSON value becomes `{ message: String(value) }`;
 * anything else `{ message: text }`.
 *
 * @since 0.1.0
 * @category hooks
 */
export const parseAction = (text: string): OpenEnvProtocol.JsonObject => {
  let body = text.trim()
  const fenced = /^```[\w-]*[ \t]*\r?\n?([\s\S]*?)\r?\n?[ \t]*```$/.exec(body)
  if (fenced !== null) body = fenced[1].trim()
  const parsed = Either.try(() => JSON.parse(body) as unknown)
  if (Either.isLeft(parsed)) return { message: body }
  const value = parsed.right
  if (isRecord(value)) return value
  return { message: typeof value === "string" ? value : JSON.stringify(value) }
}

/**
 * Default `formatObservation`: the observation object as JSON text.
 *
 * @since 0.1.0
 * @category hooks
 */
export const formatObservation = (reply: OpenEnvProtocol.ObservationData): string => JSON.stringify(reply.observation)

/**
 * A row's `env_config` for an OpenEnv server.
 *
 * @since 0.1.0
 * @category schemas
 */
export const EnvConfig = Schema.Struct({
  base_url: Schema.String,
  reset_kwargs: Schema.optionalWith(OpenEnvProtocol.JsonObject, { default: () => ({}) }),
  system_message: Schema.optional(Schema.NullOr(Schema.String))
})

/**
 * @since 0.1.0
 * @category models
 */
export type EnvConfig = typeof EnvConfig.Type

const NumberInput = Schema.Union(Schema.Number, Schema.NumberFromString)
const positive = (what: string) =>
  NumberInput.pipe(Schema.filter((n) => (Number.isFinite(n) && n > 0) || `${what} must be a number > 0`))
const count = (min: number) =>
  NumberInput.pipe(Schema.filter((n) => isWhole(n, min) || `must be a whole number >= ${min}`))

/**
 * The scheduler's run options.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunOptions = Schema.Struct({
  max_concurrent_envs: Schema.optionalWith(count(1), { default: () => 4 }),
  connect_timeout_s: Schema.optionalWith(positive("a timeout"), { default: () => 10 }),
  reply_timeout_s: Schema.optionalWith(positive("a timeout"), { default: () => 60 }),
  close_timeout_s: Schema.optionalWith(positive("a timeout"), { default: () => 5 }),
  capacity_retries: Schema.optionalWith(count(0), { default: () => 0 }),
  capacity_backoff_ms: Schema.optionalWith(positive("a backoff"), { default: () => 500 }),
  connect_retries: Schema.optionalWith(count(0), { default: () => 5 }),
  connect_backoff_ms: Schema.optionalWith(positive("a backoff"), { default: () => 250 }),
  orphan_capacity_retries: Schema.optionalWith(count(0), { default: () => 20 })
})

/**
 * @since 0.1.0
 * @category models
 */
export type RunOptions = typeof RunOptions.Type

/**
 * What a per-trajectory `session` override sees: the live OpenEnv session (already reset) and the
 * reset reply.
 *
 * @since 0.1.0
 * @category models
 */
export interface Live {
  readonly request: Scheduler.TrajectoryRequest
  readonly config: EnvConfig
  readonly session: OpenEnvClient.Session
  readonly reset: OpenEnvProtocol.ObservationData
  /** The scheduler's name (for errors). */
  readonly scheduler: string
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Default `openenv`. */
  readonly name?: string | undefined
  readonly description?: string | undefined
  /** The model's reply to the action object (default {@link parseAction}). */
  readonly parseAction?: ((text: string) => OpenEnvProtocol.JsonObject) | undefined
  /** An observation reply to the next user message (default {@link formatObservation}). */
  readonly formatObservation?: ((reply: OpenEnvProtocol.ObservationData) => string) | undefined
  /**
   * Per-trajectory hook overrides on top of the gym session over OpenEnv (like
   * `Scheduler.extend`, with the live session at hand).
   */
  readonly session?:
    | ((base: Scheduler.Session, live: Live) =>
      | Partial<Scheduler.Session>
      | Effect.Effect<Partial<Scheduler.Session>, Scheduler.TrajectoryError>)
    | undefined
  /** Defaults for the run options (e.g. another `max_concurrent_envs`). */
  readonly defaults?: Partial<Record<keyof RunOptions, number>> | undefined
  /** The WebSocket implementation (default Node's). */
  readonly webSocketConstructor?: Context.Tag.Service<typeof Socket.WebSocketConstructor> | undefined
}

const decodeRunOptions = ParseResult.decodeUnknownEither(RunOptions, { errors: "first", onExcessProperty: "error" })
const decodeEnvConfig = ParseResult.decodeUnknownEither(EnvConfig, { errors: "first", onExcessProperty: "ignore" })

const firstIssue = (error: ParseResult.ParseIssue): { readonly path: string; readonly message: string } => {
  const issue = ParseResult.ArrayFormatter.formatIssueSync(error)[0]
  return { path: (issue?.path ?? []).map(String).join("."), message: issue?.message ?? "invalid" }
}

/** An OpenEnv failure's facts as the env error's `details` (written to the log as fields). */
const detailsOf = (error: OpenEnvProtocol.OpenEnvError): Record<string, unknown> => {
  const out: Record<string, unknown> = { reason: error.reason, url: error.url }
  if (error.code !== undefined) out.code = error.code
  if (error.activeSessions !== undefined) out.active_sessions = error.activeSessions
  if (error.maxSessions !== undefined) out.max_sessions = error.maxSessions
  if (error.errors !== undefined) out.errors = error.errors
  return out
}

const infoOf = (reply: OpenEnvProtocol.ObservationData): Env.Info => {
  const info: Record<string, unknown> = { openenv_reward: reply.reward }
  const extra = reply.observation.info
  if (typeof extra === "object" && extra !== null && Object.keys(extra).length > 0) info.observation_info = extra
  return info
}

/**
 * An OpenEnv scheduler definition.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Scheduler.Definition => {
  const name = options.name ?? "openenv"
  const parse = options.parseAction ?? parseAction
  const format = options.formatObservation ?? formatObservation
  return Scheduler.define({
    name,
    description: options.description ??
      "Drives OpenEnv servers over WebSocket (env_config: base_url, reset_kwargs, system_message); " +
        "one shared limit per server",
    usesRegistryEnvs: false,
    make: (run) =>
      Effect.gen(function*() {
        const decoded = decodeRunOptions({ ...options.defaults, ...run.options })
        if (Either.isLeft(decoded)) {
          const issue = firstIssue(decoded.left)
          return yield* new Scheduler.SchedulerError({
            scheduler: name,
            hook: "make",
            detail: `--scheduler-option ${issue.path}: ${issue.message}`
          })
        }
        const settings = decoded.right
        const constructor = options.webSocketConstructor ??
          (yield* Effect.provide(Socket.WebSocketConstructor, OpenEnvClient.layerWebSocketConstructor))
        const clientOptions: OpenEnvClient.Options = {
          connectTimeout: Duration.seconds(settings.connect_timeout_s),
          replyTimeout: Duration.seconds(settings.reply_timeout_s),
          closeTimeout: Duration.seconds(settings.close_timeout_s)
        }
        /**
         * Sessions of this run the server may still hold: dropped after a reply timeout (the
         * server, frozen or slow, had not seen the close). A full server is then likely full of
         * them, so CAPACITY_REACHED is retried (up to `orphan_capacity_retries`) while any is recent.
         */
        const orphans = new Map<string, Array<number>>()
        const orphanWindow = 2 * settings.reply_timeout_s * 1000 + 60_000
        const recentOrphans = (url: string) => {
          const now = Date.now()
          const kept = (orphans.get(url) ?? []).filter((at) => now - at < orphanWindow)
          orphans.set(url, kept)
          return kept.length
        }
        /**
         * One connect-and-reset's retry policy: connection failures (refused, reset, lost before
         * the reset's reply: a server restarting) up to `connect_retries`; CAPACITY_REACHED up to
         * `capacity_retries`, or `orphan_capacity_retries` while this run's own dropped sessions may
         * hold the server's slots. Backoff: exponential from the smaller base, jittered, at most 10 s.
         */
        const retryFor = (url: string) => {
          let connectFailures = 0
          let capacityFailures = 0
          const limit = settings.connect_retries + Math.max(settings.capacity_retries, settings.orphan_capacity_retries)
          return {
            retry: Schedule.exponential(Duration.millis(Math.min(settings.connect_backoff_ms, settings.capacity_backoff_ms))).pipe(
              Schedule.either(Schedule.spaced("10 seconds")),
              Schedule.jittered,
              Schedule.intersect(Schedule.recurs(limit))
            ),
            retryWhile: (error: OpenEnvProtocol.OpenEnvError) => {
              if (error.reason === "ConnectFailed" || error.reason === "ConnectTimeout" || error.reason === "ConnectionLost") {
                return ++connectFailures <= settings.connect_retries
              }
              if (error.reason === "CapacityReached") {
                capacityFailures++
                return capacityFailures <= settings.capacity_retries ||
                  (recentOrphans(url) > 0 && capacityFailures <= settings.orphan_capacity_retries)
              }
              return false
            }
          }
        }

        // One limit per server for the whole run: this map lives as long as the run's instance.
        const limits = new Map<string, Effect.Semaphore>()
        const limitFor = (url: string): Effect.Semaphore => {
          let limit = limits.get(url)
          if (limit === undefined) {
            limit = Effect.unsafeMakeSemaphore(settings.max_concurrent_envs)
            limits.set(url, limit)
          }
          return limit
        }

        const start = (
          request: Scheduler.TrajectoryRequest
        ): Effect.Effect<Scheduler.Session, Scheduler.TrajectoryError, Scope.Scope> =>
          Effect.gen(function*() {
            const createError = (detail: string, cause?: unknown) =>
              new Env.EnvError({ env: name, phase: "create", detail, ...(cause === undefined ? {} : { cause }) })
            const config = decodeEnvConfig(request.envConfig)
            if (Either.isLeft(config)) {
              const issue = firstIssue(config.left)
              return yield* createError(`env_config.${issue.path}: ${issue.message}`)
            }
            const envConfig = config.right
            const url = OpenEnvProtocol.toWebSocketUrl(envConfig.base_url)
            if (url === undefined) {
              return yield* createError(
                `env_config.base_url: ${JSON.stringify(envConfig.base_url)} is not an http(s):// or ws(s):// URL`
              )
            }
            // The permit is held until the trajectory's scope closes, after the session's own
            // finalizer has closed the connection. Waiting for it stays interruptible.
            const limit = limitFor(url)
            yield* Effect.uninterruptibleMask((restore) =>
              Effect.zipRight(restore(limit.take(1)), Effect.addFinalizer(() => limit.release(1)))
            )
            const scope = yield* Effect.scope
            const toEnvError = (phase: Env.EnvError["phase"]) => (error: OpenEnvProtocol.OpenEnvError) => {
              if (error.reason === "ReplyTimeout") (orphans.get(url) ?? orphans.set(url, []).get(url)!).push(Date.now())
              return new Env.EnvError({ env: name, phase, detail: error.message, details: detailsOf(error), cause: error })
            }

            let live: { readonly session: OpenEnvClient.Session; readonly reset: OpenEnvProtocol.ObservationData } | undefined
            const env: Env.Env = {
              reset: (reset) =>
                OpenEnvClient.connectAndReset(
                  envConfig.base_url,
                  { seed: reset.seed, episode_id: reset.trajectoryId, ...envConfig.reset_kwargs },
                  { ...clientOptions, ...retryFor(url) }
                ).pipe(
                  Effect.provideService(Socket.WebSocketConstructor, constructor),
                  Scope.extend(scope),
                  Effect.mapError(toEnvError("reset")),
                  Effect.flatMap(({ observation, session }) => {
                    live = { session, reset: observation }
                    return Effect.map(Env.lift(name, "reset", () => format(observation)), (text): Env.ResetResult => ({
                      observation: text,
                      info: infoOf(observation),
                      systemPrompt: envConfig.system_message ?? undefined
                    }))
                  })
                ),
              step: (messages) =>
                Effect.suspend(() => {
                  const current = live
                  if (current === undefined) {
                    return Effect.fail(new Env.EnvError({ env: name, phase: "step", detail: "step before reset" }))
                  }
                  const reply = Message.lastOf(messages, "assistant") ?? ""
                  return Env.lift(name, "step", () => parse(reply)).pipe(
                    Effect.flatMap((action) => Effect.mapError(current.session.step(action), toEnvError("step"))),
                    Effect.flatMap((out) =>
                      Effect.map(Env.lift(name, "step", () => format(out)), (text): Env.StepResult => ({
                        observation: text,
                        reward: out.reward ?? 0,
                        done: out.done,
                        info: infoOf(out)
                      }))
                    )
                  )
                })
            }
            const base = yield* Scheduler.gymSession(name, env, request)
            const overrides = options.session
            if (overrides === undefined || live === undefined) return base
            const session = live.session
            const resetReply = live.reset
            const extra = yield* Scheduler.liftHook(name, "session", () =>
              overrides(base, { request, config: envConfig, session, reset: resetReply, scheduler: name }))
            return { ...base, ...extra }
          })

        return { name, start }
      })
  })
}

/**
 * The built-in `openenv` scheduler.
 *
 * @since 0.1.0
 * @category definitions
 */
export const openenv: Scheduler.Definition = make()
