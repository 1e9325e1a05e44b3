/**
 * The token view of a trajectory: per turn, each model token's id, loss mask and logprob from the
 * log, and its text when a tokenizer is at hand.
 *
 * The log keeps token ids, not their text. Text shown for a token must come from the tokenizer that
 * made the ids, so the viewer decodes only with one it is given (`--model FILE.gguf`: the GGUF's
 * own vocabulary, loaded without weights) and checks the decoded turn against the message the log
 * holds; without one it shows ids and says why.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as path from "node:path"
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
  readonly vocabularySize: number
}

/**
 * @since 0.1.0
 * @category errors
 */
export class TokenizerError extends Schema.TaggedError<TokenizerError>("effect-gym/view/TokenizerError")(
  "TokenizerError",
  { file: Schema.String, detail: Schema.String, cause: Schema.optional(Schema.Defect) }
) {
  override get message(): string {
    return `--model ${this.file}: ${this.detail}`
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
      vocabularySize,
      piece: (id) => model.detokenize([id as Id], true),
      decode: (ids) => model.detokenize(ids as ReadonlyArray<Id>, false)
    }
  })

const numbers = (u: unknown): ReadonlyArray<number> | null =>
  Array.isArray(u) && u.every((x) => typeof x === "number") ? (u as ReadonlyArray<number>) : null

/**
 * The token view of a log line, or `null` when it has no token fields.
 *
 * @since 0.1.0
 * @category views
 */
export const view = (line: Record<string, unknown>, tokenizer: Tokenizer | undefined): TokenView | null => {
  const ids = line.response_token_ids
  if (!Array.isArray(ids)) return null
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
      text: tokenizer === undefined ? null : tokenizer.piece(id),
      mask: mask?.[k] ?? null,
      logprob: lp?.[k] ?? null
    }))
    let decoded: string | null = null
    let matches: TokenTurn["matches"] = null
    if (tokenizer !== undefined) {
      const outOfRange = turnIds.filter((id) => id < 0 || (tokenizer.vocabularySize > 0 && id >= tokenizer.vocabularySize))
      if (outOfRange.length > 0) {
        problems.push(
          `${outOfRange.length} token ids are outside the vocabulary of ${tokenizer.name} (${tokenizer.vocabularySize} tokens): ` +
            "not the tokenizer of this run"
        )
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
        "start the viewer with --model FILE.gguf (the GGUF the run used, or one with the same vocabulary)."
      : `Token text decoded with ${tokenizer.name}; each turn's decoded text is checked against its message.`,
    turns
  }
}
