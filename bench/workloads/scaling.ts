/**
 * Workload 6: scaling. The whole command-line job (dataset file in, completions log out, summary)
 * at 1,000 / 10,000 / 100,000 trajectories with the random policy: the cost per turn must stay flat
 * as the run grows (no quadratic work in the loop, the writer or the summary).
 *
 *   --trajectories N  --generations 8  --concurrency 64
 */
import { NodeContext } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { main } from "../../dist/cli/Cli.js"
import { frozenLakeDataset } from "../../dist/cli/DatasetCommand.js"
import { flags, report } from "../lib.js"

const args = flags()
const trajectories = Number(args.trajectories ?? 10_000)
const generations = Number(args.generations ?? 8)
const concurrency = Number(args.concurrency ?? 64)
const rows = Math.ceil(trajectories / generations)

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-bench-"))
const dataset = path.join(dir, "rows.jsonl")
const output = path.join(dir, "completions.jsonl")
fs.writeFileSync(dataset, frozenLakeDataset({ rows }))

let printed = ""
const quiet = {
  ...globalThis.console,
  log: (...xs: ReadonlyArray<unknown>) => Effect.sync(() => void (printed += xs.join(" "))),
  error: () => Effect.void
}
const run = (out: string) =>
  Effect.runPromise(
    main([
      "node", "effect-gym", "run", "--dataset", dataset, "--gym-env", "frozen_lake", "--policy", "random",
      "--num-generations", String(generations), "--max-turns", "10", "--concurrency", String(concurrency),
      "--output", out, "--json"
    ]).pipe(Effect.withConsole(quiet as unknown as Console.Console), Effect.provide(NodeContext.layer))
  )

const mainBench = async () => {
  await run(path.join(dir, "warmup.jsonl")) // warm up the code paths (same size)
  printed = ""
  const started = performance.now()
  const code = await run(output)
  const seconds = (performance.now() - started) / 1000
  const summary = JSON.parse(printed) as { trajectories: number; turns: number }
  const lines = fs.readFileSync(output, "utf8").split("\n").filter((l) => l !== "").length
  fs.rmSync(dir, { recursive: true, force: true })
  if (code !== 0 || lines !== summary.trajectories) throw new Error(`run failed: exit ${code}, ${lines} lines`)
  report({
    trajectories: summary.trajectories,
    turns: summary.turns,
    seconds,
    turnsPerSecond: summary.turns / seconds,
    microsecondsPerTurn: (seconds * 1e6) / summary.turns
  })
}

mainBench()
