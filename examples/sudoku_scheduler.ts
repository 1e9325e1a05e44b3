/**
 * The Sudoku scheduler of the seeds (ms-swift's `sudoku_scheduler.py`, after TRL's Sudoku GRPO
 * example), as a plugin for OpenEnv Sudoku servers: this project's
 * (`npx effect-gym openenv serve --env sudoku`) or the Python TextArena one.
 *
 *   npx effect-gym run --dataset examples/sudoku.jsonl --plugin examples/sudoku_scheduler.ts \
 *     --scheduler sudoku_scheduler --policy sudoku-solver --max-turns 30 --num-generations 4
 *
 * It registers:
 * - `sudoku_scheduler`: built on the `openenv` scheduler. The model sees the board and hints (moves
 *   already tried, guaranteed moves, cells with 2-3 candidates) instead of the whole growing game
 *   transcript; the board is tracked from the part of the observation added since the last turn.
 *   Replies are read as `[row col number]` (else the first three integers); an unparseable reply
 *   ends the trajectory with a step reward of -1. Five reward components are kept per trajectory
 *   and reported in `rollout_infos`: `empty_cell_reward`, `valid_move_reward`, `repetition_reward`
 *   (means over the moves), `progress_reward`, `correct_reward`, and their sum `sudoku_reward`. Each
 *   step's reward is the change of that sum, so the trajectory's total reward (the `gym_reward`
 *   column) is the final sum (minus 1 after an unparseable reply).
 * - `sudoku_progress`: a reward function with only the components that nothing but moves the env
 *   accepted can raise: `progress_reward`, plus 1 when the puzzle is solved (see the README on which
 *   components to train on). Use it with the gym column weighted 0:
 *   `--reward-funcs sudoku_progress --reward-weights 1 0`.
 * - `sudoku-solver`: a scripted policy for demos and tests that reads the board of the last user
 *   message and answers a correct move; `epsilon` mixes in random moves.
 */
import { Effect, Schema } from "effect"
import { Env, Message, Plugin, Policy, Reward, Scheduler, Sudoku } from "effect-gym"
import { OpenEnvScheduler } from "effect-gym/openenv"

type Grid = Sudoku.Grid

/** The system prompt when the row's `env_config` has no `system_message` (`null` means none). */
export const SYSTEM_PROMPT = [
  "You are playing Sudoku on a 9x9 grid split into nine 3x3 boxes.",
  "Rows are R1-R9 from top to bottom, columns C1-C9 from left to right; '.' marks an empty cell.",
  "Fill one empty cell per turn so that every row, column and box holds the digits 1-9 exactly once.",
  "Never change a filled cell and never repeat a move you already tried.",
  "Think as much as you need, then end your reply with your move as [row col number],",
  "for example [3 5 7] to put 7 in row 3, column 5.",
  "Prefer cells that allow only one digit."
].join("\n")

// ---------------------------------------------------------------------------------------------
// Reading replies and boards
// ---------------------------------------------------------------------------------------------

/** The move of a reply as `[row col number]`: the bracketed form, else the first three integers. */
export const parseMove = (text: string): string | undefined => {
  const bracketed = /\[\s*(\d+)\s+(\d+)\s+(\d+)\s*\]/.exec(text)
  if (bracketed !== null) return `[${bracketed[1]} ${bracketed[2]} ${bracketed[3]}]`
  const numbers = text.match(/\d+/g)
  return numbers !== null && numbers.length >= 3 ? `[${numbers[0]} ${numbers[1]} ${numbers[2]}]` : undefined
}

const ROW_LINE = /^R(\d)\s/

/** The lines of the first board in a text (header, rows and dividers), or `undefined`. */
export const boardLines = (text: string): Array<string> | undefined => {
  const lines: Array<string> = []
  let inBoard = false
  for (const line of text.split("\n")) {
    const t = line.trim()
    const isBoardLine = t.startsWith("C1") || ROW_LINE.test(t) || (inBoard && t.startsWith("-"))
    if (isBoardLine) {
      inBoard = true
      lines.push(line)
    } else if (inBoard && t !== "") {
      break
    }
  }
  const has = (label: string) => lines.some((line) => line.trim().startsWith(label))
  return has("R1") && has("R9") ? lines : undefined
}

/** The first board in a text as a grid (0 = empty), or `undefined` when there is no full board. */
export const parseBoard = (text: string): Grid | undefined => {
  const lines = boardLines(text)
  return lines === undefined ? undefined : gridOf(lines)
}

/** The grid of a board's lines (see {@link boardLines}), or `undefined` when it is not a full board. */
const gridOf = (lines: ReadonlyArray<string>): Grid | undefined => {
  const grid: Grid = []
  for (const line of lines) {
    const t = line.trim()
    const row = ROW_LINE.exec(t)
    if (row === null) continue
    const cells = [...t.slice(2)]
      .filter((ch) => ch === "." || (ch >= "0" && ch <= "9"))
      .map((ch) => (ch === "." ? 0 : Number(ch)))
    if (cells.length !== 9 || Number(row[1]) !== grid.length + 1) return undefined
    grid.push(cells)
  }
  return grid.length === 9 ? grid : undefined
}

/** The digits allowed in an empty cell by its row, column and box (empty for a filled cell). */
export const candidates = (grid: Grid, row: number, col: number): Array<number> => {
  if (grid[row][col] !== 0) return []
  const used = new Set<number>()
  for (let i = 0; i < 9; i++) {
    used.add(grid[row][i])
    used.add(grid[i][col])
  }
  const r0 = 3 * Math.floor(row / 3)
  const c0 = 3 * Math.floor(col / 3)
  for (let r = r0; r < r0 + 3; r++) for (let c = c0; c < c0 + 3; c++) used.add(grid[r][c])
  return [1, 2, 3, 4, 5, 6, 7, 8, 9].filter((d) => !used.has(d))
}

/** Empty cells (1-based) with their candidates, fewest candidates first (ties in reading order). */
const emptyCells = (grid: Grid) => {
  const cells: Array<{ readonly row: number; readonly col: number; readonly options: Array<number> }> = []
  for (let r = 0; r < 9; r++) {
    for (let c = 0; c < 9; c++) {
      if (grid[r][c] === 0) cells.push({ row: r + 1, col: c + 1, options: candidates(grid, r, c) })
    }
  }
  return cells.sort((a, b) => a.options.length - b.options.length)
}

/**
 * The hints under the board: moves already tried (the 10 most recent), up to 5 guaranteed moves
 * (cells with one candidate) and up to 5 other options (cells with 2-3 candidates), taken from the
 * 10 most constrained cells.
 */
export const makeHints = (grid: Grid | undefined, tried: ReadonlyArray<string>): string => {
  const parts: Array<string> = []
  if (tried.length > 0) parts.push(`\nMOVES ALREADY TRIED (do not repeat): ${tried.slice(-10).join(", ")}`)
  if (grid === undefined) return parts.join("\n")
  const guaranteed: Array<string> = []
  const other: Array<string> = []
  for (const cell of emptyCells(grid).slice(0, 10)) {
    const n = cell.options.length
    if (n === 1) guaranteed.push(`[${cell.row} ${cell.col} ${cell.options[0]}]`)
    else if (n >= 2 && n <= 3) other.push(`(${cell.row},${cell.col})->${cell.options.join(",")}`)
  }
  if (guaranteed.length > 0) parts.push(`\nGUARANTEED MOVES (only one option): ${guaranteed.slice(0, 5).join(", ")}`)
  if (other.length > 0) parts.push(`Other options: ${other.slice(0, 5).join(" | ")}`)
  return parts.join("\n")
}

/** The game text of an OpenEnv TextArena observation (the one accumulated message). */
export const contentOf = (observation: Readonly<Record<string, unknown>>): string => {
  const messages = observation.messages
  if (Array.isArray(messages) && messages.length > 0) {
    const content = (messages[0] as { readonly content?: unknown } | null)?.content
    if (typeof content === "string") return content
  }
  return typeof observation.prompt === "string" ? observation.prompt : JSON.stringify(observation)
}

const INVALID_WORDS = ["invalid", "error", "cannot", "already", "violation", "lost"]

const mean = (xs: ReadonlyArray<number>): number => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length)

// ---------------------------------------------------------------------------------------------
// Reward components
// ---------------------------------------------------------------------------------------------

/** The five components and their sum. */
export interface Components {
  readonly empty_cell_reward: number
  readonly valid_move_reward: number
  readonly repetition_reward: number
  readonly progress_reward: number
  readonly correct_reward: number
  readonly sudoku_reward: number
}

/** One trajectory's board tracking and reward components (pure: the scheduler and tests use it). */
export class Tracker {
  /** The board as last seen after an accepted move (from the new part of an observation). */
  board: Grid | undefined
  boardText: string
  readonly initialFilled: number
  maxFilled: number
  readonly successful: Array<string> = []
  readonly failed: Array<string> = []
  /** Distinct moves in the order they were first tried. */
  readonly tried: Array<string> = []
  readonly emptyCell: Array<number> = []
  readonly validMove: Array<number> = []
  readonly repetition: Array<number> = []
  correct = 0
  private readonly counts = new Map<string, number>()
  private seen: number

  constructor(content: string) {
    const lines = boardLines(content)
    this.board = lines === undefined ? undefined : gridOf(lines)
    this.boardText = lines?.join("\n") ?? ""
    this.initialFilled = this.board === undefined ? 0 : Sudoku.countClues(this.board)
    this.maxFilled = this.initialFilled
    this.seen = content.length
  }

  /** Scores one move against the env's answer (its whole accumulated text and its reward). */
  observe(move: string, content: string, envReward: number): Components & { readonly newContent: string } {
    const newContent = content.length > this.seen ? content.slice(this.seen) : content
    this.seen = content.length
    const lower = newContent.toLowerCase()
    const saysInvalid = INVALID_WORDS.some((word) => lower.includes(word))
    const [row, col, digit] = move.slice(1, -1).split(" ").map(Number)
    const onGrid = row >= 1 && row <= 9 && col >= 1 && col <= 9
    const targetsEmpty = this.board === undefined || (onGrid && this.board[row - 1][col - 1] === 0)
    const lines = boardLines(newContent)
    const shown = lines === undefined ? undefined : gridOf(lines)
    // Accepted means the env shows the digit in its cell. The absence of an error text proves
    // nothing: TextArena ends the game on the second invalid move in a row without a word, and
    // that move was once scored as accepted (+1, listed in successful_moves). Without a board to
    // go by (a server that never showed one), the error words decide alone, as in the reference.
    const shownOnBoard = this.board === undefined || (shown !== undefined && onGrid && shown[row - 1][col - 1] === digit)
    this.emptyCell.push(targetsEmpty ? 1 : -1)
    const repeats = this.counts.get(move) ?? 0
    this.counts.set(move, repeats + 1)
    if (repeats === 0) this.tried.push(move)
    this.repetition.push(repeats > 0 ? -Math.min(2 ** repeats, 10) : 0)
    const valid = !saysInvalid && targetsEmpty && shownOnBoard
    if (valid && repeats === 0) {
      this.validMove.push(1)
      this.successful.push(move)
    } else if (lower.includes("please resubmit") || lower.includes("avoid penalties")) {
      this.validMove.push(-0.5)
      this.failed.push(move)
    } else {
      this.validMove.push(0)
      if (!valid) this.failed.push(move)
    }
    if (valid && shown !== undefined) {
      this.board = shown
      this.boardText = lines!.join("\n")
      this.maxFilled = Math.max(this.maxFilled, Sudoku.countClues(shown))
    }
    this.correct = envReward
    return { ...this.components(), newContent }
  }

  components(): Components {
    const remaining = 81 - this.initialFilled
    const progress = remaining > 0 ? (this.maxFilled - this.initialFilled) / remaining : 1
    const parts = {
      empty_cell_reward: mean(this.emptyCell),
      valid_move_reward: mean(this.validMove),
      repetition_reward: mean(this.repetition),
      progress_reward: progress,
      correct_reward: this.correct
    }
    return {
      ...parts,
      sudoku_reward: parts.empty_cell_reward + parts.valid_move_reward + parts.repetition_reward + progress +
        this.correct
    }
  }

  hints(): string {
    return makeHints(this.board, this.tried)
  }

  /** The first user message: the board and hints. */
  firstPrompt(): string {
    return `${this.boardText}${this.hints()}`
  }

  /** The next user message after a move. */
  nextPrompt(): string {
    const n = this.successful.length
    return `Step ${n}. Progress: ${n} cells filled.\n\nBoard:\n${this.boardText}${this.hints()}`
  }
}

// ---------------------------------------------------------------------------------------------
// The scheduler
// ---------------------------------------------------------------------------------------------

const sudokuScheduler = OpenEnvScheduler.make({
  name: "sudoku_scheduler",
  description: "Sudoku on an OpenEnv server: board and hints as prompts, five reward components (the seeds' scheduler)",
  session: (_base, live) => {
    const tracker = new Tracker(contentOf(live.reset.observation))
    const system = live.config.system_message === undefined ? SYSTEM_PROMPT : live.config.system_message
    const first = Message.user(tracker.firstPrompt())
    const messages = system ? [Message.system(system), first] : [first]
    let total = 0
    let previous = 0
    const infos = (components: Components, done: boolean, extra: Record<string, unknown> = {}) => ({
      ...components,
      total_reward: total,
      gym_done: done,
      successful_moves: tracker.successful.slice(),
      failed_moves: tracker.failed.slice(),
      ...extra
    })
    const session: Partial<Scheduler.Session> = {
      messages,
      onTurnEnd: (context) => {
        const move = parseMove(context.completion.text)
        if (move === undefined) {
          total -= 1
          return Effect.succeed<Scheduler.TurnResult>({
            done: true,
            reward: -1,
            info: { move: null, unparseable: true, is_success: false },
            rolloutInfos: infos(tracker.components(), false, { unparseable: true })
          })
        }
        return live.session.step({ message: move }).pipe(
          Effect.mapError((error) =>
            new Env.EnvError({ env: live.scheduler, phase: "step", detail: error.message, cause: error })
          ),
          Effect.map((out): Scheduler.TurnResult => {
            const before = tracker.successful.length
            const { newContent, ...components } = tracker.observe(move, contentOf(out.observation), out.reward ?? 0)
            // each step adds the change of the combined reward, so the total is the final value
            const reward = components.sudoku_reward - previous
            previous = components.sudoku_reward
            total += reward
            return {
              done: out.done,
              reward,
              observation: out.done ? newContent.replace(/^\n/, "") : tracker.nextPrompt(),
              // `accepted` and `is_success` (the env's reward is 1 exactly when the puzzle is solved) for
              // the viewer's board and the summary's `solved`
              info: {
                move,
                env_reward: out.reward,
                ...components,
                accepted: tracker.successful.length > before,
                is_success: components.correct_reward === 1
              },
              rolloutInfos: infos(components, out.done)
            }
          })
        )
      }
    }
    return session
  }
})

/**
 * `progress_reward` + 1 when solved, from the trajectory's `rollout_infos`. Both rise only with moves
 * the env accepted; unlike the sum, this does not pay for ending a game with invalid moves.
 */
const sudokuProgress = Reward.define({
  name: "sudoku_progress",
  description: "Sudoku scheduler: progress_reward, plus 1 when the puzzle is solved (correct_reward 1)",
  score: ({ trajectory }) => {
    const infos = trajectory.rolloutInfos
    const progress = typeof infos.progress_reward === "number" ? infos.progress_reward : 0
    return progress + (infos.correct_reward === 1 ? 1 : 0)
  }
})

// ---------------------------------------------------------------------------------------------
// A scripted solver policy (no model), for demos and tests
// ---------------------------------------------------------------------------------------------

/** mulberry32: a tiny seeded generator, so a seeded run answers the same way every time. */
const rng = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** A correct move for the board of a text: the most constrained empty cell and its solution digit. */
export const solverMove = (text: string): string | undefined => {
  const grid = parseBoard(text)
  if (grid === undefined) return undefined
  const solution = Sudoku.solveUnique(grid)
  const cell = emptyCells(grid)[0]
  if (solution === undefined || cell === undefined) return undefined
  return `[${cell.row} ${cell.col} ${solution[cell.row - 1][cell.col - 1]}]`
}

const Probability = Schema.Union([Schema.Number, Schema.NumberFromString]).check(
  Schema.makeFilter((p) => (p >= 0 && p <= 1) || "must be a probability in [0, 1]")
)

const sudokuSolver = Policy.define({
  name: "sudoku-solver",
  description: "Scripted Sudoku player: a correct move for the board in the last user message; " +
    "option epsilon (random moves)",
  options: Schema.Struct({ epsilon: Probability.pipe(Schema.withDecodingDefaultType(Effect.succeed(0))) }),
  make: (options) =>
    Effect.succeed({
      name: `policy sudoku-solver (epsilon ${options.epsilon})`,
      chat: (request) =>
        Effect.sync(() => {
          const random = rng(request.seed)
          const text = Message.lastOf(request.messages, "user") ?? ""
          const digit = () => 1 + Math.floor(random() * 9)
          const move = random() < options.epsilon ? `[${digit()} ${digit()} ${digit()}]` : solverMove(text)
          return {
            text: move === undefined ? "I cannot find a board to play on." : `My move: ${move}`,
            finishReason: "stop" as const
          }
        })
    })
})

export default Plugin.make({
  name: "sudoku-examples",
  schedulers: [sudokuScheduler],
  rewards: [sudokuProgress],
  policies: [sudokuSolver]
})
