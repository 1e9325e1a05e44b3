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

/**
 * The drift check's report: how many trajectories' token sequences a trainer would get differently
 * by re-tokenizing the final conversation, and where the first one differs.
 *
 * @since 0.2.0
 * @category models
 */
export interface DriftReport {
  /** Trajectories with a token sequence, compared. */
  readonly checked: number
  /** Of those, the ones whose re-tokenized conversation differs. */
  readonly drifted: number
  /** Trajectories without a token sequence (not compared). */
  readonly unavailable: number
  /** Token positions compared. */
  readonly tokens: number
  /**
   * The first drifted trajectory: its id, the position (in prompt + token_ids), the turn whose prompt
   * or reply holds it, and the tokens around it in both sequences.
   */
  readonly first?: {
    readonly id: string
    readonly index: number
    readonly turn: number
    readonly expected: ReadonlyArray<number>
    readonly retokenized: ReadonlyArray<number>
  } | undefined
}

/**
 * Folds drift comparisons into a {@link DriftReport}.
 *
 * @since 0.2.0
 * @category diagnostics
 */
export class DriftCheck {
  private checked = 0
  private drifted = 0
  private unavailable = 0
  private tokens = 0
  private first: DriftReport["first"] = undefined

  /** One trajectory: its sequence (or none) and the re-tokenized final conversation. */
  add(id: string, sequence: TokenSequence | undefined, retokenized: ReadonlyArray<number> | undefined): void {
    if (sequence === undefined || retokenized === undefined) {
      this.unavailable++
      return
    }
    this.checked++
    const expected = sequence.promptTokenIds.concat(sequence.tokenIds)
    this.tokens += expected.length
    const at = firstMismatch(expected, retokenized)
    if (at === undefined) return
    this.drifted++
    if (this.first === undefined) {
      // The turn whose prompt or reply holds the mismatch: a reply (a run of mask 1) is its turn's;
      // the tokens after reply k belong to turn k + 1's prompt.
      const mask = sequence.lossMask
      const position = Math.min(at - sequence.promptTokenIds.length, mask.length - 1)
      let replies = 0
      for (let i = 0; i <= position; i++) if (mask[i] === 1 && (i === 0 || mask[i - 1] === 0)) replies++
      const turn = position < 0 ? 1 : mask[position] === 1 ? replies : replies + 1
      this.first = {
        id,
        index: at,
        turn,
        expected: expected.slice(Math.max(0, at - 3), at + 5),
        retokenized: retokenized.slice(Math.max(0, at - 3), at + 5)
      }
    }
  }

  report(): DriftReport {
    return {
      checked: this.checked,
      drifted: this.drifted,
      unavailable: this.unavailable,
      tokens: this.tokens,
      ...(this.first === undefined ? {} : { first: this.first })
    }
  }
}

/**
 * The report as one line of the summary.
 *
 * @since 0.2.0
 * @category formatting
 */
export const formatDrift = (report: DriftReport): string => {
  const base = `${report.drifted} of ${report.checked} trajectories would drift if re-tokenized` +
    (report.unavailable > 0 ? ` (${report.unavailable} without a token sequence)` : "")
  const first = report.first
  return first === undefined
    ? base
    : `${base}; first: ${first.id} at token ${first.index} (turn ${first.turn}): ` +
      `[${first.expected.join(", ")}] vs re-tokenized [${first.retokenized.join(", ")}]`
}
