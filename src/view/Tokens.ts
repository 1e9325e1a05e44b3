/**
 * The token view of a trajectory: per turn, each model token's id, loss mask and logprob from the
 * log, and its text when a tokenizer is at hand.
 *
 * The log keeps token ids, not their text. Text shown for a token must come from the tokenizer that
 * made the ids, so the viewer decodes only with one it is given (`--model FILE.gguf`: the GGUF's
 * own vocabulary, loaded without weights; `--tokenizer DIR`: a Hugging Face model folder, as server
 * mode's token path loads it) and checks the decoded turn against the message the log holds;
 * without one it shows ids and says why.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as path from "node:path"
import * as HfTokenizer from "../inference/HfTokenizer.js"
import * as Binding from "../inference/internal/nodeLlamaCpp.js"
import { isRecord } from "../internal/inspect.js"
import { errorMessage } from "../internal/lift.js"
import type { Token, TokenTurn, TokenView } from "./Detail.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Tokenizer {
  /** Shown on the page: what decodes the ids. */
  readonly name: string
  /** One token's text, special tokens included (`<|im_end|>`). */
  readonly piece: (id: number) => string
  /** A turn's text as the backend writes it (special tokens left out). */
  readonly decode: (ids: ReadonlyArray<number>) => string
  /** Whether an id is in the vocabulary. */
  readonly known: (id: number) => boolean
}

/**
 * @since 0.1.0
 * @category errors
 */
export class TokenizerError extends Schema.TaggedError<TokenizerError>("effect-gym/view/TokenizerError")(
  "TokenizerError",
  {
    option: Schema.String.pipe(Schema.withConstructorDefault(Effect.succeed("--model"))),
    file: Schema.String,
    detail: Schema.String,
    cause: Schema.optional(Schema.Defect())
  }
) {
  override get message(): string {
    return `${this.option} ${this.file}: ${this.detail}`
  }
}

/**
 * The vocabulary of a GGUF model (node-llama-cpp, `vocabOnly`: no weights are loaded), released
 * with the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromGguf = (file: string): Effect.Effect<Tokenizer, TokenizerError, Scope.Scope> =>
  Effect.gen(function*() {
    if (!fs.existsSync(file)) return yield* new TokenizerError({ file, detail: "no such file" })
    const fail = (detail: string) => (cause: unknown) =>
      new TokenizerError({ file, detail: `${detail}: ${errorMessage(cause)}`, cause })
    const binding = yield* Effect.mapError(Binding.load(), (e) => new TokenizerError({ file, detail: e.detail }))
    const llama = yield* Effect.acquireRelease(
      Effect.mapError(Binding.getLlama(binding, { gpu: false, log: new Binding.LogTail() }), (e) =>
        new TokenizerError({ file, detail: e.detail })),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const model = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => llama.loadModel({ modelPath: file, vocabOnly: true }),
        catch: fail("cannot read the model's vocabulary")
      }),
      (model) => Effect.promise(() => model.dispose())
    )
    const vocabularySize = Number(model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0)
    type Id = Parameters<typeof model.detokenize>[0][number]
    return {
      name: `${path.basename(file)} (the GGUF model's own vocabulary)`,
      known: (id) => Number.isInteger(id) && id >= 0 && (vocabularySize === 0 || id < vocabularySize),
      piece: (id) => model.detokenize([id as Id], true),
      decode: (ids) => model.detokenize(ids as ReadonlyArray<Id>, false)
    }
  })

/**
 * A Hugging Face tokenizer from a model's folder (`tokenizer.json`, `tokenizer_config.json`), loaded
 * as server mode's token path loads it (`HfTokenizer`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromHf = (dir: string): Effect.Effect<Tokenizer, TokenizerError> =>
  HfTokenizer.load(dir, { option: "--tokenizer" }).pipe(
    Effect.mapError((error) => new TokenizerError({ option: "--tokenizer", file: dir, detail: error.detail.replace(`--tokenizer ${dir}: `, "") })),
    Effect.map((tokenizer): Tokenizer => ({
      name: `the Hugging Face tokenizer in ${dir}`,
      known: (id) => tokenizer.tokenString(id) !== undefined,
      piece: (id) => tokenizer.decode([id]),
      decode: (ids) => tokenizer.decode(ids.filter((id) => !tokenizer.isSpecial(id)))
    }))
  )

const numbers = (u: unknown): ReadonlyArray<number> | null =>
  Array.isArray(u) && u.every((x) => typeof x === "number") ? (u as ReadonlyArray<number>) : null

/**
 * The token view of a log line, or `null` when it has no token fields.
 *
 * @since 0.1.0
 * @category views
 */
export const view = (line: Record<string, unknown>, tokenizer: Tokenizer | undefined): TokenView | null => {
  const ids = Array.isArray(line.response_token_ids) ? line.response_token_ids : []
  const sequence = sequenceOf(line, tokenizer)
  if (ids.length === 0 && sequence === null) return null
  const masks = Array.isArray(line.response_loss_mask) ? line.response_loss_mask : []
  const logprobs = Array.isArray(line.rollout_logprobs) ? line.rollout_logprobs : []
  const replies = (Array.isArray(line.messages) ? line.messages : [])
    .filter((m): m is Record<string, unknown> => isRecord(m) && m.role === "assistant")
    .map((m) => (typeof m.content === "string" ? m.content : ""))
  const turns: Array<TokenTurn> = ids.map((entry, i): TokenTurn => {
    const turnIds = numbers(entry)
    const message = replies[i] ?? null
    if (turnIds === null) {
      return {
        turn: i + 1,
        tokens: null,
        message,
        decoded: null,
        matches: null,
        problems: entry === null ? [] : [`response_token_ids[${i}] is not a list of numbers`]
      }
    }
    const mask = masks[i] === null || masks[i] === undefined ? null : numbers(masks[i])
    const lp = logprobs[i] === null || logprobs[i] === undefined ? null : numbers(logprobs[i])
    const problems: Array<string> = []
    if (masks[i] !== undefined && masks[i] !== null && (mask === null || mask.length !== turnIds.length)) {
      problems.push(`response_loss_mask[${i}] does not have one entry per token`)
    }
    if (logprobs[i] !== undefined && logprobs[i] !== null && (lp === null || lp.length !== turnIds.length)) {
      problems.push(`rollout_logprobs[${i}] does not have one entry per token`)
    }
    const tokens: Array<Token> = turnIds.map((id, k) => ({
      id,
      text: tokenizer === undefined || !tokenizer.known(id) ? null : tokenizer.piece(id),
      mask: mask?.[k] ?? null,
      logprob: lp?.[k] ?? null
    }))
    let decoded: string | null = null
    let matches: TokenTurn["matches"] = null
    if (tokenizer !== undefined) {
      const unknown = turnIds.filter((id) => !tokenizer.known(id))
      if (unknown.length > 0) {
        problems.push(`${unknown.length} token ids are not in the vocabulary of ${tokenizer.name}: not the tokenizer of this run`)
      } else {
        decoded = tokenizer.decode(turnIds)
        matches = message === null
          ? "differs"
          : decoded === message
          ? "exact"
          : decoded.trim() === message.trim()
          ? "whitespace"
          : "differs"
      }
    }
    return { turn: i + 1, tokens, message, decoded, matches, problems }
  })
  return {
    tokenizer: tokenizer?.name ?? null,
    note: tokenizer === undefined
      ? "The log holds token ids, not their text. Token text is shown only when decoded by the run's own tokenizer: " +
        "start the viewer with --tokenizer DIR (the model's Hugging Face folder) or --model FILE.gguf (the GGUF the run used)."
      : `Token text decoded with ${tokenizer.name}; each turn's decoded text is checked against its message.`,
    turns,
    sequence
  }
}

/** The token path's sequence of a line, checked: one mask entry and one logprob entry per token. */
const sequenceOf = (line: Record<string, unknown>, tokenizer: Tokenizer | undefined): TokenView["sequence"] => {
  if (line.token_ids === null) {
    return { unavailable: typeof line.token_ids_unavailable === "string" ? line.token_ids_unavailable : "no token sequence" }
  }
  const ids = numbers(line.token_ids)
  if (ids === null) return null
  const prompt = numbers(line.prompt_token_ids) ?? []
  const mask = Array.isArray(line.loss_mask) ? line.loss_mask : []
  const logprobs = Array.isArray(line.logprobs) ? line.logprobs : []
  const problems: Array<string> = []
  if (mask.length !== ids.length) problems.push(`loss_mask has ${mask.length} entries for ${ids.length} tokens`)
  if (logprobs.length !== 0 && logprobs.length !== ids.length) problems.push(`logprobs has ${logprobs.length} entries for ${ids.length} tokens`)
  const text = (id: number) => (tokenizer === undefined || !tokenizer.known(id) ? null : tokenizer.piece(id))
  return {
    prompt: prompt.map((id) => ({ id, text: text(id), mask: null, logprob: null })),
    tokens: ids.map((id, i) => ({
      id,
      text: text(id),
      mask: typeof mask[i] === "number" ? mask[i] : null,
      logprob: typeof logprobs[i] === "number" ? logprobs[i] : null
    })),
    problems
  }
}
