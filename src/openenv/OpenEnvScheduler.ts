/**
 * The `openenv` scheduler: trajectories against OpenEnv servers (the reference's
 * `OpenEnvScheduler`), built on the gym scheduler's hooks.
 *
 * Each trajectory opens one OpenEnv session (a WebSocket connection) to its row's
 * `env_config.base_url`, resets it with `env_config.reset_kwargs`, and steps it with each model
 * reply. The session is adapted into the core `Env` contract and driven by `Scheduler.gymSession`,
 * so rewards, `done`, `rollout_infos` and closing behave exactly as for local envs.
 *
 * The session is an env ({@link env}, a `Definition<OpenEnvPool>`): its constructor requires the
 * `OpenEnvPool` service, one concurrency limit per server (per normalized WebSocket URL:
 * `localhost` and `127.0.0.1` are one server) shared by every
 * trajectory of the run (`max_concurrent_envs`, default 4): a trajectory holds its permit from
 * before it connects until its connection is closed, so the server never sees more sessions than
 * the limit from this run. (The reference creates its semaphore per call, which limits nothing.)
 * The scheduler brings that env (rows that name none use it) and builds the pool from its run
 * options; a run with another scheduler provides `OpenEnvPool.layer` instead.
 *
 * Row `env_config`: `base_url` (`http(s)://host:port`, the WebSocket is `ws(s)://host:port/ws`),
 * `reset_kwargs` (an object, default `{}`; `seed` defaults to the row's seed and `episode_id` to the
 * trajectory id), `system_message` (optional system prompt), `mcp_tools` (default `false`; `true`:
 * the server's MCP tools are the model's tools, see below), `mcp_via` (`mcp`, the default, or `step`).
 *
 * With `mcp_tools`, each reset is followed by a `tools/list` on the session: a `{"type":"mcp"}`
 * JSON-RPC frame on its `/ws` connection, which OpenEnv's Python server and `openenv serve` answer
 * with the session's own env, or with `mcp_via: "step"` the `list_tools` / `call_tool` step actions
 * OpenEnv's `MCPToolClient` sends (the Python `MCPEnvironment`'s step, with its reward and done;
 * `openenv serve` does not take them). The listed tools (but `act`, `restart` and OpenEnv's reserved names)
 * are offered to the model for the episode. A reply with tool calls is answered call by call, in
 * order, each a `tools/call` on the same session, under the same permit: one `tool` message per
 * call (`tool_call_id` the call's). A bad call (unknown tool, arguments not a JSON object or over
 * the limit, the server's JSON-RPC error or `isError` result) follows `onBadCall`: a tool message
 * `Error: <reason>: <detail>` (default) or an `EnvError` whose cause is the `ToolError`. A call that
 * does not answer within `tool_timeout_s` or loses the connection ends the session (the protocol
 * cannot skip a late reply), so it is always an `EnvError`. A reply without calls is a text step.
 *
 * Scheduler options (`--scheduler-option key=value`, and `--max-concurrent-envs N`):
 * `max_concurrent_envs` (4), `connect_timeout_s` (10), `reply_timeout_s` (60), `close_timeout_s` (5),
 * `capacity_retries` (0: a full server fails the trajectory; N: reconnect and reset up to N times
 * with exponential backoff from `capacity_backoff_ms`, 500), `connect_retry_budget_s` (60: a
 * connection refused, timed out or lost is retried for this long, as a server restarts),
 * `connect_retries` (at most N of those; default: no limit but the budget), `tool_timeout_s` (30:
 * each MCP tool call).
 *
 * {@link make} builds variants: other `parseAction` / `formatObservation`, and per-trajectory
 * `session` overrides that see the live OpenEnv session (the Sudoku scheduler of the examples is
 * one).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Result, Schema, Scope } from "effect"
import * as Socket from "effect/socket/Socket"
import * as Env from "../Env.js"
import { isRecord } from "../internal/inspect.js"
import * as Issue from "../internal/issue.js"
import * as Tool from "../Tool.js"
import * as McpTools from "./internal/mcpTools.js"
import * as Message from "../Message.js"
import * as Scheduler from "../Scheduler.js"
import * as OpenEnvClient from "./OpenEnvClient.js"
import * as OpenEnvPool from "./OpenEnvPool.js"
import * as Redact from "../internal/redact.js"
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
  let value: unknown
  try {
    value = JSON.parse(body)
  } catch {
    return { message: body }
  }
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
  reset_kwargs: OpenEnvProtocol.JsonObject.pipe(Schema.withDecodingDefaultType(Effect.sync(() => ({})))),
  system_message: Schema.optional(Schema.NullOr(Schema.String)),
  mcp_tools: Schema.Boolean.pipe(Schema.withDecodingDefaultType(Effect.succeed(false))),
  mcp_via: Schema.Literals(["mcp", "step"]).pipe(Schema.withDecodingDefaultType(Effect.succeed("mcp" as const)))
})

/**
 * @since 0.1.0
 * @category models
 */
export type EnvConfig = typeof EnvConfig.Type

const NumberInput = Schema.Union([Schema.Number, Schema.NumberFromString])
const positive = (what: string) =>
  NumberInput.check(Schema.makeFilter((n) => (Number.isFinite(n) && n > 0) || `${what} must be a number > 0`))
const count = (min: number) => NumberInput.check(Schema.makeFilter((n) => isWhole(n, min) || `must be a whole number >= ${min}`))

/**
 * The scheduler's run options.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunOptions = Schema.Struct({
  max_concurrent_envs: count(1).pipe(Schema.withDecodingDefaultType(Effect.succeed(4))),
  connect_timeout_s: positive("a timeout").pipe(Schema.withDecodingDefaultType(Effect.succeed(10))),
  reply_timeout_s: positive("a timeout").pipe(Schema.withDecodingDefaultType(Effect.succeed(60))),
  close_timeout_s: positive("a timeout").pipe(Schema.withDecodingDefaultType(Effect.succeed(5))),
  capacity_retries: count(0).pipe(Schema.withDecodingDefaultType(Effect.succeed(0))),
  capacity_backoff_ms: positive("a backoff").pipe(Schema.withDecodingDefaultType(Effect.succeed(500))),
  connect_retries: Schema.optionalKey(count(0)),
  connect_retry_budget_s: positive("a budget").pipe(Schema.withDecodingDefaultType(Effect.succeed(60))),
  connect_backoff_ms: positive("a backoff").pipe(Schema.withDecodingDefaultType(Effect.succeed(250))),
  orphan_capacity_retries: count(0).pipe(Schema.withDecodingDefaultType(Effect.succeed(20))),
  tool_timeout_s: positive("a timeout").pipe(Schema.withDecodingDefaultType(Effect.succeed(30)))
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
  readonly webSocketConstructor?: Socket.WebSocketConstructor["Service"] | undefined
  /** A bad MCP tool call (rows with `mcp_tools`): a tool message saying what is wrong (default) or an `EnvError`. */
  readonly onBadCall?: "message" | "fail" | undefined
  /** The longest tool-call arguments text sent (default 65,536 characters, as `Tool.toolkit`). */
  readonly maxArgumentsLength?: number | undefined
}

const decodeRunOptions = Schema.decodeUnknownResult(RunOptions, { ...Issue.parseOptions, onExcessProperty: "error" })
const decodeEnvConfig = Schema.decodeUnknownResult(EnvConfig, { ...Issue.parseOptions, onExcessProperty: "ignore" })

const firstIssue = (error: Schema.SchemaError): { readonly path: string; readonly message: string } => {
  const issue = Issue.first(error.issue)
  return { path: issue.path.map(String).join("."), message: issue.message }
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

/** The OpenEnv env's instance: the core contract, and the live session once reset (for scheduler overrides). */
interface OpenEnvInstance extends Env.Env {
  readonly live: () => { readonly session: OpenEnvClient.Session; readonly reset: OpenEnvProtocol.ObservationData; readonly config: EnvConfig } | undefined
}

/**
 * Options of the `openenv` env: its name, and how replies and observations are translated.
 *
 * @since 0.1.0
 * @category models
 */
export interface EnvOptions {
  /** Default `openenv`. */
  readonly name?: string | undefined
  readonly description?: string | undefined
  /** The model's reply to the action object (default {@link parseAction}). */
  readonly parseAction?: ((text: string) => OpenEnvProtocol.JsonObject) | undefined
  /** An observation reply to the next user message (default {@link formatObservation}). */
  readonly formatObservation?: ((reply: OpenEnvProtocol.ObservationData) => string) | undefined
  /** A bad MCP tool call (rows with `mcp_tools`): a tool message saying what is wrong (default) or an `EnvError`. */
  readonly onBadCall?: "message" | "fail" | undefined
  /** The longest tool-call arguments text sent (default 65,536 characters, as `Tool.toolkit`). */
  readonly maxArgumentsLength?: number | undefined
}

/**
 * The `openenv` env: one OpenEnv session (a WebSocket connection) per trajectory, to the row's
 * `env_config.base_url`, reset with `env_config.reset_kwargs` (`seed` defaults to the row's seed,
 * `episode_id` to the trajectory id), stepped with each reply. Its constructor requires the
 * {@link OpenEnvPool.OpenEnvPool} service: the permit of its server is taken before it connects
 * and given back when its trajectory's scope closes, after the connection is closed.
 *
 * @since 0.1.0
 * @category constructors
 */
export const env = (options: EnvOptions = {}): Env.Definition<OpenEnvPool.OpenEnvPool> => {
  const name = options.name ?? "openenv"
  const parse = options.parseAction ?? parseAction
  const format = options.formatObservation ?? formatObservation
  return Env.define({
    name,
    description: options.description ??
      "An OpenEnv server over WebSocket (env_config: base_url, reset_kwargs, system_message); one shared limit per server",
    make: (raw) => Effect.flatMap(OpenEnvPool.OpenEnvPool, (pool) => connect(name, raw, pool, parse, format, options))
  })
}

const connect = (
  name: string,
  raw: Env.EnvConfig,
  pool: OpenEnvPool.Service,
  parse: (text: string) => OpenEnvProtocol.JsonObject,
  format: (reply: OpenEnvProtocol.ObservationData) => string,
  options: EnvOptions
): Effect.Effect<OpenEnvInstance, Env.EnvError, Scope.Scope> =>
  Effect.gen(function*() {
    const createError = (detail: string, cause?: unknown) =>
      new Env.EnvError({ env: name, phase: "create", detail, ...(cause === undefined ? {} : { cause }) })
    const config = decodeEnvConfig(raw)
    if (Result.isFailure(config)) {
      const issue = firstIssue(config.failure)
      return yield* createError(`env_config.${issue.path}: ${issue.message}`)
    }
    const envConfig = config.success
    const url = OpenEnvProtocol.toWebSocketUrl(envConfig.base_url)
    if (url === undefined) {
      return yield* createError(
        `env_config.base_url: ${JSON.stringify(Redact.url(envConfig.base_url))} is not an http(s):// or ws(s):// URL`
      )
    }
    // The permit is held until the trajectory's scope closes, after the session's own finalizer has
    // closed the connection.
    yield* pool.permit(url)
    const scope = yield* Effect.scope
    const toEnvError = (phase: Env.EnvError["phase"]) => (error: OpenEnvProtocol.OpenEnvError) => {
      if (error.reason === "ReplyTimeout") pool.orphaned(url)
      return new Env.EnvError({ env: name, phase, detail: error.message, details: detailsOf(error), cause: error })
    }

    let live: { readonly session: OpenEnvClient.Session; readonly reset: OpenEnvProtocol.ObservationData; readonly config: EnvConfig } | undefined
    /** The MCP tools offered in this episode (rows with `mcp_tools`), once listed. */
    let offered: ReadonlySet<string> | undefined
    /** Whether a tool call's step said done: later calls are answered here, not sent. */
    let ended = false
    const callOptions = (names: ReadonlySet<string>): McpTools.CallOptions => ({
      offered: names,
      via: envConfig.mcp_via,
      timeout: pool.toolTimeout,
      maxArgumentsLength: options.maxArgumentsLength ?? Tool.MAX_ARGUMENTS_LENGTH
    })

    /** The session's MCP tools as the episode's tools (`tools/list` on the session). */
    const listTools = (session: OpenEnvClient.Session): Effect.Effect<ReadonlyArray<Tool.Spec>, Env.EnvError> =>
      McpTools.list(session, envConfig.mcp_via).pipe(
        Effect.mapError(toEnvError("reset")),
        Effect.flatMap((specs) =>
          Result.isSuccess(specs)
            ? Effect.succeed(specs.success)
            : Effect.fail(new Env.EnvError({ env: name, phase: "reset", detail: `env_config.mcp_tools: tools/list: ${specs.failure}` }))
        )
      )

    /**
     * A reply's tool calls, one `tools/call` each, in order. A call that leaves the session unusable
     * (a timeout, a lost connection) fails the step, whatever `onBadCall` says: nothing more can be
     * sent on it.
     */
    const toolStep = (
      session: OpenEnvClient.Session,
      calls: ReadonlyArray<Message.ToolCall>,
      names: ReadonlySet<string>
    ): Effect.Effect<Env.StepResult, Env.EnvError> =>
      Effect.gen(function*() {
        const messages: Array<Message.Message> = []
        const errors: Array<Tool.ToolError> = []
        let reward: number | null = null
        let last: OpenEnvProtocol.ObservationData | undefined
        for (const toolCall of calls) {
          const answered = ended
            ? Effect.fail(new Tool.ToolError({
              tool: toolCall.function.name,
              toolCallId: toolCall.id,
              reason: "Failed",
              detail: "the episode is over: the call was not sent"
            }))
            : McpTools.call(session, toolCall, callOptions(names))
          // a failed call has no step; a call_tool step the server refused has one (its reward counts)
          const out: McpTools.Answer = yield* Effect.catch(answered, (error) => Effect.succeed({ content: "", step: undefined, error }))
          const step = out.step
          if (step !== undefined) {
            last = step
            if (step.reward !== null) reward = (reward ?? 0) + step.reward
            if (step.done) ended = true
          }
          const error = out.error
          if (error === undefined) {
            messages.push(Message.tool(toolCall.id, toolCall.function.name, out.content))
            continue
          }
          const lost = !session.isOpen()
          if (lost && error.reason === "Timeout") pool.orphaned(session.url)
          if (lost || options.onBadCall === "fail") {
            return yield* new Env.EnvError({
              env: name,
              phase: "step",
              detail: lost ? `${error.message} (the session is closed)` : error.message,
              details: { reason: error.reason, tool: error.tool, tool_call_id: error.toolCallId },
              cause: error
            })
          }
          errors.push(error)
          messages.push(Message.tool(toolCall.id, toolCall.function.name, Tool.errorContent(error)))
        }
        const info: Record<string, unknown> = {
          tool_calls: calls.length,
          tool_errors: errors.map((e) => e.reason),
          openenv_reward: reward
        }
        const extra = last?.observation.info
        if (isRecord(extra) && Object.keys(extra).length > 0) info.observation_info = extra
        return { observation: "", reward: reward ?? 0, done: ended, info, toolMessages: messages }
      })

    return {
      live: () => live,
      reset: (reset) =>
        OpenEnvClient.connectAndReset(
          envConfig.base_url,
          { seed: reset.seed, episode_id: reset.trajectoryId, ...envConfig.reset_kwargs },
          { ...pool.client, ...pool.retryFor(url) }
        ).pipe(
          Effect.provideService(Socket.WebSocketConstructor, pool.webSocketConstructor),
          Scope.provide(scope),
          Effect.mapError(toEnvError("reset")),
          Effect.flatMap(({ observation, session }) => {
            live = { session, reset: observation, config: envConfig }
            ended = false
            offered = undefined
            const tools = envConfig.mcp_tools ? listTools(session) : Effect.succeed(undefined)
            return Effect.flatMap(tools, (specs) => {
              if (specs !== undefined) offered = new Set(specs.map((t) => t.name))
              return Effect.map(Env.lift(name, "reset", () => format(observation)), (text): Env.ResetResult => ({
                observation: text,
                info: infoOf(observation),
                systemPrompt: envConfig.system_message ?? undefined,
                ...(specs === undefined ? {} : { tools: specs })
              }))
            })
          })
        ),
      step: (messages) =>
        Effect.suspend(() => {
          const current = live
          if (current === undefined) {
            return Effect.fail(new Env.EnvError({ env: name, phase: "step", detail: "step before reset" }))
          }
          const newest = messages.at(-1)
          const calls = newest?.role === "assistant" ? newest.tool_calls ?? [] : []
          if (offered !== undefined && calls.length > 0) return toolStep(current.session, calls, offered)
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
    } satisfies OpenEnvInstance
  })

/** The pool settings of the scheduler's run options. */
const poolSettings = (
  settings: RunOptions,
  webSocketConstructor: Options["webSocketConstructor"]
): OpenEnvPool.Settings => ({
  maxConcurrentEnvs: settings.max_concurrent_envs,
  connectTimeout: Duration.seconds(settings.connect_timeout_s),
  replyTimeout: Duration.seconds(settings.reply_timeout_s),
  closeTimeout: Duration.seconds(settings.close_timeout_s),
  capacityRetries: settings.capacity_retries,
  capacityBackoff: Duration.millis(settings.capacity_backoff_ms),
  connectRetries: settings.connect_retries,
  connectRetryBudget: Duration.seconds(settings.connect_retry_budget_s),
  connectBackoff: Duration.millis(settings.connect_backoff_ms),
  orphanCapacityRetries: settings.orphan_capacity_retries,
  webSocketConstructor,
  toolTimeout: Duration.seconds(settings.tool_timeout_s)
})

/**
 * An OpenEnv scheduler definition: the gym scheduler over the {@link env} it brings (rows that
 * name no env use it), with an {@link OpenEnvPool.OpenEnvPool} built from its run options for the
 * run and provided to the envs its rows create.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Scheduler.Definition => {
  const name = options.name ?? "openenv"
  const definition = env({
    name: "openenv",
    parseAction: options.parseAction,
    formatObservation: options.formatObservation,
    onBadCall: options.onBadCall,
    maxArgumentsLength: options.maxArgumentsLength
  })
  return Scheduler.define({
    name,
    description: options.description ??
      "Drives OpenEnv servers over WebSocket (env_config: base_url, reset_kwargs, system_message); " +
        "one shared limit per server",
    envs: [definition as Env.Definition<unknown>],
    make: (run) =>
      Effect.gen(function*() {
        const decoded = decodeRunOptions({ ...options.defaults, ...run.options })
        if (Result.isFailure(decoded)) {
          const issue = firstIssue(decoded.failure)
          return yield* new Scheduler.SchedulerError({
            scheduler: name,
            hook: "make",
            detail: `${Scheduler.optionName(run, issue.path)}: ${issue.message}`
          })
        }
        // One pool (one limit per server) for the whole run: it lives as long as the run's instance.
        const pool = yield* Effect.mapError(
          OpenEnvPool.make(poolSettings(decoded.success, options.webSocketConstructor)),
          (error) => new Scheduler.SchedulerError({ scheduler: name, hook: "make", detail: error.message })
        )

        const start = (
          request: Scheduler.TrajectoryRequest
        ): Effect.Effect<Scheduler.Session, Scheduler.TrajectoryError, Scope.Scope> =>
          Effect.gen(function*() {
            const selected = request.env
            if (selected === undefined) {
              return yield* new Scheduler.SchedulerError({ scheduler: name, hook: "start", detail: "no env selected for this row" })
            }
            const live = yield* Effect.provideService(
              selected.create as Effect.Effect<Env.Env, Env.EnvError, Scope.Scope | OpenEnvPool.OpenEnvPool>,
              OpenEnvPool.OpenEnvPool,
              pool
            )
            const base = yield* Scheduler.gymSession(selected.name, live, request)
            const overrides = options.session
            const session = "live" in live ? (live as OpenEnvInstance).live() : undefined
            if (overrides === undefined || session === undefined) return base
            const extra = yield* Scheduler.liftHook(name, "session", () =>
              overrides(base, {
                request,
                config: session.config,
                session: session.session,
                reset: session.reset,
                scheduler: name
              }))
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
