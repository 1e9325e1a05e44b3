/**
 * A Hugging Face tokenizer from a model's folder (`tokenizer.json`, `tokenizer_config.json`, and
 * `chat_template.jinja` when the template lives there), run in-process with
 * `@huggingface/tokenizers` (pinned): the local tokenizer of server mode's token path.
 *
 * Text is encoded as `apply_chat_template(..., tokenize=True)` encodes a rendered prompt: special
 * tokens written in the text (`<|im_start|>`) are their ids, and nothing (no BOS) is added; the
 * template adds what the model needs.
 *
 * @since 0.2.0
 */
import { Tokenizer } from "@huggingface/tokenizers"
import { Effect, Result } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { InferenceError } from "../Inference.js"
import { errorMessage } from "../internal/lift.js"
import * as ChatTemplate from "./ChatTemplate.js"

/**
 * @since 0.2.0
 * @category models
 */
export interface HfTokenizer {
  readonly path: string
  readonly encode: (text: string) => Array<number>
  readonly decode: (ids: ReadonlyArray<number>) => string
  /** A token's string in the vocabulary (byte-level form for BPE vocabularies: `Ġthe`). */
  readonly tokenString: (id: number) => string | undefined
  /** Ids of the special tokens (`<|im_end|>`, ...). */
  readonly isSpecial: (id: number) => boolean
  /** The model's chat template, when the folder has one. */
  readonly template: ChatTemplate.ChatTemplate | undefined
  /** The template's special-token variables (`bos_token`, `eos_token`, ...). */
  readonly specialTokens: Readonly<Record<string, string>>
}

const SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]

/** A special token in `tokenizer_config.json`: a string or an AddedToken object. */
const tokenText = (value: unknown): string | undefined =>
  typeof value === "string"
    ? value
    : typeof value === "object" && value !== null && typeof (value as { content?: unknown }).content === "string"
    ? (value as { content: string }).content
    : undefined

/** The config's chat template: a string, or a list of named ones (the `default`). */
const templateOf = (config: Record<string, unknown>): string | undefined => {
  const raw = config.chat_template
  if (typeof raw === "string") return raw
  if (Array.isArray(raw)) {
    const named = raw as Array<{ name?: unknown; template?: unknown }>
    const found = named.find((t) => t.name === "default") ?? named[0]
    return typeof found?.template === "string" ? found.template : undefined
  }
  return undefined
}

const invalid = (detail: string, cause?: unknown) =>
  new InferenceError({ reason: "InvalidRequest", backend: "tokenizer", detail, ...(cause === undefined ? {} : { cause }) })

const readJson = (file: string, option: string) =>
  Effect.tryPromise({
    try: async () => JSON.parse(await fs.readFile(file, "utf8")) as Record<string, unknown>,
    catch: (cause) =>
      invalid(
        (cause as { code?: unknown }).code === "ENOENT"
          ? `${option} ${path.dirname(file)}: no ${path.basename(file)} there (a Hugging Face model folder has one)`
          : `${option} ${file}: ${errorMessage(cause)}`,
        cause
      )
  })

/**
 * Loads the tokenizer of a model folder. `chatTemplate` replaces the folder's template.
 *
 * @since 0.2.0
 * @category constructors
 */
export const load = (
  dir: string,
  options: { readonly chatTemplate?: string | undefined; readonly option?: string } = {}
): Effect.Effect<HfTokenizer, InferenceError> =>
  Effect.gen(function*() {
    const option = options.option ?? "--tokenizer"
    const json = yield* readJson(path.join(dir, "tokenizer.json"), option)
    const config = yield* readJson(path.join(dir, "tokenizer_config.json"), option)
    const tokenizer = yield* Effect.try({
      try: () => new Tokenizer(json, config),
      catch: (cause) => invalid(`${option} ${dir}: tokenizer.json does not load: ${errorMessage(cause)}`, cause)
    })
    const specialTokens: Record<string, string> = {}
    for (const key of SPECIAL_KEYS) {
      const text = tokenText(config[key])
      if (text !== undefined) specialTokens[key] = text
    }
    const special = new Set<number>()
    for (const [id, token] of tokenizer.get_added_tokens_decoder()) if (token.special) special.add(id)
    let source = options.chatTemplate ?? templateOf(config)
    if (source === undefined) {
      source = yield* Effect.promise(() =>
        fs.readFile(path.join(dir, "chat_template.jinja"), "utf8").then((t) => t, () => undefined)
      )
    }
    let template: ChatTemplate.ChatTemplate | undefined
    if (source !== undefined) {
      const made = ChatTemplate.make(source, specialTokens)
      if (Result.isFailure(made)) return yield* invalid(`${option} ${dir}: ${made.failure.detail}`, made.failure)
      template = made.success
    }
    return {
      path: dir,
      encode: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
      decode: (ids) => tokenizer.decode([...ids], { skip_special_tokens: false }),
      tokenString: (id) => tokenizer.id_to_token(id),
      isSpecial: (id) => special.has(id),
      template,
      specialTokens
    } satisfies HfTokenizer
  })
