/** Runs the CLI in-process with a full argv (as `test/Cli.test.ts` does) and reads completion logs. */
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, readLines, tmp as makeTmp } from "../cli.js"


export const tmp = () => makeTmp("effect-gym-inference-")

export { cli, readLines }

/** A FrozenLake dataset of `rows` rows (seeds 0..rows-1). */
export const frozenLakeDataset = (dir: string, rows: number, size = 4) => {
  const file = path.join(dir, "frozen_lake.jsonl")
  const lines = Array.from({ length: rows }, (_, seed) => JSON.stringify({ env_config: { seed, size } }))
  fs.writeFileSync(file, lines.join("\n") + "\n")
  return file
}
