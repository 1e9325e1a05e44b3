/**
 * Workload 10 (issue 14): the `run` job through the front door (bench/workloads/cli.ts): the built
 * CLI from process start to exit, the log written and read back. FrozenLake, max_turns 10, 8
 * generations; the random and the solver policy; a 20 ms policy at concurrency 1,024.
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const file = path.resolve(import.meta.dirname, "../cli.ts")

const run = (rows: number, policy: "random" | "frozen-lake-solver"): Case => ({
  name: `cli run ${rows}x8 ${policy}`,
  file,
  args: ["--rows", String(rows), "--policy", policy],
  figures: (rs) => {
    const w = `10. CLI: effect-gym run, FrozenLake ${rows.toLocaleString("en")} rows x 8, ${policy} policy, max_turns 10, concurrency 64`
    return [
      { workload: w, figure: "in-run turns/s (the summary's)", unit: "turns/s", values: pick(rs, "inRunTurnsPerSecond"), target: policy === "random" ? { op: ">=", value: 150_000 } : undefined },
      { workload: w, figure: "end-to-end turns/s (process start to exit)", unit: "turns/s", values: pick(rs, "endToEndTurnsPerSecond") },
      { workload: w, figure: "wall time, start to exit", unit: "s", values: pick(rs, "wallSeconds") },
      { workload: w, figure: "turns per CPU second (user + system)", unit: "turns/s", values: pick(rs, "turnsPerCpuSecond") },
      { workload: w, figure: "load average (1 min) at the end", unit: "load", values: pick(rs, "load1") }
    ]
  }
})

const latency: Case = {
  name: "cli latency c=1024",
  file,
  args: ["--rows", "6000", "--concurrency", "1024", "--latency-ms", "20"],
  figures: (rs) => {
    const w = "10. CLI: effect-gym run, 6,000 rows x 8, random policy with latency_ms=20, concurrency 1,024 (bound 51,200 turns/s)"
    return [
      { workload: w, figure: "in-run turns/s / bound (ramp-up and tail included)", unit: "ratio", values: pick(rs, "efficiency"), target: { op: ">=", value: 0.9 } },
      { workload: w, figure: "in-run turns/s", unit: "turns/s", values: pick(rs, "inRunTurnsPerSecond") },
      { workload: w, figure: "load average (1 min) at the end", unit: "load", values: pick(rs, "load1") }
    ]
  }
}

const warmup: Case = {
  name: "cli warmup",
  file: path.resolve(import.meta.dirname, "../warmup.ts"),
  args: ["--jobs", "4"],
  figures: (rs) => {
    const w = "10b. the run job (1024 x 8, random) 4 times in one process: job 1 cold, as a user's process runs it"
    return [
      { workload: w, figure: "CPU per turn, job 1 (cold)", unit: "us/turn", values: pick(rs, "job1CpuMicrosecondsPerTurn") },
      { workload: w, figure: "CPU per turn, job 4 (warm)", unit: "us/turn", values: pick(rs, "job4CpuMicrosecondsPerTurn") },
      { workload: w, figure: "cold / warm CPU per turn", unit: "ratio", values: pick(rs, "coldOverWarmCpu") },
      { workload: w, figure: "load average (1 min) at the end", unit: "load", values: pick(rs, "load1") }
    ]
  }
}

export const cases: ReadonlyArray<Case> = [
  run(1024, "random"),
  run(10_000, "random"),
  run(1024, "frozen-lake-solver"),
  latency,
  warmup
]
