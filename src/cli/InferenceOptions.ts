/**
 * The inference options of the command line and the choice of the `Inference` layer they select:
 * `--mode scripted` (an in-process policy, `--policy NAME`), `--mode server` (an OpenAI-compatible
 * server, `--base-url` and `--model NAME`) or `--mode colocate` (a GGUF file run in-process,
 * `--model FILE`), plus sampling parameters shared by all modes. Commands that run rollouts
 * (`run`, and the rollout server) spread `options` into their own and call `make`.
 */
import { Options } from "@effect/cli"
import { Config, Context, Duration, Effect, Layer, Option } from "effect"
import type * as Scope from "effect/Scope"
import type { SamplingParams, Service } from "../Inference.js"
import { Inference } from "../Inference.js"
import * as LlamaCpp from "../inference/LlamaCpp.js"
import * as OpenAiCompat from "../inference/OpenAiCompat.js"
import * as Sampling from "../inference/Sampling.js"
import * as Registry from "../Registry.js"
import { OptionError, parseNumber } from "./common.js"

const number = (name: string, description: string) =>
  Options.text(name).pipe(Options.withDescription(description), Options.optional)

/**
 * @since 0.1.0
 * @category options
 */
export const options = {
  mode: Options.choice("mode", ["scripted", "server", "colocate"]).pipe(
    Options.withDescription(
      "Who answers: scripted (an in-process --policy), server (an OpenAI-compatible API), " +
        "colocate (a GGUF model in-process)"
    ),
    Options.withDefault("scripted" as const)
  ),
  baseUrl: Options.text("base-url").pipe(
    Options.withDescription("Server mode: the API's base URL, e.g. http://127.0.0.1:8000/v1"),
    Options.optional
  ),
  model: Options.text("model").pipe(
    Options.withDescription("Server mode: the model name the server serves; colocate mode: a GGUF file"),
    Options.optional
  ),
  apiKeyEnv: Options.text("api-key-env").pipe(
    Options.withDescription("Server mode: the environment variable holding the API key (sent as a bearer token)"),
    Options.optional
  ),
  strictOpenai: Options.boolean("strict-openai").pipe(
    Options.withDescription("Server mode: send only OpenAI API fields (no top_k, no return_token_ids), for hosted APIs")
  ),
  seededSampling: Options.boolean("seeded-sampling").pipe(
    Options.withDescription("Server mode: send each call's seed (derived from --seed); colocate mode always does")
  ),
  noLogprobs: Options.boolean("no-logprobs").pipe(
    Options.withDescription("Server mode: do not ask for token ids and logprobs")
  ),
  requestTimeout: number("request-timeout", "Server mode: seconds per request attempt (default 600)"),
  retries: Options.integer("retries").pipe(
    Options.withDescription("Server mode: retries of a transient failure (default 3)"),
    Options.optional
  ),
  inferenceConcurrency: Options.integer("inference-concurrency").pipe(
    Options.withDescription(
      "Requests in flight (server mode, default 64) or sequences generated at once (colocate, default 4)"
    ),
    Options.optional
  ),
  contextSize: Options.integer("context-size").pipe(
    Options.withDescription("Colocate mode: tokens per sequence (default: the model's, at most 4096)"),
    Options.optional
  ),
  gpuLayers: Options.integer("gpu-layers").pipe(
    Options.withDescription("Colocate mode: layers offloaded to a GPU (default 0: CPU only)"),
    Options.optional
  ),
  threads: Options.integer("threads").pipe(
    Options.withDescription("Colocate mode: CPU threads (default: the cores but one)"),
    Options.optional
  ),
  temperature: number("temperature", "Sampling temperature (>= 0)"),
  topP: number("top-p", "Nucleus sampling: keep the smallest set of tokens with this much probability, in (0, 1]"),
  topK: Options.integer("top-k").pipe(
    Options.withDescription("Sample among the k most likely tokens (>= 1)"),
    Options.optional
  ),
  maxTokens: Options.integer("max-tokens").pipe(
    Options.withDescription("Tokens per completion (per turn)"),
    Options.optional
  ),
  stop: Options.text("stop").pipe(Options.withDescription("A stop string (repeatable)"), Options.repeated),
  presencePenalty: number("presence-penalty", "Presence penalty in [-2, 2]"),
  frequencyPenalty: number("frequency-penalty", "Frequency penalty in [-2, 2]")
}

/**
 * @since 0.1.0
 * @category options
 */
export type InferenceArgs = {
  readonly [K in keyof typeof options]: (typeof options)[K] extends Options.Options<infer A> ? A : never
}

const optionalNumber = (option: string, value: Option.Option<string>) =>
  Option.match(value, {
    onNone: () => Effect.succeed(undefined),
    onSome: (text) => parseNumber(option, text)
  })

/**
 * The sampling parameters of the options, checked (a bad value names its option).
 *
 * @since 0.1.0
 * @category options
 */
export const sampling = (args: InferenceArgs): Effect.Effect<SamplingParams, OptionError> =>
  Effect.gen(function*() {
    const params: SamplingParams = {
      temperature: yield* optionalNumber("--temperature", args.temperature),
      topP: yield* optionalNumber("--top-p", args.topP),
      topK: Option.getOrUndefined(args.topK),
      maxTokens: Option.getOrUndefined(args.maxTokens),
      stop: args.stop.length > 0 ? args.stop : undefined,
      presencePenalty: yield* optionalNumber("--presence-penalty", args.presencePenalty),
      frequencyPenalty: yield* optionalNumber("--frequency-penalty", args.frequencyPenalty),
      logprobs: args.mode === "server" ? !args.noLogprobs : undefined
    }
    const problem = Sampling.problems(params)[0]
    if (problem !== undefined) return yield* new OptionError(problem)
    const set: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(params)) if (value !== undefined) set[key] = value
    return set as SamplingParams
  })

const SERVER_ONLY = [
  ["--base-url", "baseUrl"],
  ["--api-key-env", "apiKeyEnv"],
  ["--strict-openai", "strictOpenai"],
  ["--seeded-sampling", "seededSampling"],
  ["--no-logprobs", "noLogprobs"],
  ["--request-timeout", "requestTimeout"],
  ["--retries", "retries"]
] as const
const COLOCATE_ONLY = [
  ["--context-size", "contextSize"],
  ["--gpu-layers", "gpuLayers"],
  ["--threads", "threads"]
] as const
const MODEL_ONLY = [["--model", "model"], ["--inference-concurrency", "inferenceConcurrency"]] as const

const otherMode = (option: string, only: string, mode: string) =>
  new OptionError({ option, detail: `only with ${only} (this run has --mode ${mode})` })

const isSet = (value: unknown): boolean => (Option.isOption(value) ? Option.isSome(value) : value === true)

/** Options that belong to another mode are an error, not silently ignored. */
const rejectOthers = (
  args: InferenceArgs,
  groups: ReadonlyArray<readonly [ReadonlyArray<readonly [string, keyof InferenceArgs]>, string]>
): Effect.Effect<void, OptionError> => {
  for (const [group, only] of groups) {
    for (const [flag, key] of group) {
      if (isSet(args[key])) {
        return Effect.fail(otherMode(flag, only, args.mode))
      }
    }
  }
  return Effect.void
}

const required = (option: string, value: Option.Option<string>, mode: string) =>
  Option.match(value, {
    onNone: () => Effect.fail(new OptionError({ option, detail: `required with --mode ${mode}` })),
    onSome: Effect.succeed
  })

/**
 * The `Inference` service the options select, acquired in the current scope (a colocate model is
 * freed when it closes). `policy` and `policyOptions` serve `--mode scripted`. The sampling options
 * are checked by {@link sampling}, which a command runs first.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  args: InferenceArgs,
  scripted: {
    readonly registry: Registry.Registry
    readonly policy: Option.Option<string>
    readonly policyOptions: Readonly<Record<string, unknown>>
  }
) =>
  Effect.gen(function*() {
    if (args.mode !== "scripted") {
      if (Option.isSome(scripted.policy)) {
        return yield* otherMode("--policy", "--mode scripted", args.mode)
      }
      if (Object.keys(scripted.policyOptions).length > 0) {
        return yield* otherMode("--policy-option", "--mode scripted", args.mode)
      }
    }
    switch (args.mode) {
      case "scripted": {
        yield* rejectOthers(args, [[SERVER_ONLY, "--mode server"], [COLOCATE_ONLY, "--mode colocate"], [
          MODEL_ONLY,
          "--mode server or --mode colocate"
        ]])
        const policy = yield* Registry.policy(scripted.registry, Option.getOrElse(scripted.policy, () => "random"))
        return yield* policy.make(scripted.policyOptions)
      }
      case "server": {
        yield* rejectOthers(args, [[COLOCATE_ONLY, "--mode colocate"]])
        const baseUrl = yield* required("--base-url", args.baseUrl, "server")
        const model = yield* required("--model", args.model, "server")
        const apiKey = yield* Option.match(args.apiKeyEnv, {
          onNone: () => Effect.succeed(undefined),
          onSome: (name) =>
            Config.redacted(name).pipe(
              Effect.mapError(() =>
                new OptionError({ option: "--api-key-env", detail: `the environment variable ${name} is not set` })
              )
            )
        })
        const timeout = yield* optionalNumber("--request-timeout", args.requestTimeout)
        if (timeout !== undefined && !(timeout > 0)) {
          return yield* new OptionError({
            option: "--request-timeout",
            detail: `must be a number of seconds > 0, got ${timeout}`
          })
        }
        const layer = OpenAiCompat.layerUndici({
          baseUrl,
          model,
          apiKey,
          seeded: args.seededSampling,
          strict: args.strictOpenai,
          requestTimeout: timeout === undefined ? undefined : Duration.millis(timeout * 1000),
          retries: Option.getOrUndefined(args.retries),
          concurrency: Option.getOrUndefined(args.inferenceConcurrency)
        })
        return Context.get(yield* Layer.build(layer), Inference)
      }
      case "colocate": {
        yield* rejectOthers(args, [[SERVER_ONLY, "--mode server"]])
        const modelPath = yield* required("--model", args.model, "colocate")
        return yield* LlamaCpp.make({
          modelPath,
          contextSize: Option.getOrUndefined(args.contextSize),
          gpuLayers: Option.getOrUndefined(args.gpuLayers),
          threads: Option.getOrUndefined(args.threads),
          sequences: Option.getOrUndefined(args.inferenceConcurrency)
        })
      }
    }
  }) satisfies Effect.Effect<Service, unknown, Scope.Scope>
