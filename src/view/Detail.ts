/**
 * What the page shows of one trajectory besides its log line: the env renderer's frames and the
 * token view. Plain data, shared by the server (which computes it) and the page (which draws it).
 *
 * @since 0.1.0
 */
import type { Summary } from "./Model.js"

/**
 * How a cell of a board is drawn. The page has a style for each; a renderer cannot inject markup.
 *
 * @since 0.1.0
 * @category models
 */
export type Tone =
  | "plain"
  | "start"
  | "goal"
  | "hole"
  | "ice"
  | "player"
  | "path"
  | "given"
  | "filled"
  | "valid"
  | "invalid"
  | "empty"
  | "mark"

/**
 * @since 0.1.0
 * @category constants
 */
export const TONES: ReadonlyArray<Tone> = [
  "plain",
  "start",
  "goal",
  "hole",
  "ice",
  "player",
  "path",
  "given",
  "filled",
  "valid",
  "invalid",
  "empty",
  "mark"
]

/**
 * @since 0.1.0
 * @category models
 */
export interface Cell {
  readonly text: string
  readonly tone?: Tone | undefined
  /** Shown on hover. */
  readonly title?: string | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Note {
  readonly text: string
  readonly tone?: "good" | "bad" | "info" | undefined
}

/**
 * The board after a turn (`turn` 0: after the reset).
 *
 * @since 0.1.0
 * @category models
 */
export interface Frame {
  readonly turn: number
  readonly label: string
  readonly grid?: {
    readonly cells: ReadonlyArray<ReadonlyArray<Cell>>
    /** Draw a thicker line every `blocks` cells (3 for Sudoku's boxes). */
    readonly blocks?: number | undefined
  } | undefined
  readonly notes?: ReadonlyArray<Note> | undefined
}

/**
 * What an env renderer made of a trajectory: frames to step through.
 *
 * @since 0.1.0
 * @category models
 */
export interface Rendered {
  readonly renderer: string
  readonly title: string
  readonly frames: ReadonlyArray<Frame>
  readonly notes?: ReadonlyArray<Note> | undefined
}

/**
 * One model token: its id, its text when a tokenizer decoded it, its loss mask and logprob when
 * the log has them.
 *
 * @since 0.1.0
 * @category models
 */
export interface Token {
  readonly id: number
  readonly text: string | null
  readonly mask: number | null
  readonly logprob: number | null
}

/**
 * @since 0.1.0
 * @category models
 */
export interface TokenTurn {
  readonly turn: number
  /** `null`: the backend gave no token ids for this turn. */
  readonly tokens: ReadonlyArray<Token> | null
  /** The assistant message of this turn, to compare with the decoded tokens. */
  readonly message: string | null
  /** The tokens decoded together (null without a tokenizer). */
  readonly decoded: string | null
  /**
   * How the decoded text compares with the message: `exact`, `whitespace` (equal but for leading or
   * trailing whitespace), `differs`; null without a tokenizer.
   */
  readonly matches: "exact" | "whitespace" | "differs" | null
  readonly problems: ReadonlyArray<string>
}

/**
 * The token path's whole sequence (`prompt_token_ids`, then `token_ids` with its loss mask: 1 on
 * sampled tokens, 0 on the template and observation tokens between turns).
 *
 * @since 0.1.0
 * @category models
 */
export interface TokenSequence {
  readonly prompt: ReadonlyArray<Token>
  readonly tokens: ReadonlyArray<Token>
  readonly problems: ReadonlyArray<string>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface TokenView {
  /** What decoded the ids (e.g. `tiny.gguf (vocabulary of the GGUF model)`); null: ids only. */
  readonly tokenizer: string | null
  readonly note: string
  readonly turns: ReadonlyArray<TokenTurn>
  /** The token path's sequence when the log has it; `unavailable` says why it has none. */
  readonly sequence: TokenSequence | { readonly unavailable: string } | null
}

/**
 * One trajectory as the page opens it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Detail {
  readonly log: number
  readonly summary: Summary
  /** The log line, parsed. */
  readonly line: Record<string, unknown>
  /** Where the line does not match the completions log schema. */
  readonly problems: ReadonlyArray<string>
  readonly rendered: Rendered | { readonly error: string } | null
  readonly tokens: TokenView | null
}
