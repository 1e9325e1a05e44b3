/**
 * Issue 27 under a fourth hostile user, 2026-12-04: `run` started again with V8 semi-spaces of 8 MB
 * (src/cli/launch.ts), attacked through the built command line. Integration layer (it runs
 * bin/effect-gym.js).
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "../..")
const bin = path.join(root, "bin/effect-gym.js")
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-h27n4-"))
/** A plugin that says, as it is loaded, the Node flags of the process that runs the job. */
const probe = path.join(dir, "probe.mjs")
fs.writeFileSync(probe, "console.error(`PROBE ${JSON.stringify(process.execArgv)}`)\nexport default {}\n")
const flags = ["--min-semi-space-size=8", "--max-semi-space-size=8"]

const job = (output: string) => [
  "run", "--dataset", path.join(root, "examples/frozen_lake.jsonl"), "--env", "frozen_lake",
  "--policy", "frozen-lake-solver", "--num-generations", "2", "--max-turns", "10",
  "--output", path.join(dir, output), "--overwrite", "--plugin", probe
]

const runJob = (output: string, env: Record<string, string | undefined>, nodeArgs: ReadonlyArray<string> = []) => {
  const result = spawnSync(process.execPath, [...nodeArgs, bin, ...job(output)], {
    cwd: root,
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, ...env }
  })
  const execArgv = /PROBE (.*)/.exec(result.stderr)?.[1]
  return {
    status: result.status,
    signal: result.signal,
    stderr: result.stderr,
    execArgv: execArgv === undefined ? undefined : JSON.parse(execArgv) as Array<string>,
    lines: fs.existsSync(path.join(dir, output)) ? fs.readFileSync(path.join(dir, output), "utf8").split("\n").length - 1 : 0
  }
}

describe("run started again (issue 27, fourth hostile pass)", () => {
  it("a heap size and an old space size of the user's: the run runs (V8 killed it at its start: a semi-space size too)", () => {
    const viaOptions = runJob("a.jsonl", { NODE_OPTIONS: "--max-heap-size=2048 --max-old-space-size=1024" })
    expect(viaOptions.stderr).not.toContain("Fatal error")
    expect([viaOptions.status, viaOptions.signal, viaOptions.lines]).toEqual([0, null, 256])
    const viaFlags = runJob("b.jsonl", {}, ["--max-heap-size=2048", "--max-old-space-size=1024"])
    expect([viaFlags.status, viaFlags.signal, viaFlags.execArgv]).toEqual([0, null, ["--max-heap-size=2048", "--max-old-space-size=1024"]])
  })

  it("a semi-space size in NODE_OPTIONS in double quotes is the user's: not replaced by 8 MB", () => {
    const quoted = runJob("c.jsonl", { NODE_OPTIONS: "\"--max-semi-space-size=2\"" })
    expect([quoted.status, quoted.execArgv]).toEqual([0, []])
    // (unquoted, as it was)
    expect(runJob("d.jsonl", {}).execArgv).toEqual(flags)
  })

  it("with code preloaded (--require in NODE_OPTIONS, --import before the script): it runs once (started again, it ran twice)", () => {
    const banner = path.join(dir, "banner.cjs")
    // (printed by the main thread only: a preload also runs in each worker thread, the plugin's loader's too)
    fs.writeFileSync(banner, "if (require('node:worker_threads').isMainThread) process.stderr.write(`BANNER ${process.pid}\\n`)\n")
    const bannerMjs = path.join(dir, "banner.mjs")
    fs.writeFileSync(bannerMjs, "import { isMainThread } from 'node:worker_threads'\nif (isMainThread) process.stderr.write(`BANNER ${process.pid}\\n`)\n")
    for (const [name, result] of [
      ["NODE_OPTIONS --require", runJob("p1.jsonl", { NODE_OPTIONS: `--require ${banner}` })],
      ["--import", runJob("p2.jsonl", {}, ["--import", bannerMjs])]
    ] as const) {
      expect([result.status, result.lines], name).toEqual([0, 256])
      expect(result.stderr.match(/BANNER/g), name).toHaveLength(1)
    }
  })

  it("under --inspect: one debugger session (started again, a second one opened at another address)", () => {
    const inspected = runJob("e.jsonl", {}, ["--inspect=127.0.0.1:0"])
    expect(inspected.status).toBe(0)
    expect(inspected.stderr.match(/Debugger listening on/g)).toHaveLength(1)
  })

  it("an environment that fits the start but not the 48 bytes of flags: the run runs (Node aborted it: execve E2BIG, exit 134)", () => {
    // the largest environment (in pieces of 64 KiB) that this very command line starts with, found
    // by halving; then the same size with the young generation asked for
    const env = (bytes: number, switched: string) => {
      const out: Record<string, string> = { ...process.env as Record<string, string>, EFFECT_GYM_YOUNG_GENERATION: switched }
      for (let i = 0; bytes > 0; i++, bytes -= 65536) out[`H27N4_FILL_${i}`] = "x".repeat(Math.min(bytes, 65536))
      return out
    }
    // Whether the command line can be started at all (the kernel's limit on the file name, the
    // arguments and the environment): the same bytes given to /bin/true, which ends at once, not a
    // whole job each time; through a link to it whose path is as long as Node's.
    const pad = process.execPath.length - dir.length - 1
    const truePath = pad > 0 ? path.join(dir, "t".repeat(pad)) : undefined
    if (truePath !== undefined && !fs.existsSync(truePath)) fs.symlinkSync("/bin/true", truePath)
    const starts = (bytes: number) =>
      spawnSync(truePath ?? process.execPath, [bin, ...job("f.jsonl")], { argv0: process.execPath, cwd: root, env: env(bytes, "off"), timeout: 60_000 }).error === undefined
    let low = 0
    let high = 16 * 1024 * 1024
    expect(starts(low)).toBe(true)
    expect(starts(high)).toBe(false)
    while (high - low > 1) {
      const mid = Math.floor((low + high) / 2)
      if (starts(mid)) low = mid
      else high = mid
    }
    // ("on_": as long as "off", so the same size)
    const result = spawnSync(process.execPath, [bin, ...job("g.jsonl")], { cwd: root, env: env(low, "on_"), timeout: 60_000, encoding: "utf8" })
    expect(result.stderr).not.toContain("execve failed")
    expect([result.status, result.signal]).toEqual([0, null])
  }, 120_000)

  it("under a permission model without child processes: no ExperimentalWarning of process.execve (it threw)", () => {
    const result = runJob("h.jsonl", {}, ["--permission", "--allow-worker", "--allow-fs-read=*", `--allow-fs-write=${dir}`, `--allow-fs-write=${path.join(root, "dist")}`])
    expect(result.status, result.stderr).toBe(0)
    expect(result.stderr).not.toContain("ExperimentalWarning")
  })
})
