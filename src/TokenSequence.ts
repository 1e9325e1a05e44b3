/**
 * A trajectory as one token sequence, for trainers (TRL's `prompt_ids` / `completion_ids` /
 * `logprobs` / `env_mask`, verl's and SkyRL's interleaved sequences):
 *
 * - `promptTokenIds`: the templated first prompt;
 * - `tokenIds`: everything after it, in order: each turn's sampled tokens exactly as the backend
 *   returned them, then the template and observation tokens the next prompt added;
 * - `lossMask`: 1 exactly on sampled tokens;
 * - `logprobs`: the logprob of each sampled token, `null` elsewhere (and where the backend gave none).
 *
 * It is folded from the completions of a trajectory whose backend generated from tokens (each
 * completion's `prompt`): turn k's prompt must be turn k-1's prompt and sampled tokens, reused as
 * they are, plus new tokens. When a turn breaks that (a text backend, a scheduler that rewrote the
 * conversation) there is no single sequence, and the result says why instead.
 *
 * @since 0.2.0
 */
import type { Completion } from "./Inference.js"

/**
 * @since 0.2.0
 * @category models
 */
export interface TokenSequence {
  readonly promptTokenIds: ReadonlyArray<number>
  readonly tokenIds: ReadonlyArray<number>
  readonly lossMask: ReadonlyArray<0 | 1>
  readonly logprobs: ReadonlyArray<number | null>
}

/**
 * What a trajectory has: its sequence, or why it has none (`undefined` when no turn said anything
 * about tokens, e.g. a scripted policy).
 *
 * @since 0.2.0
 * @category models
 */
export type Outcome =
  | { readonly _tag: "Sequence"; readonly sequence: TokenSequence }
  | { readonly _tag: "Unavailable"; readonly reason: string }

/**
 * Folds completions, turn by turn, into the sequence.
 *
 * @since 0.2.0
 * @category folding
 */
export class Builder {
  private prompt: ReadonlyArray<number> | undefined = undefined
  private readonly ids: Array<number> = []
  private readonly mask: Array<0 | 1> = []
  private readonly logprobs: Array<number | null> = []
  private broken: string | undefined = undefined
  /** The first turn's backend said nothing about tokens (a scripted policy): nothing to report. */
  private silent = false
  private turn = 0

  add(completion: Completion): void {
    this.turn++
    if (this.broken !== undefined || this.silent) return
    const prompt = completion.prompt
    const sampled = completion.tokenIds
    if (prompt === undefined || sampled === undefined) {
      if (this.turn === 1 && completion.tokensUnavailable === undefined && prompt === undefined) {
        this.silent = true
        return
      }
      this.broken = completion.tokensUnavailable ??
        (prompt === undefined
          ? `turn ${this.turn}: the backend generated from text, not from a token prompt`
          : `turn ${this.turn}: the backend returned no token ids`)
      return
    }
    if (this.prompt === undefined) {
      this.prompt = prompt.tokenIds
    } else {
      const before = this.prompt.length + this.ids.length
      if (prompt.reused !== before) {
        this.broken = `turn ${this.turn}: the prompt does not continue the previous turns' tokens ` +
          `(${prompt.restarted ?? "the conversation was rewritten between turns, e.g. by a custom scheduler"})`
        return
      }
      for (let i = prompt.reused; i < prompt.tokenIds.length; i++) {
        this.ids.push(prompt.tokenIds[i])
        this.mask.push(0)
        this.logprobs.push(null)
      }
    }
    const logprobs = completion.logprobs !== undefined && completion.logprobs.length === sampled.length
      ? completion.logprobs
      : undefined
    for (let i = 0; i < sampled.length; i++) {
      this.ids.push(sampled[i])
      this.mask.push(1)
      this.logprobs.push(logprobs === undefined ? null : logprobs[i])
    }
  }

  result(): Outcome | undefined {
    if (this.broken !== undefined) return { _tag: "Unavailable", reason: this.broken }
    if (this.prompt === undefined) return undefined
    return {
      _tag: "Sequence",
      sequence: { promptTokenIds: this.prompt, tokenIds: this.ids, lossMask: this.mask, logprobs: this.logprobs }
    }
  }
}

/**
 * Where two token sequences first differ (`undefined` when `actual` is `expected` or extends it
 * only by what `expected` never had: a re-tokenized conversation that goes on past the last sampled
 * token, with the template's closing tokens, has not drifted).
 *
 * @since 0.2.0
 * @category diagnostics
 */
export const firstMismatch = (
  expected: ReadonlyArray<number>,
  actual: ReadonlyArray<number>
): number | undefined => {
  const n = Math.min(expected.length, actual.length)
  for (let i = 0; i < n; i++) if (expected[i] !== actual[i]) return i
  return actual.length < expected.length ? actual.length : undefined
}
