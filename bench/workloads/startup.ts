/**
 * Workload 8: startup, as a user meets it: the built CLI (`node bin/effect-gym.js ARGS`) from
 * process start to exit, `--runs` times in a row (after one untimed run that warms the file
 * cache); prints the median and the minimum. `--command help|envs|node` (`node`: `node -e 0`, the
 * floor under every command).
 *
 * A/B: `--base PATH` (another build's bin/effect-gym.js, e.g. main's in a scratch checkout) runs
 * the same command with that build, interleaved with this one (A B, B A, ...), and reports its
 * median and `ratio`, the median over pairs of this build's time / the base's.
 * `--bin PATH` times another build instead of this checkout's.
 */
import { spawn } from "node:child_process"
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

const once = (argv: ReadonlyArray<string>) =>
  new Promise<number>((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, argv, { stdio: "ignore" })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve(performance.now() - started) : reject(new Error(`${argv.join(" ")} exited with ${code}`)))
  })

const main = async () => {
  await once(a)
  if (b !== undefined) await once(b)
  const times: Array<number> = []
  const baseTimes: Array<number> = []
  for (let i = 0; i < runs; i++) {
    if (b === undefined) {
      times.push(await once(a))
    } else if (i % 2 === 0) {
      times.push(await once(a))
      baseTimes.push(await once(b))
    } else {
      baseTimes.push(await once(b))
      times.push(await once(a))
    }
  }
  report({
    medianMs: median(times),
    minMs: Math.min(...times),
    ...(b === undefined ? {} : {
      baseMedianMs: median(baseTimes),
      baseMinMs: Math.min(...baseTimes),
      ratio: median(times.map((t, i) => t / baseTimes[i]))
    }),
    load1: os.loadavg()[0]
  })
}

main()
