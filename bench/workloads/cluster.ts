/**
 * Workload 11: the cluster (`run --cluster` with `effect-gym runner` processes on loopback, a
 * temporary PostgreSQL). Each figure is a whole command, process start to exit, as a user runs it.
 *
 *   A. Cost per group: FrozenLake, the frozen-lake-solver policy, in-process `run` vs the same run
 *      through the cluster with one runner.
 *   B. Scaling on a latency-bound workload (the policy answers after 20 ms): 1, 2, 3 runner
 *      processes, each running at most --runner-concurrency groups at once (a node's capacity).
 *
 *   --groups 300  --generations 8  --runs 3  --runner-concurrency 8
 *
 * Wall time is process start to exit; CPU time is every process's (the coordinator's or the
 * local run's, read at its exit by bench/workloads/cpu-probe.mjs, plus the runners' during the run,
 * from /proc), per group.
 *
 * Prints the figures (medians and all values) on stderr, then one line of JSON with the medians
 * (what `npm run bench` reads: bench/workloads/extra/cluster.cases.ts). Run after `npm run build`:
 *   node --import tsx bench/workloads/cluster.ts
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Postgres from "../../test/cluster/postgres.js"
import { flags, median } from "../lib.js"

const args = flags()
const groups = Number(args.groups ?? 300)
const generations = Number(args.generations ?? 8)
const runs = Number(args.runs ?? 3)
const runnerConcurrency = Number(args["runner-concurrency"] ?? 8)
const BIN = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
const dir = fs.mkdtempSync(path.join(fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), "effect-gym-cluster-bench-"))
const dataset = path.join(dir, "rows.jsonl")
fs.writeFileSync(
  dataset,
  Array.from({ length: groups }, (_, i) => JSON.stringify({ messages: [{ role: "user", content: "go" }], env_config: { seed: i } }))
    .join("\n") + "\n"
)

const PROBE = path.resolve(import.meta.dirname, "cpu-probe.mjs")
let probes = 0
/** Runs a command; its wall time, and its CPU time (user + system, all threads) read at its exit. */
const exec = (argv: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; ms: number; cpuMs: number; out: string }>((resolve) => {
    const started = performance.now()
    const probe = path.join(dir, `cpu-${probes++}.txt`)
    const child = spawn(process.execPath, ["--import", PROBE, BIN, ...argv], {
      cwd: dir,
      stdio: ["ignore", "pipe", "ignore"],
      env: { ...process.env, EFFECT_GYM_CPU_PROBE: probe }
    })
    let out = ""
    child.stdout.on("data", (c: Buffer) => void (out += c.toString()))
    child.once("exit", (code) => {
      const ms = performance.now() - started
      const cpuMs = fs.existsSync(probe) ? Number(fs.readFileSync(probe, "utf8")) : NaN
      resolve({ code, ms, cpuMs, out })
    })
  })

/** CPU milliseconds a live process has used so far (Linux /proc; NaN elsewhere). */
const TICK_MS = 1000 / 100
const cpuOf = (children: ReadonlyArray<ChildProcess>): number =>
  children.reduce((sum, child) => {
    try {
      const stat = fs.readFileSync(`/proc/${child.pid}/stat`, "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      return sum + (Number(fields[11]) + Number(fields[12])) * TICK_MS
    } catch {
      return NaN
    }
  }, 0)

/** A cluster run: its wall time and the CPU time of the coordinator and of the runners during it. */
const clusterRun = async (argv: ReadonlyArray<string>, runners: ReadonlyArray<ChildProcess>) => {
  const before = cpuOf(runners)
  const r = await exec(argv)
  return { ...r, cpuMs: r.cpuMs + cpuOf(runners) - before }
}

const startRunner = async (url: string, port: number, policyOptions: ReadonlyArray<string>) => {
  const child: ChildProcess = spawn(process.execPath, [
    BIN, "runner", "--cluster", url, "--port", String(port), "--policy", "frozen-lake-solver",
    "--concurrency", String(runnerConcurrency), ...policyOptions
  ], { cwd: dir, stdio: ["ignore", "ignore", "pipe"] })
  let err = ""
  child.stderr?.on("data", (c: Buffer) => void (err += c.toString()))
  const deadline = Date.now() + 120_000
  while (!err.includes("joined the cluster")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`runner did not start: ${err}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  return child
}

const stopAll = async (children: ReadonlyArray<ChildProcess>) => {
  for (const child of children) child.kill("SIGTERM")
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once("exit", r)))))
}

const common = ["--dataset", dataset, "--env", "frozen_lake", "--num-generations", String(generations), "--max-turns", "10", "--json"]
let n = 0
const output = () => path.join(dir, `out-${n++}.jsonl`)
const trajectoriesPerSecond = (ms: number) => (groups * generations) / (ms / 1000)

const scaling: Record<number, { tps: number; cpu: number }> = {}
const pg = await Postgres.start()
const figures: Record<string, { median: number; values: Array<number>; unit: string }> = {}
const record = (name: string, unit: string, values: Array<number>) => {
  figures[name] = { median: median(values), values, unit }
  process.stderr.write(`${name}: ${median(values).toFixed(2)} ${unit} (${values.map((v) => v.toFixed(2)).join(", ")})\n`)
}
try {
  let db = 0
  const database = async () => {
    const name = `bench${db++}`
    const psql = spawn("psql", [pg.url, "-q", "-c", `CREATE DATABASE ${name}`])
    await new Promise((r) => psql.once("exit", r))
    return pg.url.replace(/\/postgres$/, `/${name}`)
  }
  // A. cost per group
  const url = await database()
  const runner = await startRunner(url, 41401, [])
  const local: Array<number> = []
  const localCpu: Array<number> = []
  const clustered: Array<number> = []
  const clusteredCpu: Array<number> = []
  // interleaved: in-process, cluster, in-process, ... (the machine's load drifts)
  for (let i = 0; i < runs; i++) {
    const a = await exec(["run", ...common, "--policy", "frozen-lake-solver", "--output", output()])
    if (a.code !== 0) throw new Error(`local run exited ${a.code}`)
    local.push(a.ms / groups)
    localCpu.push(a.cpuMs / groups)
    const b = await clusterRun(["run", "--cluster", url, ...common, "--concurrency", "64", "--output", output()], [runner])
    if (b.code !== 0) throw new Error(`cluster run exited ${b.code}`)
    clustered.push(b.ms / groups)
    clusteredCpu.push(b.cpuMs / groups)
  }
  await stopAll([runner])
  record("A. in-process run, ms per group (process start to exit)", "ms/group", local)
  record("A. in-process run, CPU ms per group", "CPU ms/group", localCpu)
  record("A. cluster, 1 runner, ms per group (coordinator start to exit)", "ms/group", clustered)
  record("A. cluster, 1 runner, CPU ms per group (coordinator + runner)", "CPU ms/group", clusteredCpu)
  // B. scaling, 20 ms policy
  for (const count of [1, 2, 3]) {
    const url = await database()
    const runners = []
    for (let k = 0; k < count; k++) runners.push(await startRunner(url, 41410 + k, ["--policy-option", "latency_ms=20"]))
    const values: Array<number> = []
    const cpu: Array<number> = []
    for (let i = 0; i < runs; i++) {
      const r = await clusterRun(["run", "--cluster", url, ...common, "--concurrency", "128", "--output", output()], runners)
      if (r.code !== 0) throw new Error(`cluster run exited ${r.code}`)
      values.push(trajectoriesPerSecond(r.ms))
      cpu.push(r.cpuMs / groups)
    }
    record(`B. 20 ms policy, ${count} runner(s) x ${runnerConcurrency} groups, trajectories/s`, "trajectories/s", values)
    record(`B. 20 ms policy, ${count} runner(s), CPU ms per group`, "CPU ms/group", cpu)
    scaling[count] = { tps: median(values), cpu: median(cpu) }
    await stopAll(runners)
  }
} finally {
  await pg.stop()
  fs.rmSync(dir, { recursive: true, force: true })
}
process.stderr.write(JSON.stringify({ groups, generations, runs, runnerConcurrency, cpus: os.cpus().length, loadavg: os.loadavg(), figures }, null, 2) + "\n")
const at = (name: string) => figures[name]?.median ?? NaN
console.log(JSON.stringify({
  localMsPerGroup: at("A. in-process run, ms per group (process start to exit)"),
  localCpuMsPerGroup: at("A. in-process run, CPU ms per group"),
  clusterMsPerGroup: at("A. cluster, 1 runner, ms per group (coordinator start to exit)"),
  clusterCpuMsPerGroup: at("A. cluster, 1 runner, CPU ms per group (coordinator + runner)"),
  runners1TrajectoriesPerSecond: scaling[1]?.tps ?? NaN,
  runners2TrajectoriesPerSecond: scaling[2]?.tps ?? NaN,
  runners3TrajectoriesPerSecond: scaling[3]?.tps ?? NaN,
  runners1CpuMsPerGroup: scaling[1]?.cpu ?? NaN,
  runners2CpuMsPerGroup: scaling[2]?.cpu ?? NaN,
  runners3CpuMsPerGroup: scaling[3]?.cpu ?? NaN,
  loadAverage: os.loadavg()[0]
}))
