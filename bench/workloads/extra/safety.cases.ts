/**
 * Workloads 8 and 9 (issue 11): startup of the CLI, process start to exit (bench/workloads/startup.ts),
 * and a 2 GiB dataset run with bounded memory (bench/workloads/bigdata.ts; about a minute a run).
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const startup = (command: "help" | "envs" | "node"): Case => ({
  name: `startup ${command}`,
  file: path.resolve(import.meta.dirname, "../startup.ts"),
  args: ["--command", command, "--runs", "11"],
  figures: (rs) => [
    {
      workload: command === "node"
        ? "8. reference: node -e 0 (the floor under every command)"
        : `8. startup: effect-gym ${command === "help" ? "--help" : "envs"}, process start to exit`,
      figure: "median of 11",
      unit: "ms",
      values: pick(rs, "medianMs"),
      target: command === "node" ? undefined : { op: "<=", value: 250 }
    }
  ]
})

const bigdata: Case = {
  name: "bigdata 2 GiB",
  file: path.resolve(import.meta.dirname, "../bigdata.ts"),
  args: ["--gb", "2"],
  figures: (rs) => [
    {
      workload: "9. run over a 2 GiB dataset (64 KiB rows, 1 generation, random policy)",
      figure: "peak V8 heap",
      unit: "MiB",
      values: pick(rs, "peakHeapMiB"),
      target: { op: "<=", value: 200 }
    },
    { workload: "9. same", figure: "peak RSS", unit: "MiB", values: pick(rs, "peakRssMiB") },
    { workload: "9. same", figure: "wall time (hash pass + run)", unit: "s", values: pick(rs, "seconds") }
  ]
}

export const cases: ReadonlyArray<Case> = [startup("node"), startup("help"), startup("envs"), bigdata]
