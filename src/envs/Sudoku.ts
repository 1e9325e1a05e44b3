/**
 * Sudoku: TextArena's `Sudoku-v0` as the OpenEnv TextArena server plays it, in plain TypeScript.
 *
 * The game reproduces the reference line by line: the same prompt, board text, feedback texts,
 * `[Player]`/`[GAME]` transcript, bracket wrapping of replies without brackets, rules (a move is
 * accepted only when it puts the solution's digit into an empty cell; the first invalid move asks
 * to resubmit, the second one in a row ends the game with the fraction of cells filled; solving
 * gives 1), and the same state snapshot (`raw_state`).
 *
 * Two views of one game:
 * - As a gym env (`sudoku` in the registry), the observation is the text a model should see: the
 *   reset observation is the whole prompt with the board; each step's observation is only what the
 *   game answered to the move (the conversation already holds the model's own reply). `info` keeps
 *   small structured facts (accepted, reason, completion), not the transcript.
 * - As an OpenEnv env, the live env carries an `openenv` view (`observation()` and `state()`) with
 *   the exact JSON of the reference server; `effect-gym openenv serve` sends that instead of the
 *   text, so Python OpenEnv clients see what they would see from the Python server.
 *
 * Puzzles are generated like TextArena's (a randomly filled grid, then cells emptied in a shuffled
 * order as long as the solution stays unique) with a port of Python's `random`, so seed `s` gives
 * the puzzle TextArena gives after `random.seed(s)`. The reference server ignores reset seeds; here
 * the seed is `env_config.seed`, else the reset's seed (the row's seed: every generation of a GRPO
 * group sees the same puzzle). `env_config.puzzle` plays a fixed puzzle instead.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import * as Env from "../Env.js"
import { Lru } from "../internal/lru.js"
import type { Message } from "../Message.js"
import { PyRandom } from "./PyRandom.js"

/**
 * A 9x9 grid, row by row; 0 is an empty cell.
 *
 * @since 0.1.0
 * @category models
 */
export type Grid = Array<Array<number>>

/**
 * The env id the reference reports.
 *
 * @since 0.1.0
 * @category constants
 */
export const ENV_ID = "Sudoku-v0"

/** The sender ids of TextArena's transcript. */
const GAME_ID = -1
const PLAYER_ID = 0

// ---------------------------------------------------------------------------------------------
// Solving and generation
// ---------------------------------------------------------------------------------------------

const ALL = 0x3fe // bits 1..9

const popcount = (mask: number): number => {
  let n = 0
  for (let m = mask; m !== 0; m &= m - 1) n++
  return n
}

/**
 * Counts the solutions of a grid, stopping at `limit`. The search picks the empty cell with the
 * fewest candidates first (bitmasks per row, column and box), so even sparse grids are fast; the
 * count does not depend on the search order.
 *
 * @since 0.1.0
 * @category solving
 */
export const countSolutions = (grid: ReadonlyArray<ReadonlyArray<number>>, limit = 2): number =>
  search(grid, limit, undefined)

/**
 * The solution of a grid when it has exactly one, else `undefined`.
 *
 * @since 0.1.0
 * @category solving
 */
export const solveUnique = (grid: ReadonlyArray<ReadonlyArray<number>>): Grid | undefined => {
  const found: Array<Grid> = []
  const count = search(grid, 2, found)
  return count === 1 ? found[0] : undefined
}

const search = (
  grid: ReadonlyArray<ReadonlyArray<number>>,
  limit: number,
  found: Array<Grid> | undefined
): number => {
  const cells = new Int8Array(81)
  const rows = new Int32Array(9)
  const cols = new Int32Array(9)
  const boxes = new Int32Array(9)
  for (let r = 0; r < 9; r++) {
    for (let c = 0; c < 9; c++) {
      const d = grid[r][c]
      if (d === 0) continue
      const bit = 1 << d
      const b = 3 * ((r / 3) | 0) + ((c / 3) | 0)
      // a digit repeated in a unit: no solution at all
      if ((rows[r] | cols[c] | boxes[b]) & bit) return 0
      rows[r] |= bit
      cols[c] |= bit
      boxes[b] |= bit
      cells[r * 9 + c] = d
    }
  }
  let count = 0
  const go = (): void => {
    let best = -1
    let bestMask = 0
    let bestCount = 10
    for (let i = 0; i < 81; i++) {
      if (cells[i] !== 0) continue
      const r = (i / 9) | 0
      const c = i % 9
      const mask = ALL & ~(rows[r] | cols[c] | boxes[3 * ((r / 3) | 0) + ((c / 3) | 0)])
      const n = popcount(mask)
      if (n < bestCount) {
        best = i
        bestMask = mask
        bestCount = n
        if (n <= 1) break
      }
    }
    if (best < 0) {
      count++
      if (found !== undefined) found.push(toGrid(cells))
      return
    }
    const r = (best / 9) | 0
    const c = best % 9
    const b = 3 * ((r / 3) | 0) + ((c / 3) | 0)
    for (let d = 1; d <= 9 && count < limit; d++) {
      const bit = 1 << d
      if ((bestMask & bit) === 0) continue
      cells[best] = d
      rows[r] |= bit
      cols[c] |= bit
      boxes[b] |= bit
      go()
      rows[r] &= ~bit
      cols[c] &= ~bit
      boxes[b] &= ~bit
      cells[best] = 0
    }
  }
  go()
  return count
}

const toGrid = (cells: Int8Array): Grid =>
  Array.from({ length: 9 }, (_, r) => Array.from(cells.subarray(r * 9, r * 9 + 9)))

/** TextArena's `is_safe`: the digit is not yet in the cell's row, column or box. */
const isSafe = (grid: Grid, row: number, col: number, num: number): boolean => {
  for (let j = 0; j < 9; j++) if (grid[row][j] === num) return false
  for (let i = 0; i < 9; i++) if (grid[i][col] === num) return false
  const r0 = 3 * ((row / 3) | 0)
  const c0 = 3 * ((col / 3) | 0)
  for (let i = r0; i < r0 + 3; i++) {
    for (let j = c0; j < c0 + 3; j++) if (grid[i][j] === num) return false
  }
  return true
}

/** Python's `random.shuffle`, in place. */
const shuffle = <A>(rng: PyRandom, items: Array<A>): void => {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rng.randrange(i + 1)
    const t = items[i]
    items[i] = items[j]
    items[j] = t
  }
}

/**
 * TextArena's `_fill_grid`: the first empty cell in row-major order gets the digits in a freshly
 * shuffled order, with backtracking. The random draws (one shuffle per call) follow the reference
 * exactly, so the filled grid is the reference's for the same generator state.
 */
const fill = (rng: PyRandom, grid: Grid): boolean => {
  let row = -1
  let col = -1
  for (let i = 0; i < 81 && row < 0; i++) {
    if (grid[(i / 9) | 0][i % 9] === 0) {
      row = (i / 9) | 0
      col = i % 9
    }
  }
  if (row < 0) return true
  const digits = [1, 2, 3, 4, 5, 6, 7, 8, 9]
  shuffle(rng, digits)
  for (const num of digits) {
    if (isSafe(grid, row, col, num)) {
      grid[row][col] = num
      if (fill(rng, grid)) return true
      grid[row][col] = 0
    }
  }
  return false
}

/**
 * A generated puzzle and its (unique) solution.
 *
 * @since 0.1.0
 * @category models
 */
export interface Puzzle {
  readonly puzzle: Grid
  readonly solution: Grid
}

/**
 * Generates a puzzle the way TextArena's Sudoku does after `random.seed(seed)`: a random full
 * grid, then the 81 positions shuffled and emptied from the end of the list while more than
 * `clues` remain, skipping any removal that would make the solution not unique. The result has at
 * least `clues` clues and exactly one solution.
 *
 * @since 0.1.0
 * @category generation
 */
export const generate = (seed: number | bigint, clues = 60): Puzzle => {
  const rng = new PyRandom(seed)
  const solution: Grid = Array.from({ length: 9 }, () => new Array<number>(9).fill(0))
  fill(rng, solution)
  const puzzle = solution.map((row) => row.slice())
  const cells: Array<readonly [number, number]> = []
  for (let i = 0; i < 9; i++) for (let j = 0; j < 9; j++) cells.push([i, j])
  shuffle(rng, cells)
  while (cells.length > clues) {
    const [row, col] = cells.pop()!
    const kept = puzzle[row][col]
    puzzle[row][col] = 0
    if (countSolutions(puzzle, 2) !== 1) puzzle[row][col] = kept
  }
  return { puzzle, solution }
}

/**
 * A grid from 81 characters (`1`-`9`, and `0` or `.` for empty cells), row by row; whitespace is
 * ignored. `undefined` when the text is not a grid.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseGrid = (text: string): Grid | undefined => {
  const compact = text.replace(/\s+/g, "")
  if (!/^[0-9.]{81}$/.test(compact)) return undefined
  return Array.from({ length: 9 }, (_, r) =>
    Array.from(compact.slice(r * 9, r * 9 + 9), (ch) => (ch === "." ? 0 : Number(ch))))
}

/**
 * TextArena's board text: a column header, rows `R1`..`R9` with `|` between boxes, `- - -`
 * dividers between bands, `.` for empty cells.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderBoard = (board: ReadonlyArray<ReadonlyArray<number>>): string => {
  let header = "  "
  for (let j = 0; j < 9; j++) header += ` C${j + 1}${(j + 1) % 3 === 0 ? "  " : ""}`
  const lines = [header]
  for (let i = 0; i < 9; i++) {
    let row = `R${i + 1} `
    for (let j = 0; j < 9; j++) {
      const d = board[i][j]
      row += ` ${d === 0 ? "." : String(d)} `
      if ((j + 1) % 3 === 0 && j < 8) row += "| "
    }
    lines.push(row.trim())
    if ((i + 1) % 3 === 0 && i < 8) lines.push("   " + "- ".repeat(16))
  }
  return lines.join("\n")
}

// ---------------------------------------------------------------------------------------------
// The game
// ---------------------------------------------------------------------------------------------

/**
 * The player prompt of TextArena's Sudoku (the first `[GAME]` message).
 *
 * @since 0.1.0
 * @category constants
 */
export const PROMPT = "You are Player 0. You are playing Sudoku.\n" +
  "Here is the current state of the Sudoku grid. Each row is numbered from 1 to 9, " +
  "and each column is also numbered from 1 to 9.\n" +
  "Empty cells are represented by '.', and pre-filled cells contain digits from 1 to 9.\n\n" +
  "Current Sudoku Grid:\n" +
  "Your objective is to fill the empty cells in the 9x9 grid with digits from 1 to 9 such that:\n" +
  "1. Each row contains all digits from 1 to 9 without repetition.\n" +
  "2. Each column contains all digits from 1 to 9 without repetition.\n" +
  "3. Each of the nine 3x3 subgrids contains all digits from 1 to 9 without repetition.\n\n" +
  "Rules and Instructions:\n" +
  "1. **Do not overwrite** the initial numbers provided in the grid.\n" +
  "2. **Only fill** empty cells represented by '.'.\n" +
  "3. You may respond in any manner you prefer, " +
  "but ensure that your response includes the format of '[row column number]'.\n" +
  "4. **Ensure** that your move does not violate Sudoku rules. Invalid moves will result in penalties.\n" +
  "Examples:\n" +
  "- **Valid Move**:\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[5 3 7]`\n" +
  "  - Explanation: Placing 7 at row 5, column 3 does not violate any Sudoku rules.\n\n" +
  "- **Invalid Move** (Overwriting a pre-filled cell):\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[1 1 9]`\n" +
  "  - Explanation: Cell (1,1) is already filled with 5. You cannot overwrite it.\n\n" +
  "- **Invalid Move** (Violating Sudoku rules):\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[1 3 5]`\n" +
  "  - Explanation: Placing 5 in row 1, column 3 violates the rule since 5 already exists in row 1.\n\n" +
  "The history of your moves and thoughts will be appended as you play more rounds. " +
  "Use the history of your move to improve your decision making by avoiding the moves you have tried. " +
  "Good luck!\n\n"

/**
 * TextArena's action wrapper: a reply with no bracket at all is wrapped in brackets.
 *
 * @since 0.1.0
 * @category parsing
 */
export const formatAction = (reply: string): string =>
  !reply.includes("[") && !reply.includes("]") ? `[${reply}]` : reply

/** The game's move pattern (`[row col number]`, single spaces). */
const MOVE = /\[(\d+)\s(\d+)\s(\d+)\]/

/**
 * The move of an action as the game reads it (`[row col number]`, the first one), unchecked; the
 * viewer's Sudoku board uses it too.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseMove = (action: string): readonly [row: number, col: number, num: number] | undefined => {
  const match = MOVE.exec(action)
  return match === null ? undefined : [Number(match[1]), Number(match[2]), Number(match[3])]
}

/**
 * What one step did, for the gym view.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepOutcome {
  /** The action after bracket wrapping, as the game read it. */
  readonly action: string
  /** The text the game added after the player's echo (empty when it added none). */
  readonly feedback: string
  readonly accepted: boolean
  /** The reason of an invalid move, when the move was invalid. */
  readonly invalidReason: string | undefined
  readonly reward: number
  readonly done: boolean
}

/**
 * One game, as TextArena's `SudokuEnv` with its `SinglePlayerState` (one invalid move allowed in a
 * row, turn limit) and the OpenEnv TextArena server around it (`step_count`, rewards, snapshots).
 * Independent of any effect system: the env and the tests use it directly.
 *
 * @since 0.1.0
 * @category models
 */
export class Game {
  readonly initial: Grid
  readonly solution: Grid
  readonly board: Grid
  readonly maxTurns: number
  /** Accepted moves (and the final invalid move), as TextArena's `turn`. */
  turn = 0
  /** Steps taken, as the OpenEnv server's `step_count`. */
  stepCount = 0
  done = false
  rewards: { 0: number } | null = null
  lastReward = 0
  completed = false
  renderedBoard: string
  readonly logs: Array<[number, string]> = []
  readonly gameInfo: { role: string; invalid_move: boolean; turn_count: number; reason?: string } = {
    role: "Player 0",
    invalid_move: false,
    turn_count: 0
  }
  private errorCount = 0
  private madeInvalidMove = false
  /** The accumulated transcript (TextArena's LLM observation wrapper). */
  private content = ""
  private prompt: string

  constructor(puzzle: Puzzle, maxTurns = 100) {
    this.initial = puzzle.puzzle.map((row) => row.slice())
    this.solution = puzzle.solution.map((row) => row.slice())
    this.board = puzzle.puzzle.map((row) => row.slice())
    this.maxTurns = maxTurns
    this.renderedBoard = renderBoard(this.board)
    this.observe(GAME_ID, PROMPT)
    this.observe(GAME_ID, `Game Board:\n${this.renderedBoard}`)
    this.prompt = this.content.trim()
  }

  private observe(from: number, message: string): void {
    this.logs.push([from, message])
    this.content += `\n[${from === GAME_ID ? "GAME" : "Player"}] ${message}`
  }

  /** The whole transcript so far: `[GAME]` and `[Player]` lines, as the reference accumulates it. */
  get transcript(): string {
    return this.content
  }

  /** The prompt: the whole transcript while the game is at turn 0, the env id once a move counted. */
  get promptText(): string {
    return this.prompt
  }

  /** The fraction of the originally empty cells that hold the solution's digit. */
  completion(): number {
    let correct = 0
    let total = 0
    for (let i = 0; i < 9; i++) {
      for (let j = 0; j < 9; j++) {
        if (this.initial[i][j] !== 0) continue
        total++
        if (this.board[i][j] === this.solution[i][j]) correct++
      }
    }
    return total > 0 ? correct / total : 0
  }

  private setInvalidMove(reason: string): void {
    if (this.errorCount < 1) {
      this.errorCount++
      this.madeInvalidMove = true
      this.observe(
        GAME_ID,
        `You attempted an invalid move. Reason: ${reason} ` +
          "Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      )
    } else {
      this.rewards = { 0: this.completion() }
      this.gameInfo.reason = `Invalid Move: ${reason}`
      this.gameInfo.invalid_move = true
      this.done = true
    }
  }

  private setOutcome(reward: number, reason: string): void {
    this.rewards = { 0: reward }
    this.gameInfo.reason = reason
    this.done = true
  }

  private isComplete(): boolean {
    for (let i = 0; i < 9; i++) {
      for (let j = 0; j < 9; j++) if (this.board[i][j] !== this.solution[i][j]) return false
    }
    return true
  }

  /**
   * Plays one reply (the model's text). Steps after the end are played too, as the reference
   * server does; they cannot change the outcome's reward.
   */
  step(reply: string): StepOutcome {
    const action = formatAction(reply)
    this.observe(PLAYER_ID, action)
    const echoed = this.content.length
    let accepted = false
    let invalidReason: string | undefined
    const invalid = (reason: string) => {
      invalidReason = reason
      this.setInvalidMove(reason)
    }
    const move = parseMove(action)
    if (move === undefined) {
      invalid("Invalid move format. Player 0 did not respond with valid 'row column number'.")
    } else {
      const [row, col, num] = move
      if (row < 1 || row > 9 || col < 1 || col > 9 || num < 1 || num > 9) {
        invalid(`Invalid move. Player 0 attempted to place ${num} at (${row}, ${col}), which is out of bounds.`)
      } else {
        const [r, c] = [row - 1, col - 1]
        if (this.board[r][c] !== 0) {
          invalid(`Invalid move. Player 0 attempted to overwrite a pre-filled cell (${row}, ${col}).`)
        } else if (this.solution[r][c] === num) {
          this.board[r][c] = num
          accepted = true
          this.renderedBoard = renderBoard(this.board)
          this.observe(GAME_ID, `Board state: \n${this.renderedBoard}`)
        } else {
          invalid(`Invalid move. Player 0 attempted to place ${num} at (${row}, ${col}), which violates Sudoku rules.`)
        }
        if (this.isComplete()) {
          this.completed = true
          this.setOutcome(1, "Congratulations! Player 0 completed the Sudoku puzzle.")
        }
      }
    }
    if (this.turn >= this.maxTurns && !this.done) {
      const pct = this.completion()
      this.setOutcome(
        pct,
        `The turn limit has been reached. You correctly filled ${pythonRound(pct * 100)}% of the empty cells.`
      )
    }
    // SinglePlayerState.step: a resubmission does not count as a turn; note that after the end it
    // returns before clearing the invalid-move flag, as the reference does.
    if (!this.madeInvalidMove) {
      this.errorCount = 0
      this.turn++
      this.gameInfo.turn_count++
    }
    if (!this.done) this.madeInvalidMove = false
    this.stepCount++
    // OpenEnv's TextArena server: the first message while the game is at turn 0 (an invalid first
    // move does not count as a turn: the whole transcript), the env id after that
    this.prompt = this.turn === 0 ? this.content.trim() : ENV_ID
    const reward = this.rewards === null ? 0 : this.rewards[0]
    this.lastReward = reward
    return {
      action,
      feedback: this.content.slice(echoed).replace(/^\n/, ""),
      accepted,
      invalidReason,
      reward,
      done: this.done
    }
  }

  /** The observation JSON of the OpenEnv TextArena server. */
  openEnvObservation(): Record<string, unknown> {
    return {
      prompt: this.prompt,
      messages: [{ sender_id: GAME_ID, content: this.content, category: "MESSAGE" }],
      current_player_id: PLAYER_ID,
      legal_players: [PLAYER_ID],
      info: {}
    }
  }

  /** The env-specific part of the OpenEnv TextArena server's state (after `episode_id`, `step_count`). */
  openEnvState(): Record<string, unknown> {
    return {
      env_id: ENV_ID,
      num_players: 1,
      max_turns: null,
      turn: this.turn,
      last_reward: this.lastReward,
      last_info: {},
      raw_state: {
        turn: this.turn,
        game_state: {
          board: this.board.map((row) => row.slice()),
          rendered_board: this.renderedBoard,
          completed: this.completed
        },
        logs: this.logs.map(([from, message]) => [from, message]),
        rewards: this.rewards === null ? null : { 0: this.rewards[0] },
        done: this.done,
        role_mapping: { 0: "Player", [-1]: "GAME" },
        game_info: { 0: { ...this.gameInfo } },
        step_info: {}
      }
    }
  }
}

/** Python's `round()` for the percentages of the turn-limit text (halves go to the even side). */
const pythonRound = (x: number): number => {
  const floor = Math.floor(x)
  const diff = x - floor
  if (diff > 0.5) return floor + 1
  if (diff < 0.5) return floor
  return floor % 2 === 0 ? floor : floor + 1
}

// ---------------------------------------------------------------------------------------------
// The env
// ---------------------------------------------------------------------------------------------

const Puzzle81 = Schema.String.check(
  Schema.makeFilter((text) => {
    const grid = parseGrid(text)
    if (grid === undefined) return "must be 81 cells: digits 1-9, and 0 or . for empty cells"
    return countSolutions(grid, 2) === 1 || "must have exactly one solution"
  })
)

/**
 * `env_config` of the Sudoku env: `seed` (an integer; absent means the reset's seed, i.e. the row's
 * seed), `clues` (default 60, as `Sudoku-v0`; fewer clues make a harder puzzle), `max_turns`
 * (default 100), `puzzle` (81 cells, plays this puzzle instead of generating one; it must have a
 * unique solution).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Config = Schema.Struct({
  seed: Schema.optional(Schema.Int),
  clues: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 81 })).pipe(
    Schema.withDecodingDefaultType(Effect.succeed(60))
  ),
  max_turns: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)).pipe(Schema.withDecodingDefaultType(Effect.succeed(100))),
  puzzle: Schema.optional(Puzzle81)
})

/**
 * @since 0.1.0
 * @category models
 */
export type Config = typeof Config.Type

/**
 * A live Sudoku env: the core env contract plus its OpenEnv view.
 *
 * @since 0.1.0
 * @category models
 */
export interface SudokuEnv extends Env.Env {
  /**
   * The OpenEnv view (`effect-gym openenv serve` sends it instead of the text): the observation JSON
   * and the env-specific state fields of the reference server, after the latest reset or step.
   */
  readonly openenv: {
    readonly observation: () => Record<string, unknown>
    readonly state: () => Record<string, unknown>
  }
  /** The game in progress (`undefined` before the first reset). */
  readonly game: () => Game | undefined
}

const puzzles = new Lru<Puzzle>(256)

/**
 * The puzzle of a reset: the fixed one, or one generated from the config's seed or the reset's.
 * Every generation of a GRPO group plays the same puzzle, so a small LRU cache generates it once;
 * games copy the grids they change.
 */
const puzzleFor = (config: Config, seed: number): Puzzle =>
  puzzles.get(config.puzzle ?? `${config.seed ?? seed}|${config.clues}`, () => {
    if (config.puzzle === undefined) return generate(config.seed ?? seed, config.clues)
    // the config schema already checked that the grid parses and has exactly one solution
    const grid = parseGrid(config.puzzle)!
    return { puzzle: grid, solution: solveUnique(grid)! }
  })

/**
 * The filled cells of a grid.
 *
 * @since 0.1.0
 * @category boards
 */
export const countClues = (grid: Grid): number => grid.reduce((n, row) => n + row.filter((d) => d !== 0).length, 0)

/**
 * Creates one Sudoku env for a config (the game starts at `reset`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeEnv = (config: Config, name = "sudoku"): SudokuEnv => {
  let game: Game | undefined
  return {
    game: () => game,
    reset: (request) =>
      Effect.sync(() => {
        const puzzle = puzzleFor(config, request.seed)
        game = new Game(puzzle, config.max_turns)
        const clues = countClues(puzzle.puzzle)
        const seed = config.puzzle !== undefined ? null : (config.seed ?? request.seed)
        return { observation: game.promptText, info: { env_id: ENV_ID, seed, clues, empty_cells: 81 - clues } }
      }),
    step: (messages: ReadonlyArray<Message>) =>
      Effect.suspend(() => {
        const g = game
        if (g === undefined) {
          return Effect.fail(new Env.EnvError({ env: name, phase: "step", detail: "step before reset" }))
        }
        const reply = messages.length > 0 ? messages[messages.length - 1].content : ""
        const out = g.step(reply)
        const reason = out.done ? g.gameInfo.reason : undefined
        // The game adds no text when it ends on an invalid move; the reason says what happened.
        const observation = reason === undefined
          ? out.feedback
          : [out.feedback, reason].filter((s) => s !== "").join("\n")
        const info: Record<string, unknown> = {
          action: out.action,
          accepted: out.accepted,
          turn: g.turn,
          completion: g.completion(),
          // solved: every cell filled (the reward alone is the filled fraction when the game ends otherwise)
          is_success: g.completed
        }
        if (out.invalidReason !== undefined) info.invalid_reason = out.invalidReason
        if (reason !== undefined) info.reason = reason
        return Effect.succeed<Env.StepResult>({ observation, reward: out.reward, done: out.done, info })
      }),
    openenv: {
      observation: () => (game === undefined ? {} : game.openEnvObservation()),
      state: () => (game === undefined ? {} : game.openEnvState())
    }
  }
}

/**
 * Builds the Sudoku env definition under a name (plugins register variants this way).
 *
 * @since 0.1.0
 * @category constructors
 */
export const definition = (
  name = "sudoku",
  description = "TextArena Sudoku-v0 as served by OpenEnv (config: seed, clues, max_turns, puzzle)"
): Env.Definition =>
  Env.define({
    name,
    description,
    config: Config,
    make: (config) => Effect.sync(() => makeEnv(config, name))
  })

/**
 * The built-in `sudoku` env.
 *
 * @since 0.1.0
 * @category definitions
 */
export const Sudoku: Env.Definition = definition()
