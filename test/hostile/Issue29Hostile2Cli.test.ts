/**
 * Issue 29 under a second hostile user, 2026-12-04: `check-env --json`'s keys, and
 * examples/trl_grpo.py's options on a machine without torch. Integration layer: it runs the built
 * command line and Python.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "../..")
const bin = path.join(root, "bin/effect-gym.js")

/** Every key of a JSON value, dotted, skipping the records that hold data (env_configs). */
const keys = (value: unknown, at = ""): Array<string> => {
  if (Array.isArray(value)) return value.flatMap((v) => keys(v, `${at}[]`))
  if (value === null || typeof value !== "object") return []
  return Object.entries(value).flatMap(([k, v]) =>
    [`${at}.${k}`, ...(k === "config" || k === "configs" ? [] : keys(v, `${at}.${k}`))]
  )
}

const python = spawnSync("python3", ["-c", "import sys"]).status === 0
const hasTorch = python && spawnSync("python3", ["-c", "import torch"]).status === 0

describe("issue 29, hostile 2 (2026-12-04)", () => {
  it("check-env --json: snake_case keys, as run --json and the log (it printed maxSteps, stats.episodesDone, failures[].configIndex)", () => {
    const result = spawnSync(process.execPath, [bin, "check-env", "frozen_lake", "--seeds", "1", "--runs", "2", "--json"], {
      encoding: "utf8",
      cwd: root
    })
    expect(result.status, result.stderr).toBe(0)
    const report = JSON.parse(result.stdout)
    const camel = keys(report).filter((k) => /[a-z][A-Z]/.test(k))
    expect(camel).toEqual([])
    expect(report.max_steps).toBe(16)
    expect(report.stats.episodes_at_max_steps).toBeGreaterThanOrEqual(0)
  })

  it.skipIf(!python || hasTorch)("trl_grpo.py --help and a bad option need no torch (they were a ModuleNotFoundError traceback, exit 1)", () => {
    const script = path.join(root, "examples/trl_grpo.py")
    const help = spawnSync("python3", [script, "--help"], { encoding: "utf8" })
    expect(help.status, help.stderr).toBe(0)
    expect(help.stdout).toContain("--num-generations")
    const bad = spawnSync("python3", [script, "--steps", "0"], { encoding: "utf8" })
    expect(bad.status).toBe(2)
    expect(bad.stderr).toContain("--steps: must be an integer >= 1, got 0")
    const word = spawnSync("python3", [script, "--max-turns", "abc"], { encoding: "utf8" })
    expect(word.status).toBe(2)
    expect(word.stderr).toContain("--max-turns: must be an integer >= 1, got abc") // was "invalid parse value: 'abc'"
    for (const rate of ["nan", "inf", "-1", "0"]) {
      const lr = spawnSync("python3", [script, "--learning-rate", rate], { encoding: "utf8" })
      expect(lr.status, rate).toBe(2) // nan and inf were taken, and trained nothing
      expect(lr.stderr).toContain(`--learning-rate: must be a finite number > 0, got ${rate}`)
    }
    const run = spawnSync("python3", [script, "--steps", "1"], { encoding: "utf8" })
    expect(run.status).toBe(2)
    expect(run.stderr).toContain("bash .ci/trl-example")
    expect(run.stderr).not.toContain("Traceback")
  })

  /**
   * The example's main() with torch, trl and the rest stubbed (it is the process handling under test,
   * not training), and an `--effect-gym` that never says it listens: SIGTERM while it waits.
   */
  const driver = `
import sys, types, unittest.mock as m
for name in ["torch", "datasets", "tokenizers", "transformers", "trl"]:
    sys.modules[name] = m.MagicMock()
sys.path.insert(0, sys.argv[1])
import trl_grpo
trl_grpo.build_tokenizer = lambda folder: m.MagicMock()
trl_grpo.build_model = lambda tokenizer, seed: m.MagicMock()
trl_grpo.ModelServer = lambda model, tokenizer: m.MagicMock(url="http://127.0.0.1:9/v1")
sys.argv = ["trl_grpo.py", "--effect-gym", sys.argv[2]]
sys.exit(trl_grpo.main())
`

  it.skipIf(!python)("trl_grpo.py: SIGTERM while effect-gym serve starts stops it (it was left running: start was outside the try)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-trl-term-"))
    const pidFile = path.join(dir, "serve.pid")
    const fake = "node -e require('fs').writeFileSync(process.env.SERVE_PID,String(process.pid)),setInterval(()=>{},1e3)"
    const child = spawn("python3", ["-c", driver, path.join(root, "examples"), fake], {
      env: { ...process.env, SERVE_PID: pidFile },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (d) => (stderr += d))
    const deadline = Date.now() + 20_000
    while (!fs.existsSync(pidFile) || fs.readFileSync(pidFile, "utf8") === "") {
      if (Date.now() > deadline) throw new Error(`the fake serve never started: ${stderr}`)
      await new Promise((r) => setTimeout(r, 50))
    }
    const pid = Number(fs.readFileSync(pidFile, "utf8"))
    child.kill("SIGTERM")
    const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)))
    const alive = (): boolean => {
      try {
        process.kill(pid, 0)
        return true
      } catch {
        return false
      }
    }
    const left = alive()
    if (left) process.kill(pid, "SIGKILL")
    expect(left, stderr).toBe(false)
    expect(code).toBe(143)
  }, 30_000)
})

describe("issue 29 item 6, hostile: env_ms with --isolate-envs (2026-12-04)", () => {
  it("at concurrency 64, a FrozenLake step's env_ms is its time in the worker; the queueing is wait_ms (env_ms was 3.8 ms, wait_ms never written)", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-isolated-wait-"))
    try {
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 64 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
      const output = path.join(dir, "out.jsonl")
      const out = spawnSync(process.execPath, [
        bin, "run", "--env", "frozen_lake", "--dataset", dataset, "--num-generations", "8", "--concurrency", "64",
        "--isolate-envs", "--output", output
      ], { cwd: root, encoding: "utf8", timeout: 120_000 })
      expect(out.status, out.stderr).toBe(0)
      const lines = fs.readFileSync(output, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      const turns = lines.flatMap((l) => l.timings.turns as Array<{ env_ms: number; wait_ms?: number }>)
      const median = (xs: Array<number>) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]
      const env = median(turns.map((t) => t.env_ms))
      const wait = median(turns.map((t) => t.wait_ms ?? 0))
      // (a step of FrozenLake is microseconds of work; 512 trajectories queue on a few worker threads)
      expect(turns.filter((t) => (t.wait_ms ?? 0) > 0).length).toBeGreaterThan(turns.length / 2)
      expect(wait).toBeGreaterThan(env)
      expect(env).toBeLessThan(1)
      // every turn still adds up: the waiting is apart, not lost
      for (const t of turns) expect(t.env_ms).toBeGreaterThanOrEqual(0)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)
})

describe("view stopped while it still reads its log (CI, 2026-12-04)", () => {
  it("a SIGTERM right after the URL, while a 67 MB log is being read: exit 0, the viewer's ordinary end (it was 143)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-view-early-"))
    try {
      const small = path.join(dir, "small.jsonl")
      const ran = spawnSync(process.execPath, [
        bin, "run", "--dataset", path.join(root, "examples/frozen_lake.jsonl"), "--env", "frozen_lake", "--output", small
      ], { cwd: root, encoding: "utf8", timeout: 120_000 })
      expect(ran.status, ran.stderr).toBe(0)
      const big = path.join(dir, "big.jsonl")
      const text = fs.readFileSync(small, "utf8")
      fs.writeFileSync(big, text.repeat(40))
      const child = spawn(process.execPath, [bin, "view", big, "--port", "0"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
      let stderr = ""
      child.stderr.on("data", (chunk: Buffer) => void (stderr += chunk.toString("utf8")))
      const code = await new Promise<number | null>((resolve) => {
        let sent = false
        child.stdout.on("data", (chunk: Buffer) => {
          if (!sent && /http:\/\/127\.0\.0\.1:\d+/.test(chunk.toString("utf8"))) {
            sent = true
            child.kill("SIGTERM")
          }
        })
        child.on("close", (code) => resolve(code))
      })
      expect(code, stderr).toBe(0)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)
})
