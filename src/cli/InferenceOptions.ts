/**
 * The inference options of the command line and the choice of the `Inference` layer they select:
 * `--mode scripted` (an in-process policy, `--policy NAME`), `--mode server` (an OpenAI-compatible
 * server, `--base-url` and `--model NAME`) or `--mode colocate` (a GGUF file run in-process,
 * `--model FILE`), plus sampling parameters shared by all modes. Commands that run rollouts
 * (`run`, and the rollout server) spread `options` into their own and provide `layer` at their root.
 */
import { Config, Context, Duration, Effect, Layer, Option } from "effect"
import { Flag } from "effect/cli"
import type { InferenceError, SamplingParams, Service } from "../Inference.js"
import { Inference } from "../Inference.js"
import * as Sampling from "../inference/Sampling.js"
import type * as SwiftRollout from "../inference/SwiftRollout.js"
import * as Json from "../internal/Json.js"
import { isWhole } from "../internal/whole.js"
import * as Policy from "../Policy.js"
import * as Registry from "../Registry.js"
import type { Item } from "../Rollout.js"
import type { Summary } from "../Summary.js"
import { DriftCheck } from "../TokenSequence.js"
import { choice, integer, OptionError, parseNumber, repeated, toggle } from "./common.js"

/** A number option (checked when the run starts), shown in help as `number`, or as its unit (`seconds`). */
const number = (name: string, description: string, metavar = "number") =>
  Flag.String(name).pipe(Flag.withMetavar(metavar), Flag.withDescription(description), Flag.optional)

/** What help says of a sampling option nobody gives: the server's own default, or colocate's. */
const serversDefault = (colocate: string) => ` (default: the server's; colocate ${colocate})`

/**
 * @since 0.1.0
 * @category options
 */
export const options = {
  mode: choice("mode", ["scripted", "server", "colocate", "swift-rollout"]).pipe(
    Flag.withDescription(
      "Who answers: scripted (an in-process --policy), server (an OpenAI-compatible API), " +
        "colocate (a GGUF model in-process), swift-rollout (a `swift rollout` server's single-turn /infer/)"
    ),
    Flag.withDefault("scripted" as const)
  ),
  baseUrl: Flag.String("base-url").pipe(
    Flag.withDescription("Server mode: the API's base URL, e.g. http://127.0.0.1:8000/v1"),
    Flag.optional
  ),
  model: Flag.String("model").pipe(
    Flag.withDescription("Server mode: the model name the server serves; colocate mode: a GGUF file"),
    Flag.optional
  ),
  apiKeyEnv: Flag.String("model-api-key-env").pipe(
    Flag.withAlias("api-key-env"),
    Flag.withDescription(
      "Server mode: the environment variable holding the model server's API key, sent as a bearer token (--api-key-env: its old name)"
    ),
    Flag.optional
  ),
  strictOpenai: toggle(
    "strict-openai",
    "Server mode: send only OpenAI API fields (no top_k, no return_token_ids), for hosted APIs"
  ),
  seededSampling: toggle(
    "seeded-sampling",
    "Server mode: send each call's seed (derived from --seed); colocate mode always does"
  ),
  noLogprobs: toggle(
    "no-logprobs",
    "Server mode: do not ask for token ids and logprobs"
  ),
  requestTimeout: number("request-timeout", "Server mode: seconds per request attempt (default 600)", "seconds"),
  retries: integer("retries").pipe(
    Flag.withDescription("Server mode: retries of a transient failure (default 3)"),
    Flag.optional
  ),
  inferenceConcurrency: integer("inference-concurrency").pipe(
    Flag.withDescription(
      "Requests in flight (server mode, default 64) or sequences generated at once (colocate, default 4)"
    ),
    Flag.optional
  ),
  contextSize: integer("context-size").pipe(
    Flag.withDescription("Colocate mode: tokens per sequence (default: the model's, at most 4096)"),
    Flag.optional
  ),
  gpuLayers: integer("gpu-layers").pipe(
    Flag.withDescription("Colocate mode: layers offloaded to a GPU (default 0: CPU only)"),
    Flag.optional
  ),
  threads: integer("threads").pipe(
    Flag.withDescription("Colocate mode: CPU threads (default: the cores but one)"),
    Flag.optional
  ),
  temperature: number("temperature", `Sampling temperature (>= 0)${serversDefault("1")}`),
  topP: number(
    "top-p",
    `Nucleus sampling: keep the smallest set of tokens with this much probability, in (0, 1]${serversDefault("1")}`
  ),
  topK: integer("top-k").pipe(
    Flag.withDescription(`Sample among the k most likely tokens (>= 1, or -1 for no limit)${serversDefault("no limit")}`),
    Flag.optional
  ),
  maxTokens: integer("max-tokens").pipe(
    Flag.withDescription(`Tokens per completion (per turn)${serversDefault("the context left")}`),
    Flag.optional
  ),
  stop: repeated("stop", "A stop string (repeatable)"),
  tokenPath: choice("token-path", ["auto", "require", "off"]).pipe(
    Flag.withDescription(
      "Server mode: token in/token out through /completions with token prompts: auto (when the server can, " +
        "else the chat path, said once), require (fail at start if it cannot), off (the chat path)"
    ),
    Flag.optional
  ),
  tokenizer: Flag.String("tokenizer").pipe(
    Flag.withDescription(
      "Server mode: a Hugging Face model folder (tokenizer.json, tokenizer_config.json): the token path's " +
        "local tokenizer and chat template (else the server's /tokenize)"
    ),
    Flag.optional
  ),
  chatTemplateKwargs: Flag.String("chat-template-kwargs").pipe(
    Flag.withDescription(
      "A JSON object of chat-template variables, e.g. '{\"enable_thinking\": false}' (server mode sends it as " +
        "chat_template_kwargs or renders with it; colocate renders with it)"
    ),
    Flag.optional
  ),
  titoCheck: toggle(
    "tito-check",
    "Re-tokenize each final conversation and compare it with the trajectory's token sequence; the summary " +
        "says how many would drift and where the first differs"
  ),
  maxTransportFailures: integer("max-transport-failures").pipe(
    Flag.withDescription(
      "Server mode: requests in a row without any response after which the server is taken as down and the " +
        "run stops (default 20; 0 never)"
    ),
    Flag.optional
  ),
  toolParser: choice("tool-parser", ["hermes", "llama3_json", "mistral", "none"]).pipe(
    Flag.withDescription(
      "How tool calls are read out of a reply's text when the env offers tools and the backend gave none: " +
        "hermes (Qwen, Hermes: <tool_call>), llama3_json (Llama 3.x), mistral ([TOOL_CALLS]), none (default: the one " +
        "the model's chat template writes calls for, when it is known here; else hermes)"
    ),
    Flag.optional
  ),
  presencePenalty: number("presence-penalty", `Presence penalty in [-2, 2]${serversDefault("0")}`),
  frequencyPenalty: number("frequency-penalty", `Frequency penalty in [-2, 2]${serversDefault("0")}`)
}

/**
 * @since 0.1.0
 * @category options
 */
export type InferenceArgs = {
  readonly [K in keyof typeof options]: (typeof options)[K] extends Flag.Flag<infer A> ? A : never
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
      logprobs: args.mode === "server" || args.mode === "swift-rollout" ? !args.noLogprobs : undefined
    }
    const problem = Sampling.problems(params)[0]
    if (problem !== undefined) return yield* new OptionError(problem)
    const set: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(params)) if (value !== undefined) set[key] = value
    return set as SamplingParams
  })

export const SERVER_ONLY = [
  ["--base-url", "baseUrl"],
  ["--model-api-key-env", "apiKeyEnv"],
  ["--strict-openai", "strictOpenai"],
  ["--seeded-sampling", "seededSampling"],
  ["--no-logprobs", "noLogprobs"],
  ["--request-timeout", "requestTimeout"],
  ["--retries", "retries"],
  ["--token-path", "tokenPath"],
  ["--tokenizer", "tokenizer"],
  ["--max-transport-failures", "maxTransportFailures"]
] as const
export const COLOCATE_ONLY = [
  ["--context-size", "contextSize"],
  ["--gpu-layers", "gpuLayers"],
  ["--threads", "threads"]
] as const
/** What swift-rollout mode takes of the server options (the rest are the OpenAI API's). */
const SWIFT_TAKES: ReadonlySet<string> = new Set([
  "--base-url",
  "--model-api-key-env",
  "--seeded-sampling",
  "--no-logprobs",
  "--request-timeout",
  "--retries",
  "--max-transport-failures"
])
const NOT_SWIFT = SERVER_ONLY.filter(([flag]) => !SWIFT_TAKES.has(flag))
/** What swift-rollout mode does not take of the options of both server and colocate mode. */
const MODEL_NOT_SWIFT = [
  ["--model", "model"],
  ["--tito-check", "titoCheck"]
] as const
export const MODEL_ONLY = [
  ["--model", "model"],
  ["--inference-concurrency", "inferenceConcurrency"],
  ["--chat-template-kwargs", "chatTemplateKwargs"],
  ["--tito-check", "titoCheck"]
] as const

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

/**
 * `--chat-template-kwargs`: a JSON object, without the names the renderer sets itself.
 *
 * @since 0.2.0
 * @category options
 */
export const chatTemplateKwargs = (
  value: Option.Option<string>
): Effect.Effect<Readonly<Record<string, unknown>> | undefined, OptionError> => {
  if (Option.isNone(value)) return Effect.succeed(undefined)
  const option = "--chat-template-kwargs"
  let parsed: unknown
  try {
    parsed = Json.parse(value.value)
  } catch (cause) {
    return Effect.fail(new OptionError({ option, detail: `not JSON: ${(cause as Error).message}` }))
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    return Effect.fail(new OptionError({ option, detail: `must be a JSON object, got ${value.value}` }))
  }
  const kwargs = parsed as Record<string, unknown>
  // The template module (and its Jinja engine) is loaded only when the option is given.
  return Effect.flatMap(Effect.promise(() => import("../inference/ChatTemplate.js")), ({ RESERVED_KWARGS }) => {
    const reserved = RESERVED_KWARGS.find((key) => key in kwargs)
    return reserved === undefined
      ? Effect.succeed(kwargs)
      : Effect.fail(new OptionError({ option, detail: `${reserved} is set by effect-gym itself, not a template kwarg` }))
  })
}

/**
 * The control side of the backend the options select, when it has one (`--mode swift-rollout`: the
 * reference trainer's weight-sync endpoints, which the rollout server forwards to it); `None` for
 * the other modes. Provided by {@link layer} beside `Inference`.
 *
 * @since 0.3.0
 * @category services
 */
export class Control extends Context.Service<Control, Option.Option<SwiftRollout.Control>>()(
  "effect-gym/cli/InferenceOptions/Control"
) {}

/**
 * What `--mode scripted` needs beside the options: the registry that names the policies (plugins
 * add theirs), `--policy` and `--policy-option`.
 *
 * @since 0.3.0
 * @category models
 */
export interface ScriptedArgs {
  readonly registry: Registry.Registry
  readonly policy: Option.Option<string>
  readonly policyOptions: Readonly<Record<string, unknown>>
}

const noControl = <E>(inference: Layer.Layer<Inference, E>): Layer.Layer<Inference | Control, E> =>
  Layer.merge(inference, Layer.succeed(Control, Option.none()))

/**
 * The backend of `inference` with tool calls parsed out of its text replies: by `--tool-parser`, else
 * by the parser the backend's chat template writes calls for (hermes without one); `none` leaves the
 * replies as they are. The service says which (`toolParser`), for the run's record and summary.
 */
const parsingTools = (args: InferenceArgs) => <E>(inference: Layer.Layer<Inference, E>): Layer.Layer<Inference, E> =>
  Layer.effect(
    Inference,
    Effect.gen(function*() {
      const service = yield* Inference
      const given = Option.getOrUndefined(args.toolParser)
      if (given === "none") return { ...service, toolParser: { name: "none", chosenBy: "--tool-parser" } }
      const ToolParsers = yield* Effect.promise(() => import("../inference/ToolParsers.js"))
      const choice = given !== undefined
        ? { name: given, chosenBy: "--tool-parser" }
        : service.chatTemplate === undefined && service.callRendering !== undefined
        ? ToolParsers.chooseFor(service.callRendering, "the server's chat template (its /tokenize rendering of a call)")
        : ToolParsers.chooseFor(service.chatTemplate)
      return ToolParsers.wrap(service, choice.name, choice.chosenBy)
    })
  ).pipe(Layer.provide(inference))

const apiKeyOf = (args: InferenceArgs) =>
  Option.match(args.apiKeyEnv, {
    onNone: () => Effect.succeed(undefined),
    onSome: (name) =>
      Config.Redacted(name).pipe(
        Effect.mapError(() =>
          new OptionError({ option: "--model-api-key-env", detail: `the environment variable ${name} is not set` })
        )
      )
  })

const requestTimeoutOf = (args: InferenceArgs) =>
  Effect.flatMap(optionalNumber("--request-timeout", args.requestTimeout), (timeout) =>
    timeout !== undefined && !(timeout > 0)
      ? Effect.fail(
        new OptionError({ option: "--request-timeout", detail: `must be a number of seconds > 0, got ${timeout}` })
      )
      : Effect.succeed(timeout))

const maxTransportFailuresOf = (args: InferenceArgs) => {
  const value = Option.getOrUndefined(args.maxTransportFailures)
  return value !== undefined && !isWhole(value, 0)
    ? Effect.fail(new OptionError({ option: "--max-transport-failures", detail: "must be a whole number >= 0" }))
    : Effect.succeed(value)
}

const required = (option: string, value: Option.Option<string>, mode: string) =>
  Option.match(value, {
    onNone: () => Effect.fail(new OptionError({ option, detail: `required with --mode ${mode}` })),
    onSome: Effect.succeed
  })

/**
 * The `Inference` layer the options select (with its {@link Control}): a scripted policy
 * (`Policy.layer`), an OpenAI-compatible server, a GGUF model in-process, or a `swift rollout`
 * server. The options are checked when the layer is built, before anything runs: an option of
 * another mode, a missing `--base-url`, an unknown `--policy` fail the layer with an
 * {@link OptionError} (or the registry's, or the policy's, error). Its resources (a colocate model,
 * an HTTP client's connections) are released when the layer's scope closes. The sampling options
 * are checked by {@link sampling}, which a command runs first.
 *
 * A command provides it once, at its composition root: `job.pipe(Effect.provide(layer(args, ...)))`.
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (
  args: InferenceArgs,
  scripted: ScriptedArgs,
  /** `refuse` for a server (a trainer's request is honoured or refused); a run drops (see `OpenAiCompat`). */
  rejectedFields: "drop" | "refuse" = "drop"
) =>
  Layer.unwrap(Effect.gen(function*() {
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
        const policy = yield* Effect.fromResult(
          Registry.policy(scripted.registry, Option.getOrElse(scripted.policy, () => "random"))
        )
        return noControl<InferenceError | Policy.PolicyConfigError>(
          parsingTools(args)(Policy.layer(policy, scripted.policyOptions, "flags"))
        )
      }
      case "server": {
        yield* rejectOthers(args, [[COLOCATE_ONLY, "--mode colocate"]])
        if (args.strictOpenai) {
          // What --strict-openai never sends: asked for on the command line, an error, not a silent drop.
          const topK = Option.getOrUndefined(args.topK)
          if (topK !== undefined && topK !== -1) {
            return yield* new OptionError({ option: "--top-k", detail: "not part of the OpenAI API: --strict-openai never sends it" })
          }
          if (Option.isSome(args.chatTemplateKwargs)) {
            return yield* new OptionError({
              option: "--chat-template-kwargs",
              detail: "not part of the OpenAI API: --strict-openai never sends it"
            })
          }
        }
        const baseUrl = yield* required("--base-url", args.baseUrl, "server")
        const model = yield* required("--model", args.model, "server")
        const apiKey = yield* apiKeyOf(args)
        const timeout = yield* requestTimeoutOf(args)
        const maxTransportFailures = yield* maxTransportFailuresOf(args)
        // Backends are loaded when their mode is used (undici, node-llama-cpp stay out of other commands).
        const OpenAiCompat = yield* Effect.promise(() => import("../inference/OpenAiCompat.js"))
        return noControl<InferenceError | Policy.PolicyConfigError>(parsingTools(args)(OpenAiCompat.layerUndici({
          baseUrl,
          model,
          apiKey,
          seeded: args.seededSampling,
          strict: args.strictOpenai,
          requestTimeout: timeout === undefined ? undefined : Duration.millis(timeout * 1000),
          retries: Option.getOrUndefined(args.retries),
          concurrency: Option.getOrUndefined(args.inferenceConcurrency),
          // The token path needs the sampled ids, which only come with logprobs asked for.
          sampling: args.noLogprobs ? { logprobs: false } : undefined,
          tokenPath: Option.getOrUndefined(args.tokenPath),
          tokenizer: Option.getOrUndefined(args.tokenizer),
          chatTemplateKwargs: yield* chatTemplateKwargs(args.chatTemplateKwargs),
          maxTransportFailures,
          rejectedFields
        })))
      }
      case "colocate": {
        yield* rejectOthers(args, [[SERVER_ONLY, "--mode server"]])
        const modelPath = yield* required("--model", args.model, "colocate")
        const LlamaCpp = yield* Effect.promise(() => import("../inference/LlamaCpp.js"))
        return noControl<InferenceError | Policy.PolicyConfigError>(parsingTools(args)(LlamaCpp.layer({
          modelPath,
          contextSize: Option.getOrUndefined(args.contextSize),
          gpuLayers: Option.getOrUndefined(args.gpuLayers),
          threads: Option.getOrUndefined(args.threads),
          sequences: Option.getOrUndefined(args.inferenceConcurrency),
          chatTemplateKwargs: yield* chatTemplateKwargs(args.chatTemplateKwargs)
        })))
      }
      case "swift-rollout": {
        yield* rejectOthers(args, [[COLOCATE_ONLY, "--mode colocate"], [NOT_SWIFT, "--mode server"], [MODEL_NOT_SWIFT, "--mode server or --mode colocate"]])
        const baseUrl = yield* required("--base-url", args.baseUrl, "swift-rollout")
        const apiKey = yield* apiKeyOf(args)
        const timeout = yield* requestTimeoutOf(args)
        const maxTransportFailures = yield* maxTransportFailuresOf(args)
        const SwiftRollout = yield* Effect.promise(() => import("../inference/SwiftRollout.js"))
        const options = {
          baseUrl,
          apiKey,
          seeded: args.seededSampling,
          sampling: args.noLogprobs ? { logprobs: false } : undefined,
          requestTimeout: timeout === undefined ? undefined : Duration.millis(timeout * 1000),
          retries: Option.getOrUndefined(args.retries),
          concurrency: Option.getOrUndefined(args.inferenceConcurrency),
          chatTemplateKwargs: yield* chatTemplateKwargs(args.chatTemplateKwargs),
          maxTransportFailures
        }
        return Layer.effectContext(
          Effect.map(SwiftRollout.makeScoped(options), (swift) =>
            Context.make(Inference, swift.service).pipe(Context.add(Control, Option.some(swift.control))))
        ) as Layer.Layer<Inference | Control, InferenceError | Policy.PolicyConfigError>
      }
    }
  }))

/**
 * The drift check of `--tito-check`: each trajectory's final conversation re-tokenized by the
 * backend's own template and tokenizer and compared with its token sequence. Without the flag it
 * does nothing; with a backend that cannot re-tokenize (the chat path, a scripted policy) the flag
 * is an error before anything runs.
 *
 * @since 0.2.0
 * @category options
 */
export const driftCheck = (
  args: Pick<InferenceArgs, "titoCheck" | "chatTemplateKwargs">,
  service: Service
): Effect.Effect<
  { readonly add: (item: Item) => Effect.Effect<void>; readonly into: (summary: Summary) => Summary },
  OptionError
> =>
  Effect.gen(function*() {
    const retokenize = service.retokenize
    if (!args.titoCheck) return { add: () => Effect.void, into: (summary) => summary }
    if (retokenize === undefined) {
      return yield* new OptionError({
        option: "--tito-check",
        detail: `needs a backend that generates from tokens (colocate, or server mode's token path); ${service.name} does not`
      })
    }
    const kwargs = yield* chatTemplateKwargs(args.chatTemplateKwargs)
    const check = new DriftCheck()
    return {
      add: (item) =>
        item._tag !== "Group" ? Effect.void : Effect.forEach(item.records, (record) => {
          const tokens = record.result.tokens
          if (tokens?._tag !== "Sequence") return Effect.sync(() => check.add(record.result.id, undefined, undefined))
          return retokenize(record.result.messages, kwargs, record.result.tools).pipe(
            Effect.match({
              onFailure: () => check.add(record.result.id, undefined, undefined),
              onSuccess: (ids) => check.add(record.result.id, tokens.sequence, ids)
            })
          )
        }, { discard: true }),
      into: (summary) => ({ ...summary, titoCheck: check.report() })
    }
  })
