/**
 * Issue 29 under a hostile user, 2026-12-04: the launcher run by an older Node, which runs the
 * command line again on the clone's Node 24 (src/cli/launch.ts). Integration layer: it runs the
 * built binary with the system's Node under `script` (a terminal), skipped when that Node is >= 24
 * or there is no `script`.
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
  const out = spawnSync(SYSTEM_NODE, ["-p", "process.versions.node"], { encoding: "utf8" })
  return out.status === 0 ? Number(out.stdout.trim().split(".")[0]) : undefined
})()
const hasScript = spawnSync("script", ["--version"], { encoding: "utf8" }).status === 0
const ready = major !== undefined && major < 24 && hasScript
if (!ready) console.warn(`NOTICE: the launcher's terminal tests are SKIPPED (${SYSTEM_NODE}: ${major ?? "missing"}, script: ${hasScript})`)

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const childrenOf = (pid: number): Array<number> => {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter((s) => s !== "").map(Number)
  } catch {
    return []
  }
}
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * A long run started by the system's Node in a pseudo-terminal (`script`), printing its exit code:
 * the pty, the log, what it has printed so far and its end.
 */
const runInPty = (dir: string) => {
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, Array.from({ length: 20_000 }, (_, seed) => JSON.stringify({ prompt: "p", env_config: { seed, size: 64 } })).join("\n") + "\n")
  const log = path.join(dir, "log.jsonl")
  // One command, its exit code given back by `script -e`: no `; echo $?` after it, because a shell
  // that gets the terminal's SIGINT too may end without running it (dash, /bin/sh on Debian, does)
  const command = `${SYSTEM_NODE} ${BIN} run --dataset ${dataset} --env frozen_lake --output ${log}`
  const pty = spawn("script", ["-qefc", command, "/dev/null"], { stdio: ["pipe", "pipe", "pipe"] })
  let printed = ""
  pty.stdout.on("data", (chunk: Buffer) => void (printed += chunk.toString("utf8")))
  // "close", not "exit": the pty's last bytes can come after the process's exit
  const exited = new Promise<number | null>((resolve) => pty.on("close", (code) => resolve(code)))
  return { pty, log, output: () => printed, exited }
}

describe("issue 29, hostile, the launcher at a terminal (2026-12-04)", () => {
  it.skipIf(!ready)("a `kill -INT` of the launcher alone, on a terminal, stops the run gracefully (130): it was not passed on, and the run went on", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-launch-int-"))
    try {
      const { exited, log, output, pty } = runInPty(dir)
      // script → sh → the launcher (the system's Node) → the run (the clone's Node)
      let launcher: number | undefined
      for (let i = 0; i < 200 && launcher === undefined; i++) {
        await sleep(100)
        const shells = childrenOf(pty.pid!)
        for (const pid of [...shells, ...shells.flatMap(childrenOf)]) {
          if (fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith(`${SYSTEM_NODE}\0${BIN}`) && childrenOf(pid).length > 0 && fs.existsSync(log) && fs.statSync(log).size > 0) launcher = pid
        }
      }
      expect(launcher).toBeDefined()
      const run = childrenOf(launcher!)[0]
      process.kill(launcher!, "SIGINT")
      for (let i = 0; i < 300 && alive(run); i++) await sleep(100)
      const stopped = !alive(run)
      if (!stopped) process.kill(launcher!, "SIGTERM")
      const code = await exited
      expect(stopped, output()).toBe(true)
      expect(output()).toContain("interrupted    by SIGINT")
      expect(output()).not.toContain("exiting now")
      expect(code, output()).toBe(130)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)

  it.skipIf(!ready)("a Ctrl-C at the terminal is still one SIGINT (graceful, 130), not two (a hard stop)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-launch-ctrlc-"))
    try {
      const { exited, log, output, pty } = runInPty(dir)
      for (let i = 0; i < 200 && !(fs.existsSync(log) && fs.statSync(log).size > 0); i++) await sleep(100)
      pty.stdin.write("\x03")
      const timer = setTimeout(() => pty.kill("SIGKILL"), 60_000)
      const code = await exited
      clearTimeout(timer)
      expect(output()).toContain("interrupted    by SIGINT")
      expect(output()).not.toContain("exiting now")
      expect(code, output()).toBe(130)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)
})

describe("issue 29, hostile, the launcher's guard (2026-12-04)", () => {
  it.skipIf(!(major !== undefined && major < 24))("EFFECT_GYM_RERUN=1 inherited from a run (a plugin's or a script's own `node bin/effect-gym.js`) still runs on the clone's Node (it was refused, exit 2, saying to run npm ci)", () => {
    const out = spawnSync(SYSTEM_NODE, [BIN, "--version"], { encoding: "utf8", timeout: 60_000, env: { ...process.env, EFFECT_GYM_RERUN: "1" } })
    expect(out.stderr).not.toContain("needs Node")
    expect(out.status, out.stderr).toBe(0)
    expect(out.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/)
  })
})
