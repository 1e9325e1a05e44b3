/**
 * One served env from create to close, as the OpenEnv server's three front ends use it (a `/ws`
 * session, an MCP session, the stateless HTTP endpoints): reset with kwargs, step with an action,
 * state, close. Failures come back as protocol errors (`code`, `message`, extra fields) that each
 * front end renders its own way.
 *
 * Python parity, by default: a step or state before any reset plays on a fresh env (the Python
 * server creates and resets its env when the session opens); reset kwargs are not type-checked
 * (a `seed` that is not an integer seeds by its text). `requireReset` and `strictReset` are the
 * stricter variants. Each call has `callTimeout`: a call that does not answer ends the session.
 */
import { Cause, Duration, Effect, Exit, Random, Result, Scope, Semaphore } from "effect"
import * as Env from "../../Env.js"
import { errorMessage } from "../../internal/lift.js"
import { isWhole } from "../../internal/whole.js"
import type * as Message from "../../Message.js"
import * as Scheduler from "../../Scheduler.js"
import type * as Tool from "../../Tool.js"
import * as OpenEnvProtocol from "../OpenEnvProtocol.js"

/** The view an env may carry to answer with its own observation JSON and state. */
export interface View {
  readonly observation: () => OpenEnvProtocol.JsonObject
  readonly state: () => OpenEnvProtocol.JsonObject
}

export const viewOf = (env: Env.Env): View | undefined => {
  const candidate = (env as { readonly openenv?: unknown }).openenv
  if (typeof candidate !== "object" || candidate === null) return undefined
  const view = candidate as Record<string, unknown>
  return typeof view.observation === "function" && typeof view.state === "function"
    ? (view as unknown as View)
    : undefined
}

/** A failed call, as the protocol reports it. `fatal`: the session cannot go on. */
export interface Failure {
  readonly code: OpenEnvProtocol.ErrorCode
  readonly message: string
  readonly extra?: OpenEnvProtocol.JsonObject | undefined
  readonly fatal: boolean
}

export interface Settings {
  readonly env: Env.Definition
  readonly baseConfig: Env.EnvConfig
  readonly callTimeout: Duration.Duration
  /** Added to `callTimeout` by the server's own timer (envs that time their own calls). */
  readonly callGrace: Duration.Duration
  readonly requireReset: boolean
  readonly strictReset: boolean
}

/** The observation of an env that has no view of its own: its text, as a single-player game. */
export const genericObservation = (text: string, info: Env.Info, systemPrompt?: string): OpenEnvProtocol.JsonObject => ({
  prompt: text,
  messages: [{ sender_id: -1, content: text, category: "MESSAGE" }],
  current_player_id: 0,
  legal_players: [0],
  info,
  ...(systemPrompt === undefined ? {} : { system_prompt: systemPrompt })
})

const failure = (
  code: OpenEnvProtocol.ErrorCode,
  message: string,
  extra?: OpenEnvProtocol.JsonObject,
  fatal = false
): Failure => ({ code, message, extra, fatal })

const fail = (
  code: OpenEnvProtocol.ErrorCode,
  message: string,
  extra?: OpenEnvProtocol.JsonObject,
  fatal = false
): Effect.Effect<never, Failure> => Effect.fail(failure(code, message, extra, fatal))

export const invalid = (errors: ReadonlyArray<OpenEnvProtocol.ValidationIssue>): Failure =>
  failure("VALIDATION_ERROR", "Invalid message", { errors })

/** A seed of any JSON value, as Python's `random.seed` takes any hashable: by its text (FNV-1a). */
const seedOf = (value: unknown): number => {
  // (a bigint is a long integer as Json.parse keeps it, which JSON.stringify refuses)
  const text = typeof value === "string" ? value : typeof value === "bigint" ? value.toString() : JSON.stringify(value)
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193) >>> 0
  }
  return hash & 0x7fffffff
}

const isNonNegativeInt = (u: unknown): u is number => typeof u === "number" && isWhole(u, 0)

export class Episode {
  private scope: Scope.Closeable | undefined
  private env: Env.Env | undefined
  private view: View | undefined
  /** The conversation so far, built by the gym scheduler's conversation step (Scheduler.opening, withReply, afterStep). */
  private conversation: ReadonlyArray<Message.Message> = []
  private episodeId: string | null = null
  private stepCount = 0
  private closed = false
  /** The tools the env offered at its last reset (none for a text env). */
  tools: ReadonlyArray<Tool.Spec> = []
  /**
   * One call at a time: `POST /mcp` requests on one session may come together, and each step
   * extends the conversation the one before left (five concurrent `tools/call`s all stepped the
   * opening conversation, under one call id, before this).
   */
  private readonly lock = Semaphore.makeUnsafe(1)
  private serial<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> {
    return Semaphore.withPermit(this.lock, effect)
  }

  constructor(readonly settings: Settings) {}

  /** Whether an env is live (a reset, or a step or state that primed one, has run). */
  get started(): boolean {
    return this.env !== undefined
  }

  private timed<A>(phase: string, effect: Effect.Effect<A, Env.EnvError>): Effect.Effect<A, Failure> {
    // A create may first wait for an env worker to start (seconds on a loaded machine); the
    // worker pool times the create itself.
    const limit = phase === "create"
      ? Duration.sum(this.settings.callTimeout, Duration.seconds(60))
      : this.settings.callTimeout
    const stuck = () =>
      failure(
        "SESSION_ERROR",
        `${phase} did not answer within ${Duration.format(limit)}: the session is closed`,
        undefined,
        true
      )
    // (isolated envs are timed by their pool, which tells a late call from one that waited behind
    // another env's: this timer is then only a backstop)
    const backstop = Duration.sum(limit, this.settings.callGrace)
    return effect.pipe(
      Effect.timeoutOrElse({ duration: backstop, orElse: () => Effect.fail("timeout" as const) }),
      Effect.catchCause((cause): Effect.Effect<never, Failure> => {
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const error = Cause.findErrorOption(cause)
        if (error._tag === "Some" && error.value === "timeout") return Effect.fail(stuck())
        if (error._tag === "Some" && error.value instanceof Env.EnvError) {
          const reason = error.value.details?.reason
          if (reason === "Timeout" || reason === "WorkerLost") return Effect.fail(stuck())
          return Effect.fail(failure("EXECUTION_ERROR", error.value.detail))
        }
        const defect = Cause.squash(cause)
        return Effect.fail(failure("EXECUTION_ERROR", defect instanceof Error ? defect.message : String(defect)))
      })
    )
  }

  /** Closes the current env (its scope), if any. */
  readonly closeEnv: Effect.Effect<void> = Effect.suspend(() => {
    const scope = this.scope
    this.scope = undefined
    this.env = undefined
    this.view = undefined
    // A failing close is the env's problem, reported, not the session's.
    return scope === undefined
      ? Effect.void
      : Effect.catchCause(Scope.close(scope, Exit.void), (cause) => Effect.logWarning(errorMessage(Cause.squash(cause))))
  })

  /** Closes for good: later calls fail. */
  readonly close: Effect.Effect<void> = Effect.suspend(() => {
    this.closed = true
    return this.closeEnv
  })

  /** Creates and resets a new env; the previous one is closed first. */
  reset(kwargs: OpenEnvProtocol.JsonObject): Effect.Effect<OpenEnvProtocol.ObservationData, Failure> {
    return this.serial(Effect.gen({ self: this }, function*() {
      if (this.closed) return yield* fail("SESSION_ERROR", "the session is closed", undefined, true)
      const { episode_id: episodeKwarg, seed: seedKwarg, ...overrides } = kwargs
      if (this.settings.strictReset) {
        const issues: Array<OpenEnvProtocol.ValidationIssue> = []
        if (seedKwarg !== undefined && seedKwarg !== null && !isNonNegativeInt(seedKwarg)) {
          issues.push({ type: "int_type", loc: ["seed"], msg: "Input should be a valid integer >= 0", input: seedKwarg })
        }
        if (episodeKwarg !== undefined && episodeKwarg !== null && (typeof episodeKwarg !== "string" || episodeKwarg.length > 255)) {
          issues.push({ type: "string_type", loc: ["episode_id"], msg: "Input should be a valid string of at most 255 characters", input: episodeKwarg })
        }
        if (issues.length > 0) return yield* Effect.fail(invalid(issues))
      }
      const config: Env.EnvConfig = { ...this.settings.baseConfig, ...overrides }
      const prepared = this.settings.env.prepare(config)
      if (Result.isFailure(prepared)) {
        const path = prepared.failure.path.split(".").slice(1)
        return yield* Effect.fail(invalid([{
          type: "value_error",
          loc: path,
          msg: prepared.failure.reason,
          input: path.length > 0 ? config[path[0]] : config
        }]))
      }
      const seed = seedKwarg === undefined || seedKwarg === null
        ? yield* Random.nextIntBetween(0, 2 ** 31 - 1, { halfOpen: true })
        : isNonNegativeInt(seedKwarg)
        ? seedKwarg
        : seedOf(seedKwarg)
      const episodeId = episodeKwarg === undefined || episodeKwarg === null
        ? crypto.randomUUID()
        : typeof episodeKwarg === "string"
        ? episodeKwarg
        : JSON.stringify(episodeKwarg)
      yield* this.start(prepared.success, config, { ...kwargs, env_config: config }, seed, episodeId)
      return { observation: this.lastObservation!, reward: 0, done: false }
    }))
  }

  private lastObservation: OpenEnvProtocol.JsonObject | undefined

  private start(
    create: Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>,
    config: Env.EnvConfig,
    dataDict: Readonly<Record<string, unknown>>,
    seed: number,
    episodeId: string | null
  ): Effect.Effect<void, Failure> {
    return Effect.gen({ self: this }, function*() {
      yield* this.closeEnv
      const scope = yield* Scope.make()
      this.scope = scope
      const created = yield* Effect.result(this.timed("create", Scope.provide(create, scope)))
      if (Result.isFailure(created)) {
        yield* this.closeEnv
        const error = created.failure
        if (error.code !== "EXECUTION_ERROR") return yield* Effect.fail(error)
        return yield* fail(
          "FACTORY_ERROR",
          `Environment factory '${this.settings.env.name}' failed to create instance.`,
          { factory_name: this.settings.env.name, detail: error.message },
          true
        )
      }
      const live = created.success
      this.stepCount = 0
      this.episodeId = episodeId
      const out = yield* this.timed(
        "reset",
        live.reset({ trajectoryId: episodeId ?? crypto.randomUUID(), seed, messages: [], dataDict, envConfig: config })
      )
      if (typeof out?.observation !== "string") {
        return yield* fail("EXECUTION_ERROR", "reset gave no text observation")
      }
      this.env = live
      this.view = viewOf(live)
      this.tools = Array.isArray(out.tools) ? out.tools : []
      const systemPrompt = out.systemPrompt ?? undefined
      this.conversation = Scheduler.opening({ observation: out.observation, systemPrompt })
      this.lastObservation = this.view?.observation() ??
        genericObservation(out.observation, out.info ?? {}, systemPrompt || undefined)
    })
  }

  /** Before any reset: a fresh env, reset as the Python server's constructor does (no episode id). */
  private prime(what: "step" | "state"): Effect.Effect<void, Failure> {
    return Effect.gen({ self: this }, function*() {
      if (this.closed) return yield* fail("SESSION_ERROR", "the session is closed", undefined, true)
      if (this.env !== undefined) return
      if (this.settings.requireReset) {
        return yield* fail("EXECUTION_ERROR", `no episode: send reset before ${what}`)
      }
      const prepared = this.settings.env.prepare(this.settings.baseConfig)
      if (Result.isFailure(prepared)) return yield* fail("EXECUTION_ERROR", prepared.failure.message)
      const seed = yield* Random.nextIntBetween(0, 2 ** 31 - 1, { halfOpen: true })
      yield* this.start(prepared.success, this.settings.baseConfig, { env_config: this.settings.baseConfig }, seed, null)
    })
  }

  /** Steps with the model's text (the action's `message`). */
  step(message: string): Effect.Effect<OpenEnvProtocol.ObservationData, Failure> {
    return this.serial(Effect.flatMap(this.prime("step"), () => {
      const live = this.env!
      const messages = Scheduler.withReply(this.conversation, message)
      return Effect.flatMap(this.timed("step", live.step(messages)), (result) => {
        if (typeof result?.observation !== "string" || typeof result.done !== "boolean") {
          return Effect.fail(failure("EXECUTION_ERROR", "step gave no text observation and done flag"))
        }
        this.stepCount++
        this.conversation = Scheduler.afterStep(messages, result.observation, result.done)
        const observation = this.view?.observation() ?? genericObservation(result.observation, result.info ?? {})
        this.lastObservation = observation
        const reward = typeof result.reward === "number" && Number.isFinite(result.reward) ? result.reward : null
        return Effect.succeed({ observation, reward, done: result.done })
      })
    }))
  }

  /**
   * Calls one of the env's own tools (offered at reset): the step of an assistant message that
   * carries the one call; the content of the tool message that answers it, with the step's result.
   */
  callTool(name: string, args: Readonly<Record<string, unknown>>): Effect.Effect<
    { readonly content: string; readonly data: OpenEnvProtocol.ObservationData },
    Failure
  > {
    return this.serial(Effect.flatMap(this.prime("step"), () => {
      const live = this.env!
      const id = `mcp_${this.stepCount + 1}`
      const call: Message.ToolCall = { id, type: "function", function: { name, arguments: JSON.stringify(args) } }
      const messages = Scheduler.withReply(this.conversation, "", [call])
      return Effect.flatMap(this.timed("step", live.step(messages)), (result) => {
        if (typeof result?.observation !== "string" || typeof result.done !== "boolean") {
          return Effect.fail(failure("EXECUTION_ERROR", "step gave no text observation and done flag"))
        }
        const answer = (result.toolMessages ?? []).find((m) => m.tool_call_id === id)
        if (answer === undefined) {
          return Effect.fail(failure("EXECUTION_ERROR", `the env did not answer the call of its tool ${name} with a tool message`))
        }
        this.stepCount++
        this.conversation = Scheduler.afterStep(messages, result.observation, result.done, result.toolMessages)
        const observation = this.view?.observation() ?? genericObservation(result.observation, result.info ?? {})
        this.lastObservation = observation
        const reward = typeof result.reward === "number" && Number.isFinite(result.reward) ? result.reward : null
        return Effect.succeed({ content: answer.content, data: { observation, reward, done: result.done } })
      })
    }))
  }

  /** Opens the episode as the Python server opens a session: an env created and reset, unless `requireReset`. */
  get open(): Effect.Effect<void, Failure> {
    return this.settings.requireReset ? Effect.void : this.serial(this.prime("state"))
  }

  /** `episode_id`, `step_count`, then the env's own state fields (before any reset: an error with `requireReset`). */
  get state(): Effect.Effect<OpenEnvProtocol.StateData, Failure> {
    return Effect.map(
      this.serial(this.prime("state")),
      () => ({ episode_id: this.episodeId, step_count: this.stepCount, ...(this.view?.state() ?? {}) })
    )
  }
}
