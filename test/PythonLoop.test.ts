/**
 * The Python loop of the Python comparison (bench/workloads/python/gym_loop.py) does the same work
 * as `effect-gym run --env frozen_lake --policy random`: the same trajectories, trajectory by
 * trajectory (conversation, rewards, turns, advantage), so the benchmark's ratio compares equal work.
 * Skipped where there is no python3.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { cli } from "./cli.js"

const loop = path.resolve(import.meta.dirname, "../bench/workloads/python/gym_loop.py")
const hasPython = (() => {
  try {
    execFileSync("python3", ["--version"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
})()

describe.skipIf(!hasPython)("the Python comparison loop", () => {
  it.effect("produces effect-gym's trajectories (seeds, sizes, p, max_turns, run seed)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-python-loop-"))
      const dataset = path.join(dir, "rows.jsonl")
      const rows = [
        ...Array.from({ length: 40 }, (_, i) => ({ messages: [{ role: "user", content: "<placeholder>" }], env_config: { seed: i } })),
        { env_config: { seed: 7, size: 6, p: 0.7 } },
        { env_config: { seed: "12", size: "3" } },
        { env_config: { seed: 2 ** 40 + 3 } }
      ]
      fs.writeFileSync(dataset, rows.map((r) => JSON.stringify(r)).join("\n") + "\n")
      for (const [maxTurns, seed] of [["10", "0"], ["3", "17"]]) {
        const ours = path.join(dir, `effect-gym-${seed}.jsonl`)
        const theirs = path.join(dir, `python-${seed}.jsonl`)
        const run = yield* cli(
          "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--num-generations", "4",
          "--max-turns", maxTurns, "--seed", seed, "--output", ours, "--json"
        )
        expect(run.code).toBe(0)
        const summary = JSON.parse(
          execFileSync("python3", [
            loop, "--dataset", dataset, "--output", theirs, "--num-generations", "4", "--max-turns", maxTurns,
            "--seed", seed, "--check-against", ours
          ], { encoding: "utf8" })
        ) as { matched: number; turns: number }
        expect(summary.matched).toBe(rows.length * 4)
        expect(summary.turns).toBe((JSON.parse(run.stdout) as { turns: number }).turns)
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }), 60_000)
})
