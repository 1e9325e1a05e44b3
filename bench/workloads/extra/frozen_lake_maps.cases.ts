/**
 * Workload 8 (bench/workloads/frozen_lake_maps.ts): FrozenLake map generation on 256x256 boards,
 * valid configs and configs past the generation budget.
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const workload = "8. FrozenLake 256x256 maps, fresh seeds"

export const cases: ReadonlyArray<Case> = [
  {
    name: "frozen-lake maps",
    file: path.resolve(import.meta.dirname, "../frozen_lake_maps.ts"),
    args: ["--seeds", "9"],
    figures: (rs) => [
      {
        workload: `${workload}: reset of a valid config (map + first observation), p 0.8`,
        figure: "median of 9 seeds",
        unit: "ms",
        values: pick(rs, "validResetP08MedianMs"),
        target: { op: "<=", value: 50 }
      },
      { workload: `${workload}: same, p 0.8`, figure: "slowest of 9 seeds", unit: "ms", values: pick(rs, "validResetP08MaxMs") },
      { workload: `${workload}: same, p 0.8`, figure: "median CPU time", unit: "ms", values: pick(rs, "validResetP08MedianCpuMs") },
      { workload: `${workload}: same, p 0.9`, figure: "median of 9 seeds", unit: "ms", values: pick(rs, "validResetP09MedianMs") },
      {
        workload: `${workload}: config past the budget (p 0), generateMap to MapBudgetExceeded`,
        figure: "median of 9 seeds",
        unit: "ms",
        values: pick(rs, "failP0MedianMs")
      },
      { workload: `${workload}: same, p 0`, figure: "median CPU time", unit: "ms", values: pick(rs, "failP0MedianCpuMs") },
      { workload: `${workload}: same, p 0.3`, figure: "median of 9 seeds", unit: "ms", values: pick(rs, "failP03MedianMs") },
      {
        workload: `${workload}: floor: drawing the budget's 2^25 generator outputs, nothing else`,
        figure: "median",
        unit: "ms",
        values: pick(rs, "floorMedianMs")
      },
      { workload: `${workload}: same`, figure: "median CPU time", unit: "ms", values: pick(rs, "floorMedianCpuMs") },
      {
        workload: `${workload}: env reset past the budget (sliced search)`,
        figure: "time to EnvError",
        unit: "ms",
        values: pick(rs, "envResetPastBudgetMs")
      },
      { workload: `${workload}: same`, figure: "CPU time", unit: "ms", values: pick(rs, "envResetPastBudgetCpuMs") },
      {
        workload: `${workload}: same`,
        figure: "longest event-loop delay during it",
        unit: "ms",
        values: pick(rs, "envResetMaxEventLoopDelayMs"),
        target: { op: "<=", value: 50 }
      },
      {
        workload: `${workload}: reference: an idle event loop for as long`,
        figure: "longest event-loop delay",
        unit: "ms",
        values: pick(rs, "idleMaxEventLoopDelayMs")
      }
    ]
  }
]
