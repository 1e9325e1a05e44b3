/**
 * Workload 12 (issue 14): effect-gym against a Python loop that follows ms-swift's GYMScheduler with
 * its FrozenLake plugin (bench/workloads/python/gym_loop.py), the same job through the front door of
 * each: `node bin/effect-gym.js run --dataset ROWS --env frozen_lake --policy random
 * --num-generations G --max-turns 10 --concurrency C --output LOG --json` and `python3 gym_loop.py
 * --dataset ROWS --num-generations G --max-turns 10 --concurrency C --output LOG`, the same rows, the
 * same trajectories (the first pair's logs are compared trajectory by trajectory, untimed, with the
 * loop's `--compare-logs`, or the measurement fails).
 *
 * `--pairs` A/B pairs, run interleaved (the order alternates: A B, B A, ...), one process each,
 * timed from spawn to exit, each log read back (one line per trajectory). Reports the medians of each
 * side, and `ratio*` = the median over pairs of effect-gym's figure / Python's (turns/s) or Python's /
 * effect-gym's (seconds), so the load of the shared machine weighs on both sides of each ratio.
 *
 *   --rows N (1024)  --generations G (8)  --concurrency C (64)  --pairs P (1)
 *   --latency-ms MS  (0: none; else the random policy waits MS per call on both sides, and
 *                     `efficiency*` = in-run turns/s / the bound C / MS)
 *   --step-copy deep|shallow   (deep: what ms-swift's on_turn_end gives env.step; shallow: a list copy,
 *                     the Python loop without its deepcopy, for a bound on Python's best)
 *   --bin PATH  (bin/effect-gym.js)   --python CMD  (python3)
 *
 * Figures per side: in-run turns/s (each program's own: from reading the dataset to the log
 * written), end-to-end turns/s (turns / spawn to exit), wall seconds, CPU seconds (user + system, from
 * /usr/bin/time when it exists).
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { flags, median, report } from "../lib.js"

const args = flags()
const rows = Number(args.rows ?? 1024)
const generations = Number(args.generations ?? 8)
const concurrency = Number(args.concurrency ?? 64)
const pairs = Number(args.pairs ?? 1)
const latencyMs = Number(args["latency-ms"] ?? 0)
const stepCopy = args["step-copy"] ?? "deep"
const root = path.resolve(import.meta.dirname, "../..")
const bin = path.resolve(args.bin ?? path.join(root, "bin/effect-gym.js"))
const python = args.python ?? "python3"
const loop = path.join(import.meta.dirname, "python/gym_loop.py")

const base = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir()
const dir = fs.mkdtempSync(path.join(base, "effect-gym-python-compare-"))
const dataset = path.join(dir, "rows.jsonl")
let text = ""
for (let i = 0; i < rows; i++) text += `{"messages":[{"role":"user","content":"<placeholder>"}],"env_config":{"seed":${i}}}\n`
fs.writeFileSync(dataset, text)
const timeBin = fs.existsSync("/usr/bin/time") ? "/usr/bin/time" : undefined

interface Side {
  readonly turns: number
  readonly inRunTurnsPerSecond: number
  readonly endToEndTurnsPerSecond: number
  readonly wallSeconds: number
  readonly cpuSeconds: number
}

const exec = (command: string, argv: ReadonlyArray<string>) =>
  new Promise<{ stdout: string; wallSeconds: number; cpuSeconds: number }>((resolve, reject) => {
    const started = performance.now()
    const child = timeBin === undefined
      ? spawn(command, argv, { stdio: ["ignore", "pipe", "pipe"] })
      : spawn(timeBin, ["-f", "\nCPU %U %S", command, ...argv], { stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c))
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c))
    child.once("error", reject)
    child.once("exit", (code) => {
      const wallSeconds = (performance.now() - started) / 1000
      if (code !== 0) return reject(new Error(`${command} ${argv.join(" ")} exited with ${code}: ${stderr}`))
      const cpu = /CPU ([\d.]+) ([\d.]+)/.exec(stderr)
      resolve({ stdout, wallSeconds, cpuSeconds: cpu === null ? Number.NaN : Number(cpu[1]) + Number(cpu[2]) })
    })
  })

const countLines = (file: string): number => {
  const log = fs.readFileSync(file)
  let lines = 0
  for (let i = 0; i < log.length; i++) if (log[i] === 10) lines++
  return lines
}

const lastJson = <A>(stdout: string): A => {
  const lines = stdout.trim().split("\n")
  return JSON.parse(lines[lines.length - 1]) as A
}

/** One side's figures from its summary (the last line of its stdout), once its log is complete. */
const side = (who: string, run: { stdout: string; wallSeconds: number; cpuSeconds: number }, output: string): Side => {
  const summary = lastJson<{ turns: number; turns_per_second: number }>(run.stdout)
  if (countLines(output) !== rows * generations) throw new Error(`${who} log lacks trajectories`)
  return {
    turns: summary.turns,
    inRunTurnsPerSecond: summary.turns_per_second,
    endToEndTurnsPerSecond: summary.turns / run.wallSeconds,
    wallSeconds: run.wallSeconds,
    cpuSeconds: run.cpuSeconds
  }
}

const effectGym = async (output: string): Promise<Side> => {
  const run = await exec(process.execPath, [
    bin, "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random",
    ...(latencyMs > 0 ? ["--policy-option", `latency_ms=${latencyMs}`] : []),
    "--num-generations", String(generations), "--max-turns", "10", "--concurrency", String(concurrency),
    "--output", output, "--overwrite", "--json"
  ])
  return side("effect-gym's", run, output)
}

const pythonLoop = async (output: string): Promise<Side> => {
  const run = await exec(python, [
    loop, "--dataset", dataset, "--gym-env", "frozen_lake", "--num-generations", String(generations),
    "--max-turns", "10", "--concurrency", String(concurrency), "--latency-ms", String(latencyMs),
    "--step-copy", stepCopy, "--output", output
  ])
  return side("the Python loop's", run, output)
}

const main = async () => {
  const a: Array<Side> = []
  const b: Array<Side> = []
  const egLog = path.join(dir, "effect-gym.jsonl")
  const pyLog = path.join(dir, "python.jsonl")
  for (let i = 0; i < pairs; i++) {
    if (i % 2 === 0) {
      a.push(await effectGym(egLog))
      b.push(await pythonLoop(pyLog))
    } else {
      b.push(await pythonLoop(pyLog))
      a.push(await effectGym(egLog))
    }
    if (a[i].turns !== b[i].turns) throw new Error(`turns differ: effect-gym ${a[i].turns}, Python ${b[i].turns}`)
    if (i === 0) {
      // Both programs did the same work: the same trajectories (untimed, in its own process).
      const check = lastJson<{ matched: number }>((await exec(python, [loop, "--compare-logs", pyLog, egLog])).stdout)
      if (check.matched !== rows * generations) throw new Error(`the logs matched ${check.matched} trajectories`)
    }
    process.stderr.write(
      `pair ${i + 1}/${pairs}: in-run turns/s effect-gym ${Math.round(a[i].inRunTurnsPerSecond)} Python ${
        Math.round(b[i].inRunTurnsPerSecond)
      } (x${(a[i].inRunTurnsPerSecond / b[i].inRunTurnsPerSecond).toFixed(2)}); wall ${a[i].wallSeconds.toFixed(2)} s vs ${
        b[i].wallSeconds.toFixed(2)
      } s; load ${os.loadavg()[0].toFixed(1)}\n`
    )
  }
  fs.rmSync(dir, { recursive: true, force: true })
  const m = (xs: ReadonlyArray<Side>, key: keyof Side) => median(xs.map((x) => x[key]))
  const ratio = (key: keyof Side, inverse = false) =>
    median(a.map((x, i) => (inverse ? b[i][key] / x[key] : x[key] / b[i][key])))
  const bound = latencyMs > 0 ? concurrency / (latencyMs / 1000) : undefined
  report({
    turns: a[0].turns,
    effectGymInRunTurnsPerSecond: m(a, "inRunTurnsPerSecond"),
    pythonInRunTurnsPerSecond: m(b, "inRunTurnsPerSecond"),
    effectGymEndToEndTurnsPerSecond: m(a, "endToEndTurnsPerSecond"),
    pythonEndToEndTurnsPerSecond: m(b, "endToEndTurnsPerSecond"),
    effectGymWallSeconds: m(a, "wallSeconds"),
    pythonWallSeconds: m(b, "wallSeconds"),
    effectGymCpuSeconds: m(a, "cpuSeconds"),
    pythonCpuSeconds: m(b, "cpuSeconds"),
    ratioInRun: ratio("inRunTurnsPerSecond"),
    ratioEndToEnd: ratio("endToEndTurnsPerSecond"),
    ratioCpu: ratio("cpuSeconds", true),
    ...(bound === undefined ? {} : {
      effectGymEfficiency: m(a, "inRunTurnsPerSecond") / bound,
      pythonEfficiency: m(b, "inRunTurnsPerSecond") / bound
    }),
    load1: os.loadavg()[0]
  })
}

main().catch((error) => {
  fs.rmSync(dir, { recursive: true, force: true })
  console.error(error)
  process.exit(1)
})
