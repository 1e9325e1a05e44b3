/**
 * The environment contract.
 *
 * An env is created per trajectory from the row's `env_config`, inside a `Scope`: whatever ends
 * the trajectory (done, max_turns, an env or model failure, interruption), the scope closes and the
 * env's `close` runs exactly once.
 *
 * - `reset(request)` gives the first observation (the first user message), an `info` record and an
 *   optional system prompt.
 * - `step(messages)` receives the whole conversation (its last message is the model's newest reply)
 *   and gives the next observation, a reward, `done` and an `info` record.
 *
 * An env may offer tools: `reset` returns their specs (`tools`, per episode). The model's reply
 * then may carry `tool_calls` (OpenAI's format), and `step` may answer them with `toolMessages`
 * (one `tool` message per call, each with its `tool_call_id`; `Tool.toolkit` builds them) instead
 * of, or before, a user observation. Text envs do neither and are unchanged.
 *
 * Envs are registered by name as {@link Definition}s. {@link define} takes an Effect-native
 * constructor; {@link make} and {@link fromClass} adapt plain objects and classes whose methods
 * return values, Promises or Effects, the way Python envs are written.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema, SchemaParser, Scope } from "effect"
import * as Issue from "./internal/issue.js"
import type * as Lift from "./internal/lift.js"
import { describe, hasTag, isPromiseLike, liftMaybe } from "./internal/lift.js"
import { CurrentWaits, type Waits } from "./internal/waits.js"
import type { Message } from "./Message.js"
import type * as Tool from "./Tool.js"

/**
 * A row's `env_config`: a JSON object. `name` (when present) selects the env.
 *
 * @since 0.1.0
 * @category models
 */
export type EnvConfig = Readonly<Record<string, unknown>>

/**
 * Free-form, JSON-serialisable debugging data returned by reset and step. It is kept in the
 * trajectory and written to the completions log.
 *
 * @since 0.1.0
 * @category models
 */
export type Info = Readonly<Record<string, unknown>>

/**
 * What `reset` receives: the dataset row's messages and extra columns (`dataDict`, which holds
 * `env_config` too).
 *
 * @since 0.1.0
 * @category models
 */
export interface ResetRequest {
  readonly trajectoryId: string
  /**
   * The row's seed, derived from the run's seed and the row index: the same for every generation
   * of a row. Envs whose config has no seed of its own use it, so reruns stay reproducible.
   */
  readonly seed: number
  readonly messages: ReadonlyArray<Message>
  readonly dataDict: Readonly<Record<string, unknown>>
  readonly envConfig: EnvConfig
}

/**
 * @since 0.1.0
 * @category models
 */
export interface ResetResult {
  readonly observation: string
  readonly info: Info
  readonly systemPrompt?: string | undefined
  /** The tools offered to the model in this episode (none: a text env). */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
  /** How the model may use them (OpenAI's `tool_choice`; default `auto`). */
  readonly toolChoice?: Tool.Choice | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface StepResult {
  /**
   * The next user message. With `toolMessages`, an empty observation adds no user message (the tool
   * messages answer the reply); a non-empty one follows them.
   */
  readonly observation: string
  readonly reward: number
  readonly done: boolean
  /** Free-form; `is_success` (a boolean, on the last step at least) says whether the episode was solved: see {@link SUCCESS_KEY}. */
  readonly info: Info
  /** `tool` messages answering the reply's `tool_calls` (each with its `tool_call_id`), in order. */
  readonly toolMessages?: ReadonlyArray<Message> | undefined
}

/**
 * The key of a step's `info` that says whether the episode was solved: `true` or `false`, read from
 * the trajectory's last step (the convention of Stable-Baselines3's `Monitor` and Gymnasium-Robotics).
 * A positive reward is not the same thing (Sudoku's shaped reward is positive for a partly filled
 * board); the run's summary and the viewer count `solved` apart from it.
 *
 * @since 0.4.0
 * @category models
 */
export const SUCCESS_KEY = "is_success"

/**
 * What a step's `info` says of success ({@link SUCCESS_KEY}): `undefined` when it says nothing (or
 * something that is not a boolean).
 *
 * @since 0.4.0
 * @category getters
 */
export const successOf = (info: Info | undefined): boolean | undefined => {
  const value = info?.[SUCCESS_KEY]
  return typeof value === "boolean" ? value : undefined
}

/**
 * A live env. Closing is not part of this interface: it is the finalizer of the scope the env was
 * created in.
 *
 * @since 0.1.0
 * @category models
 */
export interface Env {
  readonly reset: (request: ResetRequest) => Effect.Effect<ResetResult, EnvError>
  readonly step: (messages: ReadonlyArray<Message>) => Effect.Effect<StepResult, EnvError>
}

/**
 * @since 0.1.0
 * @category errors
 */
export class EnvError extends Schema.TaggedError<EnvError>()("EnvError", {
  env: Schema.String,
  phase: Schema.Literals(["create", "reset", "step", "close"]),
  detail: Schema.String,
  /**
   * Machine-readable facts about the failure, written to the log with the error: e.g. an OpenEnv
   * server's `code`, `active_sessions`, `max_sessions`; an isolated env's `reason` (`Timeout`,
   * `WorkerLost`).
   */
  details: Schema.optional(Schema.Record(Schema.String, Schema.Unknown)),
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `env ${this.env}: ${this.phase} failed: ${this.detail}`
  }

  /**
   * An isolated env that did not answer in time (`details.reason: "Timeout"`) or whose worker
   * thread was lost (`"WorkerLost"`: another env of that worker blocked it, or the thread died)
   * may well run on a fresh worker: transient, as `Scheduler.Timeout` is (see
   * `Scheduler.isTransient`; an OpenEnv failure says so through its `cause`).
   */
  get transient(): boolean {
    const reason = this.details?.["reason"]
    return reason === "Timeout" || reason === "WorkerLost"
  }
}

/**
 * A row's `env_config` that the env cannot use. `path` is the field, e.g. `env_config.size`.
 *
 * @since 0.1.0
 * @category errors
 */
export class EnvConfigError extends Schema.TaggedError<EnvConfigError>()(
  "EnvConfigError",
  {
    env: Schema.String,
    path: Schema.String,
    reason: Schema.String
  }
) {
  override get message(): string {
    return `${this.path}: ${this.reason} (env ${this.env})`
  }
}

/**
 * An env registered under a name. `prepare` checks a row's `env_config` once (so a bad value is
 * reported with its row before anything runs) and gives the Effect that creates one env; running
 * that Effect twice creates two envs.
 *
 * `R` is what the constructor requires besides the trajectory's `Scope`: services (a connection
 * pool, a sandbox manager) provided as Layers when the run is built (`Rollout.run` requires them
 * in its context). Env instances are per trajectory; services are per run.
 *
 * @since 0.1.0
 * @category models
 */
export interface Definition<R = never> {
  readonly name: string
  readonly description: string
  readonly prepare: (config: EnvConfig) => Result.Result<Effect.Effect<Env, EnvError, Scope.Scope | R>, EnvConfigError>
}

/**
 * The services an env definition's constructor requires.
 *
 * @since 0.1.0
 * @category models
 */
export type Services<D> = D extends Definition<infer R> ? R : never

const configDecoder = <C, I>(name: string, schema: Schema.Codec<C, I> | undefined) => {
  if (schema === undefined) {
    return (config: EnvConfig): Result.Result<C, EnvConfigError> => Result.succeed(config as unknown as C)
  }
  const decode = SchemaParser.decodeUnknownResult(schema, { ...Issue.parseOptions, onExcessProperty: "ignore" })
  return (config: EnvConfig): Result.Result<C, EnvConfigError> =>
    Result.mapError(decode(config), (error) => {
      const issue = Issue.first(error)
      const path = ["env_config", ...issue.path.map(String)].join(".")
      return new EnvConfigError({ env: name, path, reason: issue.message })
    })
}

/**
 * An env from an Effect-native constructor. `config` (optional) is the schema of `env_config`;
 * without it the constructor receives the raw object. The constructor may require services
 * (`R`): the definition is then a `Definition<R>`, and a run of it requires them.
 *
 * @since 0.1.0
 * @category constructors
 */
export const define = <C = EnvConfig, I = C, R = Scope.Scope>(options: {
  readonly name: string
  readonly description?: string | undefined
  readonly config?: Schema.Codec<C, I> | undefined
  readonly make: (config: C) => Effect.Effect<Env, EnvError, R>
}): Definition<Exclude<R, Scope.Scope>> => {
  const decode = configDecoder(options.name, options.config)
  return {
    name: options.name,
    description: options.description ?? "",
    // R is Scope and the services; the services are R without Scope.
    prepare: (config) =>
      // Suspended: a `make` that throws (a plugin's bug) fails its trajectory when it runs, as a
      // throwing `step` does, instead of throwing out of the run's planning and stopping the run.
      Result.map(decode(config), (decoded) =>
        Effect.suspend(() => options.make(decoded)) as Effect.Effect<Env, EnvError, Scope.Scope | Exclude<R, Scope.Scope>>)
  }
}

/**
 * A value, a Promise of it, or an Effect of it: what the methods of a plain-object or class env may
 * return.
 *
 * @since 0.1.0
 * @category models
 */
export type MaybeEffect<A> = Lift.MaybeEffect<A>

/**
 * The methods of a plain-object or class env. Reset may return a `ResetResult` or a Python-style
 * tuple `[observation, info, systemPrompt]`; step a `StepResult` or `[observation, reward, done, info]`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Handlers {
  reset(request: ResetRequest): MaybeEffect<ResetResult | readonly [string, Info?, (string | null)?]>
  step(messages: ReadonlyArray<Message>): MaybeEffect<StepResult | readonly [string, number, boolean, Info?]>
  close?(): MaybeEffect<void>
}

const ENV_ERROR = new Set(["EnvError"])

/**
 * Runs a handler method and lifts whatever it returns (value, Promise, Effect, or a throw) into an
 * Effect failing with `EnvError`.
 *
 * @since 0.1.0
 * @category combinators
 */
export const lift = <A>(
  env: string,
  phase: EnvError["phase"],
  thunk: () => MaybeEffect<A>
): Effect.Effect<A, EnvError> => liftMaybe(thunk, envError(env, phase))

/** {@link lift}, noting in `waits` the time a Promise it returned waited to be taken up. */
const liftTimed = <A>(
  env: string,
  phase: EnvError["phase"],
  thunk: () => MaybeEffect<A>,
  waits: Waits | undefined
): Effect.Effect<A, EnvError> => liftMaybe(thunk, envError(env, phase), waits)

/** A thrown value or failure of user code as the env's `EnvError` (one already is kept). */
const envError = (env: string, phase: EnvError["phase"]) => (cause: unknown): EnvError =>
  hasTag(cause, ENV_ERROR) ? (cause as EnvError) : new EnvError({ env, phase, detail: describe(cause), cause })

const normalizeReset = (out: ResetResult | readonly [string, Info?, (string | null)?]): ResetResult =>
  Array.isArray(out)
    ? { observation: out[0], info: out[1] ?? {}, systemPrompt: out[2] ?? undefined }
    : (out as ResetResult)

const normalizeStep = (out: StepResult | readonly [string, number, boolean, Info?]): StepResult =>
  Array.isArray(out)
    ? { observation: out[0], reward: out[1], done: out[2], info: out[3] ?? {} }
    : (out as StepResult)

/**
 * Adapts live handlers into the contract: the handlers' `close` becomes the scope's finalizer,
 * so it runs exactly once. A failing close makes closing the scope fail (a defect carrying the
 * `EnvError` with phase `close`): in a run, that trajectory's error.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromHandlers = (
  name: string,
  acquire: Effect.Effect<Handlers, EnvError>
): Effect.Effect<Env, EnvError, Scope.Scope> =>
  Effect.flatMap(Effect.zip(Effect.scope, Effect.service(CurrentWaits)), ([scope, waits]) =>
    // acquireRelease without its fiber-ref bookkeeping (restoring the acquiring fiber's refs around
    // the finalizer costs more than a whole env step): the finalizer registered as soon as the
    // handlers are there, without an interruption in between. The acquiring itself can be
    // interrupted (a creation that never ends held every stop, and a reset timeout could not end it).
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(acquire), (handlers) => {
        const problem = notHandlers(handlers)
        if (problem !== undefined) return Effect.fail(new EnvError({ env: name, phase: "create", detail: problem }))
        return Effect.as(
          Scope.addFinalizer(
            scope,
            handlers.close === undefined
              ? Effect.void
              : lift(name, "close", () => handlers.close!()).pipe(
                Effect.catch((error) => Effect.die(error)),
                Effect.asVoid,
                // as acquireRelease's release: a close under way is waited for, not cut
                Effect.uninterruptible
              )
          ),
          adapt(name, handlers, waits)
        )
      })
    ))

/** What is wrong with what a creation gave, when it is not an env's handlers (a `create` that forgot its `return`). */
const notHandlers = (handlers: unknown): string | undefined =>
  typeof handlers !== "object" || handlers === null
    ? `create gave ${handlers === null ? "null" : typeof handlers}, not an env (an object with reset and step methods)`
    : typeof (handlers as Handlers).reset !== "function" || typeof (handlers as Handlers).step !== "function"
    ? `create gave an object without ${typeof (handlers as Handlers).reset !== "function" ? "a reset" : "a step"} method, not an env`
    : undefined

const adapt = (name: string, handlers: Handlers, waits: Waits | undefined): Env => ({
  reset: (request) => Effect.map(liftTimed(name, "reset", () => handlers.reset(request), waits), normalizeReset),
  step: (messages) => Effect.map(liftTimed(name, "step", () => handlers.step(messages), waits), normalizeStep)
})

/**
 * An env from a function that creates a plain object with `reset`, `step` and optional `close`
 * methods (sync, async or Effect).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <C = EnvConfig, I = C>(options: {
  readonly name: string
  readonly description?: string | undefined
  readonly config?: Schema.Codec<C, I> | undefined
  readonly create: (config: C) => MaybeEffect<Handlers>
}): Definition =>
  define({
    name: options.name,
    description: options.description,
    config: options.config,
    make: (config) => fromHandlers(options.name, create(options.name, () => options.create(config)))
  })

/**
 * An env's creation by user code: as {@link lift}, but a Promise of handlers that resolves after
 * the creation was interrupted has its handlers closed as they come (no scope holds them).
 */
const create = (name: string, thunk: () => MaybeEffect<Handlers>): Effect.Effect<Handlers, EnvError> =>
  Effect.suspend(() => {
    let out: MaybeEffect<Handlers>
    try {
      out = thunk()
    } catch (cause) {
      return Effect.fail(envError(name, "create")(cause))
    }
    if (!isPromiseLike(out)) return lift(name, "create", () => out)
    const promise = out as PromiseLike<Handlers>
    return Effect.callback<Handlers, EnvError>((resume) => {
      let interrupted = false
      promise.then(
        (handlers) => {
          if (!interrupted) return resume(Effect.succeed(handlers))
          if (typeof handlers?.close === "function") Effect.runFork(Effect.ignore(lift(name, "close", () => handlers.close!())))
        },
        (cause) => {
          if (!interrupted) resume(Effect.fail(envError(name, "create")(cause)))
        }
      )
      return Effect.sync(() => {
        interrupted = true
      })
    })
  })

/**
 * An env from a class whose constructor takes the config, the way Python envs are written
 * (`class MyEnv { constructor(config) {}; async reset(req) {}; async step(messages) {}; async close() {} }`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromClass = <C = EnvConfig, I = C>(options: {
  readonly name: string
  readonly description?: string | undefined
  readonly config?: Schema.Codec<C, I> | undefined
  readonly class: new(config: C) => Handlers
}): Definition =>
  make({
    name: options.name,
    description: options.description,
    config: options.config,
    create: (config) => new options.class(config)
  })
