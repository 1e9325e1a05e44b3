/**
 * Workload 12 (issue 14, bench/workloads/python_compare.ts): the `run` job through the front door
 * against a Python loop that follows ms-swift's GYMScheduler and FrozenLake plugin
 * (bench/workloads/python/gym_loop.py), the same rows and the same trajectories, one interleaved A/B
 * pair per run. The figure that counts is the ratio effect-gym / Python (goal: >= 3 at every size).
 * Needs `python3` (3.9+, standard library only).
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const file = path.resolve(import.meta.dirname, "../python_compare.ts")

const size = (rows: number): Case => ({
  name: `python compare ${rows}x8`,
  file,
  args: ["--rows", String(rows), "--pairs", "1"],
  figures: (rs) => {
    const w = `12. effect-gym run vs the Python GYMScheduler loop, FrozenLake ${rows.toLocaleString("en")} rows x 8, random policy, max_turns 10, concurrency 64`
    return [
      { workload: w, figure: "effect-gym / Python, in-run turns/s", unit: "ratio", values: pick(rs, "ratioInRun"), target: { op: ">=", value: 3 } },
      { workload: w, figure: "effect-gym / Python, end to end (spawn to exit)", unit: "ratio", values: pick(rs, "ratioEndToEnd") },
      { workload: w, figure: "effect-gym / Python, per CPU second", unit: "ratio", values: pick(rs, "ratioCpu") },
      { workload: w, figure: "effect-gym in-run turns/s", unit: "turns/s", values: pick(rs, "effectGymInRunTurnsPerSecond") },
      { workload: w, figure: "Python in-run turns/s", unit: "turns/s", values: pick(rs, "pythonInRunTurnsPerSecond") },
      { workload: w, figure: "load average (1 min) at the end", unit: "load", values: pick(rs, "load1") }
    ]
  }
})

const latency: Case = {
  name: "python compare latency c=1024",
  file,
  args: ["--rows", "6000", "--concurrency", "1024", "--latency-ms", "20", "--pairs", "1"],
  figures: (rs) => {
    const w = "12. same, 6,000 rows x 8, random policy waiting 20 ms per call, concurrency 1,024 (bound 51,200 turns/s)"
    return [
      { workload: w, figure: "effect-gym / Python, in-run turns/s", unit: "ratio", values: pick(rs, "ratioInRun"), target: { op: ">=", value: 3 } },
      { workload: w, figure: "effect-gym in-run turns/s / bound", unit: "ratio", values: pick(rs, "effectGymEfficiency"), target: { op: ">=", value: 0.9 } },
      { workload: w, figure: "Python in-run turns/s / bound", unit: "ratio", values: pick(rs, "pythonEfficiency") },
      { workload: w, figure: "load average (1 min) at the end", unit: "load", values: pick(rs, "load1") }
    ]
  }
}

export const cases: ReadonlyArray<Case> = [size(1024), size(10_000), latency]
