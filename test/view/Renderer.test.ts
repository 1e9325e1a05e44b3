import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { CompletionLine } from "../../src/CompletionsLog.js"
import * as FrozenLake from "../../src/envs/FrozenLake.js"
import * as Message from "../../src/Message.js"
import * as PluginLoader from "../../src/node/PluginLoader.js"
import { cli } from "../cli.js"
import type { Rendered } from "../../src/view/Detail.js"
import * as Renderer from "../../src/view/Renderer.js"
import * as Logs from "./logs.js"
import sudokuPlugin from "../../examples/sudoku_scheduler.js"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Sudoku from "../../src/envs/Sudoku.js"
import * as Inference from "../../src/Inference.js"
import * as Rollout from "../../src/Rollout.js"
import { records, rows, runConfig } from "../helpers.js"
import { serve } from "../openenv/helpers.js"

const read = (file: string): Array<CompletionLine> => fs.readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l))

const rendered = (out: Rendered | { readonly error: string }): Rendered => {
  if ("error" in out) throw new Error(out.error)
  return out
}

const player = (frame: Rendered["frames"][number]) => {
  const cells = frame.grid!.cells
  for (let r = 0; r < cells.length; r++) {
    for (let c = 0; c < cells[r].length; c++) {
      if (cells[r][c].title?.startsWith("player")) return [r, c]
    }
  }
  return undefined
}

describe("env renderers", () => {
  const dir = Logs.tmp()

  it.effect("FrozenLake: one frame per turn, the player where the env's own game puts it, the path walked marked", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 10, policy: "random" })
      const frozen = Renderer.builtins.get("frozen_lake")!
      let holes = 0
      for (const line of read(file)) {
        const out = rendered(Renderer.run(frozen, line))
        expect(out.frames.length).toBe(line.rollout_infos.num_turns + 1)
        // Replay the trajectory's replies in the env's game: the same position after every turn.
        const game = new FrozenLake.Game({ size: 4, p: 0.8, seed: BigInt(line.env_config.seed as number) })
        game.reset(0)
        expect(player(out.frames[0])).toEqual([game.row, game.col])
        const replies = line.messages.filter((m) => m.role === "assistant")
        replies.forEach((reply, i) => {
          game.step([Message.assistant(reply.content)])
          const frame = out.frames[i + 1]
          expect(player(frame)).toEqual([game.row, game.col])
          const cell = frame.grid!.cells[game.row][game.col]
          expect(cell.tone).toBe(game.grid[game.row][game.col] === "G" ? "goal" : game.grid[game.row][game.col] === "H" ? "hole" : "player")
        })
        const last = out.frames[out.frames.length - 1]
        if (last.grid!.cells.flat().some((c) => c.tone === "hole" && c.title?.startsWith("player"))) holes++
        // the start is marked once the player has left it; every earlier position is on the path
        const tones = last.grid!.cells.flat().map((c) => c.tone)
        expect(tones.filter((t) => t === "start" || t === "player" || t === "goal" || t === "hole").length).toBeGreaterThan(0)
      }
      expect(holes).toBeGreaterThan(0) // the random policy falls in now and then: those frames are drawn too
    }))

  it.effect("Sudoku: the puzzle, each move marked valid or invalid as the env judged it, accepted digits kept", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.sudoku(dir)
      const sudoku = Renderer.builtins.get("sudoku")!
      let valid = 0
      let invalid = 0
      for (const line of read(file)) {
        const out = rendered(Renderer.run(sudoku, line))
        const infos = line.rollout_infos.step_infos
        expect(out.frames.length).toBe(infos.length + 1)
        expect(out.frames[0].grid!.cells.flat().filter((c) => c.tone === "given").length).toBe(74)
        infos.forEach((info, i) => {
          const cells = out.frames[i + 1].grid!.cells.flat()
          const marked = cells.filter((c) => c.tone === "valid" || c.tone === "invalid")
          if (info.accepted === true) {
            valid++
            expect(marked.map((c) => c.tone)).toEqual(["valid"])
            // accepted digits stay on the board in later frames
            const filled = out.frames[out.frames.length - 1].grid!.cells.flat().filter((c) => c.tone === "filled" || c.tone === "valid").length
            expect(filled).toBeGreaterThan(0)
          } else {
            invalid++
            expect(marked.every((c) => c.tone === "invalid")).toBe(true)
            expect(out.frames[i + 1].notes?.some((n) => n.tone === "bad")).toBe(true)
          }
        })
      }
      expect(valid).toBeGreaterThan(0)
      expect(invalid).toBeGreaterThan(0)
    }))

  it.live("the OpenEnv flow's Sudoku (logged as env openenv): its boards are drawn, each move as the env judged it (issue 29)", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 8 })
      const scheduler = sudokuPlugin.schedulers!.find((s) => s.name === "sudoku_scheduler")!
      const solver = sudokuPlugin.policies!.find((p) => p.name === "sudoku-solver")!
      const config = yield* runConfig({ scheduler, numGenerations: 4, maxTurns: 30, concurrency: 4 })
      const policy = Layer.effect(Inference.Inference, Effect.orDie(solver.make({ epsilon: 0.2 })))
      const all = records(yield* Effect.provide(Rollout.runAll(config, rows([{ env_config: { base_url: server.url } }, { env_config: { base_url: server.url } }])), policy))
      let valid = 0
      let invalid = 0
      for (const record of all) {
        const line = JSON.parse(CompletionsLog.encodeLine(record)) as CompletionLine
        expect(line.env).toBe("openenv")
        const renderer = Renderer.pick(Renderer.builtins, line)
        expect(renderer?.name).toBe("sudoku")
        const out = rendered(Renderer.run(renderer!, line))
        const infos = line.rollout_infos.step_infos as ReadonlyArray<{ readonly move: string | null; readonly accepted?: boolean }>
        expect(out.frames.length).toBe(infos.length + 1)
        const marks = (frames: Rendered["frames"]) =>
          frames.slice(1).map((f) => f.grid!.cells.flat().filter((c) => c.tone === "valid" || c.tone === "invalid").map((c) => c.tone))
        const accepted = marks(out.frames).map((tones) => tones.includes("valid"))
        expect(accepted).toEqual(infos.map((info) => info.accepted === true))
        valid += accepted.filter(Boolean).length
        invalid += accepted.filter((a) => !a).length
        // a log written before `accepted`: the next board (or successful_moves, for the last move) says it
        const old = {
          ...line,
          rollout_infos: { ...line.rollout_infos, step_infos: infos.map(({ accepted: _accepted, ...info }) => info) }
        }
        expect(marks(rendered(Renderer.run(renderer!, old)).frames)).toEqual(marks(out.frames))
      }
      expect(valid).toBeGreaterThan(0)
      expect(invalid).toBeGreaterThan(0)
      // a line whose env names its own renderer keeps it; one with no board has none
      const first = JSON.parse(CompletionsLog.encodeLine(all[0])) as CompletionLine
      expect(Renderer.pick(Renderer.builtins, { ...first, env: "frozen_lake" })?.name).toBe("frozen_lake")
      expect(Renderer.pick(Renderer.builtins, { ...first, messages: [Message.user("hello")] })).toBeUndefined()
    }))

  it("a plugin renderer's output is checked: unknown tones dropped, texts capped, too many frames or a throw become an error", () => {
    const line = JSON.parse(JSON.stringify({ messages: [], rollout_infos: { num_turns: 0, step_infos: [] } })) as CompletionLine
    const make = (render: () => unknown) => Renderer.make({ name: "x", render: render as Renderer.Renderer["render"] })
    const out = rendered(Renderer.run(make(() => ({
      title: "T",
      frames: [{ label: "x".repeat(500), grid: { cells: [[{ text: "<script>alert(1)</script>", tone: "javascript:evil" }, 7]] }, notes: ["plain", { text: "ok", tone: "good" }] }]
    })), line))
    expect(out.frames[0].label.length).toBe(201)
    // a cell's text is capped at 16 characters; it is text, never markup (the page adds it as a text node)
    expect(out.frames[0].grid!.cells[0]).toEqual([
      { text: "<script>alert(1)…", tone: undefined, title: undefined },
      { text: "7", tone: undefined, title: undefined }
    ])
    expect(out.frames[0].notes).toEqual([{ text: "plain", tone: undefined }, { text: "ok", tone: "good" }])
    expect(Renderer.run(make(() => ({ title: "T", frames: Array.from({ length: 1001 }, () => ({})) })), line)).toEqual({ error: "renderer x: more than 1000 frames" })
    expect(Renderer.run(make(() => { throw new Error("bad line") }), line)).toEqual({ error: "renderer x failed: bad line" })
    expect(Renderer.run(make(() => 42), line)).toEqual({ error: "renderer x: expected { title, frames: [...] }" })
    expect(Renderer.run(make(() => ({ title: "T", frames: [{ grid: { cells: [Array.from({ length: 5000 }, () => "a")] } }] })), line)).toEqual({
      error: "renderer x failed: frames[0].grid has more than 4096 cells"
    })
  })

  it.effect("a plugin's renderer (examples/frozen_lake_plugin.ts): the slippery lake's board, every slip noted", () =>
    Effect.gen(function*() {
      const plugin = path.join(Logs.root, "examples/frozen_lake_plugin.ts")
      const output = path.join(dir, "slippery.jsonl")
      const run = yield* cli(
        "run", "--dataset", path.join(Logs.root, "examples/frozen_lake.jsonl"), "--plugin", plugin, "--env", "slippery_frozen_lake",
        "--policy", "frozen-lake-solver", "--num-generations", "2", "--max-turns", "8", "--output", output
      )
      expect(run.code).toBeLessThanOrEqual(1)
      const registry = Renderer.registry([yield* PluginLoader.load(plugin)])
      const slippery = registry.get("slippery_frozen_lake")!
      let slips = 0
      for (const line of read(output).slice(0, 64)) {
        const out = rendered(Renderer.run(slippery, line))
        expect(out.frames.length).toBe(line.rollout_infos.num_turns + 1)
        line.rollout_infos.step_infos.forEach((info, i) => {
          const noted = out.frames[i + 1].notes?.some((n) => n.text.startsWith("slipped:")) === true
          expect(noted).toBe(info.slipped === true)
          if (noted) slips++
        })
      }
      expect(slips).toBeGreaterThan(0)
    }))

  it("plugins add renderers by env name, later ones replacing earlier ones", () => {
    const mine = Renderer.make({ name: "frozen_lake", render: () => ({ title: "mine", frames: [] }) })
    const registry = Renderer.registry([{ renderers: [mine] }, { renderers: [Renderer.make({ name: "other", render: () => ({ title: "o", frames: [] }) })] }])
    expect(registry.get("frozen_lake")).toBe(mine)
    expect([...registry.keys()].sort()).toEqual(["frozen_lake", "other", "sudoku"])
    expect(Renderer.builtins.get("frozen_lake")).not.toBe(mine)
  })
})
