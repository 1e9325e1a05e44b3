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
 * - `isolation`: two envs alive at once do not affect each other;
 * - `tools` (envs that offer tools at reset): each spec is valid (name, description, parameters a
 *   JSON Schema object); each tool answers a call with arguments valid by its schema (a round trip)
 *   and calls with malformed JSON or the wrong shape, and an unknown tool is answered too: by a
 *   tool message with the call's `tool_call_id`, never a failed or crashed step.
 *
 * The check is deterministic: replies and configs are drawn from arbitraries with fixed seeds, runs
 * are sequential, and the report holds no timings.
 *
 * For property tests, {@link transcript} plays replies through an env, and the arbitraries of
 * `Arbitraries` (re-exported here: {@link replies}, {@link config}, ...) generate replies and
 * configs.
 *
 * @since 0.1.0
 */
import { Arbitrary, Clock, Duration, Effect, Exit, Option } from "effect"
import * as Builtins from "../Builtins.js"
import type * as Env from "../Env.js"
import { isRecord, toJsonSafe, typeName } from "../internal/inspect.js"
import { nextTurn } from "../internal/nextTurn.js"
import { mixSeed } from "../internal/seed.js"
import { wholeProblem } from "../internal/whole.js"
import type * as Message from "../Message.js"
import * as RunSpec from "../RunSpec.js"
import * as Scheduler from "../Scheduler.js"
import * as Registry from "../Registry.js"
import * as Arbitraries from "./Arbitraries.js"
import { Collector, difference, inspectLifecycle } from "./internal/inspection.js"
import { type Context, Lifecycle, type Scenario, type Settings } from "./internal/lifecycle.js"
import { CHECKS, type CheckName, CheckOptionError, type Failure, Report, Skipped, Stats } from "./internal/report.js"
import { checkTools } from "./internal/tools.js"

export * from "./Arbitraries.js"
export {
  CheckName,
  CheckOptionError,
  CHECKS,
  DESCRIPTIONS,
  Failure,
  format,
  Report,
  Skipped,
  Stats,
  toCliJson,
  toJson,
  Warning
} from "./internal/report.js"

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
  readonly configs?: ReadonlyArray<Env.EnvConfig> | Arbitrary.Arbitrary<Env.EnvConfig> | undefined
  /** How many seed configs (or samples of the configs arbitrary) to try. Default 3. */
  readonly seeds?: number | undefined
  /** How many times each env_config is played from a fresh env, to compare. Default 3. */
  readonly runs?: number | undefined
  /**
   * The replies: an arbitrary of one reply, sampled with a seed per env_config (the same replies for
   * every run of a config), or a fixed list played in order (cycled). Default: {@link replyFor} of
   * `actions` when given, else {@link reply}.
   */
  readonly replies?: Arbitrary.Arbitrary<string> | ReadonlyArray<string> | undefined
  /** Well-formed actions of the env (strings or patterns), mixed into the default replies. */
  readonly actions?: ReadonlyArray<string | RegExp> | undefined
  /** The longest a create, reset, step or close may take. Default 10 seconds. */
  readonly timeout?: Duration.Input | undefined
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

/**
 * The most env_configs, runs of each and steps of an episode a check takes, with why (as `run`
 * bounds its counts): `--seeds 1e9` ran out of heap after 43 s. Each env_config's runs are kept for
 * the report until the end: measured with frozen_lake and 3 runs, 1,000 seeds took 45 s and 452 MB,
 * 10,000 took 225 s and 2.4 GB.
 *
 * @since 0.4.0
 * @category models
 */
export const LIMITS = {
  configs: {
    max: 1000,
    reason: "each env_config's runs are kept for the report until the end (10,000 frozen_lake seeds took 2.4 GB)"
  },
  runs: { max: 100, reason: "each run of each env_config is kept for the report and compared with the first" },
  maxSteps: { max: RunSpec.LIMITS.maxTurns.max, reason: RunSpec.LIMITS.maxTurns.reason }
} as const

const positiveInt = (
  option: string,
  value: number | undefined,
  fallback: number,
  limit: { readonly max: number; readonly reason: string }
) => {
  if (value === undefined) return Effect.succeed(fallback)
  const detail = wholeProblem(value, 1) ?? (value > limit.max ? `must be at most ${limit.max}, got ${value}: ${limit.reason}` : undefined)
  return detail === undefined ? Effect.succeed(value) : Effect.fail(new CheckOptionError({ option, detail }))
}

const nodeResources = (): (() => ReadonlyArray<string>) | undefined => {
  // A global, not an import: the core stays free of Node, and other runtimes simply skip this probe.
  const proc = (globalThis as { process?: { getActiveResourcesInfo?: () => Array<string> } }).process
  const list = proc?.getActiveResourcesInfo
  return typeof list === "function" ? () => list.call(proc) : undefined
}

const CONFIG_SAMPLE_SEED = 0x636f6e66

const settingsOf = (options: Options): Effect.Effect<Settings, CheckOptionError> =>
  Effect.gen(function*() {
    const runs = yield* positiveInt("runs", options.runs, 3, LIMITS.runs)
    const maxSteps = yield* positiveInt("maxSteps", options.maxSteps, 16, LIMITS.maxSteps)
    const count = yield* positiveInt("seeds", options.seeds, 3, LIMITS.configs)
    const seed = options.seed ?? 0
    if (!Number.isSafeInteger(seed)) {
      return yield* new CheckOptionError({ option: "seed", detail: `must be a whole number, got ${seed}` })
    }
    const timeout = Duration.fromInput(options.timeout ?? "10 seconds")
    if (Option.isNone(timeout) || !Duration.isGreaterThan(timeout.value, Duration.zero)) {
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
      configs = yield* sample(options.configs as Arbitrary.Arbitrary<Env.EnvConfig>, "configs", mixSeed(seed, CONFIG_SAMPLE_SEED), count)
    }
    if (configs.length === 0) return yield* new CheckOptionError({ option: "configs", detail: "no env_config to try" })
    if (configs.length > LIMITS.configs.max) {
      const detail = `holds ${configs.length} env_configs, at most ${LIMITS.configs.max}: ${LIMITS.configs.reason}`
      return yield* new CheckOptionError({ option: "configs", detail })
    }
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

/** `count` values of an arbitrary, from a seed (an arbitrary that cannot give them is an option that cannot be used). */
const sample = <A>(
  arbitrary: Arbitrary.Arbitrary<A>,
  option: string,
  seed: number,
  count: number
): Effect.Effect<ReadonlyArray<A>, CheckOptionError> =>
  Arbitrary.sampleEffect(arbitrary, { seed, count }).pipe(
    Effect.mapError((error) =>
      new CheckOptionError({
        option,
        detail: `cannot draw ${count} values (${error.generated} drawn, ${error.discards} discarded by filters)`
      })
    )
  )

const scenarioOf = (
  definition: Env.Definition,
  settings: Settings,
  config: Env.EnvConfig,
  index: number
): Effect.Effect<Scenario, CheckOptionError> =>
  Effect.gen(function*() {
    // One reply per step, plus one for the step after done.
    const count = settings.maxSteps + 1
    const fixed = Array.isArray(settings.replies) ? (settings.replies as ReadonlyArray<string>) : undefined
    const replies = fixed !== undefined
      ? Array.from({ length: count }, (_, k) => fixed[k % fixed.length])
      : yield* sample(settings.replies as Arbitrary.Arbitrary<string>, "replies", mixSeed(settings.seed, index), count)
    const request: Env.ResetRequest = {
      trajectoryId: `check-c${index}`,
      seed: mixSeed(settings.seed, index),
      messages: [],
      dataDict: { env_config: config },
      envConfig: config
    }
    return { index, config, replies, request, prepared: definition.prepare(config) }
  })

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
    yield* lc.close(Exit.interrupt())
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
      // a turn of the event loop: an env that answers at once runs its episodes without one, and a
      // check that never gave one could not see Ctrl-C (`check-env` ran to its end, for minutes)
      yield* nextTurn
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
    case "tools":
      return "the env offers no tools"
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
    const definition = typeof env === "string"
      ? yield* Effect.fromResult(Registry.env(options.registry ?? Builtins.registry, env))
      : env
    const settings = yield* settingsOf(options)
    const collector = new Collector()
    const context: Context = { settings, definition, collector }
    const scenarios = yield* Effect.forEach(settings.configs, (config, index) => scenarioOf(definition, settings, config, index))
    const fresh: Array<Lifecycle> = []
    for (const scenario of scenarios) fresh.push(yield* checkScenario(context, scenario))
    yield* checkIsolation(context, scenarios, fresh)
    for (let i = 0; i < scenarios.length; i++) {
      const reset = fresh[i].reset
      const tools = reset?._tag === "Ok" && isRecord(reset.value) ? reset.value.tools : undefined
      if (Array.isArray(tools) && tools.length > 0) yield* checkTools(settings, collector, scenarios[i], tools)
    }
    const failed = new Set(collector.failures.map((f) => f.check))
    const order = (a: Failure, b: Failure) =>
      CHECKS.indexOf(a.check) - CHECKS.indexOf(b.check) || a.configIndex - b.configIndex
    return new Report({
      env: definition.name,
      ok: collector.failures.length === 0,
      seed: settings.seed,
      runs: settings.runs,
      maxSteps: settings.maxSteps,
      timeout: Duration.format(settings.timeout),
      configs: settings.configs.map((c) => toJsonSafe(c)),
      passed: CHECKS.filter((c) => collector.exercised.has(c) && !failed.has(c)),
      failures: collector.failures.slice().sort(order),
      skipped: CHECKS.filter((c) => !collector.exercised.has(c)).map((check) =>
        new Skipped({ check, reason: collector.skipReasons.get(check) ?? skipReason(check, settings) })
      ),
      warnings: collector.warnings,
      stats: new Stats(collector.stats)
    })
  }).pipe(Effect.provideService(Clock.Clock, Clock.Clock.defaultValue()))

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
    const create = yield* Effect.fromResult(definition.prepare(config))
    const env = yield* create
    const reset = yield* env.reset({
      trajectoryId: options.trajectoryId ?? "transcript",
      seed: options.seed ?? 0,
      messages: [],
      dataDict: { env_config: config },
      envConfig: config
    })
    // The gym scheduler's conversation step (Scheduler.opening / withReply / afterStep).
    let messages: ReadonlyArray<Message.Message> = Scheduler.opening(reset)
    const steps: Array<TranscriptStep> = []
    let done = false
    for (const reply of replies) {
      const given = Scheduler.withReply(messages, reply)
      const result = yield* env.step(given)
      steps.push({ reply, result })
      if (result.done) {
        done = true
        break
      }
      messages = Scheduler.afterStep(given, result.observation, false)
    }
    return { reset, steps, done }
  }))
