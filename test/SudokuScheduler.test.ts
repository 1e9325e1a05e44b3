/**
 * The Sudoku scheduler's scoring over whole runs against an OpenEnv Sudoku server (this project's,
 * in-process): issue 13's repro. With a player that makes a random move 20% of the time, games
 * often end on the second invalid move in a row; that move was scored as accepted (+1
 * `valid_move_reward`, listed in `successful_moves`) in 17 of 256 trajectories of the README's run.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import plugin from "../examples/sudoku_scheduler.js"
import * as Sudoku from "../src/envs/Sudoku.js"
import * as Inference from "../src/Inference.js"
import * as Rollout from "../src/Rollout.js"
import * as Summary from "../src/Summary.js"
import { records, rows, runConfig } from "./helpers.js"
import { serve } from "./openenv/helpers.js"

const scheduler = plugin.schedulers!.find((s) => s.name === "sudoku_scheduler")!
const solver = plugin.policies!.find((p) => p.name === "sudoku-solver")!
const progress = plugin.rewards!.find((r) => r.name === "sudoku_progress")!

describe("sudoku_scheduler: every move counted once, as the env ruled", () => {
  it.live("random moves (epsilon 0.2): successful_moves are exactly the cells the env filled", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 8 })
      // trained on sudoku_progress alone (the gym column weighted 0), as the README suggests
      const config = yield* runConfig({
        scheduler,
        numGenerations: 8,
        maxTurns: 30,
        concurrency: 8,
        seed: 0,
        rewards: [progress],
        weights: [1, 0]
      })
      const policy = Layer.effect(Inference.Inference, Effect.orDie(solver.make({ epsilon: 0.2 })))
      const dataset = Array.from({ length: 12 }, () => ({ env_config: { base_url: server.url } }))
      const all = records(yield* Effect.provide(Rollout.runAll(config, rows(dataset)), policy))
      expect(all.length).toBe(96)
      let endedOnInvalidMove = 0
      for (const record of all) {
        expect(record.error).toBeUndefined()
        const infos = record.result.rolloutInfos as Record<string, unknown> & {
          readonly successful_moves: ReadonlyArray<string>
          readonly failed_moves: ReadonlyArray<string>
          readonly progress_reward: number
          readonly valid_move_reward: number
          readonly correct_reward: number
          readonly gym_done: boolean
        }
        const steps = record.result.stepInfos as ReadonlyArray<{ readonly move: string; readonly env_reward: number }>
        // the board the model first saw: its empty cells are what progress is measured against
        const first = record.result.messages.find((m) => m.role === "user")!.content
        const empty = first.split("\n").filter((line) => /^R\d/.test(line.trim())).join("").split(".").length - 1
        const filled = Math.round(infos.progress_reward * empty)
        expect(infos.successful_moves.length, record.result.id).toBe(filled)
        // every move is either successful or failed, except repeats of a successful one (never here)
        expect(infos.successful_moves.length + infos.failed_moves.length, record.result.id).toBe(steps.length)
        if (infos.gym_done && infos.correct_reward < 1) {
          // the game ended on an invalid move: it is the last failed move, not a successful one
          endedOnInvalidMove++
          const last = steps[steps.length - 1].move
          expect(infos.failed_moves[infos.failed_moves.length - 1], record.result.id).toBe(last)
          expect(infos.successful_moves.slice(-1), record.result.id).not.toEqual([last])
        }
        // valid_move_reward is the mean of +1 per accepted move, -0.5 per warning, 0 for the move that ends it
        const warnings = infos.failed_moves.length - (infos.gym_done && infos.correct_reward < 1 ? 1 : 0)
        expect(infos.valid_move_reward, record.result.id).toBeCloseTo((filled - 0.5 * warnings) / steps.length)
        // sudoku_progress: progress, plus 1 when solved; it alone makes the trajectory's reward
        const solved = infos.correct_reward === 1
        expect(solved).toBe(filled === empty)
        expect(record.rewards!.sudoku_progress).toBeCloseTo(infos.progress_reward + (solved ? 1 : 0))
        expect(record.reward).toBeCloseTo(record.rewards!.sudoku_progress)
      }
      // the run has games ending on an invalid move, or it would not test this
      expect(endedOnInvalidMove).toBeGreaterThan(20)
    }))

  it.live("the summary's solved counts the puzzles the env completed, not every positive shaped reward (issue 29)", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 8 })
      const config = yield* runConfig({ scheduler, numGenerations: 8, maxTurns: 30, concurrency: 8, seed: 0 })
      const policy = Layer.effect(Inference.Inference, Effect.orDie(solver.make({ epsilon: 0.2 })))
      const dataset = Array.from({ length: 8 }, () => ({ env_config: { base_url: server.url } }))
      const items = yield* Effect.provide(Rollout.runAll(config, rows(dataset)), policy)
      const accumulator = new Summary.Accumulator()
      for (const item of items) accumulator.add(item)
      const s = accumulator.summary(1)
      const all = records(items)
      const completed = all.filter((r) => (r.result.rolloutInfos as { correct_reward?: number }).correct_reward === 1).length
      expect(s.solved).toBe(completed)
      expect(s.solvedReported).toBe(all.length)
      // the shaped sum is positive for most partial boards: "success rate" was read as solved
      expect(s.successes).toBeGreaterThan(completed)
      expect(completed).toBeGreaterThan(0)
      // each step says whether the env accepted its move (the viewer's board marks it)
      for (const r of all) {
        const steps = r.result.stepInfos as ReadonlyArray<{ readonly move: string | null; readonly accepted?: boolean }>
        const infos = r.result.rolloutInfos as { readonly successful_moves: ReadonlyArray<string> }
        expect(steps.filter((step) => step.accepted === true).map((step) => step.move)).toEqual(infos.successful_moves)
      }
    }))
})
