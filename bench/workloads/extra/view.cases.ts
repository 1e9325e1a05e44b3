/**
 * Workload 9 (bench/workloads/view.ts): `effect-gym view` on a 1 GiB log, short lines (FrozenLake
 * as logged: the most lines per byte) and long ones (~8 KB, long replies).
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const view = (lines: "short" | "long"): Case => ({
  name: `view 1GiB ${lines}`,
  file: path.resolve(import.meta.dirname, "../view.ts"),
  args: ["--mb", "1024", "--lines", lines],
  figures: (rs) => {
    const w = `9. effect-gym view, 1 GiB log, ${lines === "short" ? "~1.6 KB lines (FrozenLake as logged)" : "~8 KB lines (long replies)"}`
    return [
      { workload: w, figure: "process start to page served", unit: "ms", values: pick(rs, "servedMs") },
      { workload: `${w}`, figure: "process start to index done", unit: "ms", values: pick(rs, "indexedMs") },
      { workload: `${w}`, figure: "index throughput", unit: "MiB/s", values: pick(rs, "indexMbPerSecond") },
      { workload: `${w}`, figure: "/api/meta latency while indexing, max", unit: "ms", values: pick(rs, "metaDuringIndexMaxMs"), target: { op: "<=", value: 500 } },
      { workload: `${w}`, figure: "first page of trajectories", unit: "ms", values: pick(rs, "firstPageMs") },
      { workload: `${w}`, figure: "page sorted by reward (whole log sorted)", unit: "ms", values: pick(rs, "sortByRewardMs") },
      { workload: `${w}`, figure: "a page half-way through the sorted log", unit: "ms", values: pick(rs, "deepPageMs") },
      { workload: `${w}`, figure: "open a trajectory near the end", unit: "ms", values: pick(rs, "openTrajectoryMs") },
      { workload: `${w}`, figure: "text search over the whole file (first page)", unit: "ms", values: pick(rs, "searchMs") },
      { workload: `${w}`, figure: "the search's next page", unit: "ms", values: pick(rs, "searchNextPageMs") },
      { workload: `${w}`, figure: "overview (all trajectories)", unit: "ms", values: pick(rs, "overviewMs") }
    ]
  }
})

export const cases: ReadonlyArray<Case> = [view("short"), view("long")]
