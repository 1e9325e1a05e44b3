/**
 * One run specification: the settings of a run, described once as a `Schema` and decoded once by
 * every front end (the CLI's `run`, the rollout server, the cluster's runners, `Rollout.make`).
 * Each setting's check is written here, once, and a bad value is refused with the setting's name
 * as the front end that was given it spells it: `--num-generations` on the command line,
 * `numGenerations` in `Rollout.make`'s options.
 *
 * What a run is made of besides its settings (its envs, scheduler and reward functions, given as
 * definitions or looked up by name) is the front end's; `Rollout.configOf` builds the run from
 * both, for all of them.
 *
 * @since 0.4.0
 */
import { Duration, Effect, Result, Schema } from "effect"
import * as Issue from "./internal/issue.js"
import { show } from "./internal/inspect.js"
import { isWhole, wholeProblem } from "./internal/whole.js"

/**
 * The run's configuration cannot work (e.g. `--num-generations 0`): which setting, and why.
 *
 * @since 0.1.0
 * @category errors
 */
export class RunConfigError extends Schema.TaggedError<RunConfigError>()(
  "RunConfigError",
  { option: Schema.String, detail: Schema.String }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * Upper bounds of a run's sizes, and why (a value above is refused before anything runs).
 *
 * @since 0.1.0
 * @category validation
 */
export const LIMITS = {
  numGenerations: {
    max: 4096,
    reason: "a group's trajectories are held in memory until its last one ends (GRPO groups are 2 to a few hundred)"
  },
  concurrency: {
    max: 100_000,
    reason: "each trajectory in flight holds an env, a conversation and a fiber; memory runs out before more helps"
  },
  maxTurns: {
    max: 10_000,
    reason: "a trajectory holds its whole conversation, which no model's context takes past a few thousand turns"
  },
  retries: {
    max: 100,
    reason: "each attempt can take up to the sum of the timeouts"
  }
} as const

/**
 * The longest timeout of a run, in seconds (about 31 years): every timeout of a run spec, from
 * every front end (`--step-timeout`, `Rollout.make`'s `timeouts`, a server's request), is at most
 * this; a run that must not time out gives none.
 *
 * @since 0.4.0
 * @category validation
 */
export const MAX_TIMEOUT_SECONDS = 1e9

/**
 * {@link MAX_TIMEOUT_SECONDS} as the messages write it (`1e9`).
 *
 * @since 0.4.0
 * @category validation
 */
export const MAX_TIMEOUT_TEXT = MAX_TIMEOUT_SECONDS.toExponential().replace("e+", "e")

// ---------------------------------------------------------------------------------------------
// The checks, each written once
// ---------------------------------------------------------------------------------------------

/** A check of a value: `undefined` when it is fine, else what is wrong ("must be ..., got ..."). */
type Check = (value: unknown) => string | undefined

const number = (value: unknown): value is number => typeof value === "number"

/** A whole number of at least `min` (and at most `limit.max`, with its reason). */
const whole = (min: number, limit?: { readonly max: number; readonly reason: string }): Check => (value) => {
  if (!number(value)) return `must be a whole number >= ${min}, got ${show(value)}`
  const problem = wholeProblem(value, min)
  if (problem !== undefined) return problem
  return limit !== undefined && value > limit.max ? `must be at most ${limit.max}, got ${value}: ${limit.reason}` : undefined
}

const safeInteger: Check = (value) =>
  number(value) && Number.isSafeInteger(value) ? undefined : `must be an integer, got ${show(value)}`

/** A finite number within a range, described as the OpenAI API describes it. */
const ranged = (ok: (n: number) => boolean, expected: string): Check => (value) =>
  !number(value) || !Number.isFinite(value)
    ? `must be a finite number, got ${show(value, 80).slice(0, 100)}`
    : ok(value)
    ? undefined
    : `must be ${expected}, got ${value}`

/**
 * A positive duration ("30 seconds", 500 ms, `Duration.seconds(30)`) of at most
 * {@link MAX_TIMEOUT_SECONDS}; its milliseconds.
 */
const millisOf = (input: unknown): number | undefined => {
  const duration = Duration.fromInput(input as Duration.Input)
  if (duration._tag !== "Some") return undefined
  const ms = Duration.toMillis(duration.value)
  return Number.isFinite(ms) && ms > 0 && ms <= MAX_TIMEOUT_SECONDS * 1000 ? ms : undefined
}

const duration: Check = (value) => {
  if (millisOf(value) !== undefined) return undefined
  const given = show(value, 80).slice(0, 100)
  // a duration, but past the cap (Duration.infinity included); else not one ("1e9 seconds": Effect reads no exponent)
  const read = Duration.fromInput(value as Duration.Input)
  return read._tag === "Some" && Duration.toMillis(read.value) > 0
    ? `must be at most ${MAX_TIMEOUT_TEXT} seconds, got ${given}`
    : `must be a positive duration ("30 seconds", 500, Duration.seconds(30)), got ${given}`
}

/** A schema of `base` whose values pass `check` (its message is the issue's). */
const checked = <S extends Schema.Top>(base: S, check: Check) =>
  base.check(Schema.makeFilter((value: S["Type"]) => check(value) ?? true))

/** Any value, checked by `check` (so that a wrong type reads as the check says, not Schema's). */
const value = <A>(check: Check) => checked(Schema.Unknown, check) as unknown as Schema.Codec<A, A>

/**
 * The sampling settings a run gives every model call, with the ranges every backend accepts (the
 * OpenAI API's, which vLLM, llama.cpp and Ollama accept too): temperature >= 0, top_p in (0, 1],
 * top_k a whole number >= 1 or -1 (no limit, as in vLLM), max_tokens a whole number >= 1,
 * penalties in [-2, 2], stop strings non-empty; vLLM's min_p in [0, 1] (0: no limit) and
 * repetition_penalty > 0 (1: none).
 *
 * @since 0.4.0
 * @category schemas
 */
export const Sampling = Schema.Struct({
  temperature: Schema.optionalKey(value<number>(ranged((n) => n >= 0, "a number >= 0"))),
  topP: Schema.optionalKey(value<number>(ranged((n) => n > 0 && n <= 1, "a number in (0, 1]"))),
  topK: Schema.optionalKey(value<number>(ranged((n) => n === -1 || isWhole(n, 1), "a whole number >= 1, or -1 for no limit"))),
  maxTokens: Schema.optionalKey(value<number>(ranged((n) => isWhole(n, 1), "a whole number >= 1"))),
  stop: Schema.optionalKey(value<ReadonlyArray<string>>((stops) =>
    !Array.isArray(stops)
      ? `must be a list of strings, got ${show(stops)}`.slice(0, 200)
      : stops.every((stop) => typeof stop === "string" && stop.length > 0)
      ? undefined
      : "stop strings must not be empty"
  )),
  presencePenalty: Schema.optionalKey(value<number>(ranged((n) => n >= -2 && n <= 2, "a number in [-2, 2]"))),
  frequencyPenalty: Schema.optionalKey(value<number>(ranged((n) => n >= -2 && n <= 2, "a number in [-2, 2]"))),
  logprobs: Schema.optionalKey(Schema.Boolean),
  minP: Schema.optionalKey(value<number>(ranged((n) => n >= 0 && n <= 1, "a number in [0, 1]"))),
  repetitionPenalty: Schema.optionalKey(value<number>(ranged((n) => n > 0, "a number > 0"))),
  structuredOutputsRegex: Schema.optionalKey(value<string>((regex) =>
    typeof regex === "string" && regex !== "" ? undefined : "must be a non-empty regular expression"
  ))
})

/**
 * Limits on the phases of a trajectory, in milliseconds (given as any positive duration: "30
 * seconds", 500, `Duration.seconds(30)`); absent ones are not limited.
 *
 * @since 0.4.0
 * @category schemas
 */
export const Timeouts = Schema.Struct({
  reset: Schema.optionalKey(value<Duration.Input>(duration)),
  step: Schema.optionalKey(value<Duration.Input>(duration)),
  close: Schema.optionalKey(value<Duration.Input>(duration)),
  trajectory: Schema.optionalKey(value<Duration.Input>(duration))
})

const defaulted = <A>(schema: Schema.Codec<A, A>, fallback: A) =>
  schema.pipe(Schema.withDecodingDefault(Effect.succeed(fallback)))

/**
 * A run's settings. Every front end decodes what it was given into one ({@link decode}), with the
 * same checks and defaults: 8 generations, 10 turns, 64 trajectories in flight, seed 0, no retries,
 * no timeouts, the backend's own sampling.
 *
 * @since 0.4.0
 * @category schemas
 */
export const RunSpec = Schema.Struct({
  /** The env of rows whose `env_config` has no `name`. */
  defaultEnv: Schema.optionalKey(value<string>((name) => typeof name === "string" && name !== "" ? undefined : `must be an env's name, got ${show(name)}`)),
  /** The GRPO group size: trajectories per row. */
  numGenerations: defaulted(value<number>(whole(1, LIMITS.numGenerations)), 8),
  maxTurns: defaulted(value<number>(whole(1, LIMITS.maxTurns)), 10),
  /** Trajectories in flight. */
  concurrency: defaulted(value<number>(whole(1, LIMITS.concurrency)), 64),
  seed: defaulted(value<number>(safeInteger), 0),
  /** Attempts after the first of a trajectory that failed with a transient error. */
  retries: defaulted(value<number>(whole(0, LIMITS.retries)), 0),
  /** Groups ahead of the stream's consumer (absent: `Rollout.defaultBufferSize`). */
  bufferSize: Schema.optionalKey(value<number>(whole(1))),
  timeouts: defaulted(Timeouts as unknown as Schema.Codec<typeof Timeouts.Type, typeof Timeouts.Type>, {}),
  sampling: defaulted(Sampling as unknown as Schema.Codec<typeof Sampling.Type, typeof Sampling.Type>, {}),
  /** Variables of the model's chat template for every call of the run. */
  chatTemplateKwargs: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown)),
  /** The scheduler's own options (`--scheduler-option key=value`). */
  schedulerOptions: defaulted(
    Schema.Record(Schema.String, Schema.Unknown) as unknown as Schema.Codec<Readonly<Record<string, unknown>>, Readonly<Record<string, unknown>>>,
    {}
  ),
  /** One weight per reward column (the functions', then the env's); absent: 1 each. */
  rewardWeights: Schema.optionalKey(value<ReadonlyArray<number>>((weights) =>
    Array.isArray(weights) && weights.every((w) => typeof w === "number" && Number.isFinite(w))
      ? undefined
      : `must be finite numbers, got ${show(weights, 80).slice(0, 100)}`
  ))
})

/**
 * @since 0.4.0
 * @category models
 */
export type RunSpec = typeof RunSpec.Type

/**
 * What a front end may give: any of the settings (the rest take their defaults).
 *
 * @since 0.4.0
 * @category models
 */
export type Input = { readonly [K in keyof RunSpec]?: unknown }

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

/**
 * How a front end names the settings in its messages: `"fields"` (the library: `numGenerations`,
 * `timeouts.step`, `sampling.temperature`) or `"flags"` (the command line and the servers:
 * `--num-generations`, `--step-timeout`, `--temperature`).
 *
 * @since 0.4.0
 * @category names
 */
export type Naming = "fields" | "flags"

const FLAGS: Readonly<Record<string, string>> = {
  defaultEnv: "--env",
  numGenerations: "--num-generations",
  maxTurns: "--max-turns",
  concurrency: "--concurrency",
  seed: "--seed",
  retries: "--trajectory-retries",
  bufferSize: "--buffer-size",
  "timeouts.reset": "--reset-timeout",
  "timeouts.step": "--step-timeout",
  "timeouts.close": "--close-timeout",
  "timeouts.trajectory": "--trajectory-timeout",
  "sampling.temperature": "--temperature",
  "sampling.topP": "--top-p",
  "sampling.topK": "--top-k",
  "sampling.maxTokens": "--max-tokens",
  "sampling.stop": "--stop",
  "sampling.presencePenalty": "--presence-penalty",
  "sampling.frequencyPenalty": "--frequency-penalty",
  "sampling.logprobs": "--no-logprobs",
  "sampling.minP": "min_p",
  "sampling.repetitionPenalty": "repetition_penalty",
  "sampling.structuredOutputsRegex": "structured_outputs_regex",
  chatTemplateKwargs: "chat_template_kwargs",
  schedulerOptions: "--scheduler-option",
  rewardWeights: "--reward-weights"
}

/** Settings that are maps of options, each given on the command line as `--flag key=value`. */
const KEYED: ReadonlySet<string> = new Set(["schedulerOptions"])

/**
 * The name of a setting (its path in {@link RunSpec}, `timeouts.step`) as `naming` spells it. One
 * option of a map of options (`schedulerOptions.max_concurrent_envs`) is its flag and key on the
 * command line (`--scheduler-option max_concurrent_envs`).
 *
 * @since 0.4.0
 * @category names
 */
export const nameOf = (path: string, naming: Naming): string => {
  if (naming !== "flags") return path
  if (Object.hasOwn(FLAGS, path)) return FLAGS[path]
  const dot = path.indexOf(".")
  const top = dot < 0 ? path : path.slice(0, dot)
  return dot > 0 && KEYED.has(top) ? `${FLAGS[top]} ${path.slice(dot + 1)}` : path
}

/** The setting a decoding problem is about: the first two segments of its path (`sampling.topP`). */
const settingOf = (path: ReadonlyArray<PropertyKey>): string => path.slice(0, 2).map(String).join(".")

const TOP = new Set(Object.keys(RunSpec.fields))
const NESTED: Readonly<Record<string, ReadonlySet<string>>> = {
  timeouts: new Set(Object.keys(Timeouts.fields)),
  sampling: new Set(Object.keys(Sampling.fields))
}

/** The first key of `input` that no setting has (`timeouts.soon`), if any. */
const unknownKey = (input: Input): string | undefined => {
  for (const key of Object.keys(input)) {
    if (!TOP.has(key)) return key
    const nested = NESTED[key]
    const inner = (input as Record<string, unknown>)[key]
    if (nested !== undefined && typeof inner === "object" && inner !== null) {
      for (const sub of Object.keys(inner)) {
        if (!nested.has(sub) && (inner as Record<string, unknown>)[sub] !== undefined) return `${key}.${sub}`
      }
    }
  }
  return undefined
}

/** `input` without the keys whose value is `undefined` (an option not given), at each level. */
const given = (input: Input): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(input)) {
    if (value === undefined) continue
    if (NESTED[key] !== undefined && typeof value === "object" && value !== null && !Array.isArray(value)) {
      const inner: Record<string, unknown> = {}
      for (const [sub, v] of Object.entries(value)) if (v !== undefined) inner[sub] = v
      out[key] = inner
    } else out[key] = value
  }
  return out
}

const decodeSpec = Schema.decodeUnknownResult(RunSpec)

/**
 * Decodes a front end's settings into a {@link RunSpec}: the first bad or unknown one is a
 * {@link RunConfigError} naming it as `naming` spells it. Settings given as `undefined` take their
 * defaults.
 *
 * @since 0.4.0
 * @category decoding
 */
export const decode = (input: Input, naming: Naming): Result.Result<RunSpec, RunConfigError> => {
  const extra = unknownKey(input)
  if (extra !== undefined) {
    const [top, sub] = extra.split(".")
    const known = sub === undefined ? [...TOP] : [...NESTED[top]]
    const what = sub === undefined ? "setting" : top === "timeouts" ? "timeout" : "sampling parameter"
    return Result.fail(
      new RunConfigError({ option: nameOf(extra, naming), detail: `unknown ${what} (there are ${known.join(", ")})` })
    )
  }
  return Result.mapError(decodeSpec(given(input), Issue.parseOptions), (error) => {
    const problem = Issue.first(error.issue)
    return new RunConfigError({ option: nameOf(settingOf(problem.path), naming), detail: problem.message })
  })
}

/**
 * The problems of a set of sampling settings, all of them, each named as `naming` spells it
 * (`--temperature`): for the backends' own checks of their defaults and the servers' checks of a
 * request's overrides.
 *
 * @since 0.4.0
 * @category decoding
 */
export const samplingProblems = (
  sampling: unknown,
  naming: Naming
): Array<{ readonly option: string; readonly detail: string }> => {
  const set = typeof sampling === "object" && sampling !== null
    ? Object.fromEntries(Object.entries(sampling).filter(([, v]) => v !== undefined))
    : sampling
  const decoded = decodeSampling(set, { errors: "all", reportInput: true })
  if (Result.isSuccess(decoded)) return []
  return Issue.all(decoded.failure.issue).map((problem) => ({
    option: nameOf(settingOf(["sampling", ...problem.path]), naming),
    detail: problem.message
  }))
}

const decodeSampling = Schema.decodeUnknownResult(Sampling)

/**
 * The milliseconds of each timeout of a spec (absent: not limited).
 *
 * @since 0.4.0
 * @category models
 */
export const timeoutMillis = (timeouts: RunSpec["timeouts"]): {
  readonly reset?: number | undefined
  readonly step?: number | undefined
  readonly close?: number | undefined
  readonly trajectory?: number | undefined
} => ({
  reset: timeouts.reset === undefined ? undefined : millisOf(timeouts.reset),
  step: timeouts.step === undefined ? undefined : millisOf(timeouts.step),
  close: timeouts.close === undefined ? undefined : millisOf(timeouts.close),
  trajectory: timeouts.trajectory === undefined ? undefined : millisOf(timeouts.trajectory)
})

/**
 * A spec as a JSON value (timeouts in milliseconds) that {@link decode} gives back as an equal spec:
 * how a run's settings travel (the cluster's coordinator sends them to its runners).
 *
 * @since 0.4.0
 * @category encoding
 */
export const toJson = (spec: RunSpec): Record<string, unknown> =>
  JSON.parse(JSON.stringify({ ...spec, timeouts: timeoutMillis(spec.timeouts) })) as Record<string, unknown>
