/**
 * Workload 9: a large dataset with bounded memory. Generates a dataset of `--gb` GiB (default 2)
 * in a temporary folder: FrozenLake rows with a `padding` column of `--row-kb` KiB each (64), as long
 * prompts or documents make rows large. Then runs the built CLI over it (one generation, the random
 * policy; the run is not the point) with a heap probe preloaded, and prints the peak heap, the peak
 * RSS and the time. The dataset is read twice (its hash and row count, then the run), a chunk at a
 * time each: the heap must stay under 200 MB whatever the size.
 *
 * `--max-old-space MB` (default 200) runs the CLI with `--max-old-space-size`: V8 then must keep
 * its old generation under that, so a run that completes shows the bound holds (besides the peak the
 * probe samples, which includes garbage not yet collected).
 *
 *   node --import tsx bench/workloads/bigdata.ts [--gb 2] [--row-kb 64] [--max-old-space 200] [--keep]
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { flags, report } from "../lib.js"

const args = flags()
const gib = Number(args.gb ?? 2)
const rowKb = Number(args["row-kb"] ?? 64)
const root = path.resolve(import.meta.dirname, "../..")
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-bigdata-"))
const dataset = path.join(dir, "big.jsonl")
const output = path.join(dir, "out.jsonl")
const probe = path.join(dir, "probe.json")

const generate = async () => {
  const padding = "x".repeat(rowKb * 1024)
  const rows = Math.ceil((gib * 2 ** 30) / (padding.length + 60))
  const out = fs.createWriteStream(dataset)
  const lines: Array<string> = []
  for (let i = 0; i < rows; i++) {
    lines.push(`{"env_config":{"seed":${i},"size":4},"padding":"${padding}"}\n`)
    if (lines.length === 64 || i === rows - 1) {
      if (!out.write(lines.join(""))) await new Promise<void>((resolve) => out.once("drain", () => resolve()))
      lines.length = 0
    }
  }
  await new Promise<void>((resolve) => out.end(() => resolve()))
  return rows
}

const run = () =>
  new Promise<number>((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, [
      `--max-old-space-size=${Number(args["max-old-space"] ?? 200)}`,
      "--import", path.join(import.meta.dirname, "heap-probe.mjs"),
      path.join(root, "bin/effect-gym.js"), "run", "--dataset", dataset, "--env", "frozen_lake",
      "--num-generations", "1", "--max-turns", "2", "--output", output
    ], { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, EFFECT_GYM_HEAP_PROBE: probe } })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve((performance.now() - started) / 1000) : reject(new Error(`the run exited with ${code}`)))
  })

const main = async () => {
  try {
    const rows = await generate()
    const bytes = fs.statSync(dataset).size
    const seconds = await run()
    const lines = fs.readFileSync(output, "utf8").split("\n").length - 1
    if (lines !== rows) throw new Error(`${lines} lines written for ${rows} rows`)
    const { peakHeapBytes, peakRssBytes } = JSON.parse(fs.readFileSync(probe, "utf8"))
    report({ datasetBytes: bytes, rows, seconds, peakHeapMiB: peakHeapBytes / 2 ** 20, peakRssMiB: peakRssBytes / 2 ** 20 })
  } finally {
    if (args.keep === undefined) fs.rmSync(dir, { recursive: true, force: true })
  }
}

main()
