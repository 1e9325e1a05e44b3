/**
 * FrozenLake, text version: identical to the reference implementation (ms-swift's
 * `frozen_lake_plugin.py`), seed for seed, observation for observation.
 *
 * The map comes from Python's `random.Random(seed)` (see {@link PyRandom}); actions are parsed with
 * the reference's regular expressions, with Python's Unicode rules for `\s`, `\b` and case.
 *
 * @since 0.1.0
 */
import { Effect, ParseResult, Schema } from "effect"
import * as Env from "../Env.js"
import { Lru } from "../internal/lru.js"
import { PY_SPACE, PY_WORD } from "../internal/pyre.js"
import type { Message } from "../Message.js"
import { PyRandom } from "./PyRandom.js"

/**
 * @since 0.1.0
 * @category constants
 */
export const SYSTEM_PROMPT = "You are playing FrozenLake. You see a grid where:\n" +
  "  P = your current position, S = start, G = goal, H = hole, F = safe ice.\n" +
  "Move one cell per turn. Reach G to win (+1 reward). Stepping into H ends the episode with 0 reward. " +
  "Moves that would go off the grid leave you in place.\n\n" +
  "On every turn, output your move inside <action>...</action>. " +
  "The action must be exactly one of: up, down, left, right.\n\n" +
  "Example: <action>down</action>"

/**
 * @since 0.1.0
 * @category models
 */
export type Action = "up" | "down" | "left" | "right"

/**
 * @since 0.1.0
 * @category constants
 */
export const ACTIONS: Readonly<Record<Action, readonly [number, number]>> = {
  up: [-1, 0],
  down: [1, 0],
  left: [0, -1],
  right: [0, 1]
}

// Under re.IGNORECASE Python also matches U+0130 and U+0131 for `i`; the tag name contains an `i`.
const ACTION_TAG = new RegExp(
  `<act[iI\\u0130\\u0131]on>${PY_SPACE}*(up|down|left|right)${PY_SPACE}*</act[iI\\u0130\\u0131]on>`,
  "iu"
)
const CANONICAL: ReadonlyMap<string, Action> = new Map(
  (["up", "down", "left", "right"] as const).map((a) => [`<action>${a}</action>`, a] as const)
)
const BARE_ACTION = new RegExp(`(?<!${PY_WORD})(up|down|left|right)(?!${PY_WORD})`, "giu")

/**
 * The reference's action parser: the first `<action>...</action>` wins, otherwise the last bare
 * direction word, otherwise `undefined` (an invalid reply).
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseAction = (completion: string): Action | undefined => {
  // The exact canonical replies, without running the regular expressions (same answer either way).
  const canonical = CANONICAL.get(completion)
  if (canonical !== undefined) return canonical
  const tagged = ACTION_TAG.exec(completion)
  if (tagged !== null) return tagged[1].toLowerCase() as Action
  let last: string | undefined
  BARE_ACTION.lastIndex = 0
  for (let m = BARE_ACTION.exec(completion); m !== null; m = BARE_ACTION.exec(completion)) last = m[1]
  return last === undefined ? undefined : (last.toLowerCase() as Action)
}

const isSolvable = (board: ReadonlyArray<ReadonlyArray<string>>, size: number): boolean => {
  let start: [number, number] | undefined
  for (let r = 0; r < size && start === undefined; r++) {
    const c = board[r].indexOf("S")
    if (c >= 0) start = [r, c]
  }
  if (start === undefined) return false
  const seen = new Uint8Array(size * size)
  const frontier: Array<number> = [start[0] * size + start[1]]
  while (frontier.length > 0) {
    const cell = frontier.pop()!
    if (seen[cell] === 1) continue
    seen[cell] = 1
    const r = (cell / size) | 0
    const c = cell % size
    for (const [dr, dc] of [[1, 0], [0, 1], [-1, 0], [0, -1]] as const) {
      const nr = r + dr
      const nc = c + dc
      if (nr >= 0 && nr < size && nc >= 0 && nc < size) {
        const next = board[nr][nc]
        if (next === "G") return true
        if (next !== "H") frontier.push(nr * size + nc)
      }
    }
  }
  return false
}

/**
 * The reference's map generator: rows of `F`/`H` drawn with `random() < p`, then start and goal by
 * `randrange(size)` (row, col, row, col), redrawn until start differs from goal and the goal is
 * reachable.
 *
 * @since 0.1.0
 * @category generation
 */
export const generateMap = (size: number, p: number, seed: number | bigint): ReadonlyArray<string> => {
  const rng = new PyRandom(seed)
  for (;;) {
    const board: Array<Array<string>> = []
    for (let r = 0; r < size; r++) {
      const row: Array<string> = []
      for (let c = 0; c < size; c++) row.push(rng.random() < p ? "F" : "H")
      board.push(row)
    }
    const startR = rng.randrange(size)
    const startC = rng.randrange(size)
    const goalR = rng.randrange(size)
    const goalC = rng.randrange(size)
    if (startR === goalR && startC === goalC) continue
    board[startR][startC] = "S"
    board[goalR][goalC] = "G"
    if (isSolvable(board, size)) return board.map((row) => row.join(""))
  }
}

/**
 * A generated map, with what rendering needs precomputed. Maps are immutable, so one board is shared
 * by every env that uses the same (size, p, seed) — every generation of a GRPO group.
 */
interface Board {
  readonly grid: ReadonlyArray<string>
  /** Each row with its cells joined by single spaces. */
  readonly spaced: ReadonlyArray<string>
  readonly startRow: number
  readonly startCol: number
}

const boards = new Lru<Board>(4096)

/** The board of (size, p, seed), generated once and kept in a small LRU cache. */
const boardFor = (size: number, p: number, seed: number | bigint): Board =>
  boards.get(`${size}|${p}|${seed}`, () => makeBoard(generateMap(size, p, seed)))

/** A generated map with its start cell and its rows spaced for rendering. */
const makeBoard = (grid: ReadonlyArray<string>): Board => {
  let startRow = 0
  let startCol = 0
  for (let r = 0; r < grid.length; r++) {
    const c = grid[r].indexOf("S")
    if (c >= 0) {
      startRow = r
      startCol = c
      break
    }
  }
  return { grid, spaced: grid.map((line) => line.split("").join(" ")), startRow, startCol }
}

/**
 * An observation: `head` lines, the board (the player's row rebuilt, the others precomputed), then
 * `tail` lines, in one `join` — which yields a flat string (concatenation would leave a rope of many
 * small strings alive in every message of the conversation).
 */
const observe = (
  board: Board,
  row: number,
  col: number,
  head: ReadonlyArray<string>,
  tail: ReadonlyArray<string>
): string => {
  const lines: Array<string> = []
  for (let i = 0; i < head.length; i++) lines.push(head[i])
  const spaced = board.spaced
  for (let r = 0; r < spaced.length; r++) {
    if (r === row) {
      const line = spaced[r]
      lines.push(line.slice(0, 2 * col) + (board.grid[r][col] === "G" ? "*" : "P") + line.slice(2 * col + 1))
    } else {
      lines.push(spaced[r])
    }
  }
  for (let i = 0; i < tail.length; i++) lines.push(tail[i])
  return lines.join("\n")
}

const NONE: ReadonlyArray<string> = []
const INVALID_HEAD = ["Invalid response: could not find a move. Reply with <action>up|down|left|right</action>.", ""]
const NEXT_MOVE = ["Output your next move."]

/**
 * The grid as text, cells joined by spaces, with the player shown as `P` (`*` on the goal).
 *
 * @since 0.1.0
 * @category rendering
 */
export const render = (grid: ReadonlyArray<string>, row: number, col: number): string => {
  const lines: Array<string> = []
  for (let r = 0; r < grid.length; r++) {
    const line = grid[r]
    if (r === row) {
      const chars = line.split("")
      chars[col] = chars[col] === "G" ? "*" : "P"
      lines.push(chars.join(" "))
    } else {
      lines.push(line.split("").join(" "))
    }
  }
  return lines.join("\n")
}

// ---------------------------------------------------------------------------------------------
// env_config: values are coerced like Python's int() and float(), as the reference does.
// ---------------------------------------------------------------------------------------------

const PY_INT_TEXT = /^[\s]*[+-]?(?:\d(?:_?\d)*)[\s]*$/u
const PY_FLOAT_TEXT = /^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf|infinity|nan)$/i

/** Python `int(x)`: exact for big integers. */
const pyInt = (u: unknown): bigint | undefined => {
  if (typeof u === "bigint") return u
  if (typeof u === "boolean") return u ? 1n : 0n
  if (typeof u === "number") return Number.isFinite(u) ? BigInt(Math.trunc(u)) : undefined
  if (typeof u === "string" && PY_INT_TEXT.test(u)) return BigInt(u.trim().replace(/_/g, ""))
  return undefined
}

/** Python `float(x)`. */
const pyFloat = (u: unknown): number | undefined => {
  if (typeof u === "number") return u
  if (typeof u === "bigint") return Number(u)
  if (typeof u === "boolean") return u ? 1 : 0
  const t = typeof u === "string" ? u.trim().replace(/(?<=\d)_(?=\d)/g, "").toLowerCase() : ""
  if (typeof u === "string" && PY_FLOAT_TEXT.test(t)) {
    const sign = t.startsWith("-") ? -1 : 1
    const body = t.replace(/^[+-]/, "")
    if (body === "inf" || body === "infinity") return sign * Infinity
    if (body === "nan") return NaN
    return Number(t)
  }
  return undefined
}

const PyIntFrom = Schema.Unknown.pipe(
  Schema.transformOrFail(Schema.BigIntFromSelf, {
    strict: true,
    decode: (u, _, ast) => {
      const n = pyInt(u)
      return n === undefined
        ? ParseResult.fail(new ParseResult.Type(ast, u, `expected an integer (as Python int()), got ${show(u)}`))
        : ParseResult.succeed(n)
    },
    encode: (n) => ParseResult.succeed(n)
  })
)

const PyFloatFrom = Schema.Unknown.pipe(
  Schema.transformOrFail(Schema.Number, {
    strict: true,
    decode: (u, _, ast) => {
      const n = pyFloat(u)
      return n === undefined
        ? ParseResult.fail(new ParseResult.Type(ast, u, `expected a number (as Python float()), got ${show(u)}`))
        : ParseResult.succeed(n)
    },
    encode: (n) => ParseResult.succeed(n)
  })
)

const show = (u: unknown): string => (typeof u === "bigint" ? u.toString() : JSON.stringify(u) ?? String(u))

/**
 * The largest map side accepted. The reference has no limit; a huge map is a configuration mistake
 * that would stall a run (and a side of 1 never terminates in the reference's generator).
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_SIZE = 256

/**
 * `env_config` of FrozenLake: `size` (default 4), `p` (default 0.8, probability of a safe cell),
 * `seed` (an integer of any size; absent means a map from the run's row seed, so every generation
 * of a row still sees the same map and reruns are reproducible).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Config = Schema.Struct({
  size: Schema.optionalWith(
    PyIntFrom.pipe(
      Schema.filter((n) => (n >= 2n && n <= BigInt(MAX_SIZE)) || `must be between 2 and ${MAX_SIZE}, got ${n}`)
    ),
    { default: () => 4n }
  ),
  p: Schema.optionalWith(
    PyFloatFrom.pipe(Schema.filter((p) => (p >= 0 && p <= 1) || `must be a probability in [0, 1], got ${p}`)),
    { default: () => 0.8 }
  ),
  seed: Schema.optionalWith(Schema.NullOr(PyIntFrom), { default: () => null })
})

/**
 * @since 0.1.0
 * @category models
 */
export type Config = typeof Config.Type

/**
 * The game state machine, independent of any effect system: used by the env and by tests.
 *
 * @since 0.1.0
 * @category models
 */
export class Game {
  readonly size: number
  readonly p: number
  readonly seed: bigint | null
  grid: ReadonlyArray<string> = []
  private board: Board | undefined = undefined
  private readonly seedJson: number | bigint | null
  row = 0
  col = 0
  steps = 0

  constructor(config: { readonly size: bigint | number; readonly p: number; readonly seed: bigint | number | null }) {
    this.size = Number(config.size)
    this.p = config.p
    this.seed = config.seed === null ? null : BigInt(config.seed)
    this.seedJson = jsonInt(this.seed)
  }

  /** Generates the map (from `fallbackSeed` when the config has no seed) and places the player. */
  reset(fallbackSeed: number | bigint): Env.ResetResult {
    const board = boardFor(this.size, this.p, this.seed ?? fallbackSeed)
    this.board = board
    this.grid = board.grid
    this.row = board.startRow
    this.col = board.startCol
    this.steps = 0
    const observation = observe(board, this.row, this.col, [`FrozenLake ${this.size}x${this.size}:`], [
      "",
      `You are at row ${this.row}, col ${this.col}. Output your first move.`
    ])
    const info: Record<string, unknown> = { seed: this.seedJson, size: this.size }
    if (this.seed === null) info.map_seed = jsonInt(BigInt(fallbackSeed))
    return { observation, info, systemPrompt: SYSTEM_PROMPT }
  }

  /** Applies the newest assistant message of the conversation. */
  step(messages: ReadonlyArray<Message>): Env.StepResult {
    const completion = messages.length > 0 ? messages[messages.length - 1].content ?? "" : ""
    const move = parseAction(completion)
    this.steps++
    const seed = this.seedJson
    if (move === undefined) {
      return {
        observation: observe(this.board!, this.row, this.col, INVALID_HEAD, NONE),
        reward: 0,
        done: false,
        info: { seed, step: this.steps, parsed_action: null, status: "invalid_action" }
      }
    }
    const [dr, dc] = ACTIONS[move]
    this.row = Math.max(0, Math.min(this.grid.length - 1, this.row + dr))
    this.col = Math.max(0, Math.min(this.grid[0].length - 1, this.col + dc))
    const cell = this.grid[this.row][this.col]
    const board = this.board!
    if (cell === "G") {
      return {
        observation: observe(board, this.row, this.col, [`You moved ${move} and reached the goal!`], NONE),
        reward: 1,
        done: true,
        info: { seed, step: this.steps, parsed_action: move, status: "goal" }
      }
    }
    if (cell === "H") {
      return {
        observation: observe(board, this.row, this.col, [`You moved ${move} and fell into a hole. Episode over.`], NONE),
        reward: 0,
        done: true,
        info: { seed, step: this.steps, parsed_action: move, status: "hole" }
      }
    }
    return {
      observation: observe(
        board,
        this.row,
        this.col,
        [`You moved ${move}. Now at row ${this.row}, col ${this.col} (step ${this.steps}).`],
        NEXT_MOVE
      ),
      reward: 0,
      done: false,
      info: { seed, step: this.steps, parsed_action: move, status: "ok" }
    }
  }
}

/** Seeds in infos: a plain number when exact, a bigint (written as a JSON integer) otherwise. */
const jsonInt = (n: bigint | null): number | bigint | null =>
  n === null ? null : n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n

/**
 * Builds the FrozenLake env definition under a name (plugins register variants this way).
 *
 * @since 0.1.0
 * @category constructors
 */
export const definition = (name = "frozen_lake", description = "Text FrozenLake, identical to ms-swift's reference env"): Env.Definition =>
  Env.define({
    name,
    description,
    config: Config,
    make: (config) =>
      Effect.sync(() => {
        const game = new Game(config)
        return {
          reset: (request) => Effect.sync(() => game.reset(request.seed)),
          step: (messages) => Effect.sync(() => game.step(messages))
        }
      })
  })

/**
 * The built-in `frozen_lake` env.
 *
 * @since 0.1.0
 * @category definitions
 */
export const FrozenLake: Env.Definition = definition()
