/**
 * Workload 11 (bench/workloads/cluster.ts): the cluster, on a temporary PostgreSQL with runner
 * processes on loopback: cost per group in-process vs through one runner (wall and CPU), and a
 * 20 ms policy on 1, 2, 3 runners. Skipped, with a message, where PostgreSQL's server binaries are
 * missing (`apt-get install postgresql`).
 */
import * as path from "node:path"
import * as Postgres from "../../../test/cluster/postgres.js"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const GROUPS = 200

const cluster: Case = {
  name: "cluster",
  file: path.resolve(import.meta.dirname, "../cluster.ts"),
  args: ["--groups", String(GROUPS), "--runs", "1"],
  figures: (rs) => {
    const a = `11. cluster: ${GROUPS} FrozenLake groups x 8, frozen-lake-solver, process start to exit`
    const b = `11. cluster: same, 20 ms policy, runners of 8 groups at once`
    return [
      { workload: a, figure: "in-process run, wall per group", unit: "ms/group", values: pick(rs, "localMsPerGroup") },
      { workload: a, figure: "in-process run, CPU per group", unit: "CPU ms/group", values: pick(rs, "localCpuMsPerGroup") },
      { workload: a, figure: "1 runner, wall per group", unit: "ms/group", values: pick(rs, "clusterMsPerGroup") },
      { workload: a, figure: "1 runner, CPU per group (coordinator + runner)", unit: "CPU ms/group", values: pick(rs, "clusterCpuMsPerGroup") },
      ...[1, 2, 3].flatMap((n) => [
        { workload: b, figure: `${n} runner(s), trajectories/s`, unit: "trajectories/s", values: pick(rs, `runners${n}TrajectoriesPerSecond`) },
        { workload: b, figure: `${n} runner(s), CPU per group`, unit: "CPU ms/group", values: pick(rs, `runners${n}CpuMsPerGroup`) }
      ])
    ]
  }
}

if (!Postgres.available()) {
  process.stderr.write("bench: workload 11 (cluster) skipped: PostgreSQL's server binaries are missing (apt-get install postgresql)\n")
}

export const cases: ReadonlyArray<Case> = Postgres.available() ? [cluster] : []
