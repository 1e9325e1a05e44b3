/**
 * FrozenLake, text version: identical to the reference implementation (ms-swift's
 * `frozen_lake_plugin.py`), seed for seed, observation for observation.
 *
 * The map comes from Python's `random.Random(seed)` (see {@link PyRandom}); actions are parsed with
 * the reference's regular expressions, with Python's Unicode rules for `\s`, `\b` and case.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import * as Env from "../Env.js"
import { show } from "../internal/inspect.js"
import { Lru } from "../internal/lru.js"
import { nextTurn } from "../internal/nextTurn.js"
import { isReady } from "../internal/ready.js"
import { PY_SPACE, PY_WORD } from "../internal/pyre.js"
import type { Message } from "../Message.js"
import { PyRandom, temper } from "./PyRandom.js"

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

/**
 * The work budget of map generation: the cells drawn over all attempts of one map. An attempt
 * draws `size * size` cells and counts at least 64 (its fixed costs dominate on tiny maps), so a
 * map of side `size` gets `floor(MAX_MAP_CELLS / max(size², 64))` attempts: 256 at side 256, 1,024
 * at 128, 4,096 at 64, 65,536 at 16, 262,144 at 8 and below. The budget counts work, not time, so a
 * (size, p, seed) either always gets its map or always fails, on any machine.
 *
 * The reference retries for ever. Inside the budget the map is the reference's, draw for draw (the
 * tests compare with CPython running the reference's loop, and with that loop written again).
 * Past it, the reference would still be drawing: 2^24 cells take CPython 3 to 5 s (13-20 ms per
 * 256x256 attempt on the development machine), and the configs that get there are the degenerate
 * ones: large boards with p below about 0.59, where safe cells form small islands. At the default
 * p 0.8 the first attempt nearly always succeeds. Here a failure costs at most the budget, about
 * 130 ms of CPU on the development machine, searched by the env in slices of one 256x256 attempt
 * with a turn of the event loop between them (README, FrozenLake).
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_MAP_CELLS = 2 ** 24

/**
 * The attempts a map of side `size` gets within {@link MAX_MAP_CELLS}.
 *
 * @since 0.1.0
 * @category generation
 */
export const maxAttempts = (size: number): number => Math.floor(MAX_MAP_CELLS / Math.max(size * size, 64))

/**
 * No solvable map within the generation budget ({@link MAX_MAP_CELLS}) for this (size, p, seed).
 * The same config fails the same way every time.
 *
 * @since 0.1.0
 * @category errors
 */
export class MapBudgetExceeded extends Schema.TaggedError<MapBudgetExceeded>()(
  "MapBudgetExceeded",
  {
    size: Schema.Number,
    p: Schema.Number,
    /** The map's seed, as decimal text (seeds can exceed 2^53). */
    seed: Schema.String,
    attempts: Schema.Number
  }
) {
  override get message(): string {
    const { attempts, p, seed, size } = this
    const budget = attempts === maxAttempts(size)
      ? `the generation budget at this size: ${MAX_MAP_CELLS} cells, ${size}x${size} per attempt`
      : "the given budget"
    return `FrozenLake size ${size}, p ${p}, seed ${seed}: no solvable map in ${attempts} attempts (${budget}). ` +
      `${why(size, p)}Use a larger p or a smaller size.`
  }
}

const why = (size: number, p: number): string => {
  if (p === 0) {
    const chance = (4 * (size - 1)) / (size * size * size)
    return "With p 0 every cell but S and G is a hole, so a map is solvable only when S and G are adjacent " +
      `(${(chance * 100).toPrecision(2)}% of attempts at this size). `
  }
  if (p < 0.6) {
    return `With p ${p} (below about 0.59, the square grid's percolation threshold) safe cells form small ` +
      `islands, so S and G are rarely connected on a ${size}x${size} map. `
  }
  return ""
}

const F = 70 // "F"
const H = 72 // "H"
const S = 83 // "S"
const G = 71 // "G"

/**
 * One map's search, resumable: the reference's loop (draw a board, draw start and goal, keep the
 * first solvable one), run in slices of work so that the env can let the event loop run between
 * slices, and shared by every generation of a row that asks for the map while it is being searched.
 *
 * A cell is safe when `random() < p`. Rather than draw all of them, an attempt skips over the
 * board's generator outputs ({@link PyRandom.rawWords}) and decides a cell only when the
 * reachability search looks at it: most cells of a failed attempt are never looked at. A cell
 * takes two outputs a, b; `random()` is `x / 2^53` with `x = (a >>> 5) * 2^26 + (b >>> 6)`, and
 * `random() < p` exactly when `x < ceil(p * 2^53)` (`p * 2^53` is exact: a power-of-two scaling).
 * With that bound written as `high * 2^26 + low`, the cell is safe when `a >>> 5 < high`, or when
 * `a >>> 5 === high` and `b >>> 6 < low`; b is needed once in 2^27 cells.
 */
class MapSearch {
  private readonly rng: PyRandom
  private readonly cells: number
  private readonly high: number
  private readonly low: number
  private readonly limit: number
  private words: Int32Array | undefined
  /** Per cell of the current attempt: 0 not decided yet, 1 safe, 2 hole. */
  private drawn: Uint8Array | undefined
  private seen: Uint32Array | undefined
  private stack: Int32Array | undefined
  private attempts = 0
  /** The search's outcome, once it has one; the buffers are dropped then. */
  private result: Result.Result<ReadonlyArray<string>, MapBudgetExceeded> | undefined = undefined

  constructor(readonly size: number, readonly p: number, readonly seed: number | bigint, limit = maxAttempts(size)) {
    if (!Number.isInteger(size) || size < 1 || size > 4096) {
      throw new RangeError(`FrozenLake map sizes are integers from 1 to 4096, got ${size}`)
    }
    this.rng = new PyRandom(seed)
    this.cells = size * size
    const bound = Math.ceil(p * 9007199254740992)
    this.high = Math.floor(bound / 67108864)
    this.low = bound - this.high * 67108864
    this.limit = limit
    this.words = new Int32Array(2 * this.cells)
    this.drawn = new Uint8Array(this.cells)
    this.seen = new Uint32Array(this.cells)
    this.stack = new Int32Array(this.cells)
  }

  /**
   * Runs attempts until the search has its outcome or about `work` cells of attempts are spent
   * (at least one attempt); returns the outcome, or `undefined` when there is more to do.
   */
  advance(work: number): Result.Result<ReadonlyArray<string>, MapBudgetExceeded> | undefined {
    let spent = 0
    while (this.result === undefined && spent < work) {
      this.attempt()
      spent += this.cells
    }
    return this.result
  }

  private attempt(): void {
    if (this.attempts >= this.limit) {
      return this.finish(
        Result.fail(new MapBudgetExceeded({ size: this.size, p: this.p, seed: String(this.seed), attempts: this.attempts }))
      )
    }
    this.attempts++
    const { rng, size } = this
    rng.rawWords(this.words!)
    this.drawn!.fill(0)
    const startRow = rng.randrange(size)
    const startCol = rng.randrange(size)
    const goalRow = rng.randrange(size)
    const goalCol = rng.randrange(size)
    const start = startRow * size + startCol
    const goal = goalRow * size + goalCol
    if (start !== goal && this.reachable(start, goal)) this.finish(Result.succeed(this.rows(start, goal)))
  }

  private finish(result: Result.Result<ReadonlyArray<string>, MapBudgetExceeded>): void {
    this.result = result
    this.words = this.drawn = this.seen = this.stack = undefined
  }

  /** Whether the cell was drawn safe (`random() < p`), decided once per attempt. */
  private safe(cell: number): boolean {
    const drawn = this.drawn!
    if (drawn[cell] === 0) {
      const a = temper(this.words![2 * cell]) >>> 5
      drawn[cell] = a < this.high || (a === this.high && temper(this.words![2 * cell + 1]) >>> 6 < this.low) ? 1 : 2
    }
    return drawn[cell] === 1
  }

  /**
   * The reference's validity check: whether the goal is reachable from the start through safe
   * cells, moving up, down, left or right (the start is walkable whatever was drawn under it).
   * `seen` marks visited cells with the attempt number, so it needs no clearing; each cell is
   * pushed at most once, so `stack` has room.
   */
  private reachable(start: number, goal: number): boolean {
    const { size } = this
    const seen = this.seen!
    const stack = this.stack!
    const stamp = this.attempts
    let top = 0
    stack[top++] = start
    seen[start] = stamp
    while (top > 0) {
      const cell = stack[--top]
      const col = cell % size
      for (let k = 0; k < 4; k++) {
        let next: number
        if (k === 0) {
          if (cell < size) continue
          next = cell - size
        } else if (k === 1) {
          next = cell + size
          if (next >= this.cells) continue
        } else if (k === 2) {
          if (col === 0) continue
          next = cell - 1
        } else {
          if (col === size - 1) continue
          next = cell + 1
        }
        if (next === goal) return true
        if (seen[next] !== stamp && this.safe(next)) {
          seen[next] = stamp
          stack[top++] = next
        }
      }
    }
    return false
  }

  /** The accepted attempt's rows as text. */
  private rows(start: number, goal: number): Array<string> {
    const { size } = this
    const rows: Array<string> = []
    const codes = new Array<number>(size)
    for (let r = 0; r < size; r++) {
      for (let c = 0; c < size; c++) {
        const cell = r * size + c
        codes[c] = cell === start ? S : cell === goal ? G : this.safe(cell) ? F : H
      }
      rows.push(String.fromCharCode(...codes))
    }
    return rows
  }
}

/**
 * The reference's map generator, bounded: rows of `F`/`H` drawn with `random() < p`, then start and
 * goal by `randrange(size)` (row, col, row, col), redrawn until start differs from goal and the goal
 * is reachable. Within `maxAttempts` attempts (default {@link maxAttempts}`(size)`, the env's
 * budget) the map is the reference's; past it the result is {@link MapBudgetExceeded}. This runs the
 * whole search at once; the env runs it in slices instead. A size that is not an integer from 1 to
 * 4096 throws a `RangeError` (the env's config allows 2 to {@link MAX_SIZE}).
 *
 * @since 0.1.0
 * @category generation
 */
export const generateMap = (
  size: number,
  p: number,
  seed: number | bigint,
  options?: { readonly maxAttempts?: number | undefined }
): Result.Result<ReadonlyArray<string>, MapBudgetExceeded> =>
  new MapSearch(size, p, seed, options?.maxAttempts ?? maxAttempts(size)).advance(Infinity)!

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
  /** The board's text with the player at each cell (row * size + col), made when first shown; only for small boards (see {@link VIEWS_UP_TO}). */
  readonly views: Array<string | undefined> | undefined
}

/**
 * Boards up to this size keep the text of each player position once made: the 8 generations of a
 * row share a board, and a 4x4 one has 16 positions, so most turns find their text made (a turn
 * built it from a fresh array, slices and a join before). A 8x8 board keeps at most 64 texts of 127
 * characters; bigger boards render each time (a 100x100 one would keep 10,000 texts of 20 KB).
 */
const VIEWS_UP_TO = 8

/**
 * The map of one (size, p, seed): its search while it runs, then its board or its failure. Entries
 * are kept in a small LRU cache, so every generation of a row shares one search and one board, and
 * a failure is not searched again.
 */
class MapEntry {
  private search: MapSearch | undefined
  private outcome: Result.Result<Board, MapBudgetExceeded> | undefined = undefined

  constructor(size: number, p: number, seed: number | bigint) {
    this.search = new MapSearch(size, p, seed)
  }

  /** Searches for about `work` more cells (at least one attempt); the outcome once there is one. */
  advance(work: number): Result.Result<Board, MapBudgetExceeded> | undefined {
    if (this.outcome === undefined) {
      const result = this.search!.advance(work)
      if (result !== undefined) {
        this.outcome = Result.map(result, makeBoard)
        this.search = undefined
      }
    }
    return this.outcome
  }
}

// Two caches, so that the boards kept stay small in memory: a 256x256 board and its rendering
// rows take about 200 KB, a 16x16 one under 1 KB.
const smallMaps = new Lru<MapEntry>(4096)
const largeMaps = new Lru<MapEntry>(64)

const mapEntry = (size: number, p: number, seed: number | bigint): MapEntry =>
  (size <= 64 ? smallMaps : largeMaps).get(`${size}|${p}|${seed}`, () => new MapEntry(size, p, seed))

/**
 * Cells of map search between two turns of the event loop: one attempt on a 256x256 map (about a
 * millisecond), many on small maps. A map found in the first slice (nearly every valid config)
 * costs no turn of the event loop.
 */
const SLICE_CELLS = 65536

/** The board of (size, p, seed), searched in slices with a turn of the event loop between them. */
const boardEffect = (size: number, p: number, seed: number | bigint): Effect.Effect<Board, MapBudgetExceeded> => {
  const entry = mapEntry(size, p, seed)
  // A map found in the first slice (or cached) is answered at once, as a completed Effect.
  const first = entry.advance(SLICE_CELLS)
  if (first !== undefined) return Result.isSuccess(first) ? Effect.succeed(first.success) : Effect.fail(first.failure)
  const loop: Effect.Effect<Board, MapBudgetExceeded> = Effect.suspend(() => {
    const outcome = entry.advance(SLICE_CELLS)
    if (outcome === undefined) return Effect.andThen(nextTurn, loop)
    return Result.isSuccess(outcome) ? Effect.succeed(outcome.success) : Effect.fail(outcome.failure)
  })
  return loop
}

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
  const views = grid.length <= VIEWS_UP_TO ? new Array<string | undefined>(grid.length * grid.length).fill(undefined) : undefined
  return { grid, spaced: grid.map((line) => line.split("").join(" ")), startRow, startCol, views }
}

/**
 * An observation: `head` lines, the board's text for the player's position (kept per position on
 * small boards, see {@link boardView}), then `tail` lines.
 */
const observe = (
  board: Board,
  row: number,
  col: number,
  head: ReadonlyArray<string>,
  tail: ReadonlyArray<string>
): string => {
  // One join, not template concatenation: a joined string is flat, where `${a}\n${b}` makes a rope
  // of nodes that each message of the conversation keeps alive while the trajectory runs
  // (about 3 KB per trajectory in flight, bench/workloads/memory.ts).
  const view = boardView(board, row, col)
  if (head.length === 0 && tail.length === 0) return view
  return [...head, view, ...tail].join("\n")
}

/** The board's rows (spaced) with the player's cell marked, joined by newlines. */
const boardView = (board: Board, row: number, col: number): string => {
  const views = board.views
  const at = row * board.grid.length + col
  const kept = views?.[at]
  if (kept !== undefined) return kept
  const spaced = board.spaced
  // (joined, so the text is flat: see observe)
  const lines = spaced.slice()
  const line = spaced[row]
  lines[row] = [line.slice(0, 2 * col), board.grid[row][col] === "G" ? "*" : "P", line.slice(2 * col + 1)].join("")
  const text = lines.join("\n")
  if (views !== undefined) views[at] = text
  return text
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

/** A Python conversion (`int(x)`, `float(x)`) of any value, as a schema: a value it cannot convert fails with `message`. */
const pyConverted = <A>(target: Schema.Codec<A>, convert: (u: unknown) => A | undefined, message: (u: unknown) => string) =>
  Schema.Unknown.pipe(
    Schema.decodeTo(
      target,
      SchemaTransformation.transformEffect<A, unknown>({
        decode: (u, options) => {
          const n = convert(u)
          return n === undefined
            ? Effect.fail(new SchemaIssue.InvalidValue({ message: message(u) }, u, options))
            : Effect.succeed(n)
        },
        encode: (n) => Effect.succeed<unknown>(n)
      })
    )
  )

const PyIntFrom = pyConverted(Schema.BigInt, pyInt, (u) => `expected an integer (as Python int()), got ${show(u)}`)

const PyFloatFrom = pyConverted(Schema.Number, pyFloat, (u) => `expected a number (as Python float()), got ${show(u)}`)

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
  size: PyIntFrom.check(
    Schema.makeFilter((n) => (n >= 2n && n <= BigInt(MAX_SIZE)) || `must be between 2 and ${MAX_SIZE}, got ${n}`)
  ).pipe(Schema.withDecodingDefaultType(Effect.succeed(4n))),
  p: PyFloatFrom.check(Schema.makeFilter((p) => (p >= 0 && p <= 1) || `must be a probability in [0, 1], got ${p}`)).pipe(
    Schema.withDecodingDefaultType(Effect.succeed(0.8))
  ),
  seed: Schema.NullOr(PyIntFrom).pipe(Schema.withDecodingDefaultType(Effect.succeed(null)))
})

/**
 * @since 0.1.0
 * @category models
 */
export type Config = typeof Config.Type

/**
 * The game state machine: used by the env (through {@link Game.resetEffect}) and by tests.
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

  /**
   * Generates the map (from `fallbackSeed` when the config has no seed) and places the player; fails
   * when no solvable map comes within the generation budget ({@link MAX_MAP_CELLS}).
   */
  reset(fallbackSeed: number | bigint): Result.Result<Env.ResetResult, MapBudgetExceeded> {
    const outcome = mapEntry(this.size, this.p, this.seed ?? fallbackSeed).advance(Infinity)!
    return Result.map(outcome, (board) => this.start(board, fallbackSeed))
  }

  /**
   * {@link Game.reset} as an Effect that searches for the map in slices, letting the event loop run
   * between them (so a config that spends the whole budget delays no other work for long) and
   * stopping between two slices when interrupted.
   */
  resetEffect(fallbackSeed: number | bigint): Effect.Effect<Env.ResetResult, MapBudgetExceeded> {
    const board = boardEffect(this.size, this.p, this.seed ?? fallbackSeed)
    if (isReady(board)) return Effect.succeed(this.start(board.value, fallbackSeed))
    return Effect.map(board, (board) => this.start(board, fallbackSeed))
  }

  private start(board: Board, fallbackSeed: number | bigint): Env.ResetResult {
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
        info: { seed, step: this.steps, parsed_action: null, status: "invalid_action", is_success: false }
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
        info: { seed, step: this.steps, parsed_action: move, status: "goal", is_success: true }
      }
    }
    if (cell === "H") {
      return {
        observation: observe(board, this.row, this.col, [`You moved ${move} and fell into a hole. Episode over.`], NONE),
        reward: 0,
        done: true,
        info: { seed, step: this.steps, parsed_action: move, status: "hole", is_success: false }
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
      info: { seed, step: this.steps, parsed_action: move, status: "ok", is_success: false }
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
        // Reset (of a map found at once) and step answer with completed Effects, which the trajectory
        // loop uses without a trip through the fiber runtime.
        return {
          reset: (request) => {
            const reset = game.resetEffect(request.seed)
            if (isReady(reset)) return Effect.succeed(reset.value)
            return Effect.mapError(reset, (error) =>
              new Env.EnvError({
                env: name,
                phase: "reset",
                detail: config.seed === null ? `${error.message} (The seed is the row's: env_config has none.)` : error.message,
                cause: error
              }))
          },
          step: (messages) => {
            try {
              return Effect.succeed(game.step(messages))
            } catch (defect) {
              return Effect.die(defect)
            }
          }
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
