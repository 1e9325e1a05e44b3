/**
 * Workload 8: startup, as a user meets it: the built CLI (`node bin/effect-gym.js ARGS`) from
 * process start to exit, `--runs` times in a row (after one untimed run that warms the file
 * cache); prints the median and the minimum. `--command help|envs|node` (`node`: `node -e 0`, the
 * floor under every command).
 *
 * A/B: `--base PATH` (another build's bin/effect-gym.js, e.g. main's in a scratch checkout) runs
 * the same command with that build, interleaved with this one (A B, B A, ...), and reports its
 * median and `ratio`, the median over pairs of this build's time / the base's.
 * `--bin PATH` times another build instead of this checkout's. With /usr/bin/time, each run's CPU
 * time (user + system) is reported too (`medianCpuMs`, `cpuRatio`): it depends less on the load of a
 * shared machine than the wall time does.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { flags, median, report } from "../lib.js"

const args = flags()
const command = args.command ?? "envs"
const runs = Number(args.runs ?? 11)
const root = path.resolve(import.meta.dirname, "../..")

const argv = (bin: string) =>
  command === "node" ? ["-e", "0"] : [bin, ...(command === "help" ? ["--help"] : [command])]
const a = argv(path.resolve(args.bin ?? path.join(root, "bin/effect-gym.js")))
const b = args.base === undefined ? undefined : argv(path.resolve(args.base))

const timeBin = fs.existsSync("/usr/bin/time") ? "/usr/bin/time" : undefined

interface Run {
  readonly ms: number
  readonly cpuMs: number
}

const once = (argv: ReadonlyArray<string>) =>
  new Promise<Run>((resolve, reject) => {
    const started = performance.now()
    const child = timeBin === undefined
      ? spawn(process.execPath, argv, { stdio: "ignore" })
      : spawn(timeBin, ["-f", "CPU %U %S", process.execPath, ...argv], { stdio: ["ignore", "ignore", "pipe"] })
    let stderr = ""
    child.stderr?.setEncoding("utf8").on("data", (c: string) => (stderr += c))
    child.once("error", reject)
    child.once("exit", (code) => {
      const ms = performance.now() - started
      const cpu = /CPU ([\d.]+) ([\d.]+)/.exec(stderr)
      if (code !== 0) return reject(new Error(`${argv.join(" ")} exited with ${code}`))
      resolve({ ms, cpuMs: cpu === null ? Number.NaN : (Number(cpu[1]) + Number(cpu[2])) * 1000 })
    })
  })

const main = async () => {
  await once(a)
  if (b !== undefined) await once(b)
  const runs_: Array<Run> = []
  const baseRuns: Array<Run> = []
  for (let i = 0; i < runs; i++) {
    if (b === undefined) {
      runs_.push(await once(a))
    } else if (i % 2 === 0) {
      runs_.push(await once(a))
      baseRuns.push(await once(b))
    } else {
      baseRuns.push(await once(b))
      runs_.push(await once(a))
    }
  }
  const times = runs_.map((r) => r.ms)
  report({
    medianMs: median(times),
    minMs: Math.min(...times),
    medianCpuMs: median(runs_.map((r) => r.cpuMs)),
    ...(b === undefined ? {} : {
      baseMedianMs: median(baseRuns.map((r) => r.ms)),
      baseMinMs: Math.min(...baseRuns.map((r) => r.ms)),
      ratio: median(runs_.map((r, i) => r.ms / baseRuns[i].ms)),
      baseMedianCpuMs: median(baseRuns.map((r) => r.cpuMs)),
      cpuRatio: median(runs_.map((r, i) => r.cpuMs / baseRuns[i].cpuMs))
    }),
    load1: os.loadavg()[0]
  })
}

main()
