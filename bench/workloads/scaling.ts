/**
 * Workload 6: scaling. The whole command-line job (dataset file in, completions log out, summary)
 * at 1,000 / 10,000 / 100,000 trajectories with the random policy: the cost per turn must stay flat
 * as the run grows (no quadratic work in the loop, the writer or the summary).
 *
 *   --trajectories N  --generations 8  --concurrency 64
 *   --dir DIR   where the dataset and the log are written; default /dev/shm (tmpfs) when it exists,
 *               else the OS temp dir. On this VM's disk, writing the 100,000 run's log (hundreds of
 *               MB) is slowed by page-cache writeback, which measures the disk, not the program.
 */
import { NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { main } from "../../dist/cli/Cli.js"
import { frozenLakeDataset } from "../../dist/cli/DatasetCommand.js"
import { flags, median, report } from "../lib.js"

const args = flags()
const trajectories = Number(args.trajectories ?? 10_000)
const generations = Number(args.generations ?? 8)
const concurrency = Number(args.concurrency ?? 64)
const rows = Math.ceil(trajectories / generations)

const base = args.dir ?? (fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir())
const dir = fs.mkdtempSync(path.join(base, "effect-gym-bench-"))
const dataset = path.join(dir, "rows.jsonl")
const output = path.join(dir, "completions.jsonl")
fs.writeFileSync(dataset, frozenLakeDataset({ rows }))

let printed = ""
const quiet: Console.Console = {
  ...globalThis.console,
  log: (...xs: ReadonlyArray<unknown>) => void (printed += xs.join(" ")),
  error: () => {}
}
const run = (out: string, input = dataset) =>
  Effect.runPromise(
    main([
      "node", "effect-gym", "run", "--dataset", input, "--env", "frozen_lake", "--policy", "random",
      "--num-generations", String(generations), "--max-turns", "10", "--concurrency", String(concurrency),
      "--output", out, "--json"
    ]).pipe(Effect.provideService(Console.Console, quiet), Effect.provide(NodeServices.layer))
  )

const countLines = (file: string): number => {
  const fd = fs.openSync(file, "r")
  const buffer = Buffer.alloc(1 << 20)
  let count = 0
  for (let n = fs.readSync(fd, buffer); n > 0; n = fs.readSync(fd, buffer)) {
    for (let i = 0; i < n; i++) if (buffer[i] === 10) count++
  }
  fs.closeSync(fd)
  return count
}

const mainBench = async () => {
  // Warm up the code paths (the JIT) with a run of at least 20,000 trajectories whatever the size
  // measured, so that small runs are not measured cold.
  const warmRows = Math.max(rows, Math.ceil(20_000 / generations))
  const warmDataset = path.join(dir, "warm.jsonl")
  fs.writeFileSync(warmDataset, frozenLakeDataset({ rows: warmRows }))
  await run(path.join(dir, "warmup.jsonl"), warmDataset)
  // Start from a collected heap, so a small run does not pay for the warm-up's garbage.
  ;(globalThis as { gc?: () => void }).gc?.()
  printed = ""
  // The fixed cost of a job (start-up, files, the last batch of writes), from jobs over an empty
  // dataset: per-turn figures net of it show how the cost of the work itself grows with the run.
  const empty = path.join(dir, "empty.jsonl")
  fs.writeFileSync(empty, "")
  const fixed: Array<number> = []
  for (let i = 0; i < 5; i++) {
    const t = performance.now()
    await run(path.join(dir, "empty-out.jsonl"), empty)
    fixed.push(performance.now() - t)
  }
  const fixedSeconds = median(fixed) / 1000
  // Small jobs are short enough for one GC pause or one scheduling hiccup to weigh: time the job
  // several times (at least about a million turns in all) and keep the median.
  const repeats = Math.max(1, Math.min(9, Math.round(1_000_000 / (trajectories * 5.5))))
  const timings: Array<{ seconds: number; cpu: number }> = []
  let summary = { trajectories: 0, turns: 0 }
  let lines = 0
  for (let i = 0; i < repeats; i++) {
    printed = ""
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    const code = await run(output)
    const seconds = (performance.now() - started) / 1000
    const cpu = process.cpuUsage(cpuBefore)
    timings.push({ seconds, cpu: cpu.user + cpu.system })
    summary = JSON.parse(printed) as { trajectories: number; turns: number }
    // Count the log's lines without holding the file (hundreds of MB at 100,000 trajectories).
    lines = countLines(output)
    if (code !== 0 || lines !== summary.trajectories) throw new Error(`run failed: exit ${code}, ${lines} lines`)
  }
  timings.sort((a, b) => a.seconds - b.seconds)
  const { cpu, seconds } = timings[timings.length >> 1]
  fs.rmSync(dir, { recursive: true, force: true })
  report({
    trajectories: summary.trajectories,
    turns: summary.turns,
    seconds,
    turnsPerSecond: summary.turns / seconds,
    microsecondsPerTurn: (seconds * 1e6) / summary.turns,
    fixedMilliseconds: fixedSeconds * 1000,
    netMicrosecondsPerTurn: ((seconds - fixedSeconds) * 1e6) / summary.turns,
    cpuMicrosecondsPerTurn: cpu / summary.turns,
    repeats
  })
}

mainBench()
