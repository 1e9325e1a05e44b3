/**
 * The multi-turn scheduler: the hooks that turn an env (or anything else) into a conversation.
 *
 * Per trajectory a scheduler starts a {@link Session} (the reference's `on_trajectory_start`):
 * it creates the env in the trajectory's scope, resets it and builds the first prompt. Then, per
 * turn, after the model's reply is appended:
 * - `onTurnEnd` (the reference's `on_turn_end`) steps the env: reward, `done`, infos;
 * - `checkFinished` decides when `onTurnEnd` says nothing about `done`;
 * - `step` builds the next turn's messages (appends the observation).
 * The loop itself (max turns, timing, events) lives in `Trajectory` and never changes.
 *
 * Custom schedulers are {@link Definition}s registered by name; {@link extend} builds one on top of
 * another (usually {@link gym}) by overriding hooks per trajectory.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type * as Scope from "effect/Scope"
import * as Env from "./Env.js"
import type { Completion, InferenceError } from "./Inference.js"
import { show } from "./internal/inspect.js"
import { describe, hasTag, liftMaybe } from "./internal/lift.js"
import { isReady } from "./internal/ready.js"
import * as Message from "./Message.js"
import * as RunSpec from "./RunSpec.js"
import type * as Tool from "./Tool.js"

/**
 * @since 0.1.0
 * @category errors
 */
export class SchedulerError extends Schema.TaggedError<SchedulerError>()(
  "SchedulerError",
  {
    scheduler: Schema.String,
    hook: Schema.String,
    detail: Schema.String,
    cause: Schema.optional(Schema.Defect())
  }
) {
  override get message(): string {
    return `scheduler ${this.scheduler}: ${this.hook} failed: ${this.detail}`
  }
}

/**
 * A defect (a bug: a throw or a die) in a hook, an env or a backend, caught at the trajectory's
 * boundary so that it fails that trajectory only.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnexpectedError extends Schema.TaggedError<UnexpectedError>()(
  "UnexpectedError",
  {
    phase: Schema.String,
    detail: Schema.String,
    cause: Schema.optional(Schema.Defect())
  }
) {
  override get message(): string {
    return `unexpected error in ${this.phase}: ${this.detail}`
  }
}

const PHASE_TEXT = {
  reset: "creating and resetting the env",
  model: "the model call",
  step: "the env step",
  reward: "the reward functions",
  close: "closing the env"
} as const

/**
 * A phase of a trajectory took longer than its limit (`limit`: which timeout; `phase`: where the
 * trajectory was). The trajectory ends with this error and its env is closed. Transient: a retry
 * (`--trajectory-retries`) may succeed.
 *
 * @since 0.1.0
 * @category errors
 */
export class Timeout extends Schema.TaggedError<Timeout>()("Timeout", {
  phase: Schema.Literals(["reset", "model", "step", "reward", "close"]),
  limit: Schema.Literals(["reset", "step", "close", "trajectory"]),
  seconds: Schema.Number
}) {
  override get message(): string {
    return this.limit === "trajectory"
      ? `the trajectory took longer than the trajectory timeout (${this.seconds} s), in ${PHASE_TEXT[this.phase]}`
      : `${PHASE_TEXT[this.phase]} took longer than the ${this.limit} timeout (${this.seconds} s)`
  }

  /** Timeouts are transient: the next attempt may be faster. */
  get transient(): boolean {
    return true
  }
}

/**
 * Every way a trajectory can fail.
 *
 * @since 0.1.0
 * @category errors
 */
export type TrajectoryError = Env.EnvError | InferenceError | SchedulerError | UnexpectedError | Timeout

/**
 * One trajectory to run: a dataset row's content, which generation of the row it is, and the env
 * the row selected (already checked against its config).
 *
 * @since 0.1.0
 * @category models
 */
export interface TrajectoryRequest {
  /** `r<row>-g<generation>`, unique within a run. */
  readonly id: string
  readonly row: number
  readonly generation: number
  /** The trajectory's seed (model sampling). */
  readonly seed: number
  /** The row's seed: shared by every generation of the row (env randomness). */
  readonly rowSeed: number
  readonly messages: ReadonlyArray<Message.Message>
  readonly dataDict: Readonly<Record<string, unknown>>
  readonly envConfig: Env.EnvConfig
  /** The selected env; `undefined` for schedulers that bring their own (e.g. remote envs). */
  readonly env: PreparedEnv | undefined
  readonly maxTurns: number
}

/**
 * An env picked by name, with its config checked: `create` makes one instance in a scope.
 *
 * @since 0.1.0
 * @category models
 */
export interface PreparedEnv {
  readonly name: string
  readonly create: Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>
}

/**
 * What the hooks of a turn see.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnContext {
  readonly request: TrajectoryRequest
  /** 1-based. */
  readonly turn: number
  /** The conversation, its last message being the model's reply of this turn. */
  readonly messages: ReadonlyArray<Message.Message>
  readonly completion: Completion
}

/**
 * What `onTurnEnd` reports. `reward` is summed into the trajectory's total; `done`, when present,
 * decides whether the trajectory ends (otherwise `checkFinished` does).
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnResult {
  readonly done?: boolean | undefined
  readonly reward?: number | undefined
  /**
   * The env's observation: the next user message when the trajectory goes on (the final one, when
   * done, is kept in the `Step` event but not appended, as in the reference).
   */
  readonly observation?: string | undefined
  readonly info?: Env.Info | undefined
  /** Merged into the trajectory's `rollout_infos`. */
  readonly rolloutInfos?: Readonly<Record<string, unknown>> | undefined
  /** `tool` messages answering the reply's tool calls: appended before the observation (see {@link afterStep}). */
  readonly toolMessages?: ReadonlyArray<Message.Message> | undefined
}

/**
 * The hooks of one trajectory. State lives in the closure that created it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Session {
  /** The first prompt (system prompt and first observation). */
  readonly messages: ReadonlyArray<Message.Message>
  /** The reset info. */
  readonly info: Env.Info
  /** The tools offered to the model in this trajectory (absent: none). */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
  /** How the model may use them (OpenAI's `tool_choice`). */
  readonly toolChoice?: Tool.Choice | undefined
  readonly onTurnEnd: (context: TurnContext) => Effect.Effect<TurnResult, TrajectoryError>
  readonly checkFinished: (context: TurnContext) => boolean
  /** The messages of the next turn. */
  readonly step: (
    context: TurnContext,
    result: TurnResult
  ) => Effect.Effect<ReadonlyArray<Message.Message>, TrajectoryError>
}

/**
 * A scheduler made for one run: per-run state (connection limits, caches) lives here.
 *
 * @since 0.1.0
 * @category models
 */
export interface Instance {
  readonly name: string
  readonly start: (request: TrajectoryRequest) => Effect.Effect<Session, TrajectoryError, Scope.Scope>
}

/**
 * What a run tells its scheduler.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunOptions {
  /** Scheduler-specific options (`--scheduler-option key=value`, or the server's config). */
  readonly options: Readonly<Record<string, unknown>>
  /**
   * How the run's front end names its settings, for messages about an option: `"fields"` from
   * `Rollout.make` (`schedulerOptions.key`), `"flags"` from the command line and the servers
   * (`--scheduler-option key`, also when absent). See {@link optionName}.
   */
  readonly naming?: RunSpec.Naming | undefined
}

/**
 * The name of the scheduler option `key` as the run's front end spells it: `--scheduler-option
 * key` on the command line, `schedulerOptions.key` in `Rollout.make`'s options.
 *
 * @since 0.4.0
 * @category validation
 */
export const optionName = (run: RunOptions, key: string): string =>
  RunSpec.nameOf(`schedulerOptions.${key}`, run.naming ?? "flags")

/**
 * A scheduler registered under a name. `make` runs once per run, in the run's scope.
 *
 * @since 0.1.0
 * @category models
 */
export interface Definition {
  readonly name: string
  readonly description: string
  /**
   * Envs the scheduler brings (e.g. `openenv`'s): rows may select them by name like registered ones,
   * and rows that name no env (with no `--env`) use the first. Their services are the
   * scheduler's to provide (it builds them per run in `make`).
   */
  readonly envs: ReadonlyArray<Env.Definition<unknown>>
  readonly make: (options: RunOptions) => Effect.Effect<Instance, SchedulerError, Scope.Scope>
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const define = (options: {
  readonly name: string
  readonly description?: string | undefined
  readonly envs?: ReadonlyArray<Env.Definition<unknown>> | undefined
  readonly make: (options: RunOptions) => Effect.Effect<Instance, SchedulerError, Scope.Scope>
}): Definition => ({
  name: options.name,
  description: options.description ?? "",
  envs: options.envs ?? [],
  make: options.make
})

/**
 * The conversation step, written once for every front end that plays an env turn by turn (the
 * trajectory loop and the gym scheduler, EnvCheck's transcripts, the OpenEnv server's sessions):
 * {@link opening} after reset, {@link withReply} before each step (the env is stepped with the
 * whole conversation), {@link afterStep} after it.
 */

/**
 * The first prompt of a conversation: the reset's system prompt (when it has one) and its
 * observation as the first user message.
 *
 * @since 0.1.0
 * @category conversation
 */
export const opening = (reset: {
  readonly observation: string
  readonly systemPrompt?: string | null | undefined
}): Array<Message.Message> =>
  reset.systemPrompt
    ? [Message.system(reset.systemPrompt), Message.user(reset.observation)]
    : [Message.user(reset.observation)]

/**
 * The conversation with the model's reply appended: what the env's `step` receives.
 *
 * @since 0.1.0
 * @category conversation
 */
export const withReply = (
  messages: ReadonlyArray<Message.Message>,
  reply: string,
  toolCalls?: ReadonlyArray<Message.ToolCall> | undefined
): Array<Message.Message> => [...messages, Message.assistant(reply, toolCalls)]

/**
 * The conversation after the env answered: its observation appended as the next user message, unless
 * the episode is done (the final observation is kept in the step's result, not in the conversation,
 * as in the reference). Tool messages (answers to the reply's tool calls) come first; with them, an
 * empty observation adds no user message. When done, neither is appended.
 *
 * @since 0.1.0
 * @category conversation
 */
export const afterStep = (
  messages: ReadonlyArray<Message.Message>,
  observation: string | undefined,
  done: boolean,
  toolMessages?: ReadonlyArray<Message.Message> | undefined
): ReadonlyArray<Message.Message> => {
  if (done) return messages
  if (toolMessages === undefined || toolMessages.length === 0) {
    return observation === undefined ? messages : [...messages, Message.user(observation)]
  }
  return observation === undefined || observation === ""
    ? [...messages, ...toolMessages]
    : [...messages, ...toolMessages, Message.user(observation)]
}

/**
 * The next turn's messages: the turn's messages with its observation (if any) as a user message.
 *
 * @since 0.1.0
 * @category hooks
 */
export const nextMessages = (context: TurnContext, result: TurnResult): ReadonlyArray<Message.Message> =>
  afterStep(context.messages, result.observation, false, result.toolMessages)

/**
 * Appends the observation of a turn as the next user message (the gym scheduler's `step`).
 *
 * @since 0.1.0
 * @category hooks
 */
export const appendObservation = (
  context: TurnContext,
  result: TurnResult
): Effect.Effect<ReadonlyArray<Message.Message>> => Effect.succeed(nextMessages(context, result))

/**
 * The reference's default finish check: stop when the model hit its token limit.
 *
 * @since 0.1.0
 * @category hooks
 */
export const finishedOnLength = (context: TurnContext): boolean => context.completion.finishReason === "length"

const checkStep = (env: string, out: Env.StepResult, reply?: Message.Message): Env.EnvError | undefined => {
  const problem = typeof out !== "object" || out === null
    ? "step returned no result"
    : typeof out.observation !== "string"
    ? `observation must be a string, got ${typeof out.observation}`
    : typeof out.reward !== "number" || !Number.isFinite(out.reward)
    ? `reward must be a finite number, got ${show(out.reward, 80)}`
    : typeof out.done !== "boolean"
    ? `done must be a boolean, got ${typeof out.done}`
    : out.info !== undefined && (typeof out.info !== "object" || out.info === null)
    ? "info must be an object"
    : out.toolMessages !== undefined
    ? toolMessagesProblem(out.toolMessages, reply)
    : undefined
  return problem === undefined ? undefined : new Env.EnvError({ env, phase: "step", detail: problem })
}

/**
 * What is wrong with a step's tool messages: each must be a `tool` message with text content that
 * answers a call of the reply (its `tool_call_id`), at most once.
 */
const toolMessagesProblem = (toolMessages: unknown, reply: Message.Message | undefined): string | undefined => {
  if (!Array.isArray(toolMessages)) return "toolMessages must be an array"
  const ids = new Set((reply?.tool_calls ?? []).map((call) => call.id))
  const answered = new Set<string>()
  for (let i = 0; i < toolMessages.length; i++) {
    const m = toolMessages[i] as Partial<Message.Message> | null
    const where = `toolMessages[${i}]`
    if (typeof m !== "object" || m === null) return `${where} must be a message`
    if (m.role !== "tool") return `${where}.role must be "tool", got ${JSON.stringify(m.role)}`
    if (typeof m.content !== "string") return `${where}.content must be a string`
    if (typeof m.tool_call_id !== "string") return `${where}.tool_call_id must be a string`
    if (!ids.has(m.tool_call_id)) {
      return `${where}.tool_call_id ${JSON.stringify(m.tool_call_id)} answers no call of the reply` +
        (ids.size === 0 ? " (it has none)" : ` (its calls: ${[...ids].join(", ")})`)
    }
    if (answered.has(m.tool_call_id)) return `${where}.tool_call_id ${JSON.stringify(m.tool_call_id)} is answered twice`
    answered.add(m.tool_call_id)
  }
  return undefined
}

const checkReset = (env: string, out: Env.ResetResult): Env.EnvError | undefined => {
  const problem = typeof out !== "object" || out === null
    ? "reset returned no result"
    : typeof out.observation !== "string"
    ? `observation must be a string, got ${typeof out.observation}`
    : out.systemPrompt !== undefined && out.systemPrompt !== null && typeof out.systemPrompt !== "string"
    ? "systemPrompt must be a string"
    : out.info !== undefined && (typeof out.info !== "object" || out.info === null)
    ? "info must be an object"
    : out.tools !== undefined
    ? toolsProblem(out.tools)
    : undefined
  return problem === undefined ? undefined : new Env.EnvError({ env, phase: "reset", detail: problem })
}

/** What is wrong with a reset's tool specs: each needs a name, a description and a JSON Schema object. */
const toolsProblem = (tools: unknown): string | undefined => {
  if (!Array.isArray(tools)) return "tools must be an array"
  const names = new Set<string>()
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i] as Partial<Tool.Spec> | null
    if (typeof t !== "object" || t === null) return `tools[${i}] must be an object`
    if (typeof t.name !== "string" || t.name === "") return `tools[${i}].name must be a non-empty string`
    if (names.has(t.name)) return `tools[${i}].name ${JSON.stringify(t.name)} is offered twice`
    names.add(t.name)
    if (typeof t.description !== "string") return `tools[${i}].description must be a string`
    if (typeof t.parameters !== "object" || t.parameters === null || Array.isArray(t.parameters)) {
      return `tools[${i}].parameters must be a JSON Schema object`
    }
  }
  return undefined
}

const EMPTY_INFO: Env.Info = Object.freeze({})
const GYM_DONE: Readonly<Record<string, unknown>> = Object.freeze({ gym_done: true })
const GYM_NOT_DONE: Readonly<Record<string, unknown>> = Object.freeze({ gym_done: false })

/**
 * Starts a gym session over a live env: reset gives the first prompt; each turn steps the env with
 * the whole conversation, sums rewards, and appends the observation while the env is not done.
 * `rollout_infos` carries `gym_done` (the fold adds `total_reward` and `step_rewards`), as in the
 * reference.
 *
 * @since 0.1.0
 * @category hooks
 */
export const gymSession = (
  envName: string,
  env: Env.Env,
  request: TrajectoryRequest
): Effect.Effect<Session, Env.EnvError> =>
{
  const answer = (out: Env.StepResult, reply: Message.Message | undefined): Effect.Effect<TurnResult, Env.EnvError> => {
    const bad = checkStep(envName, out, reply)
    if (bad !== undefined) return Effect.fail(bad)
    // total_reward and step_rewards are assembled once by the trajectory's fold (copying
    // the step rewards here every turn would make a trajectory quadratic in its turns).
    const result: TurnResult = {
      done: out.done,
      reward: out.reward,
      observation: out.observation,
      info: out.info ?? EMPTY_INFO,
      rolloutInfos: out.done ? GYM_DONE : GYM_NOT_DONE
    }
    return Effect.succeed(
      out.toolMessages === undefined || out.toolMessages.length === 0 ? result : { ...result, toolMessages: out.toolMessages }
    )
  }
  const session = (reset: Env.ResetResult): Effect.Effect<Session, Env.EnvError> => {
    const invalid = checkReset(envName, reset)
    if (invalid !== undefined) return Effect.fail(invalid)
    const session: Session = {
      messages: opening(reset),
      info: reset.info ?? EMPTY_INFO,
      checkFinished: () => false,
      step: appendObservation,
      // An env that answers with a completed Effect is answered at once (the trajectory loop then
      // runs the turn without the fiber runtime).
      onTurnEnd: (context) => {
        const reply = context.messages.at(-1)
        const stepped = env.step(context.messages)
        return isReady(stepped) ? answer(stepped.value, reply) : Effect.flatMap(stepped, (out) => answer(out, reply))
      }
    }
    return Effect.succeed<Session>(
      reset.tools === undefined || reset.tools.length === 0
        ? session
        : { ...session, tools: reset.tools, toolChoice: reset.toolChoice ?? "auto" }
    )
  }
  const reset = env.reset({
    trajectoryId: request.id,
    seed: request.rowSeed,
    messages: request.messages,
    dataDict: request.dataDict,
    envConfig: request.envConfig
  })
  return isReady(reset) ? session(reset.value) : Effect.flatMap(reset, session)
}

/**
 * The built-in gym scheduler (the reference's `gym_scheduler`): the row's env, reset and stepped.
 *
 * @since 0.1.0
 * @category definitions
 */
export const gym: Definition = define({
  name: "gym_scheduler",
  description: "Drives the row's registered env: reset gives the prompt, each reply is stepped (the reference's GYMScheduler)",
  make: (run) =>
    rejectOptions("gym_scheduler", run.options, [], run.naming).pipe(Effect.as<Instance>({
      name: "gym_scheduler",
      start: (request) => {
        const env = request.env
        if (env === undefined) {
          return Effect.fail(
            new SchedulerError({
              scheduler: "gym_scheduler",
              hook: "start",
              detail: "no env selected for this row: pass --env NAME or set env_config.name"
            })
          )
        }
        return Effect.flatMap(env.create, (live) => gymSession(env.name, live, request))
      }
    }))
})

/**
 * Fails with a `SchedulerError` naming the first option a scheduler does not know (a typo must not
 * be ignored silently); `known` are the option names it takes. The option is named as `naming`
 * spells it (pass the run's, {@link RunOptions.naming}; absent: the command line's).
 *
 * @since 0.1.0
 * @category validation
 */
export const rejectOptions = (
  scheduler: string,
  options: Readonly<Record<string, unknown>>,
  known: ReadonlyArray<string>,
  naming?: RunSpec.Naming | undefined
): Effect.Effect<void, SchedulerError> => {
  const unknown = Object.keys(options).find((key) => !known.includes(key))
  if (unknown === undefined) return Effect.void
  return Effect.fail(
    new SchedulerError({
      scheduler,
      hook: "make",
      detail: `${optionName({ options, naming }, unknown)}: unknown option; ${scheduler} takes ${
        known.length === 0 ? "none" : known.join(", ")
      }`
    })
  )
}

/**
 * Per-trajectory overrides for {@link extend}. `base` is the session of the scheduler being
 * extended; keep per-trajectory state in the closure.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionOverrides = (
  base: Session,
  request: TrajectoryRequest
) => Partial<Session> | Effect.Effect<Partial<Session>, TrajectoryError>

/**
 * A scheduler built on another one: same start (env creation and reset), with some hooks replaced
 * per trajectory.
 *
 * @example
 * const doubled = Scheduler.extend(Scheduler.gym, {
 *   name: "doubled",
 *   session: (base) => ({
 *     onTurnEnd: (context) => Effect.map(base.onTurnEnd(context), (r) => ({ ...r, reward: (r.reward ?? 0) * 2 }))
 *   })
 * })
 *
 * @since 0.1.0
 * @category constructors
 */
export const extend = (base: Definition, options: {
  readonly name: string
  readonly description?: string | undefined
  readonly session: SessionOverrides
}): Definition =>
  define({
    name: options.name,
    description: options.description ?? `${base.description} (extended)`,
    envs: base.envs ?? [],
    make: (runOptions) =>
      Effect.map(base.make(runOptions), (instance): Instance => ({
        name: options.name,
        start: (request) =>
          Effect.flatMap(instance.start(request), (session) => {
            const overrides = liftHook(options.name, "session", () => options.session(session, request))
            return Effect.map(overrides, (o) => ({ ...session, ...o }))
          })
      }))
  })

/**
 * Runs a hook written as plain code (value, Promise, Effect or a throw) and types its failures as
 * `SchedulerError` (or keeps them when they are already trajectory errors).
 *
 * @since 0.1.0
 * @category combinators
 */
export const liftHook = <A>(
  scheduler: string,
  hook: string,
  thunk: () => A | PromiseLike<A> | Effect.Effect<A, unknown>
): Effect.Effect<A, TrajectoryError> =>
  liftMaybe(thunk, (cause) =>
    isTrajectoryError(cause) ? cause : new SchedulerError({ scheduler, hook, detail: describe(cause), cause }))

const TRAJECTORY_ERROR_TAGS: ReadonlySet<string> = new Set([
  "EnvError",
  "InferenceError",
  "SchedulerError",
  "UnexpectedError",
  "Timeout"
])

/**
 * Whether a failure may go away on its own, so that running the trajectory again (with a fresh env
 * and the same seed) may succeed: errors that say so with `transient: true` (model transport
 * errors and timeouts, OpenEnv connection and capacity errors, {@link Timeout}), also when wrapped
 * as the `cause` of another error (an `EnvError` around an OpenEnv error).
 *
 * @since 0.1.0
 * @category guards
 */
export const isTransient = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  if ((error as { readonly transient?: unknown }).transient === true) return true
  const cause = (error as { readonly cause?: unknown }).cause
  return typeof cause === "object" && cause !== null && (cause as { readonly transient?: unknown }).transient === true
}

/**
 * @since 0.1.0
 * @category guards
 */
export const isTrajectoryError = (u: unknown): u is TrajectoryError => hasTag(u, TRAJECTORY_ERROR_TAGS)
