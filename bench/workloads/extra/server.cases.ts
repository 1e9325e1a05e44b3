/**
 * Workload 7 (bench/workloads/server.ts): the rollout server under load, at 1, 16 and 200
 * concurrent clients. Each request is one FrozenLake row x 8 trajectories (the solver policy, no
 * latency: the figures are the server's own cost); the server runs in its own process.
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const server = (clients: number): Case => {
  const who = `${clients} client${clients === 1 ? "" : "s"}`
  return {
    name: `server clients=${clients}`,
    file: path.resolve(import.meta.dirname, "../server.ts"),
    args: ["--clients", String(clients), "--generations", "8", "--seconds", "3", "--warmup", "1"],
    figures: (rs) => [
      {
        workload: `7. rollout server, ${who} (POST /v1/rollouts, 1 row x 8, JSON array)`,
        figure: "trajectories/s",
        unit: "traj/s",
        values: pick(rs, "trajectoriesPerSecond")
      },
      { workload: `7. same, ${who}`, figure: "request latency p50", unit: "ms", values: pick(rs, "p50Ms") },
      { workload: `7. same, ${who}`, figure: "request latency p99", unit: "ms", values: pick(rs, "p99Ms") },
      // Every request must succeed (no 429: --concurrency is sized for the clients) and the server
      // must stop cleanly on SIGTERM.
      {
        workload: `7. same, ${who}`,
        figure: "failed requests + server exit code",
        unit: "count",
        values: rs.map((r) => r.errors + r.serverExitCode),
        target: { op: "<=", value: 0 }
      }
    ]
  }
}

export const cases: ReadonlyArray<Case> = [server(1), server(16), server(200)]
