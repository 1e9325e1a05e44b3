/**
 * Env renderers for `effect-gym view`: a trajectory's log line in, frames to step through out (a
 * board after each turn, with notes). Registered by env name, as envs are: the built-ins draw
 * `frozen_lake` and `sudoku`; a plugin adds its own in its `renderers` field:
 *
 * ```ts
 * import { Plugin } from "effect-gym"
 * import { Renderer } from "effect-gym/view"
 * export default Plugin.make({ envs: [myEnv], renderers: [Renderer.make({ name: "my_env", render: (line) => ... })] })
 * ```
 *
 * A renderer returns plain data (cells with a text and a tone from a fixed set), never markup, so a
 * plugin cannot put scripts into the page; what it returns is checked and capped before it is sent.
 *
 * @since 0.1.0
 */
import type { CompletionLine } from "../CompletionsLog.js"
import * as Sudoku from "../envs/Sudoku.js"
import { isRecord } from "../internal/inspect.js"
import type * as Plugin from "../Plugin.js"
import type { Cell, Frame, Note, Rendered, Tone } from "./Detail.js"
import { TONES } from "./Detail.js"

/**
 * A renderer's result: frames, with a title and notes.
 *
 * @since 0.1.0
 * @category models
 */
export interface Output {
  readonly title: string
  readonly frames: ReadonlyArray<Frame>
  readonly notes?: ReadonlyArray<Note> | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Renderer {
  /** The env it draws (the log line's `env`). */
  readonly name: string
  readonly description?: string | undefined
  /** The line as it is in the log (it may lack fields a failed trajectory did not reach). */
  readonly render: (line: CompletionLine) => Output
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = (renderer: Renderer): Renderer => renderer

/**
 * Renderers by env name.
 *
 * @since 0.1.0
 * @category models
 */
export type Registry = ReadonlyMap<string, Renderer>

// ---------------------------------------------------------------------------------------------
// Reading a trajectory
// ---------------------------------------------------------------------------------------------

/**
 * The observations of a trajectory: `[0]` the reset's (the first user message), `[i]` the one the
 * env answered to turn `i`, `undefined` where the log has none (the last step's observation is not
 * part of the conversation).
 *
 * @since 0.1.0
 * @category reading
 */
export const observations = (line: CompletionLine): Array<string | undefined> => {
  const out: Array<string | undefined> = []
  let turn = -1
  for (const message of line.messages ?? []) {
    if (message.role === "user") {
      if (turn === -1) turn = 0
      out[turn] = message.content
    } else if (message.role === "assistant") {
      turn = Math.max(turn, 0) + 1
    }
  }
  return out
}

/**
 * The step infos of a trajectory (one per turn the env answered).
 *
 * @since 0.1.0
 * @category reading
 */
export const stepInfos = (line: CompletionLine): Array<Record<string, unknown>> => {
  const infos = isRecord(line.rollout_infos) ? line.rollout_infos.step_infos : undefined
  return Array.isArray(infos) ? infos.map((info) => (isRecord(info) ? info : {})) : []
}

const stepRewards = (line: CompletionLine): Array<number> => {
  const rewards = isRecord(line.rollout_infos) ? line.rollout_infos.step_rewards : undefined
  return Array.isArray(rewards) ? rewards.map((r) => (typeof r === "number" ? r : NaN)) : []
}

const fmt = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(3))

// ---------------------------------------------------------------------------------------------
// FrozenLake
// ---------------------------------------------------------------------------------------------

const LAKE_ROW = /^[SFHGP*](?: [SFHGP*])+$/

/** The first board in a text (rows of `S F H G P *` cells joined by spaces), with the player's cell. */
export const parseLake = (
  text: string
): { readonly grid: Array<Array<string>>; readonly player: readonly [number, number] | undefined } | undefined => {
  const rows: Array<Array<string>> = []
  for (const raw of text.split("\n")) {
    const line = raw.trim()
    if (LAKE_ROW.test(line)) rows.push(line.split(" "))
    else if (rows.length > 0) break
  }
  if (rows.length < 2 || rows.some((r) => r.length !== rows[0].length)) return undefined
  let player: [number, number] | undefined
  rows.forEach((r, i) => {
    const j = r.findIndex((c) => c === "P" || c === "*")
    if (j >= 0 && player === undefined) player = [i, j]
  })
  return { grid: rows, player }
}

const MOVES: Record<string, readonly [number, number]> = { up: [-1, 0], down: [1, 0], left: [0, -1], right: [0, 1] }

/**
 * The FrozenLake board, step by step: the map read from the observations (the player's start is
 * `S`), the position after each turn taken from the observation the env answered (or, after the
 * last turn, whose observation is not in the log, from the move in the step's info: `moved`, else
 * `parsed_action`), the path walked so far marked on every frame. Works for any env that shows
 * FrozenLake's board text (plugins' variants too).
 *
 * @since 0.1.0
 * @category renderers
 */
export const frozenLakeBoard = (line: CompletionLine): Output => {
  const obs = observations(line)
  const first = obs[0] === undefined ? undefined : parseLake(obs[0])
  if (first === undefined || first.player === undefined) {
    return { title: "FrozenLake", frames: [], notes: [{ text: "no board in the first observation", tone: "bad" }] }
  }
  const size = first.grid.length
  const width = first.grid[0].length
  // The map: what each cell is under the player. The start is under P at the reset.
  const map = first.grid.map((r) => r.slice())
  map[first.player[0]][first.player[1]] = "S"
  for (const text of obs.slice(1)) {
    const board = text === undefined ? undefined : parseLake(text)
    if (board === undefined || board.grid.length !== size) continue
    board.grid.forEach((r, i) =>
      r.forEach((c, j) => {
        if (c !== "P" && c !== "*" && map[i][j] === "P") map[i][j] = c
      })
    )
  }
  const infos = stepInfos(line)
  const rewards = stepRewards(line)
  const turns = typeof line.rollout_infos?.num_turns === "number" ? line.rollout_infos.num_turns : infos.length
  const path: Array<readonly [number, number]> = [first.player]
  const notes: Array<Note> = []
  const frames: Array<Frame> = []
  const draw = (turn: number, label: string, frameNotes: Array<Note>) => {
    const [pr, pc] = path[path.length - 1]
    const walked = new Set(path.slice(0, -1).map(([r, c]) => `${r},${c}`))
    const cells: Array<Array<Cell>> = map.map((r, i) =>
      r.map((c, j): Cell => {
        if (i === pr && j === pc) {
          const tone: Tone = c === "G" ? "goal" : c === "H" ? "hole" : "player"
          return { text: c === "G" ? "★" : c === "H" ? "✖" : "P", tone, title: `player (row ${i}, col ${j}) on ${c}` }
        }
        const tone: Tone = c === "S" ? "start" : c === "G" ? "goal" : c === "H" ? "hole" : walked.has(`${i},${j}`) ? "path" : "ice"
        return { text: c, tone }
      })
    )
    frames.push({ turn, label, grid: { cells }, notes: frameNotes })
  }
  draw(0, `reset: start at row ${first.player[0]}, col ${first.player[1]}`, [])
  for (let turn = 1; turn <= turns; turn++) {
    const info = infos[turn - 1]
    const [r, c] = path[path.length - 1]
    if (info === undefined) {
      draw(turn, `turn ${turn}: the env did not answer`, [{ text: "no step info for this turn", tone: "bad" }])
      continue
    }
    // The move the env made: `moved` (an env that may change it, as a slippery variant does) or
    // `parsed_action` (FrozenLake's own info).
    const action = typeof info.moved === "string" ? info.moved : typeof info.parsed_action === "string" ? info.parsed_action : null
    const status = typeof info.status === "string" ? info.status : "?"
    const move = action === null ? undefined : MOVES[action]
    const simulated: readonly [number, number] = move === undefined
      ? [r, c]
      : [Math.max(0, Math.min(size - 1, r + move[0])), Math.max(0, Math.min(width - 1, c + move[1]))]
    const seen = obs[turn] === undefined ? undefined : parseLake(obs[turn]!)
    const position = seen?.player ?? simulated
    const frameNotes: Array<Note> = []
    if (seen?.player !== undefined && (seen.player[0] !== simulated[0] || seen.player[1] !== simulated[1])) {
      frameNotes.push({
        text: `the observation shows the player at row ${seen.player[0]}, col ${seen.player[1]}; ` +
          `the parsed move leads to row ${simulated[0]}, col ${simulated[1]}`,
        tone: "info"
      })
    }
    path.push(position)
    const reward = rewards[turn - 1]
    frameNotes.push({
      text: `${action === null ? "no move parsed" : `moved ${action}`}: ${status}` +
        (reward === undefined || Number.isNaN(reward) ? "" : `, reward ${fmt(reward)}`),
      tone: status === "goal" ? "good" : status === "hole" || status === "invalid_action" ? "bad" : "info"
    })
    draw(turn, `turn ${turn}: ${action ?? "invalid"} → ${status}`, frameNotes)
  }
  const last = infos[infos.length - 1]
  if (last?.status === "goal") notes.push({ text: `reached the goal in ${turns} turns`, tone: "good" })
  else if (last?.status === "hole") notes.push({ text: `fell into a hole after ${turns} turns`, tone: "bad" })
  return { title: `FrozenLake ${size}x${width}`, frames, notes }
}

// ---------------------------------------------------------------------------------------------
// Sudoku
// ---------------------------------------------------------------------------------------------

const SUDOKU_ROW = /^R([1-9])\s+(.*)$/

/** The first 9x9 board in a text, as TextArena renders it (`R1 8 3 1 | 7 2 . | ...`). */
export const parseSudoku = (text: string): Array<Array<number>> | undefined => {
  const rows: Array<Array<number>> = []
  for (const raw of text.split("\n")) {
    const m = SUDOKU_ROW.exec(raw.trim())
    if (m === null) {
      if (rows.length > 0 && !raw.trim().startsWith("-")) break
      continue
    }
    if (Number(m[1]) !== rows.length + 1) return undefined
    const cells = m[2].replace(/\|/g, " ").trim().split(/\s+/)
    if (cells.length !== 9 || cells.some((c) => !/^[1-9.]$/.test(c))) return undefined
    rows.push(cells.map((c) => (c === "." ? 0 : Number(c))))
    if (rows.length === 9) return rows
  }
  return undefined
}

/**
 * Whether a turn's move was accepted, for step infos that do not say (`accepted`; logs of the OpenEnv
 * flow written before it): the next observation's board shows the digit, or the move is among
 * `rollout_infos.successful_moves` (the last turn has no next observation).
 */
const acceptedFrom = (line: CompletionLine, next: string | undefined, move: readonly [number, number, number]): boolean => {
  const board = next === undefined ? undefined : parseSudoku(next)
  if (board !== undefined) return board[move[0] - 1][move[1] - 1] === move[2]
  const moves = isRecord(line.rollout_infos) ? line.rollout_infos.successful_moves : undefined
  return Array.isArray(moves) && moves.includes(`[${move.join(" ")}]`)
}

/**
 * The Sudoku board: the puzzle from the reset's observation, each turn's move (read from the step's
 * `action` as the game reads it, or its `move` as the OpenEnv flow's `sudoku_scheduler` logs it)
 * marked valid (accepted) or invalid, accepted digits kept.
 *
 * @since 0.1.0
 * @category renderers
 */
export const sudokuBoard = (line: CompletionLine): Output => {
  const obs = observations(line)
  const puzzle = obs[0] === undefined ? undefined : parseSudoku(obs[0])
  if (puzzle === undefined) {
    return { title: "Sudoku", frames: [], notes: [{ text: "no board in the first observation", tone: "bad" }] }
  }
  const board = puzzle.map((r) => r.slice())
  const infos = stepInfos(line)
  const frames: Array<Frame> = []
  let accepted = 0
  let invalid = 0
  const draw = (turn: number, label: string, move: readonly [number, number, number, boolean] | undefined, notes: Array<Note>) => {
    const cells = board.map((r, i) =>
      r.map((d, j): Cell => {
        if (move !== undefined && move[0] === i && move[1] === j) {
          return move[3]
            ? { text: String(move[2]), tone: "valid", title: `turn ${turn}: ${move[2]} accepted` }
            : {
              text: String(move[2]),
              tone: "invalid",
              title: d === 0 ? `turn ${turn}: ${move[2]} rejected` : `turn ${turn}: ${move[2]} rejected (the cell holds ${d})`
            }
        }
        if (d === 0) return { text: "", tone: "empty" }
        return puzzle[i][j] !== 0 ? { text: String(d), tone: "given" } : { text: String(d), tone: "filled" }
      })
    )
    frames.push({ turn, label, grid: { cells, blocks: 3 }, notes })
  }
  draw(0, `reset: ${puzzle.flat().filter((d) => d === 0).length} empty cells`, undefined, [])
  for (let turn = 1; turn <= infos.length; turn++) {
    const info = infos[turn - 1]
    const action = typeof info.action === "string" ? info.action : typeof info.move === "string" ? info.move : ""
    const move = Sudoku.parseMove(action)
    const ok = typeof info.accepted === "boolean"
      ? info.accepted
      : move !== undefined && move.every((x) => x >= 1 && x <= 9) && acceptedFrom(line, obs[turn], move)
    const notes: Array<Note> = []
    const reason = typeof info.invalid_reason === "string" ? info.invalid_reason : undefined
    let marked: readonly [number, number, number, boolean] | undefined
    if (move === undefined || move[0] < 1 || move[0] > 9 || move[1] < 1 || move[1] > 9) {
      notes.push({ text: reason ?? `no move in ${JSON.stringify(action)}`, tone: "bad" })
    } else {
      const [row, col, num] = move
      marked = [row - 1, col - 1, num, ok]
      if (ok) board[row - 1][col - 1] = num
      notes.push(ok ? { text: `[${row} ${col} ${num}] accepted`, tone: "good" } : { text: reason ?? "rejected", tone: "bad" })
    }
    if (ok) accepted++
    else invalid++
    if (typeof info.completion === "number") notes.push({ text: `completion ${(info.completion * 100).toFixed(0)}%`, tone: "info" })
    if (typeof info.reason === "string") notes.push({ text: info.reason, tone: "info" })
    draw(turn, `turn ${turn}: ${move === undefined ? "no move" : `[${move.join(" ")}]`} ${ok ? "valid" : "invalid"}`, marked, notes)
  }
  return {
    title: "Sudoku",
    frames,
    notes: [{ text: `${accepted} valid, ${invalid} invalid moves`, tone: invalid === 0 ? "good" : "info" }]
  }
}

/**
 * The built-in renderers: `frozen_lake`, `sudoku`.
 *
 * @since 0.1.0
 * @category registry
 */
export const builtins: Registry = new Map([
  ["frozen_lake", make({ name: "frozen_lake", description: "the board and the path walked", render: frozenLakeBoard })],
  ["sudoku", make({ name: "sudoku", description: "the board, each move valid or invalid", render: sudokuBoard })]
])

/**
 * The renderer of a line: the one registered under its env's name; else the built-in whose board is
 * in the first observation (a Sudoku grid, then a FrozenLake one), for envs that do not name
 * their game: an OpenEnv server's is logged as `openenv`, whatever it plays.
 *
 * @since 0.4.0
 * @category registry
 */
export const pick = (registry: Registry, line: CompletionLine): Renderer | undefined => {
  const named = typeof line.env === "string" ? registry.get(line.env) : undefined
  if (named !== undefined) return named
  const first = observations(line)[0]
  if (first === undefined) return undefined
  if (parseSudoku(first) !== undefined) return registry.get("sudoku")
  if (parseLake(first) !== undefined) return registry.get("frozen_lake")
  return undefined
}

/**
 * The built-ins plus the renderers of each plugin, in order (a later one replaces an earlier one of
 * the same name).
 *
 * @since 0.1.0
 * @category registry
 */
export const registry = (plugins: ReadonlyArray<Plugin.Plugin>, base: Registry = builtins): Registry => {
  const out = new Map(base)
  for (const plugin of plugins) {
    for (const renderer of plugin.renderers ?? []) out.set(renderer.name, renderer as unknown as Renderer)
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Running a renderer: its output checked and capped
// ---------------------------------------------------------------------------------------------

const MAX_FRAMES = 1000
const MAX_CELLS = 4096
const MAX_TEXT = 200
const MAX_NOTES = 50

const text = (u: unknown, max = MAX_TEXT): string => {
  const s = typeof u === "string" ? u : u === undefined || u === null ? "" : String(u)
  return s.length > max ? s.slice(0, max) + "…" : s
}

const checkNotes = (u: unknown): Array<Note> =>
  (Array.isArray(u) ? u : []).slice(0, MAX_NOTES).map((n): Note => {
    const note: Record<string, unknown> = isRecord(n) ? n : { text: n }
    const tone = note.tone === "good" || note.tone === "bad" || note.tone === "info" ? note.tone : undefined
    return { text: text(note.text, 1000), tone }
  })

const checkFrame = (u: unknown, index: number): Frame => {
  if (!isRecord(u)) throw new Error(`frames[${index}] is not an object`)
  const turn = typeof u.turn === "number" && Number.isInteger(u.turn) ? u.turn : index
  let grid: Frame["grid"]
  if (u.grid !== undefined && u.grid !== null) {
    if (!isRecord(u.grid) || !Array.isArray(u.grid.cells)) throw new Error(`frames[${index}].grid.cells is not a list of rows`)
    let count = 0
    const cells = u.grid.cells.map((row, i) => {
      if (!Array.isArray(row)) throw new Error(`frames[${index}].grid.cells[${i}] is not a list of cells`)
      count += row.length
      if (count > MAX_CELLS) throw new Error(`frames[${index}].grid has more than ${MAX_CELLS} cells`)
      return row.map((c): Cell => {
        const cell: Record<string, unknown> = isRecord(c) ? c : { text: c }
        const tone = TONES.includes(cell.tone as Tone) ? (cell.tone as Tone) : undefined
        return { text: text(cell.text, 16), tone, title: cell.title === undefined ? undefined : text(cell.title) }
      })
    })
    const blocks = typeof u.grid.blocks === "number" && u.grid.blocks > 0 ? Math.trunc(u.grid.blocks) : undefined
    grid = { cells, blocks }
  }
  return { turn, label: text(u.label), grid, notes: checkNotes(u.notes) }
}

/**
 * Runs a renderer on a line: its output, checked (only known tones, texts capped, at most 1,000
 * frames of at most 4,096 cells), or the error it met.
 *
 * @since 0.1.0
 * @category running
 */
export const run = (renderer: Renderer, line: CompletionLine): Rendered | { readonly error: string } => {
  try {
    const out: unknown = renderer.render(line)
    if (!isRecord(out) || !Array.isArray(out.frames)) {
      return { error: `renderer ${renderer.name}: expected { title, frames: [...] }` }
    }
    if (out.frames.length > MAX_FRAMES) return { error: `renderer ${renderer.name}: more than ${MAX_FRAMES} frames` }
    return {
      renderer: renderer.name,
      title: text(out.title),
      frames: out.frames.map(checkFrame),
      notes: checkNotes(out.notes)
    }
  } catch (error) {
    return { error: `renderer ${renderer.name} failed: ${error instanceof Error ? error.message : String(error)}` }
  }
}
