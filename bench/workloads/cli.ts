/**
 * Workload 10: the `run` job as a user runs it, through the front door: `node bin/effect-gym.js run
 * --dataset FILE --env frozen_lake --policy P --num-generations G --max-turns 10 --json
 * --output LOG`, timed from process start to exit, the log then read back (every trajectory's line
 * must be there). One process per measurement: what is measured includes start-up, module loading
 * and the JIT's warm-up, as a user meets them.
 *
 *   --rows N (1024)  --generations G (8)  --concurrency C (64)  --policy NAME (random)
 *   --latency-ms MS  (0: none; else the scripted policy's latency_ms option)
 *   --bin PATH       (bin/effect-gym.js; another build's, to compare before/after)
 *   --node-flags="…" (flags given to node before the CLI; with "=", since they start with "--")
 *
 * Reports: `inRunTurnsPerSecond` (the summary's own figure: turns / time from the first row read to
 * the last group written), `endToEndTurnsPerSecond` (turns / process start to exit), `wallSeconds`,
 * `cpuSeconds` (user + system of the child, from /usr/bin/time when it exists; the figure that
 * depends least on the load of a shared machine), and with a latency, `efficiency`: in-run turns/s
 * over the bound concurrency / latency (the ramp-up and the tail of the run included).
 * The dataset and the log go to /dev/shm when it exists (the disk's page-cache writeback is not
 * the program's cost: see workload 6).
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { flags, report } from "../lib.js"

const args = flags()
const rows = Number(args.rows ?? 1024)
const generations = Number(args.generations ?? 8)
const concurrency = Number(args.concurrency ?? 64)
const policy = args.policy ?? "random"
const latencyMs = Number(args["latency-ms"] ?? 0)
const root = path.resolve(import.meta.dirname, "../..")
const bin = path.resolve(args.bin ?? path.join(root, "bin/effect-gym.js"))
const nodeFlags = (args["node-flags"] ?? "").split(" ").filter((f) => f !== "")

const base = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir()
const dir = fs.mkdtempSync(path.join(base, "effect-gym-cli-bench-"))
const dataset = path.join(dir, "rows.jsonl")
const output = path.join(dir, "completions.jsonl")
let text = ""
for (let i = 0; i < rows; i++) text += `{"env_config":{"seed":${i}}}\n`
fs.writeFileSync(dataset, text)

const cliArgs = [
  "run",
  "--dataset",
  dataset,
  "--env",
  "frozen_lake",
  "--policy",
  policy,
  ...(latencyMs > 0 ? ["--policy-option", `latency_ms=${latencyMs}`] : []),
  "--num-generations",
  String(generations),
  "--max-turns",
  "10",
  "--concurrency",
  String(concurrency),
  "--output",
  output,
  "--overwrite",
  "--json"
]
const timeBin = fs.existsSync("/usr/bin/time") ? "/usr/bin/time" : undefined

const main = async () => {
  const started = performance.now()
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
    (resolve, reject) => {
      const argv = [...nodeFlags, bin, ...cliArgs]
      const child = timeBin === undefined
        ? spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "pipe"] })
        : spawn(timeBin, ["-f", "\nCPU %U %S", process.execPath, ...argv], { stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c))
      child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c))
      child.once("error", reject)
      child.once("exit", (code) => resolve({ code, stdout, stderr }))
    }
  )
  const wallSeconds = (performance.now() - started) / 1000
  if (code !== 0) throw new Error(`the CLI exited with ${code}: ${stderr}`)
  const summary = JSON.parse(stdout) as { turns: number; trajectories: number; turns_per_second: number }
  // The log written: one line per trajectory.
  let lines = 0
  const log = fs.readFileSync(output)
  for (let i = 0; i < log.length; i++) if (log[i] === 10) lines++
  if (lines !== summary.trajectories || lines !== rows * generations) {
    throw new Error(`the log has ${lines} lines, expected ${rows * generations}`)
  }
  const cpu = /CPU ([\d.]+) ([\d.]+)/.exec(stderr)
  fs.rmSync(dir, { recursive: true, force: true })
  report({
    turns: summary.turns,
    wallSeconds,
    inRunTurnsPerSecond: summary.turns_per_second,
    endToEndTurnsPerSecond: summary.turns / wallSeconds,
    ...(cpu === null ? {} : { cpuSeconds: Number(cpu[1]) + Number(cpu[2]), turnsPerCpuSecond: summary.turns / (Number(cpu[1]) + Number(cpu[2])) }),
    ...(latencyMs > 0 ? { efficiency: summary.turns_per_second / (concurrency / (latencyMs / 1000)) } : {}),
    load1: os.loadavg()[0]
  })
}

main().catch((error) => {
  fs.rmSync(dir, { recursive: true, force: true })
  console.error(error)
  process.exit(1)
})
