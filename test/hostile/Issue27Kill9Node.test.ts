/**
 * Issue 27, final hostile pass (2026-12-04): `kill -9` of a run started by a Node older than
 * `engines`. In a clone, `node bin/effect-gym.js run ...` started by the system's Node 20 runs again on
 * the clone's Node 24 as a child process (src/cli/launch.ts); `kill -9` of the process the user
 * started left that child running, orphaned, still writing the log, and `--resume` was refused
 * ("being written by another run (process N)") until it had finished on its own. The child now stops
 * as a hang-up (SIGHUP) stops a run (the finished groups written, the lock released) as soon as its parent is
 * gone, and `--resume` completes the run (README: "kill -9 included").
 * (test/hostile/issue27-final/kill9-on-old-node.sh, as a test.) Integration layer: it runs the built
 * binary with the system's Node, skipped with a notice where that is missing or >= 24.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const ROOT = path.resolve(import.meta.dirname, "../..")
const BIN = path.join(ROOT, "bin/effect-gym.js")
const SYSTEM_NODE = "/usr/bin/node"

const major = (() => {
  if (!fs.existsSync(SYSTEM_NODE)) return undefined
  const out = spawnSync(SYSTEM_NODE, ["-p", "process.versions.node"], { encoding: "utf8" })
  return out.status === 0 ? Number(out.stdout.trim().split(".")[0]) : undefined
})()
const missing = major === undefined
  ? `${SYSTEM_NODE} is missing or does not run`
  : major >= 24
  ? `${SYSTEM_NODE} is Node ${major}, not older than 24 (the launcher runs no child there)`
  : undefined

/** Whether process `pid` is running (a zombie, which no one may reap in a container, is not). */
const running = (pid: number): boolean => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z"
  } catch {
    return false
  }
}

/** The children of process `pid` (Linux). */
const childrenOf = (pid: number): Array<number> => {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter((s) => s !== "").map(Number)
  } catch {
    return []
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const ROWS = 300
const GENERATIONS = 4

if (missing !== undefined) {
  describe("needs a Node older than 24 at /usr/bin/node", () => {
    console.warn(`NOTICE: the launcher's kill -9 test on an old Node is SKIPPED: ${missing}`)
    it.skip(`SKIPPED: ${missing}`, () => {})
  })
} else {
  describe("issue 27, final hostile (2026-12-04): kill -9 of a run started on an old Node", () => {
    it("the run on the clone's Node stops within 2 s of its parent's kill -9 (its log whole JSON lines), and --resume completes it, every row once", async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-kill9-"))
      let inner: number | undefined
      try {
        const dataset = path.join(dir, "rows.jsonl")
        fs.writeFileSync(dataset, Array.from({ length: ROWS }, (_, i) => `{"env_config":{"seed":${i},"size":8}}\n`).join(""))
        const log = path.join(dir, "log.jsonl")
        const args = [
          BIN, "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--policy-option", "latency_ms=5",
          "--num-generations", String(GENERATIONS), "--seed", "5", "--concurrency", "8", "--output", log
        ]
        const child = spawn(SYSTEM_NODE, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] })
        let output = ""
        child.stdout.on("data", (chunk) => void (output += chunk))
        child.stderr.on("data", (chunk) => void (output += chunk))
        const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on("exit", (code, signal) => resolve([code, signal])))
        // (the child writes on after the launcher's death: the standard streams are the same pipes)
        const closed = new Promise((resolve) => child.stderr.on("close", resolve))
        // the run is going on the clone's Node: a child process, and a group in the log
        for (let i = 0; i < 600 && !(childrenOf(child.pid!).length > 0 && fs.existsSync(log) && fs.statSync(log).size > 0); i++) await sleep(50)
        const children = childrenOf(child.pid!)
        expect(children.length, output).toBe(1)
        inner = children[0]
        expect(fs.statSync(log).size, output).toBeGreaterThan(0)

        child.kill("SIGKILL")
        expect(await exited).toEqual([null, "SIGKILL"])
        const killedAt = Date.now()
        while (running(inner) && Date.now() - killedAt < 2_000) await sleep(20)
        expect(running(inner), `process ${inner} (the run on the clone's Node) still running 2 s after its parent's kill -9`).toBe(false)

        // it stopped as a hang-up stops a run: gracefully, its summary printed
        await Promise.race([closed, sleep(2_000)])
        expect(output).toMatch(/interrupted\s+by SIGHUP: the groups finished are written/)

        // what it wrote: whole JSON lines, fewer than the run's (it was stopped mid-run)
        const text = fs.readFileSync(log, "utf8")
        expect(text.endsWith("\n")).toBe(true)
        const kept = text.trim().split("\n")
        for (const line of kept) expect(() => JSON.parse(line)).not.toThrow()
        expect(kept.length).toBeLessThan(ROWS * GENERATIONS)

        // --resume is not refused (the lock was released) and completes the run
        const resumed = spawnSync(SYSTEM_NODE, [...args, "--resume"], { cwd: dir, encoding: "utf8", timeout: 60_000 })
        expect(resumed.stderr).not.toContain("being written by another run")
        expect(resumed.status, resumed.stderr).toBe(0)
        const lines = fs.readFileSync(log, "utf8").trim().split("\n").map((line) => JSON.parse(line) as { row: number; generation: number })
        const seen = new Set(lines.map((line) => `${line.row}:${line.generation}`))
        expect([lines.length, seen.size]).toEqual([ROWS * GENERATIONS, ROWS * GENERATIONS])
        for (let row = 0; row < ROWS; row++) {
          for (let generation = 0; generation < GENERATIONS; generation++) expect(seen.has(`${row}:${generation}`)).toBe(true)
        }
      } finally {
        // (an orphan left by a failure: not left running)
        if (inner !== undefined && running(inner)) process.kill(inner, "SIGKILL")
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }, 90_000)

    // Session 41's hostile pass: `timeout -k` (SIGTERM, then SIGKILL) of the launcher while the run
    // stopped gracefully: the channel's close came as a second SIGTERM, "SIGTERM again: exiting
    // now", and the stop was cut (its summary, the envs' closes). Now a hang-up, which a stop under
    // way ignores.
    it("a kill -9 of the launcher while the run already stops gracefully does not cut that stop short", async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-kill9-"))
      let inner: number | undefined
      try {
        const dataset = path.join(dir, "rows.jsonl")
        fs.writeFileSync(dataset, Array.from({ length: 20 }, (_, i) => `{"env_config":{"i":${i}}}\n`).join(""))
        const plugin = path.join(ROOT, "test/hostile/issue27-final/slow_close_plugin.mjs")
        const child = spawn(SYSTEM_NODE, [
          BIN, "run", "--plugin", plugin, "--dataset", dataset, "--env", "slow_close", "--policy", "random",
          "--num-generations", "2", "--max-turns", "30", "--concurrency", "8", "--output", path.join(dir, "log.jsonl")
        ], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] })
        let output = ""
        child.stdout.on("data", (chunk) => void (output += chunk))
        child.stderr.on("data", (chunk) => void (output += chunk))
        const closed = new Promise((resolve) => child.stderr.on("close", resolve))
        // the run on the clone's Node started, its trajectories running (30 steps of 20 ms, then a close of 1 s: 8 s in all)
        for (let i = 0; i < 600 && childrenOf(child.pid!).length === 0; i++) await sleep(50)
        inner = childrenOf(child.pid!)[0]
        expect(inner, output).toBeDefined()
        await sleep(1_500)
        child.kill("SIGTERM")
        await sleep(100)
        child.kill("SIGKILL")
        await Promise.race([closed, sleep(10_000)])
        expect(output).toContain("SIGTERM: stopping")
        expect(output).not.toContain("exiting now")
        expect(output).toMatch(/interrupted\s+by SIGTERM: the groups finished are written/)
        expect(output).not.toContain("trajectories   40")
        expect(running(inner)).toBe(false)
      } finally {
        if (inner !== undefined && running(inner)) process.kill(inner, "SIGKILL")
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }, 60_000)
  })
}
