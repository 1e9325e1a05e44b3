/**
 * The env developer kit: a conformance checker for envs (the text-env counterpart of Gymnasium's
 * `check_env`), and helpers for property tests.
 *
 * {@link check} runs an env through its contract, with several env_configs, several runs of each and
 * seeded replies, and returns a {@link Report}: which checks passed, and for each failure the
 * env_config, the replies played, a message and the offending output. The checks:
 *
 * - `create`: the env is created from every env_config;
 * - `reset`: reset answers with a text observation and a text or absent system prompt;
 * - `step`: step answers every reply with a text observation, without failing or crashing, and
 *   leaves the conversation it was given alone;
 * - `reward`: rewards are finite numbers; `done`: done is a boolean;
 * - `info`: reset and step infos are JSON objects, and results are not changed after being returned;
 * - `determinism`: the same env_config and replies give the same reset and transcript, run after run;
 * - `step-after-done`: a step after done is answered (a result or a typed error), not a crash;
 * - `close`: the env is closed exactly once on every path (done, max steps, a failed reset or step,
 *   an early exit) and leaves nothing running: no fibers, no open handles;
 * - `timeout`: create, reset and step each answer within the timeout (a hung call is interrupted);
 * - `isolation`: two envs alive at once do not affect each other.
 *
 * The check is deterministic: replies and configs are drawn from `FastCheck` with fixed seeds, runs
 * are sequential, and the report holds no timings.
 *
 * For property tests, {@link transcript} plays replies through an env, and the arbitraries of
 * `Arbitraries` (re-exported here: {@link replies}, {@link config}, ...) generate replies and
 * configs.
 *
 * @since 0.1.0
 */
import {
  Cause,
  Clock,
  Duration,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  FastCheck,
  Fiber,
  FiberId,
  FiberRef,
  HashSet,
  Logger,
  LogLevel,
  Option,
  Schema,
  Scope,
  Supervisor
} from "effect"
import * as Env from "../Env.js"
import { canonical, isRecord, jsonProblem, show, toJsonSafe, truncate, typeName } from "../internal/inspect.js"
import * as Json from "../internal/Json.js"
import { describe } from "../internal/lift.js"
import { mixSeed } from "../internal/seed.js"
import * as Message from "../Message.js"
import * as Builtins from "../Builtins.js"
import * as Registry from "../Registry.js"
import * as Arbitraries from "./Arbitraries.js"

export * from "./Arbitraries.js"

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

/**
 * The checks, in the order they are reported.
 *
 * @since 0.1.0
 * @category models
 */
export const CheckName = Schema.Literal(
  "create",
  "reset",
  "step",
  "reward",
  "done",
  "info",
  "determinism",
  "step-after-done",
  "close",
  "timeout",
  "isolation"
)

/**
 * @since 0.1.0
 * @category models
 */
export type CheckName = typeof CheckName.Type

/**
 * @since 0.1.0
 * @category constants
 */
export const CHECKS: ReadonlyArray<CheckName> = CheckName.literals

/**
 * What each check asserts, in one line.
 *
 * @since 0.1.0
 * @category constants
 */
export const DESCRIPTIONS: Readonly<Record<CheckName, string>> = {
  create: "the env is created from every env_config",
  reset: "reset answers with a text observation and a text or absent system prompt",
  step: "step answers every reply with a text observation, without failing, and leaves the conversation alone",
  reward: "rewards are finite numbers",
  done: "done is a boolean",
  info: "infos are JSON objects (no cycles, functions, NaN or Infinity) and results are not changed later",
  determinism: "the same env_config and replies give the same reset and transcript, run after run",
  "step-after-done": "a step after done is answered (a result or a typed error), not a crash",
  close: "the env is closed exactly once on every path and leaves nothing running",
  timeout: "create, reset and step each answer within the timeout",
  isolation: "two envs alive at once do not affect each other"
}

/**
 * A check that failed for one env_config. `replies` are the replies played up to the failure;
 * `output` is the offending value, rendered.
 *
 * @since 0.1.0
 * @category models
 */
export class Failure extends Schema.Class<Failure>("effect-gym/EnvCheck/Failure")({
  check: CheckName,
  message: Schema.String,
  configIndex: Schema.Number,
  config: Schema.Unknown,
  replies: Schema.Array(Schema.String),
  output: Schema.optional(Schema.String)
}) {}

/**
 * Something questionable that does not fail the check.
 *
 * @since 0.1.0
 * @category models
 */
export class Warning extends Schema.Class<Warning>("effect-gym/EnvCheck/Warning")({
  check: CheckName,
  message: Schema.String,
  configIndex: Schema.Number,
  config: Schema.Unknown
}) {}

/**
 * A check that could not be exercised, and why (e.g. no episode ended done, so stepping after done
 * was never tried).
 *
 * @since 0.1.0
 * @category models
 */
export class Skipped extends Schema.Class<Skipped>("effect-gym/EnvCheck/Skipped")({
  check: CheckName,
  reason: Schema.String
}) {}

/**
 * @since 0.1.0
 * @category models
 */
export class Stats extends Schema.Class<Stats>("effect-gym/EnvCheck/Stats")({
  /** Envs created (each one closed). */
  envs: Schema.Number,
  resets: Schema.Number,
  steps: Schema.Number,
  /** Episodes that ended done, ran to the step limit, or ended with a failure. */
  episodesDone: Schema.Number,
  episodesAtMaxSteps: Schema.Number,
  episodesFailed: Schema.Number,
  /** Finalizers the envs registered in their scopes, and how many ran. */
  finalizersRegistered: Schema.Number,
  finalizersRun: Schema.Number
}) {}

/**
 * The result of {@link check}. `ok` is true when no check failed (skipped checks do not fail).
 *
 * @since 0.1.0
 * @category models
 */
export class Report extends Schema.Class<Report>("effect-gym/EnvCheck/Report")({
  env: Schema.String,
  ok: Schema.Boolean,
  seed: Schema.Number,
  runs: Schema.Number,
  maxSteps: Schema.Number,
  timeout: Schema.String,
  configs: Schema.Array(Schema.Unknown),
  passed: Schema.Array(CheckName),
  failures: Schema.Array(Failure),
  skipped: Schema.Array(Skipped),
  warnings: Schema.Array(Warning),
  stats: Stats
}) {
  /** The failures of one check. */
  failuresOf(check: CheckName): ReadonlyArray<Failure> {
    return this.failures.filter((failure) => failure.check === check)
  }
  /** The checks with at least one failure, in order. */
  get failed(): ReadonlyArray<CheckName> {
    return CHECKS.filter((check) => this.failures.some((failure) => failure.check === check))
  }
}

/**
 * Options of {@link check} that cannot be used.
 *
 * @since 0.1.0
 * @category errors
 */
export class CheckOptionError extends Schema.TaggedError<CheckOptionError>("effect-gym/EnvCheck/CheckOptionError")(
  "CheckOptionError",
  {
    option: Schema.String,
    detail: Schema.String
  }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Where names are looked up (default: the package's built-ins, `Builtins.registry`). */
  readonly registry?: Registry.Registry | undefined
  /**
   * The env_configs to try: a list, or an arbitrary (e.g. {@link config} of a schema) sampled
   * `seeds` times. Without it: `{ seed: 0 }`, `{ seed: 1 }`, ... (`seeds` of them).
   */
  readonly configs?: ReadonlyArray<Env.EnvConfig> | FastCheck.Arbitrary<Env.EnvConfig> | undefined
  /** How many seed configs (or samples of the configs arbitrary) to try. Default 3. */
  readonly seeds?: number | undefined
  /** How many times each env_config is played from a fresh env, to compare. Default 3. */
  readonly runs?: number | undefined
  /**
   * The replies: an arbitrary of one reply, sampled with a seed per env_config (the same replies for
   * every run of a config), or a fixed list played in order (cycled). Default: {@link replyFor} of
   * `actions` when given, else {@link reply}.
   */
  readonly replies?: FastCheck.Arbitrary<string> | ReadonlyArray<string> | undefined
  /** Well-formed actions of the env (strings or patterns), mixed into the default replies. */
  readonly actions?: ReadonlyArray<string | RegExp> | undefined
  /** The longest a create, reset, step or close may take. Default 10 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Steps per episode before it is cut (as max_turns does). Default 16. */
  readonly maxSteps?: number | undefined
  /** The seed of the replies, configs and reset requests. Default 0. */
  readonly seed?: number | undefined
  /**
   * How to list the process's open handles (timers, sockets, ...) to find what an env leaves open
   * after close; `false` turns it off. Default: Node's `process.getActiveResourcesInfo` when
   * present.
   */
  readonly resources?: (() => ReadonlyArray<string>) | false | undefined
}

interface Settings {
  readonly configs: ReadonlyArray<Env.EnvConfig>
  readonly runs: number
  readonly maxSteps: number
  readonly timeout: Duration.Duration
  readonly seed: number
  readonly replies: FastCheck.Arbitrary<string> | ReadonlyArray<string>
  readonly resources: (() => ReadonlyArray<string>) | undefined
}

const positiveInt = (option: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isSafeInteger(value) && value >= 1
    ? Effect.succeed(value)
    : Effect.fail(new CheckOptionError({ option, detail: `must be a whole number >= 1, got ${value}` }))

const nodeResources = (): (() => ReadonlyArray<string>) | undefined => {
  // A global, not an import: the core stays free of Node, and other runtimes simply skip this probe.
  const proc = (globalThis as { process?: { getActiveResourcesInfo?: () => Array<string> } }).process
  const list = proc?.getActiveResourcesInfo
  return typeof list === "function" ? () => list.call(proc) : undefined
}

const CONFIG_SAMPLE_SEED = 0x636f6e66

const settingsOf = (options: Options): Effect.Effect<Settings, CheckOptionError> =>
  Effect.gen(function*() {
    const runs = yield* positiveInt("runs", options.runs, 3)
    const maxSteps = yield* positiveInt("maxSteps", options.maxSteps, 16)
    const count = yield* positiveInt("seeds", options.seeds, 3)
    const seed = options.seed ?? 0
    if (!Number.isSafeInteger(seed)) {
      return yield* new CheckOptionError({ option: "seed", detail: `must be a whole number, got ${seed}` })
    }
    const timeout = Duration.decodeUnknown(options.timeout ?? "10 seconds")
    if (Option.isNone(timeout) || !Duration.greaterThan(timeout.value, Duration.zero)) {
      return yield* new CheckOptionError({ option: "timeout", detail: `must be a positive duration` })
    }
    let configs: ReadonlyArray<Env.EnvConfig>
    if (options.configs === undefined) {
      configs = Array.from({ length: count }, (_, i) => ({ seed: i }))
    } else if (Array.isArray(options.configs)) {
      if (options.seeds !== undefined) {
        const detail = "give a list of configs or a number of seeds, not both"
        return yield* new CheckOptionError({ option: "seeds", detail })
      }
      configs = options.configs as ReadonlyArray<Env.EnvConfig>
    } else {
      configs = FastCheck.sample(options.configs as FastCheck.Arbitrary<Env.EnvConfig>, {
        seed: mixSeed(seed, CONFIG_SAMPLE_SEED),
        numRuns: count
      })
    }
    if (configs.length === 0) return yield* new CheckOptionError({ option: "configs", detail: "no env_config to try" })
    const bad = configs.findIndex((c) => !isRecord(c))
    if (bad >= 0) {
      const detail = `configs[${bad}] must be an object, got ${typeName(configs[bad])}`
      return yield* new CheckOptionError({ option: "configs", detail })
    }
    if (Array.isArray(options.replies) && options.replies.length === 0) {
      return yield* new CheckOptionError({ option: "replies", detail: "no reply to play" })
    }
    const replies = options.replies ??
      (options.actions !== undefined && options.actions.length > 0
        ? Arbitraries.replyFor(options.actions)
        : Arbitraries.reply)
    return {
      configs,
      runs,
      maxSteps,
      timeout: timeout.value,
      seed,
      replies,
      resources: options.resources === false ? undefined : options.resources ?? nodeResources()
    }
  })

// ---------------------------------------------------------------------------------------------
// Outcomes of one call into the env
// ---------------------------------------------------------------------------------------------

type Outcome<A> =
  | { readonly _tag: "Ok"; readonly value: A }
  | { readonly _tag: "Failed"; readonly message: string; readonly error: unknown }
  | { readonly _tag: "Died"; readonly message: string }
  | { readonly _tag: "TimedOut"; readonly interrupted: boolean }

const fromExit = <A, E>(exit: Exit.Exit<A, E>): Outcome<A> => {
  if (Exit.isSuccess(exit)) return { _tag: "Ok", value: exit.value }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { _tag: "Failed", message: describe(failure.value), error: failure.value }
  if (Cause.isInterruptedOnly(exit.cause)) return { _tag: "Died", message: "it interrupted itself" }
  return { _tag: "Died", message: describe(Cause.squash(exit.cause)) }
}

const outcomeText = (outcome: Outcome<unknown> | undefined, snapshot: string | undefined): string => {
  if (outcome === undefined) return "not reached"
  switch (outcome._tag) {
    case "Ok":
      return snapshot ?? "ok"
    case "Failed":
      return `failed: ${outcome.message}`
    case "Died":
      return `crashed: ${outcome.message}`
    case "TimedOut":
      return "timed out"
  }
}

// ---------------------------------------------------------------------------------------------
// Result shapes
// ---------------------------------------------------------------------------------------------

const RESULT_FIELDS = ["observation", "systemPrompt", "reward", "done", "info"] as const

/** Canonical text of each field of a reset or step result, taken when it was returned. */
const fieldsSnapshot = (value: unknown): Readonly<Record<string, string>> | undefined => {
  if (!isRecord(value)) return undefined
  const out: Record<string, string> = {}
  for (const field of RESULT_FIELDS) out[field] = canonical(value[field])
  return out
}

interface ResetProblems {
  readonly reset?: string
  readonly info?: string
}

const resetProblems = (value: unknown): ResetProblems => {
  if (!isRecord(value)) return { reset: `reset returned ${typeName(value)}, not a result object` }
  const problems: { reset?: string; info?: string } = {}
  if (typeof value.observation !== "string") {
    problems.reset = `reset returned a non-text observation (${typeName(value.observation)})`
  } else if (value.systemPrompt !== undefined && value.systemPrompt !== null && typeof value.systemPrompt !== "string") {
    problems.reset = `reset returned a system prompt that is not text (${typeName(value.systemPrompt)})`
  }
  const info = infoProblem("reset info", value.info)
  if (info !== undefined) problems.info = info
  return problems
}

interface StepProblems {
  readonly step?: string
  readonly reward?: string
  readonly done?: string
  readonly info?: string
}

const infoProblem = (what: string, info: unknown): string | undefined => {
  if (info === undefined) return undefined
  if (!isRecord(info)) return `${what} must be an object, got ${typeName(info)}`
  const problem = jsonProblem(info, "info")
  return problem === undefined ? undefined : `${what} is not JSON: ${problem}`
}

const stepProblems = (label: string, value: unknown): StepProblems => {
  if (!isRecord(value)) return { step: `${label} returned ${typeName(value)}, not a result object` }
  const problems: { step?: string; reward?: string; done?: string; info?: string } = {}
  if (typeof value.observation !== "string") {
    problems.step = `${label} returned a non-text observation (${typeName(value.observation)})`
  }
  if (typeof value.reward !== "number" || !Number.isFinite(value.reward)) {
    problems.reward = `${label} returned reward ${show(value.reward)} (${typeName(value.reward)}): ` +
      "a reward must be a finite number"
  }
  if (typeof value.done !== "boolean") {
    problems.done = `${label} returned done ${show(value.done)} (${typeName(value.done)}): done must be a boolean`
  }
  const info = infoProblem(`${label} info`, value.info)
  if (info !== undefined) problems.info = info
  return problems
}

// ---------------------------------------------------------------------------------------------
// One env's lifecycle, instrumented
// ---------------------------------------------------------------------------------------------

interface Scenario {
  readonly index: number
  readonly config: Env.EnvConfig
  readonly replies: ReadonlyArray<string>
  readonly request: Env.ResetRequest
  readonly prepared: Either.Either<Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>, Env.EnvConfigError>
}

interface StepRecord {
  readonly reply: string
  readonly outcome: Outcome<unknown>
  readonly snapshot: Readonly<Record<string, string>> | undefined
  readonly text: string
  readonly mutatedMessages: boolean
}

type EpisodeEnd = "running" | "done" | "max_steps" | "failed" | "malformed"

interface CloseResult {
  readonly outcome: Outcome<void>
  readonly closeLogs: ReadonlyArray<string>
  readonly finalizers: number
  readonly finalizersRun: number
  readonly lateFinalizers: number
  readonly fibers: number
  readonly fibersStopped: boolean
  readonly resources: ReadonlyArray<string>
}

interface FinalizerRecord {
  runs: number
}

const SETTLE_ROUNDS = 10
const SETTLE_INTERVAL = Duration.millis(10)

const countOf = (names: ReadonlyArray<string>): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1)
  return counts
}

/** What is in `after` and not in `before`, as `Timeout ×2`. */
const extraResources = (before: ReadonlyArray<string>, after: ReadonlyArray<string>): Array<string> => {
  const was = countOf(before)
  const out: Array<string> = []
  for (const [name, n] of countOf(after)) {
    const extra = n - (was.get(name) ?? 0)
    if (extra > 0) out.push(extra === 1 ? name : `${name} ×${extra}`)
  }
  return out.sort()
}

interface Context {
  readonly settings: Settings
  readonly definition: Env.Definition
  readonly collector: Collector
}

/**
 * One env from creation to close, each call forked, timed and supervised. The env's scope is a real
 * scope seen through a wrapper that counts the finalizers registered and run; a supervisor records
 * the fibers the env starts, so that the ones still running after close are found (and stopped).
 */
class Lifecycle {
  readonly steps: Array<StepRecord> = []
  readonly finalizers: Array<FinalizerRecord> = []
  created: Outcome<Env.Env> | undefined = undefined
  reset: Outcome<unknown> | undefined = undefined
  resetSnapshot: Readonly<Record<string, string>> | undefined = undefined
  resetText: string | undefined = undefined
  afterDone: { readonly reply: string; readonly outcome: Outcome<unknown> } | undefined = undefined
  end: EpisodeEnd = "running"
  closed: CloseResult | undefined = undefined
  private env: Env.Env | undefined = undefined
  private messages: Array<Message.Message> = []
  private lastError: Exit.Exit<never, unknown> | undefined = undefined
  private lateFinalizers = 0
  private scopeClosed = false
  private readonly tracked: Scope.CloseableScope

  private constructor(
    readonly context: Context,
    readonly scenario: Scenario,
    private readonly scope: Scope.CloseableScope,
    private readonly supervisor: Supervisor.Supervisor<Array<Fiber.RuntimeFiber<unknown, unknown>>>,
    private readonly resourcesBefore: ReadonlyArray<string> | undefined
  ) {
    this.tracked = this.trackScope(scope)
  }

  static make(context: Context, scenario: Scenario, probeResources: boolean): Effect.Effect<Lifecycle> {
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      const supervisor = yield* Supervisor.track
      const resources = probeResources ? sampleResources(context.settings) : undefined
      return new Lifecycle(context, scenario, scope, supervisor, resources)
    })
  }

  /**
   * The scope given to the env: the real one as prototype (effect's `forkIn` reads its state), with
   * `addFinalizer` counting and `fork`/`close` delegating so that the state stays on the real scope.
   */
  private trackScope(real: Scope.CloseableScope): Scope.CloseableScope {
    const tracked = Object.create(real) as Scope.CloseableScope
    Object.defineProperties(tracked, {
      addFinalizer: {
        value: (finalizer: Scope.Scope.Finalizer) =>
          Effect.suspend(() => {
            const record: FinalizerRecord = { runs: 0 }
            this.finalizers.push(record)
            if (this.scopeClosed) this.lateFinalizers++
            return Scope.addFinalizerExit(real, (exit) =>
              Effect.suspend(() => {
                record.runs++
                return finalizer(exit)
              }))
          })
      },
      fork: { value: (strategy: ExecutionStrategy.ExecutionStrategy) => Scope.fork(real, strategy) },
      close: { value: (exit: Exit.Exit<unknown, unknown>) => Scope.close(real, exit) }
    })
    return tracked
  }

  /** Runs one call into the env in its own fiber; a call that outlives the timeout is interrupted. */
  private timed<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<Outcome<A>> {
    const timeout = this.context.settings.timeout
    return Effect.gen(this, function*() {
      const fiber = yield* Effect.fork(Effect.supervised(effect, this.supervisor))
      const exit = yield* awaitWithin(Fiber.await(fiber), timeout)
      if (Option.isSome(exit)) return fromExit(exit.value)
      yield* Fiber.interruptAsFork(fiber, FiberId.none)
      const stopped = yield* awaitWithin(Fiber.await(fiber), timeout)
      return { _tag: "TimedOut", interrupted: Option.isSome(stopped) } as const
    })
  }

  create(): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const prepared = this.scenario.prepared
      if (Either.isLeft(prepared)) {
        this.created = { _tag: "Failed", message: `env_config rejected: ${prepared.left.message}`, error: prepared.left }
      } else {
        this.created = yield* this.timed(Scope.extend(prepared.right, this.tracked))
      }
      if (this.created._tag === "Ok") this.env = this.created.value
      else this.stop(this.created)
    })
  }

  resetEnv(): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const env = this.env
      if (env === undefined || this.end !== "running") return
      this.context.collector.stats.resets++
      const outcome = yield* this.timed(Effect.suspend(() => env.reset(this.scenario.request)))
      this.reset = outcome
      if (outcome._tag !== "Ok") return this.stop(outcome)
      // Taken now: a result the env mutates later must not blur the comparison of runs.
      this.resetSnapshot = fieldsSnapshot(outcome.value)
      this.resetText = canonical(outcome.value)
      const value = outcome.value
      if (resetProblems(value).reset !== undefined || !isRecord(value)) {
        this.end = "malformed"
        return
      }
      if (typeof value.systemPrompt === "string" && value.systemPrompt !== "") {
        this.messages.push(Message.system(value.systemPrompt))
      }
      this.messages.push(Message.user(value.observation as string))
    })
  }

  step(reply: string): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const env = this.env
      if (env === undefined || this.end !== "running" || this.reset?._tag !== "Ok") return
      this.messages.push(Message.assistant(reply))
      const given = this.messages.slice()
      this.context.collector.stats.steps++
      const outcome = yield* this.timed(Effect.suspend(() => env.step(given)))
      const mine = this.messages
      const mutatedMessages = given.length !== mine.length ||
        given.some((m, i) => m !== mine[i] || m.content !== mine[i].content || m.role !== mine[i].role)
      const snapshot = outcome._tag === "Ok" ? fieldsSnapshot(outcome.value) : undefined
      this.steps.push({
        reply,
        outcome,
        snapshot,
        text: outcomeText(outcome, outcome._tag === "Ok" ? canonical(outcome.value) : undefined),
        mutatedMessages
      })
      if (outcome._tag !== "Ok") return this.stop(outcome)
      const value = outcome.value
      const problems = stepProblems("step", value)
      if (problems.step !== undefined || problems.done !== undefined || !isRecord(value)) {
        this.end = "malformed"
        return
      }
      if (value.done === true) {
        this.end = "done"
        return
      }
      this.messages.push(Message.user(value.observation as string))
      if (this.steps.length >= this.context.settings.maxSteps) this.end = "max_steps"
    })
  }

  /** One more step after the env said done (the gym scheduler never does this; other callers may). */
  stepAfterDone(reply: string): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const env = this.env
      if (env === undefined || this.end !== "done") return
      const given = [...this.messages, Message.assistant(reply)]
      this.context.collector.stats.steps++
      const outcome = yield* this.timed(Effect.suspend(() => env.step(given)))
      this.afterDone = { reply, outcome }
    })
  }

  private stop(outcome: Outcome<unknown>): void {
    this.end = "failed"
    this.lastError = outcome._tag === "Failed"
      ? Exit.fail(outcome.error)
      : outcome._tag === "Died"
      ? Exit.die(outcome.message)
      : Exit.interrupt(FiberId.none)
  }

  /**
   * Closes the env's scope (with the exit a trajectory would close it with, or an interruption),
   * then looks for what outlived it: fibers still running, handles still open. Leaked fibers are
   * interrupted so that the check itself leaves nothing behind.
   */
  close(exit?: Exit.Exit<unknown, unknown>): Effect.Effect<CloseResult> {
    return Effect.gen(this, function*() {
      const closeLogs: Array<string> = []
      const capture = Logger.make(({ logLevel, message }) => {
        if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) {
          closeLogs.push(Array.isArray(message) ? message.map((m) => describe(m)).join(" ") : describe(message))
        }
      })
      const closing = Effect.locally(
        Scope.close(this.scope, exit ?? this.lastError ?? Exit.void),
        FiberRef.currentLoggers,
        HashSet.make(capture)
      )
      const outcome = yield* this.timed(closing)
      this.scopeClosed = true
      let fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>> = []
      let resources: ReadonlyArray<string> = []
      // Only the first close failure of a config is reported: later ones need no waiting to confirm.
      const rounds = this.context.collector.hasFailure("close", this.scenario.index) ? 0 : SETTLE_ROUNDS
      for (let round = 0;; round++) {
        fibers = yield* this.supervisor.value
        resources = this.resourcesBefore === undefined
          ? []
          : extraResources(this.resourcesBefore, sampleResources(this.context.settings) ?? this.resourcesBefore)
        if ((fibers.length === 0 && resources.length === 0) || round >= rounds) break
        // Give asynchronous releases (a socket's close callback, an interrupted fiber) time to land.
        yield* Effect.sleep(SETTLE_INTERVAL)
      }
      let fibersStopped = true
      if (fibers.length > 0) {
        for (const fiber of fibers) yield* Fiber.interruptAsFork(fiber, FiberId.none)
        const stopped = yield* awaitWithin(Fiber.awaitAll(fibers), this.context.settings.timeout)
        fibersStopped = Option.isSome(stopped)
      }
      const stats = this.context.collector.stats
      stats.finalizersRegistered += this.finalizers.length
      const finalizersRun = this.finalizers.filter((f) => f.runs > 0).length
      stats.finalizersRun += finalizersRun
      const result: CloseResult = {
        outcome,
        closeLogs,
        finalizers: this.finalizers.length,
        finalizersRun,
        lateFinalizers: this.lateFinalizers,
        fibers: fibers.length,
        fibersStopped,
        resources
      }
      this.closed = result
      return result
    })
  }

  /** The replies played so far (cut for the report). */
  repliesUpTo(steps: number): ReadonlyArray<string> {
    return this.steps.slice(0, steps).map((s) => cut(s.reply))
  }

  /** What the episode looked like, entry by entry, for comparing runs. */
  signature(): ReadonlyArray<{ readonly label: string; readonly text: string; readonly value: unknown }> {
    const entries: Array<{ label: string; text: string; value: unknown }> = [
      { label: "create", text: outcomeText(this.created, this.created?._tag === "Ok" ? "ok" : undefined), value: undefined }
    ]
    if (this.reset !== undefined) {
      const value = this.reset._tag === "Ok" ? this.reset.value : undefined
      entries.push({ label: "reset", text: outcomeText(this.reset, this.resetText), value })
    }
    this.steps.forEach((s, i) =>
      entries.push({ label: `step ${i + 1}`, text: s.text, value: s.outcome._tag === "Ok" ? s.outcome.value : undefined })
    )
    return entries
  }

  get timedOut(): boolean {
    return this.created?._tag === "TimedOut" || this.reset?._tag === "TimedOut" ||
      this.steps.some((s) => s.outcome._tag === "TimedOut") || this.afterDone?.outcome._tag === "TimedOut"
  }
}

/**
 * Waits for a fiber (or an effect) at most `duration`. Unlike `Effect.timeout`, which interrupts
 * its timer in the background, the timer is stopped before this returns: no timer of the check is
 * left pending to blur the next look at the process's open handles.
 */
const awaitWithin = <A>(waited: Effect.Effect<A>, duration: Duration.Duration): Effect.Effect<Option.Option<A>> =>
  Effect.gen(function*() {
    const timer = yield* Effect.fork(Effect.sleep(duration))
    const result = yield* Effect.raceFirst(Effect.map(waited, Option.some), Effect.as(Fiber.await(timer), Option.none()))
    yield* Fiber.interrupt(timer)
    return result
  })

const sampleResources = (settings: Settings): ReadonlyArray<string> | undefined => {
  if (settings.resources === undefined) return undefined
  try {
    return settings.resources()
  } catch {
    return undefined
  }
}

/** A reply as shown in a report. */
const cut = (text: string): string => truncate(text, 300)

// ---------------------------------------------------------------------------------------------
// Collecting results
// ---------------------------------------------------------------------------------------------

class Collector {
  readonly failures: Array<Failure> = []
  readonly warnings: Array<Warning> = []
  readonly exercised = new Set<CheckName>()
  readonly skipReasons = new Map<CheckName, string>()
  readonly stats = {
    envs: 0,
    resets: 0,
    steps: 0,
    episodesDone: 0,
    episodesAtMaxSteps: 0,
    episodesFailed: 0,
    finalizersRegistered: 0,
    finalizersRun: 0
  }
  private readonly seen = new Set<string>()

  ran(check: CheckName): void {
    this.exercised.add(check)
  }

  /** Records a failure; only the first failure of a check per env_config is kept. */
  fail(
    check: CheckName,
    scenario: Scenario,
    message: string,
    replies: ReadonlyArray<string>,
    output?: unknown
  ): void {
    this.exercised.add(check)
    const key = `${check}\u0000${scenario.index}`
    if (this.seen.has(key)) return
    this.seen.add(key)
    this.failures.push(
      new Failure({
        check,
        message,
        configIndex: scenario.index,
        config: toJsonSafe(scenario.config),
        replies,
        ...(output === undefined ? {} : { output: show(output, 300) })
      })
    )
  }

  warn(check: CheckName, scenario: Scenario, message: string): void {
    const key = `warn\u0000${check}\u0000${scenario.index}`
    if (this.seen.has(key)) return
    this.seen.add(key)
    this.warnings.push(new Warning({ check, message, configIndex: scenario.index, config: toJsonSafe(scenario.config) }))
  }

  hasFailure(check: CheckName, index: number): boolean {
    return this.seen.has(`${check}\u0000${index}`)
  }
}

const formatDuration = (duration: Duration.Duration): string => Duration.format(duration)

const CRASHED = "(a defect: a throw or die inside Effect code; fail with EnvError instead)"
const MUTATED = "an object reused and mutated later: return a fresh one"

const hung = (what: string, timeout: string, outcome: { readonly interrupted: boolean }): string =>
  `${what} within ${timeout}; it was ${outcome.interrupted ? "interrupted" : "abandoned (it could not be interrupted)"}`

/**
 * Reports everything one lifecycle shows about the contract (types, infos, failures, timeouts,
 * close). `where` says which episode it was (a run, abandoned, alongside another env).
 */
const inspectLifecycle = (context: Context, lc: Lifecycle, where: string): void => {
  const { collector, settings } = context
  const scenario = lc.scenario
  const timeout = formatDuration(settings.timeout)
  const fail = collector.fail.bind(collector)

  collector.stats.envs++
  const created = lc.created
  if (created !== undefined) {
    collector.ran("create")
    collector.ran("timeout")
    if (created._tag === "Failed") {
      const rejected = isRecord(created.error) && created.error._tag === "EnvConfigError"
      fail("create", scenario, rejected ? created.message : `creating the env failed: ${created.message}`, [])
    } else if (created._tag === "Died") {
      fail("create", scenario, `creating the env crashed: ${created.message} ${CRASHED}`, [])
    } else if (created._tag === "TimedOut") {
      fail("timeout", scenario, hung("creating the env did not finish", timeout, created), [])
    }
  }

  const reset = lc.reset
  if (reset !== undefined) {
    collector.ran("reset")
    if (reset._tag === "Ok") {
      const problems = resetProblems(reset.value)
      collector.ran("info")
      if (problems.reset !== undefined) fail("reset", scenario, problems.reset, [], reset.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, [], reset.value)
      const changed = changedFields(lc.resetSnapshot, fieldsSnapshot(reset.value))
      if (changed !== undefined) {
        const message = `the reset result's ${changed} was changed after it was returned (${MUTATED})`
        fail("info", scenario, message, lc.repliesUpTo(lc.steps.length), reset.value)
      }
    } else if (reset._tag === "Failed") {
      fail("reset", scenario, `reset failed: ${reset.message}`, [])
    } else if (reset._tag === "Died") {
      fail("reset", scenario, `reset crashed: ${reset.message} ${CRASHED}`, [])
    } else {
      fail("timeout", scenario, hung("reset did not answer", timeout, reset), [])
    }
  }

  lc.steps.forEach((s, i) => {
    const label = `step ${i + 1}`
    const replies = lc.repliesUpTo(i + 1)
    collector.ran("step")
    if (s.mutatedMessages) {
      const message = `${label} changed the messages it was given ` +
        "(the conversation belongs to the caller: copy it before changing it)"
      fail("step", scenario, message, replies)
    }
    const outcome = s.outcome
    if (outcome._tag === "Ok") {
      const problems = stepProblems(label, outcome.value)
      collector.ran("reward")
      collector.ran("done")
      collector.ran("info")
      if (problems.step !== undefined) fail("step", scenario, problems.step, replies, outcome.value)
      if (problems.reward !== undefined) fail("reward", scenario, problems.reward, replies, outcome.value)
      if (problems.done !== undefined) fail("done", scenario, problems.done, replies, outcome.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, replies, outcome.value)
      const changed = changedFields(s.snapshot, fieldsSnapshot(outcome.value))
      if (changed !== undefined) {
        const message = `the result of ${label} had its ${changed} changed after it was returned ` +
          `(an object reused and mutated by later steps or close: return a fresh one)`
        fail("info", scenario, message, replies, outcome.value)
      }
    } else if (outcome._tag === "Failed") {
      fail("step", scenario, `${label} failed: ${outcome.message}`, replies)
    } else if (outcome._tag === "Died") {
      fail("step", scenario, `${label} crashed: ${outcome.message} ${CRASHED}`, replies)
    } else {
      fail("timeout", scenario, hung(`${label} did not answer`, timeout, outcome), replies)
    }
  })

  const after = lc.afterDone
  if (after !== undefined) {
    collector.ran("step-after-done")
    const replies = [...lc.repliesUpTo(lc.steps.length), cut(after.reply)]
    const outcome = after.outcome
    if (outcome._tag === "Ok") {
      // Rewards, done and infos after done are held to the same rules as any step's.
      const problems = stepProblems("the step after done", outcome.value)
      if (problems.reward !== undefined) fail("reward", scenario, problems.reward, replies, outcome.value)
      if (problems.done !== undefined) fail("done", scenario, problems.done, replies, outcome.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, replies, outcome.value)
      if (problems.step !== undefined) {
        fail("step-after-done", scenario, problems.step, replies, outcome.value)
      } else if (isRecord(outcome.value) && outcome.value.done === false) {
        collector.warn(
          "step-after-done",
          scenario,
          "a step after done was answered with done=false: the env does not remember that the episode ended " +
            "(the gym scheduler never steps after done; other callers might)"
        )
      }
    } else if (outcome._tag === "Died") {
      fail("step-after-done", scenario, `a step after done crashed: ${outcome.message} ${CRASHED}`, replies)
    } else if (outcome._tag === "TimedOut") {
      fail("step-after-done", scenario, `a step after done did not answer within ${timeout}`, replies)
    }
  }

  const closed = lc.closed
  if (closed !== undefined) {
    collector.ran("close")
    const problem = closeProblem(closed, timeout)
    if (problem !== undefined) {
      fail("close", scenario, `${problem} (${where}, ${endText(lc)})`, lc.repliesUpTo(lc.steps.length))
    }
  }
}

const changedFields = (
  before: Readonly<Record<string, string>> | undefined,
  after: Readonly<Record<string, string>> | undefined
): string | undefined => {
  if (before === undefined || after === undefined) return undefined
  const changed = RESULT_FIELDS.filter((field) => before[field] !== after[field])
  return changed.length === 0 ? undefined : changed.join(" and ")
}

const endText = (lc: Lifecycle): string => {
  if (lc.created === undefined || lc.created._tag !== "Ok") return "after create failed"
  if (lc.reset === undefined) return "right after create"
  if (lc.reset._tag !== "Ok") return "after reset failed"
  switch (lc.end) {
    case "done":
      return `after done at step ${lc.steps.length}`
    case "max_steps":
      return `after ${lc.steps.length} steps without done`
    case "failed":
      return `after step ${lc.steps.length} failed`
    case "malformed":
      return lc.steps.length === 0 ? "after a malformed reset" : `after step ${lc.steps.length} returned a malformed result`
    case "running":
      return lc.steps.length === 0 ? "right after reset" : `after step ${lc.steps.length}`
  }
}

const closeProblem = (closed: CloseResult, timeout: string): string | undefined => {
  const problems: Array<string> = []
  const outcome = closed.outcome
  if (outcome._tag === "TimedOut") {
    const never = closed.finalizers - closed.finalizersRun
    const unrun = never > 0 ? `; ${never} of ${closed.finalizers} finalizers never ran` : ""
    problems.push(`close did not finish within ${timeout}${unrun}`)
  } else if (outcome._tag !== "Ok") {
    problems.push(`close failed: ${outcome.message}`)
  }
  const logged = closed.closeLogs.filter((line) => /close failed/.test(line))
  if (logged.length > 0) problems.push(`close failed: ${logged[0]}`)
  if (closed.lateFinalizers > 0) {
    problems.push(
      `${closed.lateFinalizers} finalizer(s) were registered after the env's scope had closed ` +
        "(work the env started outlived it)"
    )
  }
  if (closed.fibers > 0) {
    problems.push(
      `${closed.fibers} fiber(s) started by the env were still running after its scope closed ` +
        `(a resource acquired outside the scope: use Effect.forkScoped or Effect.acquireRelease)` +
        (closed.fibersStopped ? "" : "; they could not be interrupted")
    )
  }
  if (closed.resources.length > 0) {
    problems.push(
      `the env left open handles after its scope closed: ${closed.resources.join(", ")} ` +
        `(a resource acquired outside the scope, or a close that is skipped on this path)`
    )
  }
  return problems.length === 0 ? undefined : problems.join("; ")
}

/** The first difference between two episodes, in words, or `undefined` when they are the same. */
const difference = (
  a: ReturnType<Lifecycle["signature"]>,
  b: ReturnType<Lifecycle["signature"]>
): { readonly at: number; readonly message: string; readonly output: unknown } | undefined => {
  const n = Math.max(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a[i]
    const y = b[i]
    if (x === undefined || y === undefined) {
      const longer = (x ?? y)!
      return {
        at: i,
        message: `${longer.label} happened in one and not in the other ` +
          `(one episode ${x === undefined ? "ended earlier" : "went on"})`,
        output: undefined
      }
    }
    if (x.text === y.text) continue
    const first = x.value
    const then = y.value
    if (isRecord(first) && isRecord(then)) {
      const field = RESULT_FIELDS.find((f) => canonical(first[f]) !== canonical(then[f]))
      if (field !== undefined) {
        const u = first[field]
        const v = then[field]
        return {
          at: i,
          message: `at ${x.label}, ${field} ${textDifference(u, v)}`,
          output: { first, then }
        }
      }
    }
    return { at: i, message: `at ${x.label}: ${show(x.text, 120)} vs ${show(y.text, 120)}`, output: undefined }
  }
  return undefined
}

/** `"…moved up. Now at row 1…" vs "…moved up. Now at row 2…"`: the two values around their first difference. */
const textDifference = (u: unknown, v: unknown): string => {
  if (typeof u === "string" && typeof v === "string") {
    let i = 0
    while (i < u.length && i < v.length && u[i] === v[i]) i++
    const from = Math.max(0, i - 30)
    const excerpt = (s: string) => `${from > 0 ? "…" : ""}${s.slice(from, i + 30)}${s.length > i + 30 ? "…" : ""}`
    return `${JSON.stringify(excerpt(u))} vs ${JSON.stringify(excerpt(v))}`
  }
  return `${show(u, 120)} vs ${show(v, 120)}`
}

// ---------------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------------

const scenarioOf = (definition: Env.Definition, settings: Settings, config: Env.EnvConfig, index: number): Scenario => {
  // One reply per step, plus one for the step after done.
  const count = settings.maxSteps + 1
  const fixed = Array.isArray(settings.replies) ? (settings.replies as ReadonlyArray<string>) : undefined
  const replies = fixed !== undefined
    ? Array.from({ length: count }, (_, k) => fixed[k % fixed.length])
    : FastCheck.sample(settings.replies as FastCheck.Arbitrary<string>, {
      seed: mixSeed(settings.seed, index),
      numRuns: count
    })
  const request: Env.ResetRequest = {
    trajectoryId: `check-c${index}`,
    seed: mixSeed(settings.seed, index),
    messages: [],
    dataDict: { env_config: config },
    envConfig: config
  }
  return { index, config, replies, request, prepared: definition.prepare(config) }
}

/** Creates, resets, plays the scenario's replies to done or the step limit, and closes. */
const episode = (context: Context, scenario: Scenario, stepAfterDone: boolean) =>
  Effect.gen(function*() {
    const lc = yield* Lifecycle.make(context, scenario, true)
    yield* lc.create()
    yield* lc.resetEnv()
    for (let k = 0; k < context.settings.maxSteps && lc.end === "running"; k++) yield* lc.step(scenario.replies[k])
    if (stepAfterDone) yield* lc.stepAfterDone(scenario.replies[context.settings.maxSteps])
    yield* lc.close()
    const stats = context.collector.stats
    if (lc.end === "done") stats.episodesDone++
    else if (lc.end === "max_steps") stats.episodesAtMaxSteps++
    else stats.episodesFailed++
    return lc
  })

/** An env abandoned right after reset, as when a run is interrupted: its scope closes with an interruption. */
const abandoned = (context: Context, scenario: Scenario) =>
  Effect.gen(function*() {
    const lc = yield* Lifecycle.make(context, scenario, true)
    yield* lc.create()
    yield* lc.resetEnv()
    yield* lc.close(Exit.interrupt(FiberId.none))
    return lc
  })

const checkScenario = (context: Context, scenario: Scenario) =>
  Effect.gen(function*() {
    const { collector, settings } = context
    const runs: Array<Lifecycle> = []
    for (let run = 1; run <= settings.runs; run++) {
      const lc = yield* episode(context, scenario, run === 1)
      inspectLifecycle(context, lc, `run ${run}`)
      runs.push(lc)
    }
    const first = runs[0]
    if (settings.runs > 1 && first.created?._tag === "Ok") {
      collector.ran("determinism")
      const reference = first.signature()
      for (let r = 1; r < runs.length; r++) {
        const diff = difference(reference, runs[r].signature())
        if (diff !== undefined) {
          collector.fail(
            "determinism",
            scenario,
            `run ${r + 1} differs from run 1 ${diff.message} (same env_config, same replies, fresh envs: ` +
              `randomness not drawn from the seed, or state kept between instances)`,
            first.repliesUpTo(Math.max(0, diff.at - 1)),
            diff.output
          )
          break
        }
      }
    }
    if (first.reset?._tag === "Ok") {
      const lc = yield* abandoned(context, scenario)
      inspectLifecycle(context, lc, "abandoned after reset")
    }
    return first
  })

/** Two envs alive at once, calls interleaved; each must give what a fresh env alone gives. */
const interleaved = (context: Context, a: Scenario, b: Scenario) =>
  Effect.gen(function*() {
    const x = yield* Lifecycle.make(context, a, false)
    const y = yield* Lifecycle.make(context, b, false)
    yield* x.create()
    yield* y.create()
    yield* x.resetEnv()
    yield* y.resetEnv()
    for (let k = 0; k < context.settings.maxSteps && (x.end === "running" || y.end === "running"); k++) {
      yield* x.step(a.replies[k])
      yield* y.step(b.replies[k])
    }
    yield* x.close()
    yield* y.close()
    return [x, y] as const
  })

const checkIsolation = (context: Context, scenarios: ReadonlyArray<Scenario>, fresh: ReadonlyArray<Lifecycle>) =>
  Effect.gen(function*() {
    const { collector } = context
    const eligible = (i: number) =>
      fresh[i].reset?._tag === "Ok" && !fresh[i].timedOut && !collector.hasFailure("determinism", i)
    const n = scenarios.length
    let ran = false
    for (let i = 0; i < n; i++) {
      if (!eligible(i)) continue
      const partners = n > 1 && eligible((i + 1) % n) ? [i, (i + 1) % n] : [i]
      for (const j of partners) {
        ran = true
        collector.ran("isolation")
        const [x, y] = yield* interleaved(context, scenarios[i], scenarios[j])
        const partner = j === i ? "another env with the same env_config" : `an env with env_config #${j}`
        inspectLifecycle(context, x, `alongside ${partner}`)
        inspectLifecycle(context, y, `alongside env_config #${i}`)
        for (const [lc, own, other] of [[x, i, j], [y, j, i]] as const) {
          const diff = difference(fresh[own].signature(), lc.signature())
          if (diff === undefined) continue
          collector.fail(
            "isolation",
            scenarios[own],
            `with ${other === own ? "another env with the same env_config" : `an env with env_config #${other}`} alive ` +
              `at the same time, the env differs from a fresh env alone ${diff.message} ` +
              `(state shared between instances, e.g. module-level variables)`,
            lc.repliesUpTo(Math.max(0, diff.at - 1)),
            diff.output
          )
        }
      }
    }
    if (!ran) {
      collector.skipReasons.set(
        "isolation",
        "no env_config ran cleanly on its own (each failed, timed out or was not deterministic)"
      )
    }
  })

const skipReason = (check: CheckName, settings: Settings): string => {
  switch (check) {
    case "determinism":
      return settings.runs === 1 ? "runs is 1: there is nothing to compare" : "no env could be created"
    case "step-after-done":
      return `no episode ended done within ${settings.maxSteps} steps (give well-formed actions, or more steps)`
    case "reward":
    case "done":
    case "step":
      return "no step returned a result"
    default:
      return "no env got that far (see the failures)"
  }
}

/**
 * Checks an env (by name, from `options.registry` or the built-ins, or a definition) against the
 * env contract and returns the report. The Effect fails only for a name that is not registered or
 * options that cannot be used; everything the env does wrong is in the report.
 *
 * Timeouts use the real clock, also under `it.effect`'s test clock.
 *
 * @example
 * const report = yield* EnvCheck.check("frozen_lake", { actions: ["<action>up</action>", "<action>left</action>"] })
 * if (!report.ok) console.log(EnvCheck.format(report))
 *
 * @since 0.1.0
 * @category checking
 */
export const check = (
  env: string | Env.Definition,
  options: Options = {}
): Effect.Effect<Report, CheckOptionError | Registry.NotRegistered> =>
  Effect.gen(function*() {
    const definition = typeof env === "string" ? yield* Registry.env(options.registry ?? Builtins.registry, env) : env
    const settings = yield* settingsOf(options)
    const collector = new Collector()
    const context: Context = { settings, definition, collector }
    const scenarios = settings.configs.map((config, index) => scenarioOf(definition, settings, config, index))
    const fresh: Array<Lifecycle> = []
    for (const scenario of scenarios) fresh.push(yield* checkScenario(context, scenario))
    yield* checkIsolation(context, scenarios, fresh)
    const failed = new Set(collector.failures.map((f) => f.check))
    const order = (a: Failure, b: Failure) =>
      CHECKS.indexOf(a.check) - CHECKS.indexOf(b.check) || a.configIndex - b.configIndex
    return new Report({
      env: definition.name,
      ok: collector.failures.length === 0,
      seed: settings.seed,
      runs: settings.runs,
      maxSteps: settings.maxSteps,
      timeout: formatDuration(settings.timeout),
      configs: settings.configs.map((c) => toJsonSafe(c)),
      passed: CHECKS.filter((c) => collector.exercised.has(c) && !failed.has(c)),
      failures: collector.failures.slice().sort(order),
      skipped: CHECKS.filter((c) => !collector.exercised.has(c)).map((check) =>
        new Skipped({ check, reason: collector.skipReasons.get(check) ?? skipReason(check, settings) })
      ),
      warnings: collector.warnings,
      stats: new Stats(collector.stats)
    })
  }).pipe(Effect.withClock(Clock.make()))

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/**
 * The report as readable text: one line per check, then the failures (message, env_config,
 * replies, output), warnings and counts.
 *
 * @since 0.1.0
 * @category rendering
 */
export const format = (report: Report): string => {
  const failed = report.failed
  const width = Math.max(...CHECKS.map((c) => c.length))
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`
  const setup = `${plural(report.configs.length, "env_config")} × ${plural(report.runs, "run")}, ` +
    `up to ${report.maxSteps} steps, timeout ${report.timeout}, seed ${report.seed}`
  const lines: Array<string> = [
    report.ok
      ? `${report.env}: passed (${setup})`
      : `${report.env}: FAILED, ${failed.length} of ${CHECKS.length} checks (${setup})`
  ]
  for (const check of CHECKS) {
    const skipped = report.skipped.find((s) => s.check === check)
    const status = failed.includes(check) ? "FAIL" : skipped !== undefined ? "skip" : "ok"
    const detail = skipped !== undefined ? skipped.reason : DESCRIPTIONS[check]
    lines.push(`  ${status.padEnd(4)}  ${check.padEnd(width)}  ${detail}`)
  }
  if (report.failures.length > 0) {
    lines.push("", "failures")
    for (const failure of report.failures) {
      lines.push(`  ${failure.check}: ${failure.message}`)
      lines.push(`    env_config #${failure.configIndex}  ${show(failure.config, 120)}`)
      if (failure.replies.length > 0) lines.push(`    replies        ${show(failure.replies, 80)}`)
      if (failure.output !== undefined) lines.push(`    output         ${failure.output}`)
    }
  }
  if (report.warnings.length > 0) {
    lines.push("", "warnings")
    for (const warning of report.warnings) {
      lines.push(`  ${warning.check}: env_config #${warning.configIndex} ${show(warning.config, 120)}: ${warning.message}`)
    }
  }
  const s = report.stats
  lines.push(
    "",
    `${s.envs} envs created and closed, ${s.resets} resets, ${s.steps} steps ` +
      `(episodes: ${s.episodesDone} done, ${s.episodesAtMaxSteps} at the step limit, ${s.episodesFailed} failed); ` +
      `finalizers: ${s.finalizersRegistered} registered, ${s.finalizersRun} ran`
  )
  return lines.join("\n")
}

/**
 * The report as one JSON document (big integers in configs kept exact).
 *
 * @since 0.1.0
 * @category rendering
 */
export const toJson = (report: Report): string => Json.stringify(Schema.encodeSync(Report)(report))

// ---------------------------------------------------------------------------------------------
// Property-test helpers
// ---------------------------------------------------------------------------------------------

/**
 * @since 0.1.0
 * @category models
 */
export interface TranscriptStep {
  readonly reply: string
  readonly result: Env.StepResult
}

/**
 * What an env answered: the reset, then one step per reply until done or the replies run out.
 *
 * @since 0.1.0
 * @category models
 */
export interface Transcript {
  readonly reset: Env.ResetResult
  readonly steps: ReadonlyArray<TranscriptStep>
  /** Whether the last step said done. */
  readonly done: boolean
}

/**
 * Plays replies through a fresh env, the way the gym scheduler does (the conversation grows with
 * each reply and each observation), and closes it. For users' own properties:
 *
 * @example
 * it.effect.prop("rewards stay in [0, 1]", [EnvCheck.replies], ([replies]) =>
 *   Effect.gen(function*() {
 *     const { steps } = yield* EnvCheck.transcript(myEnv, { seed: 1 }, replies)
 *     for (const { result } of steps) expect(result.reward).toBeGreaterThanOrEqual(0)
 *   }))
 *
 * @since 0.1.0
 * @category property testing
 */
export const transcript = (
  definition: Env.Definition,
  config: Env.EnvConfig,
  replies: ReadonlyArray<string>,
  options: { readonly seed?: number | undefined; readonly trajectoryId?: string | undefined } = {}
): Effect.Effect<Transcript, Env.EnvError | Env.EnvConfigError> =>
  Effect.scoped(Effect.gen(function*() {
    const create = yield* definition.prepare(config)
    const env = yield* create
    const reset = yield* env.reset({
      trajectoryId: options.trajectoryId ?? "transcript",
      seed: options.seed ?? 0,
      messages: [],
      dataDict: { env_config: config },
      envConfig: config
    })
    const messages: Array<Message.Message> = []
    if (reset.systemPrompt) messages.push(Message.system(reset.systemPrompt))
    messages.push(Message.user(reset.observation))
    const steps: Array<TranscriptStep> = []
    let done = false
    for (const reply of replies) {
      messages.push(Message.assistant(reply))
      const result = yield* env.step(messages.slice())
      steps.push({ reply, result })
      if (result.done) {
        done = true
        break
      }
      messages.push(Message.user(result.observation))
    }
    return { reset, steps, done }
  }))
