import { describe, expect, it } from "@effect/vitest"
import { Effect, Result, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import {
  contentOf,
  makeHints,
  parseBoard,
  parseMove,
  solverMove,
  Tracker
} from "../examples/sudoku_scheduler.js"
import * as Builtins from "../src/Builtins.js"
import type * as Env from "../src/Env.js"
import * as Sudoku from "../src/envs/Sudoku.js"
import * as Message from "../src/Message.js"
import * as Registry from "../src/Registry.js"

const fixtures = path.resolve(import.meta.dirname, "fixtures")
const transcript: Array<any> = fs
  .readFileSync(path.join(fixtures, "openenv/textarena-sudoku-ws.jsonl"), "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line))
const transcriptBoard: Sudoku.Grid = transcript[3].data.raw_state.game_state.board
const generated: Array<{ seed: number; clues: number; puzzle: string; solution: string }> = JSON.parse(
  fs.readFileSync(path.join(fixtures, "sudoku/generated.json"), "utf8")
)

/** An independent, naive solution counter (first empty cell, digits 1..9), to check uniqueness. */
const naiveCount = (grid: Sudoku.Grid, limit = 2): number => {
  const g = grid.map((row) => row.slice())
  const ok = (r: number, c: number, d: number) => {
    for (let i = 0; i < 9; i++) if (g[r][i] === d || g[i][c] === d) return false
    const r0 = r - (r % 3)
    const c0 = c - (c % 3)
    for (let i = r0; i < r0 + 3; i++) for (let j = c0; j < c0 + 3; j++) if (g[i][j] === d) return false
    return true
  }
  const go = (): number => {
    const at = g.flat().indexOf(0)
    if (at < 0) return 1
    const r = Math.floor(at / 9)
    const c = at % 9
    let n = 0
    for (let d = 1; d <= 9 && n < limit; d++) {
      if (!ok(r, c, d)) continue
      g[r][c] = d
      n += go()
      g[r][c] = 0
    }
    return n
  }
  return go()
}

const isSolved = (grid: Sudoku.Grid): boolean => {
  const full = (cells: Array<number>) => cells.slice().sort().join("") === "123456789"
  for (let i = 0; i < 9; i++) {
    if (!full(grid[i]) || !full(grid.map((row) => row[i]))) return false
    const r0 = 3 * Math.floor(i / 3)
    const c0 = 3 * (i % 3)
    if (!full([0, 1, 2].flatMap((dr) => grid[r0 + dr].slice(c0, c0 + 3)))) return false
  }
  return true
}

const gameOf = (puzzle: Sudoku.Grid, maxTurns = 100) =>
  new Sudoku.Game({ puzzle, solution: Sudoku.solveUnique(puzzle)! }, maxTurns)

const emptyCells = (grid: Sudoku.Grid) =>
  grid.flatMap((row, r) => row.flatMap((d, c) => (d === 0 ? [[r + 1, c + 1] as const] : [])))

describe("Sudoku env: TextArena Sudoku-v0 as served by OpenEnv", () => {
  it("reproduces the transcript: every observation and state frame, text for text", () => {
    const game = gameOf(transcriptBoard)
    // the last exchange is a reset with a seed, which the reference ignores (its board is random)
    for (let i = 0; i < 16; i += 2) {
      const request = transcript[i]
      const expected = transcript[i + 1]
      let got: unknown
      if (request.type === "reset") {
        got = { type: "observation", data: { observation: game.openEnvObservation(), reward: 0, done: false } }
      } else if (request.type === "state") {
        got = {
          type: "state",
          data: { episode_id: expected.data.episode_id, step_count: game.stepCount, ...game.openEnvState() }
        }
      } else {
        const out = game.step(request.data.message)
        got = { type: "observation", data: { observation: game.openEnvObservation(), reward: out.reward, done: out.done } }
      }
      // key order included: the JSON text is the reference's (Python writes 0.0 where JSON has 0)
      expect(JSON.stringify(got), `frame ${i + 1}`).toBe(JSON.stringify(expected))
    }
  })

  it("feedback texts of every invalid move, the one-resubmission rule, and solving", () => {
    const { puzzle } = Sudoku.generate(11)
    const game = gameOf(puzzle)
    const [r, c] = emptyCells(puzzle)[0]
    const right = game.solution[r - 1][c - 1]
    const reason = (out: Sudoku.StepOutcome) => out.feedback
    expect(reason(game.step("[10 1 1]"))).toBe(
      "[GAME] You attempted an invalid move. Reason: Invalid move. Player 0 attempted to place 1 at (10, 1), which is out of bounds. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
    )
    // a valid move in between resets the allowance
    const accepted = game.step(`I play [${r} ${c} ${right}]`)
    expect(accepted.accepted).toBe(true)
    expect(accepted.feedback).toBe(`[GAME] Board state: \n${Sudoku.renderBoard(game.board)}`)
    const [r2, c2] = emptyCells(game.board)[0]
    const right2 = game.solution[r2 - 1][c2 - 1]
    const wrong2 = right2 === 9 ? 1 : right2 + 1
    expect(game.step(`[${r2} ${c2} ${wrong2}]`).feedback).toBe(
      `[GAME] You attempted an invalid move. Reason: Invalid move. Player 0 attempted to place ${wrong2} at (${r2}, ${c2}), which violates Sudoku rules. Please resubmit a valid move and remember to follow the game rules to avoid penalties.`
    )
    // two spaces are not the game's format: the second invalid move in a row ends the game
    const last = game.step("[1  2 3]")
    expect(last.done).toBe(true)
    expect(last.feedback).toBe("")
    expect(last.reward).toBeCloseTo(1 / emptyCells(puzzle).length)
    expect(game.gameInfo.reason).toBe(
      "Invalid Move: Invalid move format. Player 0 did not respond with valid 'row column number'."
    )
    expect(game.turn).toBe(2)

    const solved = gameOf(puzzle)
    const cells = emptyCells(puzzle)
    let out: Sudoku.StepOutcome | undefined
    for (const [i, j] of cells) out = solved.step(`${i} ${j} ${solved.solution[i - 1][j - 1]}`)
    expect(out).toMatchObject({ reward: 1, done: true, accepted: true })
    expect(solved.completed).toBe(true)
    expect(solved.gameInfo).toEqual({
      role: "Player 0",
      invalid_move: false,
      turn_count: cells.length,
      reason: "Congratulations! Player 0 completed the Sudoku puzzle."
    })
    expect(solved.openEnvObservation().prompt).toBe("Sudoku-v0")
  })

  it("turn limit: done with the fraction filled, and the reference's text", () => {
    const { puzzle } = Sudoku.generate(3)
    const game = gameOf(puzzle, 2)
    const cells = emptyCells(puzzle)
    const play = (k: number) => game.step(`[${cells[k][0]} ${cells[k][1]} ${game.solution[cells[k][0] - 1][cells[k][1] - 1]}]`)
    expect(play(0).done).toBe(false)
    expect(play(1).done).toBe(false)
    const third = play(2)
    expect(third.done).toBe(true)
    expect(third.reward).toBeCloseTo(3 / cells.length)
    expect(game.gameInfo.reason).toBe(
      `The turn limit has been reached. You correctly filled ${Math.round((3 / cells.length) * 100)}% of the empty cells.`
    )
  })

  it("generation matches TextArena's generator after random.seed(seed), seed for seed", () => {
    for (const vector of generated) {
      const { puzzle, solution } = Sudoku.generate(vector.seed, vector.clues)
      expect(puzzle.flat().join(""), `seed ${vector.seed}`).toBe(vector.puzzle)
      expect(solution.flat().join(""), `seed ${vector.seed}`).toBe(vector.solution)
    }
  })

  it.prop(
    "a seeded puzzle has exactly one solution (checked by an independent solver) and is reproducible",
    [
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 2 ** 31 - 1 })),
      Schema.Int.check(Schema.isBetween({ minimum: 30, maximum: 64 }))
    ],
    ([seed, clues]) => {
      const { puzzle, solution } = Sudoku.generate(seed, clues)
      expect(naiveCount(puzzle)).toBe(1)
      expect(isSolved(solution)).toBe(true)
      for (let i = 0; i < 81; i++) {
        const d = puzzle[Math.floor(i / 9)][i % 9]
        if (d !== 0) expect(d).toBe(solution[Math.floor(i / 9)][i % 9])
      }
      const count = puzzle.flat().filter((d) => d !== 0).length
      expect(count).toBeGreaterThanOrEqual(clues)
      expect(Sudoku.generate(seed, clues).puzzle).toEqual(puzzle)
    },
    { arbitrary: { runs: 40 } }
  )

  it("solution counting agrees with the naive solver on boards with 0, 1 and many solutions", () => {
    const { puzzle } = Sudoku.generate(1, 60)
    const open = puzzle.map((row) => row.slice())
    open[0] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
    open[1] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
    const broken = puzzle.map((row) => row.slice())
    const [r, c] = emptyCells(puzzle)[0]
    broken[r - 1][c - 1] = broken[r - 1].find((d) => d !== 0)!
    for (const grid of [puzzle, open]) expect(Sudoku.countSolutions(grid)).toBe(naiveCount(grid))
    // a digit twice in a row: no solution (the naive counter does not check the clues themselves)
    expect(Sudoku.countSolutions(broken)).toBe(0)
    expect(Sudoku.countSolutions(open)).toBe(2)
  })

  it.effect("as a gym env: the prompt on reset, the game's answer per step, structured info", () =>
    Effect.gen(function*() {
      const definition = Result.getOrThrow(Registry.env(Builtins.registry, "sudoku"))
      const request = (seed: number): Env.ResetRequest => ({
        trajectoryId: "t",
        seed,
        messages: [],
        dataDict: {},
        envConfig: {}
      })
      const env = yield* Result.getOrThrow(definition.prepare({}))
      const reset = yield* env.reset(request(7))
      const expected = Sudoku.generate(7)
      expect(reset.observation.startsWith("[GAME] You are Player 0. You are playing Sudoku.")).toBe(true)
      expect(reset.observation.endsWith(`[GAME] Game Board:\n${Sudoku.renderBoard(expected.puzzle)}`)).toBe(true)
      expect(reset.systemPrompt).toBeUndefined()
      expect(reset.info).toMatchObject({ env_id: "Sudoku-v0", seed: 7 })
      const first = yield* env.step([Message.user(reset.observation), Message.assistant("hello")])
      expect(first).toMatchObject({ reward: 0, done: false, info: { action: "[hello]", accepted: false } })
      expect(first.observation.startsWith("[GAME] You attempted an invalid move.")).toBe(true)
      const second = yield* env.step([Message.assistant("[1 1 1] again?")])
      expect(second.done).toBe(true)
      expect(second.observation).toMatch(/^\[GAME\] You attempted|^Invalid Move: /)
      // ended with a reward but not solved: is_success says so (issue 29's "solved")
      expect([first.info.is_success, second.info.is_success]).toEqual([false, false])
      // solved: every empty cell filled with the solution's digit
      const solving = yield* Result.getOrThrow(definition.prepare({}))
      yield* solving.reset(request(7))
      let last: Env.StepResult | undefined
      for (let r = 0; r < 9; r++) {
        for (let c = 0; c < 9; c++) {
          if (expected.puzzle[r][c] === 0) last = yield* solving.step([Message.assistant(`[${r + 1} ${c + 1} ${expected.solution[r][c]}]`)])
        }
      }
      expect(last).toMatchObject({ done: true, reward: 1, info: { is_success: true } })

      // env_config.seed wins over the reset's seed; a fixed puzzle is played as given
      const seeded = yield* Result.getOrThrow(definition.prepare({ seed: 5 }))
      expect((yield* seeded.reset(request(99))).observation).toContain(Sudoku.renderBoard(Sudoku.generate(5).puzzle))
      const fixed = yield* Result.getOrThrow(definition.prepare({ puzzle: transcriptBoard.flat().join("") }))
      expect((yield* fixed.reset(request(1))).observation).toBe(transcript[1].data.observation.prompt)
    }).pipe(Effect.scoped))

  it("env_config is checked per row: a puzzle must parse and have exactly one solution", () => {
    const definition = Result.getOrThrow(Registry.env(Builtins.registry, "sudoku"))
    const problem = (config: Record<string, unknown>) => Result.flip(definition.prepare(config)).pipe(Result.getOrThrow)
    expect(problem({ puzzle: "123" })).toMatchObject({ path: "env_config.puzzle" })
    expect(problem({ puzzle: "123" }).reason).toContain("must be 81 cells")
    expect(problem({ puzzle: "0".repeat(81) }).reason).toContain("exactly one solution")
    expect(problem({ clues: 90 }).path).toBe("env_config.clues")
  })
})

describe("the Sudoku scheduler's pieces (examples/sudoku_scheduler.ts)", () => {
  const board = Sudoku.renderBoard(transcriptBoard)
  const initial = transcript[1].data.observation.messages[0].content as string

  it("parses moves: bracketed first, else the first three integers, else nothing", () => {
    expect(parseMove("I think [ 3  5 7 ] is right, not [1 1 1]")).toBe("[3 5 7]")
    expect(parseMove("row 4, column 2: 9")).toBe("[4 2 9]")
    expect(parseMove("row 4 then 2")).toBeUndefined()
    expect(parseMove("no idea")).toBeUndefined()
  })

  it("reads the board from a transcript and gives the hints", () => {
    expect(parseBoard(initial)).toEqual(transcriptBoard)
    expect(parseBoard(contentOf(transcript[1].data.observation))).toEqual(transcriptBoard)
    expect(parseBoard("R1 only")).toBeUndefined()
    const hints = makeHints(transcriptBoard, ["[1 1 3]", "[1 2 1]"])
    expect(hints).toContain("\nMOVES ALREADY TRIED (do not repeat): [1 1 3], [1 2 1]")
    const solution = Sudoku.solveUnique(transcriptBoard)!
    for (const grid of [transcriptBoard, Sudoku.generate(5, 25).puzzle]) {
      // the 10 most constrained empty cells (ties in reading order), computed here from the rules
      const cells = emptyCells(grid).map(([r, c]) => {
        const used = new Set<number>()
        for (let i = 0; i < 9; i++) used.add(grid[r - 1][i]).add(grid[i][c - 1])
        for (let i = 0; i < 9; i++) used.add(grid[r - 1 - ((r - 1) % 3) + Math.floor(i / 3)][c - 1 - ((c - 1) % 3) + (i % 3)])
        return { r, c, options: [1, 2, 3, 4, 5, 6, 7, 8, 9].filter((d) => !used.has(d)) }
      }).sort((a, b) => a.options.length - b.options.length).slice(0, 10)
      const single = cells.filter((x) => x.options.length === 1).map((x) => `[${x.r} ${x.c} ${x.options[0]}]`)
      const few = cells.filter((x) => x.options.length === 2 || x.options.length === 3)
        .map((x) => `(${x.r},${x.c})->${x.options.join(",")}`)
      const text = makeHints(grid, [])
      if (single.length > 0) expect(text).toContain(`\nGUARANTEED MOVES (only one option): ${single.slice(0, 5).join(", ")}`)
      else expect(text).not.toContain("GUARANTEED")
      if (few.length > 0) expect(text).toContain(`Other options: ${few.slice(0, 5).join(" | ")}`)
      else expect(text).not.toContain("Other options")
      if (grid === transcriptBoard) {
        expect(single.length).toBe(10) // all ten most constrained cells are singles; the hint shows five
        for (const move of single) {
          const [r, c, d] = move.slice(1, -1).split(" ").map(Number)
          expect(solution[r - 1][c - 1]).toBe(d)
        }
      } else {
        expect(few.length).toBeGreaterThan(0)
      }
    }
    const tried = Array.from({ length: 12 }, (_, i) => `[${i} 1 1]`)
    expect(makeHints(undefined, tried)).toBe(`\nMOVES ALREADY TRIED (do not repeat): ${tried.slice(2).join(", ")}`)
    expect(makeHints(transcriptBoard, [])).not.toContain("MOVES ALREADY TRIED")
    expect(solverMove(board)).toMatch(/^\[\d \d \d\]$/)
  })

  it("reward components on hand-built turns: accepted, overwrite, repeats, progress, correct", () => {
    const tracker = new Tracker(initial)
    expect(tracker.initialFilled).toBe(60)
    let content = initial
    const game = gameOf(transcriptBoard)
    const play = (move: string) => {
      const out = game.step(move)
      content = game.transcript
      return tracker.observe(move, content, out.reward)
    }
    // an accepted move: +1 empty cell, +1 valid, no repetition, 1/21 progress
    let c = play("[1 1 3]")
    expect(c).toMatchObject({ empty_cell_reward: 1, valid_move_reward: 1, repetition_reward: 0, correct_reward: 0 })
    expect(c.progress_reward).toBeCloseTo(1 / 21)
    // overwriting a clue: -1 empty cell, the env asks to resubmit: -0.5
    c = play("[1 2 1]")
    expect(tracker.emptyCell).toEqual([1, -1])
    expect(tracker.validMove).toEqual([1, -0.5])
    expect(c.empty_cell_reward).toBe(0)
    expect(c.valid_move_reward).toBe(0.25)
    // the same accepted move again: the cell is filled now; first repeat costs 2
    c = play("[1 1 3]")
    expect(tracker.repetition).toEqual([0, 0, -2])
    expect(tracker.emptyCell).toEqual([1, -1, -1])
    expect(game.done).toBe(true)
    expect(c.correct_reward).toBeCloseTo(1 / 21)
    expect(c.sudoku_reward).toBeCloseTo(
      c.empty_cell_reward + c.valid_move_reward + c.repetition_reward + c.progress_reward + c.correct_reward
    )
    // repeats cost 2^k, capped at 10
    const repeats = new Tracker(initial)
    for (let k = 0; k < 6; k++) repeats.observe("[9 9 9]", initial + "\n[GAME] You attempted an invalid move.", 0)
    expect(repeats.repetition).toEqual([0, -2, -4, -8, -10, -10])
    expect(repeats.components().progress_reward).toBe(0)
    expect(repeats.components().repetition_reward).toBeCloseTo(-34 / 6)
  })

  it("the invalid move that ends the game (the second in a row) is scored invalid, not as an accepted move", () => {
    // issue 13: the game ends on it without a word, so it was read as accepted (+1, in successful_moves)
    const tracker = new Tracker(initial)
    const game = gameOf(transcriptBoard)
    const solution = game.solution
    const [[r1, c1], [r2, c2]] = emptyCells(transcriptBoard)
    const right = `[${r1} ${c1} ${solution[r1 - 1][c1 - 1]}]`
    const wrongDigit = (r: number, c: number) => `[${r} ${c} ${(solution[r - 1][c - 1] % 9) + 1}]`
    const play = (move: string) => {
      const out = game.step(move)
      return { out, c: tracker.observe(move, game.transcript, out.reward) }
    }
    play(right)
    // a wrong digit in an empty cell: the env asks to resubmit (-0.5)
    expect(play(wrongDigit(r2, c2)).out.done).toBe(false)
    // the same mistake again: the game ends, and the env adds no text for it
    const { c, out } = play(wrongDigit(r2, c2))
    expect(out.done).toBe(true)
    expect(game.gameInfo.reason).toContain("Invalid Move")
    expect(tracker.validMove).toEqual([1, -0.5, 0])
    expect(tracker.successful).toEqual([right])
    expect(tracker.failed).toEqual([wrongDigit(r2, c2), wrongDigit(r2, c2)])
    expect(tracker.emptyCell).toEqual([1, 1, 1]) // it did target an empty cell
    expect(tracker.repetition).toEqual([0, 0, -2])
    expect(c.valid_move_reward).toBeCloseTo(0.5 / 3)
    expect(c.progress_reward).toBeCloseTo(1 / 21)
    expect(c.correct_reward).toBeCloseTo(1 / 21) // TextArena's reward at the end: the fraction filled

    // the same with two different wrong digits in two empty cells
    const other = new Tracker(initial)
    const second = gameOf(transcriptBoard)
    for (const move of [wrongDigit(r1, c1), wrongDigit(r2, c2)]) other.observe(move, (second.step(move), second.transcript), 0)
    expect(second.done).toBe(true)
    expect(other.validMove).toEqual([-0.5, 0])
    expect(other.successful).toEqual([])
    expect(other.failed).toEqual([wrongDigit(r1, c1), wrongDigit(r2, c2)])

    // a game-ending move that is accepted (the last cell) still counts: the env shows it on the board
    const last = new Tracker(initial)
    const solved = gameOf(transcriptBoard)
    for (const [r, col] of emptyCells(transcriptBoard)) {
      const move = `[${r} ${col} ${solution[r - 1][col - 1]}]`
      last.observe(move, (solved.step(move), solved.transcript), solved.lastReward)
    }
    expect(solved.completed).toBe(true)
    expect(last.validMove.every((v) => v === 1)).toBe(true)
  })

  it("what the sum pays for (the README's figures): ending a game on purpose beats being cut off by max_turns", () => {
    const solution = gameOf(transcriptBoard).solution
    const cells = emptyCells(transcriptBoard)
    expect(cells.length).toBe(21)
    const right = ([r, c]: readonly [number, number]) => `[${r} ${c} ${solution[r - 1][c - 1]}]`
    const wrong = ([r, c]: readonly [number, number]) => `[${r} ${c} ${(solution[r - 1][c - 1] % 9) + 1}]`
    const score = (moves: ReadonlyArray<string>) => {
      const tracker = new Tracker(initial)
      const game = gameOf(transcriptBoard)
      let last = tracker.components()
      for (const move of moves) {
        const out = game.step(move)
        last = tracker.observe(move, game.transcript, out.reward)
      }
      return { ...last, done: game.done }
    }
    const tenRight = cells.slice(0, 10).map(right)
    // 10 accepted moves, then the rollout's max_turns cuts the game: the env's reward is still 0
    const cut = score(tenRight)
    expect(cut.done).toBe(false)
    expect(cut).toMatchObject({ empty_cell_reward: 1, valid_move_reward: 1, correct_reward: 0 })
    expect(cut.sudoku_reward).toBeCloseTo(2 + 10 / 21)
    // the same 10, then two wrong digits end the game: the env pays the fraction filled
    const quit = score([...tenRight, wrong(cells[10]), wrong(cells[11])])
    expect(quit.done).toBe(true)
    expect(quit.correct_reward).toBeCloseTo(10 / 21)
    expect(quit.sudoku_reward).toBeCloseTo(1 + 9.5 / 12 + 20 / 21)
    expect(quit.sudoku_reward).toBeGreaterThan(cut.sudoku_reward + 0.25)
    // empty_cell_reward cannot tell a wrong digit from a right one
    expect(score([wrong(cells[0]), right(cells[1])]).empty_cell_reward).toBe(1)
    // the means pay one accepted move as much as ten
    expect(score([right(cells[0])]).valid_move_reward).toBe(score(tenRight).valid_move_reward)
  })

  it("a solved board: every component at its best, total 4", () => {
    const tracker = new Tracker(initial)
    const game = gameOf(transcriptBoard)
    let last: ReturnType<Tracker["observe"]> | undefined
    for (const [r, c] of emptyCells(transcriptBoard)) {
      const move = `[${r} ${c} ${game.solution[r - 1][c - 1]}]`
      const out = game.step(move)
      last = tracker.observe(move, game.transcript, out.reward)
      if (!out.done) expect(tracker.nextPrompt()).toContain(`Step ${tracker.successful.length}. Progress:`)
    }
    expect(last).toMatchObject({
      empty_cell_reward: 1,
      valid_move_reward: 1,
      repetition_reward: 0,
      progress_reward: 1,
      correct_reward: 1,
      sudoku_reward: 4
    })
  })
})
