/**
 * Colocate mode: the `Inference` service on an in-process llama.cpp engine (node-llama-cpp), from
 * a GGUF file.
 *
 * - The model loads once per layer (`Layer.effect`, scoped): runtime, model and context are released, in
 *   that reverse order, when the scope closes. node-llama-cpp is imported lazily, so a machine
 *   without it (or without a usable binary) gets an `Unavailable` error here and nothing else breaks.
 * - Concurrent trajectories share one context of `sequences` sequences; a call holds one sequence
 *   (a semaphore bounds them) and node-llama-cpp batches the evaluations of all busy sequences.
 *   Evaluation runs on llama.cpp's threads, never on the event loop. A trajectory's next turn
 *   prefers the sequence it used last, so the shared prefix of its prompt is not evaluated again.
 * - The prompt is the model's own chat template (`tokenizer.chat_template` in the GGUF), rendered as
 *   Hugging Face's `apply_chat_template(..., add_generation_prompt=True)` renders it (see
 *   `ChatTemplate`; node-llama-cpp's own Jinja wrapper renders an empty assistant message instead,
 *   which turns Qwen3's thinking off) with the chat-template kwargs, and tokenized by the model.
 *   A file without a template gets the wrapper node-llama-cpp infers from the model's name and
 *   architecture, else its general-purpose format.
 * - Tools the env offers are the template's `tools`, and tool calls and results are rendered by it
 *   (see `ChatTemplate`); the calls are read out of the generated text by the run's tool parser. A
 *   file without a template cannot take tools (the wrapper's own function format is not the model's).
 * - Token in, token out (see `PromptTokens`): a trajectory's next prompt is its previous prompt, the
 *   tokens the model sampled, and the template's tokens for the new messages only; the sequence's
 *   KV cache is reused up to there, so only the new tokens are evaluated.
 * - Every completion carries its token ids and the logprob of each token under the distribution it
 *   was drawn from (after penalties, top-k, top-p and temperature; with temperature 0 the model's
 *   own distribution). The end-of-generation token, when one was sampled, is part of the token ids
 *   (it is model output, trained on) but not of the text. A stop string cuts the text; the tokens
 *   sampled up to it stay.
 * - Sampling is seeded with each call's seed, so a run is reproducible for a fixed `--seed` (with
 *   one sequence, or the same schedule: batching different sequences together can change logits in
 *   the last bits). Defaults follow the OpenAI API: temperature 1, no top-k, top-p 1.
 *
 * @since 0.1.0
 */
import { Config, Console, Effect, Layer, Result, type Scope, Semaphore } from "effect"
import * as fs from "node:fs/promises"
import type * as NodeLlamaCpp from "node-llama-cpp"
import type { ChatRequest, Completion, Feature, FinishReason, SamplingParams, Service } from "../Inference.js"
import { Inference, InferenceError } from "../Inference.js"
import { errorMessage } from "../internal/lift.js"
import type { Message } from "../Message.js"
import type * as Tool from "../Tool.js"
import * as ChatTemplate from "./ChatTemplate.js"
import * as Binding from "./internal/nodeLlamaCpp.js"
import * as Normalizer from "./internal/normalizer.js"
import * as PromptTokens from "./PromptTokens.js"
import * as Sampling from "./Sampling.js"
import { optionProblem } from "../internal/whole.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** A GGUF file. */
  readonly modelPath: string
  /** Tokens per sequence (prompt and completion). Default: the model's training context, at most 4096. */
  readonly contextSize?: number | undefined
  /** Layers offloaded to a GPU. Default 0: CPU only. */
  readonly gpuLayers?: number | undefined
  /** CPU threads for evaluation. Default: the machine's math cores but one (left to the event loop). */
  readonly threads?: number | undefined
  /** Completions generated at once (sequences of the context). Default 4. */
  readonly sequences?: number | undefined
  /** Defaults under each call's own parameters. */
  readonly sampling?: SamplingParams | undefined
  /** The module to import instead of `node-llama-cpp` (a fork, a wrapper). */
  readonly module?: string | undefined
  /** Variables of the chat template (`{"enable_thinking": false}`), under each call's own. */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  /** A chat template (Jinja) to use instead of the file's. */
  readonly chatTemplate?: string | undefined
  /**
   * The Unicode normalization of the text between special tokens before llama.cpp tokenizes it, as
   * the model's `tokenizer.json` normalizer does (a GGUF does not record it). Default: `NFC` for a
   * file whose pre-tokenizer is `qwen2` (Qwen2, Qwen2.5, Qwen3), else `none`.
   */
  readonly normalizer?: "NFC" | "NFD" | "NFKC" | "NFKD" | "none" | undefined
}

/**
 * The loaded engine, for callers that want more than the `Inference` service (the prompt format).
 *
 * @since 0.1.0
 * @category models
 */
export interface Engine {
  readonly service: Service
  /** The chat wrapper node-llama-cpp resolved (`JinjaTemplate` when the file's own template is used as is). */
  readonly chatWrapper: string
  readonly contextSize: number
  readonly sequences: number
  readonly loadMs: number
  /** The prompt of a conversation, as text (special tokens shown) and as token ids. */
  readonly formatPrompt: (
    messages: ReadonlyArray<Message>,
    kwargs?: Readonly<Record<string, unknown>>
  ) => {
    readonly text: string
    readonly tokens: ReadonlyArray<number>
  }
  /** Renders and tokenizes prompts (the first, and the tokens between turns). */
  readonly renderer: PromptTokens.Renderer
}

const BACKEND = Binding.BACKEND

/** llama.cpp's min-p sampler is vLLM's; its repeat penalty is not vLLM's repetition_penalty, and there is no regex. */
const HONOURS: ReadonlySet<Feature> = new Set(["topK", "minP", "chatTemplateKwargs"])
/** vLLM's floor for a logprob: keeps `-Infinity` (a probability that underflowed) out of the JSON log. */
const MIN_LOGPROB = -9999

const invalid = (detail: string, cause?: unknown) =>
  new InferenceError({ reason: "InvalidRequest", backend: BACKEND, detail, ...(cause === undefined ? {} : { cause }) })

/**
 * Checks the options without loading anything.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (options: Options): Result.Result<Options, InferenceError> => {
  const problem = optionProblem("--context-size", options.contextSize, 16) ??
    optionProblem("--gpu-layers", options.gpuLayers, 0) ??
    optionProblem("--threads", options.threads, 0) ??
    optionProblem("--inference-concurrency", options.sequences, 1)
  if (problem !== undefined) return Result.fail(invalid(problem))
  if (options.modelPath.trim() === "") return Result.fail(invalid("--model: a GGUF file path is required"))
  if (options.normalizer !== undefined && options.normalizer !== "none" && !Normalizer.isForm(options.normalizer)) {
    return Result.fail(invalid(`normalizer: ${JSON.stringify(options.normalizer)} is not NFC, NFD, NFKC, NFKD or none`))
  }
  return Result.map(Sampling.validate(BACKEND, options.sampling ?? {}), () => options)
}

/**
 * Checks that the file exists and starts with the GGUF magic, so a wrong path gets a plain answer
 * instead of llama.cpp's.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkModelFile = (path: string): Effect.Effect<void, InferenceError> =>
  Effect.tryPromise({
    try: async () => {
      const handle = await fs.open(path, "r")
      try {
        const stat = await handle.stat()
        if (!stat.isFile()) return "not a file"
        const magic = Buffer.alloc(4)
        const { bytesRead } = await handle.read(magic, 0, 4, 0)
        return bytesRead === 4 && magic.toString("latin1") === "GGUF" ? undefined : "not a GGUF file (no GGUF magic)"
      } finally {
        await handle.close()
      }
    },
    catch: (cause) => {
      const code = (cause as { code?: unknown }).code
      return invalid(
        code === "ENOENT" ? `--model ${path}: no such file` : `--model ${path}: cannot read it: ${errorMessage(cause)}`,
        cause
      )
    }
  }).pipe(
    Effect.flatMap((problem) =>
      problem === undefined ? Effect.void : Effect.fail(invalid(`--model ${path}: ${problem}`))
    )
  )

type Token = NodeLlamaCpp.Token

interface Slot {
  readonly sequence: NodeLlamaCpp.LlamaContextSequence
  inUse: boolean
  owner: string | undefined
  lastUsed: number
  running: Promise<void> | undefined
}

interface Generated {
  readonly text: string
  readonly finishReason: FinishReason
  readonly tokenIds: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
}

const toHistory = (
  messages: ReadonlyArray<Message>,
  addGenerationPrompt: boolean
): Array<NodeLlamaCpp.ChatHistoryItem> => {
  const history: Array<NodeLlamaCpp.ChatHistoryItem> = messages.map((m): NodeLlamaCpp.ChatHistoryItem =>
    m.role === "system"
      ? { type: "system", text: m.content }
      : m.role === "assistant"
      ? { type: "model", response: [m.content] }
      : { type: "user", text: m.content }
  )
  // An empty model turn at the end asks the wrapper for the generation prompt.
  if (addGenerationPrompt) history.push({ type: "model", response: [] })
  return history
}

const startsWith = (tokens: ReadonlyArray<Token>, prefix: ReadonlyArray<Token>): boolean => {
  if (prefix.length > tokens.length) return false
  for (let i = 0; i < prefix.length; i++) if (tokens[i] !== prefix[i]) return false
  return true
}

const endsWith = (tokens: ReadonlyArray<Token>, suffix: ReadonlyArray<Token>): boolean => {
  if (suffix.length === 0 || suffix.length > tokens.length) return false
  const offset = tokens.length - suffix.length
  for (let i = 0; i < suffix.length; i++) if (tokens[offset + i] !== suffix[i]) return false
  return true
}

/** The prompts of node-llama-cpp's own chat format (for a file without a usable template). */
const wrapperRenderer = (
  wrapper: NodeLlamaCpp.ChatWrapper,
  model: NodeLlamaCpp.LlamaModel
): PromptTokens.Renderer => {
  const tokens = (messages: ReadonlyArray<Message>, addGenerationPrompt: boolean) =>
    wrapper.generateContextState({ chatHistory: toHistory(messages, addGenerationPrompt) }).contextText.tokenize(
      model.tokenizer
    )
  // The wrapper's own function-calling format is not the model's: tools are not rendered by guess.
  const noTools = (tools: ReadonlyArray<unknown> | undefined) =>
    tools !== undefined && tools.length > 0
      ? Effect.fail(invalid(
        `the model file has no usable chat template, and node-llama-cpp's ${wrapper.wrapperName} chat format does ` +
          "not render tools as the model was trained to see them (use a GGUF with the model's template, or give " +
          "it as the chatTemplate option)"
      ))
      : undefined
  return {
    name: `node-llama-cpp's ${wrapper.wrapperName} chat format`,
    isSpecial: (id) => model.isSpecialToken(id as Token),
    tokenize: (messages, { addGenerationPrompt, tools }) =>
      noTools(tools) ?? Effect.try({
        try: () => tokens(messages, addGenerationPrompt),
        catch: (cause) => invalid(`the ${wrapper.wrapperName} chat format failed: ${errorMessage(cause)}`, cause)
      }),
    // The wrapper renders a last model message open (no closing): the tokens after the reply are
    // what the whole conversation adds to that.
    after: (messages, reply, _kwargs, tools) =>
      noTools(tools) ?? Effect.try({
        try: () => {
          const marked = PromptTokens.withMarker(messages, reply)
          const open = tokens(marked.slice(0, reply + 1), false)
          const full = tokens(marked, true)
          if (!startsWith(full, open)) throw new Error("the conversation does not extend the reply's rendering")
          return full.slice(open.length)
        },
        catch: (cause) => invalid(`the ${wrapper.wrapperName} chat format: ${errorMessage(cause)}`, cause)
      })
  }
}

/**
 * Loads the engine in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeEngine = (options: Options): Effect.Effect<Engine, InferenceError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* Effect.fromResult(validate(options))
    yield* checkModelFile(options.modelPath)
    const binding = yield* Binding.load(options.module)
    const sequences = options.sequences ?? 4
    if (sequences > 1) {
      const version = yield* Binding.version(binding)
      if (version !== undefined && Binding.older(version, Binding.BATCHED_SAMPLING_FIXED)) {
        return yield* invalid(
          `node-llama-cpp ${version} gives wrong logprobs with more than one sequence (the sequences of a batch ` +
            `can be sampled from each other's logits; fixed in ${Binding.BATCHED_SAMPLING_FIXED}): npm install ` +
            `node-llama-cpp@3.22.1, or set --inference-concurrency 1`
        )
      }
    }
    const started = performance.now()
    const log = new Binding.LogTail()
    const gpuLayers = options.gpuLayers ?? 0
    const withLog = (detail: string) => (log.text === "" ? detail : `${detail} (llama.cpp: ${log.text})`)

    const llama = yield* Effect.acquireRelease(
      Binding.getLlama(binding, { gpu: gpuLayers > 0, log }),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const model = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => llama.loadModel({ modelPath: options.modelPath, gpuLayers }),
        catch: (cause) =>
          invalid(withLog(`--model ${options.modelPath}: cannot load the model: ${errorMessage(cause)}`), cause)
      }),
      (model) => Effect.promise(() => model.dispose())
    )
    // llama.cpp's threads spin while they wait for each other: more threads than free cores (its
    // default counts every core, and the event loop needs one) makes evaluation orders of magnitude
    // slower, not faster.
    const threads = options.threads ?? Math.max(1, llama.cpuMathCores - 1)
    const trained = model.trainContextSize
    const contextSize = options.contextSize ?? Math.min(trained > 0 ? trained : 4096, 4096)
    const context = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () =>
          model.createContext({
            contextSize,
            sequences,
            threads,
            // Fail rather than silently shrink: the context size is part of what the user asked for.
            failedCreationRemedy: false
          }),
        catch: (cause) =>
          invalid(
            withLog(`cannot create a context of ${sequences} x ${contextSize} tokens: ${errorMessage(cause)} ` +
              "(try a smaller --context-size or --inference-concurrency)"),
            cause
          )
      }),
      (context) => Effect.promise(() => context.dispose())
    )
    const slots: Array<Slot> = Array.from({ length: sequences }, () => ({
      sequence: context.getSequence(),
      inUse: false,
      owner: undefined,
      lastUsed: 0,
      running: undefined
    }))
    const semaphore = yield* Semaphore.make(sequences)
    const checkSampling = Sampling.checker(BACKEND, options.sampling ?? {})
    const samplingOf = (call: SamplingParams): Result.Result<SamplingParams, InferenceError> =>
      Result.flatMap(checkSampling(call), (sampling) => {
        const unsupported = Sampling.requireHonoured(BACKEND, sampling, HONOURS)
        return unsupported === undefined ? Result.succeed(sampling) : Result.fail(unsupported)
      })
    let clock = 0

    // The model's own template, rendered as Hugging Face renders it; the wrapper only without one.
    const source = options.chatTemplate ?? model.fileInfo.metadata?.tokenizer?.chat_template
    let template: ChatTemplate.ChatTemplate | undefined
    let unusable: ChatTemplate.ChatTemplateError | undefined
    if (source !== undefined) {
      const specialTokens: Record<string, string> = {}
      if (model.tokens.bosString !== null) specialTokens.bos_token = model.tokens.bosString
      if (model.tokens.eosString !== null) specialTokens.eos_token = model.tokens.eosString
      const made = ChatTemplate.make(source, specialTokens)
      if (Result.isSuccess(made)) template = made.success
      else if (options.chatTemplate !== undefined) return yield* invalid(`chat template: ${made.failure.detail}`, made.failure)
      else unusable = made.failure
    }
    let wrapper: NodeLlamaCpp.ChatWrapper | undefined
    let renderer: PromptTokens.Renderer
    if (template !== undefined) {
      const vocabulary = model.fileInfo.metadata?.tokenizer?.ggml
      const form = options.normalizer ?? Normalizer.byPreTokenizer[String(vocabulary?.pre)] ?? "none"
      const normalize = form === "none"
        ? undefined
        : Normalizer.make(form, Normalizer.addedTokens(vocabulary?.tokens, vocabulary?.token_type))
      renderer = PromptTokens.local({
        name: "the model's chat template",
        backend: BACKEND,
        template,
        encode: (text) => model.tokenize(normalize === undefined ? text : normalize(text), true),
        isSpecial: (id) => model.isSpecialToken(id as Token),
        kwargs: options.chatTemplateKwargs
      })
    } else {
      // node-llama-cpp's own format, resolved only without a usable template: resolving it renders
      // the file's template against every format it knows (seconds of CPU for Qwen3's).
      wrapper = binding.resolveChatWrapper(model, { warningLogs: false })
      if (unusable !== undefined) {
        // The file's template is beyond the renderer: node-llama-cpp's own format, as before.
        yield* Console.error(
          `warning: ${options.modelPath}: ${unusable.detail}; using node-llama-cpp's ${wrapper.wrapperName} chat format`
        )
      }
      renderer = wrapperRenderer(wrapper, model)
    }
    const loadMs = performance.now() - started
    const promptFormat = wrapper === undefined ? "JinjaTemplate" : wrapper.wrapperName

    // Stop triggers of the wrapper (the template's own end of turn is an end-of-generation token).
    const wrapperStops = (() => {
      const tokenStops: Array<ReadonlyArray<Token>> = []
      const textStops: Array<string> = []
      if (wrapper === undefined) return { tokenStops, textStops }
      const state = wrapper.generateContextState({ chatHistory: toHistory([], true) })
      for (const trigger of state.stopGenerationTriggers) {
        const plain = trigger.values.every((v) => typeof v === "string")
        if (plain) {
          const text = trigger.values.join("")
          if (text !== "") textStops.push(text)
          continue
        }
        const ids = trigger.tokenize(model.tokenizer)
        // A lone end-of-generation token already ends the completion.
        if (ids.length > 0 && !(ids.length === 1 && model.isEogToken(ids[0]))) tokenStops.push(ids)
      }
      return { tokenStops, textStops }
    })()

    const formatPrompt = (messages: ReadonlyArray<Message>, kwargs?: Readonly<Record<string, unknown>>) => {
      const tokens = Effect.runSync(renderer.tokenize(messages, { addGenerationPrompt: true, kwargs })) as Array<Token>
      return { text: model.detokenize(tokens, true), tokens }
    }

    /** One completion on one sequence; resolves early (and cleanly) when `signal` aborts. */
    const generate = async (
      slot: Slot,
      prompt: ReadonlyArray<Token>,
      stops: { readonly tokens: ReadonlyArray<ReadonlyArray<Token>>; readonly text: ReadonlyArray<string> },
      sampling: SamplingParams,
      seed: number,
      signal: AbortSignal
    ): Promise<Generated> => {
      const sequence = slot.sequence
      const budget = sequence.contextSize - prompt.length
      if (budget < 1) {
        throw invalid(
          `the prompt has ${prompt.length} tokens; the context holds ${sequence.contextSize} (raise --context-size)`
        )
      }
      const maxTokens = Math.min(sampling.maxTokens ?? budget, budget)
      // Keep the part of the sequence's state that the new prompt shares; at least one prompt token
      // is evaluated again, for the logits of the first completion token.
      const shared = Math.min(sequence.compareContextTokens([...prompt]).firstDifferentIndex, prompt.length - 1)
      if (shared < sequence.nextTokenIndex) {
        await sequence.eraseContextTokenRanges([{ start: shared, end: sequence.nextTokenIndex }])
      }
      const tokens: Array<Token> = []
      const logprobs: Array<number> = []
      let finishReason: FinishReason = "length"
      let cut: number | undefined // tokens that are not text (end of generation, a token stop)
      let textCut: string | undefined
      const penalize = sampling.presencePenalty !== undefined || sampling.frequencyPenalty !== undefined
      const generator = sequence.evaluateWithMetadata(prompt.slice(shared), { confidence: true }, {
        temperature: sampling.temperature ?? 1,
        // -1 (no limit, as vLLM says it) is llama.cpp's 0.
        topK: sampling.topK === undefined || sampling.topK < 0 ? 0 : sampling.topK,
        topP: sampling.topP ?? 1,
        minP: sampling.minP ?? 0,
        seed,
        yieldEogToken: true,
        ...(penalize
          ? {
            repeatPenalty: {
              punishTokens: () => tokens,
              maxPunishTokens: maxTokens,
              penalty: 1,
              presencePenalty: sampling.presencePenalty ?? 0,
              frequencyPenalty: sampling.frequencyPenalty ?? 0
            }
          }
          : {})
      })
      for await (const output of generator) {
        tokens.push(output.token)
        logprobs.push(Math.max(Math.log(output.confidence), MIN_LOGPROB))
        if (model.isEogToken(output.token)) {
          finishReason = "stop"
          cut = 1
          break
        }
        const tokenStop = stops.tokens.find((stop) => endsWith(tokens, stop))
        if (tokenStop !== undefined) {
          finishReason = "stop"
          cut = tokenStop.length
          break
        }
        if (stops.text.length > 0) {
          const text = model.detokenize(tokens, false, prompt)
          let at = -1
          for (const stop of stops.text) {
            const found = text.indexOf(stop)
            if (found >= 0 && (at < 0 || found < at)) at = found
          }
          if (at >= 0) {
            finishReason = "stop"
            textCut = text.slice(0, at)
            break
          }
        }
        if (tokens.length >= maxTokens || signal.aborted) break
      }
      const text = textCut ?? model.detokenize(cut === undefined ? tokens : tokens.slice(0, -cut), false, prompt)
      return { text, finishReason, tokenIds: tokens, logprobs }
    }

    const acquire = (owner: string) =>
      Effect.sync(() => {
        // A permit is held, so some slot is free. Prefer the trajectory's own: its KV cache holds
        // the conversation so far.
        let chosen: Slot | undefined
        for (const slot of slots) {
          if (slot.inUse) continue
          if (slot.owner === owner) {
            chosen = slot
            break
          }
          if (chosen === undefined || slot.lastUsed < chosen.lastUsed) chosen = slot
        }
        const slot = chosen!
        slot.inUse = true
        slot.owner = owner
        slot.lastUsed = ++clock
        return slot
      })

    const release = (slot: Slot) =>
      Effect.andThen(
        // An interrupted call's generation stops at its next token; the sequence is reused after.
        Effect.promise(() => slot.running ?? Promise.resolve()),
        Effect.sync(() => {
          slot.running = undefined
          slot.inUse = false
        })
      )

    const chat = (request: ChatRequest): Effect.Effect<Completion, InferenceError> =>
      Effect.suspend(() => {
        const checked = samplingOf(request.sampling)
        if (Result.isFailure(checked)) return Effect.fail(checked.failure)
        const sampling = checked.success
        // The template renders the tools; nothing here can make the model call one (or none).
        const choice = request.toolChoice
        if (request.tools !== undefined && request.tools.length > 0 && choice !== undefined && choice !== "auto") {
          return Effect.fail(
            new InferenceError({
              reason: "InvalidRequest",
              backend: BACKEND,
              field: "tool_choice",
              detail: `tool_choice ${JSON.stringify(choice)} is not supported in colocate mode (only "auto": the ` +
                "model's template renders the tools, and nothing constrains the reply)"
            })
          )
        }
        const stops = { tokens: wrapperStops.tokenStops, text: [...wrapperStops.textStops, ...(sampling.stop ?? [])] }
        return Effect.flatMap(PromptTokens.prompt(renderer, request, request.chatTemplateKwargs), (prompt) => {
          const tokens = prompt.tokenIds as ReadonlyArray<Token>
          return semaphore.withPermit(
          Effect.acquireUseRelease(
            acquire(request.trajectoryId),
            (slot) =>
              Effect.callback<Generated, InferenceError>((resume, signal) => {
                const running = generate(slot, tokens, stops, sampling, request.seed, signal)
                slot.running = running.then(() => undefined, () => undefined)
                running.then(
                  (generated) => resume(Effect.succeed(generated)),
                  (cause) =>
                    resume(Effect.fail(
                      cause instanceof InferenceError
                        ? cause
                        : new InferenceError({
                          reason: "ServerError",
                          backend: BACKEND,
                          detail: errorMessage(cause),
                          cause
                        })
                    ))
                )
              }),
            release
          )
          ).pipe(Effect.map((generated): Completion => ({ ...generated, promptTokens: tokens.length, prompt })))
        })
      })

    const retokenize = (
      messages: ReadonlyArray<Message>,
      kwargs?: Readonly<Record<string, unknown>>,
      tools?: ReadonlyArray<Tool.Spec>
    ) => renderer.tokenize(messages, { addGenerationPrompt: false, kwargs, tools })

    const name = `colocate ${options.modelPath} ` +
      `(${wrapper === undefined ? "the model's chat template" : `${wrapper.wrapperName} chat format`}, ` +
      `${sequences} sequences x ${context.contextSize} tokens)`
    return {
      service: { name, chat, retokenize, honours: HONOURS, chatTemplate: template?.source },
      chatWrapper: promptFormat,
      contextSize: context.contextSize,
      sequences,
      loadMs,
      formatPrompt,
      renderer
    } satisfies Engine
  })

/**
 * The service, loaded in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Service, InferenceError, Scope.Scope> =>
  Effect.map(makeEngine(options), (engine) => engine.service)

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Inference, InferenceError> =>
  Layer.effect(Inference, make(options))

/**
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Wrap<Options>
): Layer.Layer<Inference, InferenceError | Config.ConfigError> =>
  Layer.effect(Inference, Effect.flatMap(Config.unwrap(config), make))

/**
 * Whether colocate mode can run on this machine: node-llama-cpp imports and its llama.cpp runtime
 * starts (nothing is loaded). `reason` says why not.
 *
 * @since 0.1.0
 * @category diagnostics
 */
export const probe: Effect.Effect<
  { readonly available: true; readonly gpu: string | false } | { readonly available: false; readonly reason: string }
> = Binding.probe()
