/**
 * Issue 27's hostile pass (2026-12-03), and issue 29's first hour: the command line started by a
 * Node older than `engines` (the system's Node 20 on some machines: `npx effect-gym` and
 * `node bin/effect-gym.js` start it). In a clone it runs again on the clone's own Node 24 (the `node`
 * dev dependency); without one it says which Node it needs, exit 2. Integration layer: it runs the
 * built binary with the system's Node, skipped when that is >= 24.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const ROOT = path.resolve(import.meta.dirname, "../..")
const BIN = path.join(ROOT, "bin/effect-gym.js")
const DATASET = path.join(ROOT, "examples/frozen_lake.jsonl")
const SYSTEM_NODE = "/usr/bin/node"

const major = (() => {
  const out = spawnSync(SYSTEM_NODE, ["-p", "process.versions.node"], { encoding: "utf8" })
  return out.status === 0 ? Number(out.stdout.trim().split(".")[0]) : undefined
})()
const oldNode = major !== undefined && major < 24
if (!oldNode) console.warn(`NOTICE: the tests of an old Node are SKIPPED: ${SYSTEM_NODE} is ${major ?? "missing"}, not < 24`)

const serverRun = [
  "run", "--dataset", DATASET, "--env", "frozen_lake", "--mode", "server",
  "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--output", "/dev/null"
]

describe("issue 27, hostile, Node (2026-12-03)", () => {
  it.skipIf(!oldNode)(
    "in a clone, on Node < 24 the command line runs on the clone's Node 24: server mode with no server is its exit 2 naming the URL (it died with undici's stack trace, exit 3)",
    () => {
      const out = spawnSync(SYSTEM_NODE, [BIN, ...serverRun], { encoding: "utf8", timeout: 60_000 })
      expect(out.stderr).not.toMatch(/\n\s+at /)
      expect(out.stderr).toContain("cannot reach the inference server")
      expect(out.stderr).toContain("http://127.0.0.1:1/v1")
      expect(out.status).toBe(2)
      const help = spawnSync(SYSTEM_NODE, [BIN, "--help"], { encoding: "utf8", timeout: 60_000 })
      expect([help.status, help.stdout.includes("Multi-turn LLM rollouts")]).toEqual([0, true])
    }
  )

  it.skipIf(!oldNode)("without the clone's Node (an installed package), on Node < 24 it says which Node it needs, exit 2", () => {
    // a copy of the package without node_modules: what an installation has of it
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-old-node-"))
    try {
      fs.cpSync(path.join(ROOT, "bin"), path.join(dir, "bin"), { recursive: true })
      fs.cpSync(path.join(ROOT, "dist/bundle/launch.js"), path.join(dir, "dist/bundle/launch.js"))
      const out = spawnSync(SYSTEM_NODE, [path.join(dir, "bin/effect-gym.js"), ...serverRun], { encoding: "utf8", timeout: 60_000 })
      expect(out.stderr).not.toMatch(/\n\s+at /)
      expect(out.stderr).toMatch(/needs Node >= 24/)
      expect(out.status).toBe(2)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it.skipIf(!oldNode)("a SIGTERM to the command started by the old Node reaches the run: it stops gracefully (143), its log whole, no process left", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-old-node-"))
    try {
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 400 }, (_, i) => `{"env_config":{"seed":${i}}}\n`).join(""))
      const log = path.join(dir, "log.jsonl")
      const child = spawn(SYSTEM_NODE, [
        BIN, "run", "--dataset", dataset, "--env", "frozen_lake", "--policy-option", "latency_ms=50",
        "--concurrency", "4", "--output", log
      ], { stdio: ["ignore", "pipe", "pipe"] })
      const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on("exit", (code, signal) => resolve([code, signal])))
      // the run is going: a group in the log
      for (let i = 0; i < 400 && !(fs.existsSync(log) && fs.statSync(log).size > 0); i++) await new Promise((r) => setTimeout(r, 50))
      const inner = fs.readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").trim().split(/\s+/).map(Number)
      expect(inner.length).toBe(1)
      child.kill("SIGTERM")
      expect(await exited).toEqual([143, null])
      const text = fs.readFileSync(log, "utf8")
      expect(text.endsWith("\n")).toBe(true)
      for (const line of text.trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow()
      expect(fs.existsSync(`/proc/${inner[0]}`)).toBe(false)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})
