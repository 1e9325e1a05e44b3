/**
 * Issue 28, item 16 across processes: the built command line's lock on --output, against a second
 * process, and after `kill -9` of its holder (the kernel frees the lock with its process: a resume
 * right after is not refused).
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { bin, tmp } from "../cli.js"

const entry = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")

describe("issue 28 item 16: --output's lock, across processes", () => {
  it("a second process is refused (exit 2) while the first writes; after kill -9 of the first, --resume takes the log at once", async () => {
    const dir = tmp()
    const output = path.join(dir, "out.jsonl")
    const dataset = path.join(dir, "rows.jsonl")
    fs.writeFileSync(dataset, Array.from({ length: 24 }, (_, i) => JSON.stringify({ env_config: { seed: i } })).join("\n") + "\n")
    const args = [
      "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "frozen-lake-solver", "--policy-option",
      "latency_ms=100", "--num-generations", "2", "--max-turns", "10", "--concurrency", "2", "--output", output
    ]
    const first = spawn(process.execPath, [entry, ...args], { stdio: "ignore" })
    const exited = new Promise((resolve) => first.on("exit", resolve))
    while (!fs.existsSync(output) || fs.statSync(output).size === 0) await new Promise((r) => setTimeout(r, 20))
    const second = await bin([...args, "--overwrite"], dir)
    expect(second.code).toBe(2)
    expect(second.stderr).toContain(`--output: ${output} is being written by another run (process ${first.pid})`)
    first.kill("SIGKILL")
    await exited
    const started = Date.now()
    const resumed = await bin([...args, "--resume"], dir)
    expect(resumed.stderr).not.toContain("being written by another run")
    expect(resumed.code).toBe(0)
    expect(resumed.stderr + resumed.stdout).toContain("resuming")
    expect(Date.now() - started).toBeLessThan(60_000)
    expect(fs.readFileSync(output, "utf8").trimEnd().split("\n").length).toBe(48)
    fs.rmSync(dir, { recursive: true, force: true })
  }, 120_000)
})
