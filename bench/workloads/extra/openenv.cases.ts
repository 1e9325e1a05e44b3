/**
 * Workload 5 in `npm run bench`: OpenEnv step round trips through the project's client against the
 * project's server (its own process, loopback) at 1, 8 and 64 sessions, and the same round trip
 * with a bare `ws` client and server for the floor (see bench/workloads/openenv.ts).
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const file = path.join(import.meta.dirname, "..", "openenv.ts")
const plural = (sessions: number): string => `${sessions} session${sessions === 1 ? "" : "s"}`

const openenv = (sessions: number): Case => ({
  name: `openenv s=${sessions}`,
  file,
  args: ["--sessions", String(sessions), "--seconds", "3"],
  figures: (rs) => [
    {
      workload: `5. OpenEnv step round trips: project client -> project server (own process, loopback), ` +
        `FrozenLake invalid-reply steps, ${plural(sessions)}`,
      figure: "p50 latency per step",
      unit: "us",
      values: pick(rs, "p50Ms", 1000),
      target: sessions === 1 ? { op: "<=", value: 300 } : undefined
    },
    {
      workload: `5. same, ${plural(sessions)}`,
      figure: "p99 latency per step",
      unit: "us",
      values: pick(rs, "p99Ms", 1000)
    },
    {
      workload: `5. same, ${plural(sessions)}`,
      figure: "steps/s",
      unit: "steps/s",
      values: pick(rs, "stepsPerSecond")
    },
    {
      workload: `5. same, ${plural(sessions)}`,
      figure: "CPU per step, client + server",
      unit: "us",
      values: rs.map((r) => r.clientCpuUsPerStep + r.serverCpuUsPerStep)
    }
  ]
})

const floor = (sessions: number): Case => ({
  name: `openenv floor s=${sessions}`,
  file,
  args: ["--sessions", String(sessions), "--seconds", "3", "--client", "raw", "--server", "raw"],
  figures: (rs) => [
    {
      workload: `5. floor: bare ws client -> bare ws server (JSON.parse + JSON.stringify, same frame sizes), ` +
        plural(sessions),
      figure: "p50 latency per step",
      unit: "us",
      values: pick(rs, "p50Ms", 1000)
    },
    {
      workload: `5. floor, ${plural(sessions)}`,
      figure: "steps/s",
      unit: "steps/s",
      values: pick(rs, "stepsPerSecond")
    },
    {
      workload: `5. floor, ${plural(sessions)}`,
      figure: "CPU per step, client + server",
      unit: "us",
      values: rs.map((r) => r.clientCpuUsPerStep + r.serverCpuUsPerStep)
    }
  ]
})

export const cases: ReadonlyArray<Case> = [openenv(1), openenv(8), openenv(64), floor(1), floor(8), floor(64)]
