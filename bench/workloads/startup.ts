/**
 * Workload 8: startup, as a user meets it: the built CLI (`node bin/effect-gym.js ARGS`) from
 * process start to exit, `--runs` times in a row (after one untimed run that warms the file
 * cache); prints the median and the minimum. `--command help|envs|node` (`node`: `node -e 0`, the
 * floor under every command).
 */
import { spawn } from "node:child_process"
import * as path from "node:path"
import { flags, median, report } from "../lib.js"

const args = flags()
const command = args.command ?? "envs"
const runs = Number(args.runs ?? 11)
const root = path.resolve(import.meta.dirname, "../..")

const argv = command === "node"
  ? ["-e", "0"]
  : [path.join(root, "bin/effect-gym.js"), ...(command === "help" ? ["--help"] : [command])]

const once = () =>
  new Promise<number>((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, argv, { stdio: "ignore" })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve(performance.now() - started) : reject(new Error(`${argv.join(" ")} exited with ${code}`)))
  })

const main = async () => {
  await once()
  const times: Array<number> = []
  for (let i = 0; i < runs; i++) times.push(await once())
  report({ medianMs: median(times), minMs: Math.min(...times) })
}

main()
