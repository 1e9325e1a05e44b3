/**
 * Workload 10b: JIT warm-up of the `run` job. The CLI's own program (`main`, the same argv as
 * `effect-gym run`) run `--jobs` times in ONE process over the same FrozenLake dataset (1024 rows x
 * 8, random policy, max_turns 10): job 1 is what a user's process runs (cold code), the later ones
 * run warm code. Reports each job's CPU time per turn (user + system: the figure that depends least
 * on the load of a shared machine) and the summary's in-run turns/s, so that the cost of the cold
 * start is a ratio measured in one process.
 */
import { NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { main } from "../../dist/cli/Cli.js"
import { flags, report } from "../lib.js"

const args = flags()
const rows = Number(args.rows ?? 1024)
const jobs = Number(args.jobs ?? 4)
const base = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir()
const dir = fs.mkdtempSync(path.join(base, "effect-gym-warmup-"))
const dataset = path.join(dir, "rows.jsonl")
let text = ""
for (let i = 0; i < rows; i++) text += `{"env_config":{"seed":${i}}}\n`
fs.writeFileSync(dataset, text)

let printed = ""
const quiet: Console.Console = {
  ...globalThis.console,
  log: (...xs: ReadonlyArray<unknown>) => void (printed += xs.join(" ")),
  error: () => {}
}
const run = () =>
  Effect.runPromise(
    main([
      "node", "effect-gym", "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random",
      "--num-generations", "8", "--max-turns", "10", "--output", path.join(dir, "out.jsonl"), "--overwrite", "--json"
    ]).pipe(Effect.provideService(Console.Console, quiet), Effect.provide(NodeServices.layer))
  )

const mainBench = async () => {
  const figures: Record<string, number> = {}
  for (let i = 1; i <= jobs; i++) {
    printed = ""
    const cpuBefore = process.cpuUsage()
    await run()
    const cpu = process.cpuUsage(cpuBefore)
    const summary = JSON.parse(printed) as { turns: number; turns_per_second: number }
    figures[`job${i}CpuMicrosecondsPerTurn`] = (cpu.user + cpu.system) / summary.turns
    figures[`job${i}InRunTurnsPerSecond`] = summary.turns_per_second
  }
  figures.coldOverWarmCpu = figures.job1CpuMicrosecondsPerTurn / figures[`job${jobs}CpuMicrosecondsPerTurn`]
  figures.load1 = os.loadavg()[0]
  fs.rmSync(dir, { recursive: true, force: true })
  report(figures)
}

mainBench()
