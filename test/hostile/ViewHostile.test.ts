/** Hostile-user regressions for `effect-gym view` (found by attacking the command line). */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { cli } from "../cli.js"
import * as Logs from "../view/logs.js"

describe("effect-gym view, hostile input", () => {
  const dir = Logs.tmp()

  it.live("--html refuses a path that is the same file as a log under another name (symlink, hard link)", () =>
    Effect.gen(function*() {
      const log = path.join(dir, "precious.jsonl")
      fs.writeFileSync(log, "")
      const symlink = path.join(dir, "alias.jsonl")
      fs.symlinkSync(log, symlink)
      const hardlink = path.join(dir, "hard.jsonl")
      fs.linkSync(log, hardlink)
      for (const out of [symlink, hardlink]) {
        const result = yield* cli("view", log, "--html", out)
        expect(result.code).toBe(2)
        expect(result.stderr).toBe(`error: --html: ${out} is a log given to view: it would be overwritten`)
        expect(fs.readFileSync(log, "utf8")).toBe("")
      }
    }))
})

describe("effect-gym run --view, hostile input", () => {
  const dir = Logs.tmp()

  it.live("a --view-port in use stops the run before its log is opened: an earlier log under --output is kept, and the error names --view-port", () =>
    Effect.gen(function*() {
      const blocker = net.createServer()
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => blocker.listen(0, "127.0.0.1", () => resolve((blocker.address() as net.AddressInfo).port))))
      try {
        const dataset = path.join(dir, "rows.jsonl")
        fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
        const output = path.join(dir, "earlier.jsonl")
        fs.writeFileSync(output, "an earlier run's log\n")
        const result = yield* cli(
          "run", "--dataset", dataset, "--env", "frozen_lake", "--num-generations", "2", "--output", output,
          "--overwrite", "--view", "--view-port", String(port)
        )
        expect(result.code).toBe(2)
        expect(result.stderr).toMatch(new RegExp(`^error: --view-port: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`))
        expect(fs.readFileSync(output, "utf8")).toBe("an earlier run's log\n")
      } finally {
        blocker.close()
      }
    }))
})

describe("effect-gym view, damaged logs", () => {
  const dir = Logs.tmp()

  it.live("a UTF-8 byte order mark before the first line is skipped; NUL bytes after a first JSON line are bad lines, not a binary file", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 2, policy: "frozen-lake-solver", generations: 2 })
      const lines = fs.readFileSync(file, "utf8").trim().split("\n")
      expect(lines.length).toBe(4)
      const bom = path.join(dir, "bom.jsonl")
      fs.writeFileSync(bom, "\uFEFF" + lines.join("\n") + "\n")
      const a = yield* cli("view", bom, "--html", path.join(dir, "bom.html"))
      expect(a.stdout).toMatch(/bom\.jsonl: 4 trajectories, 4 in full$/)
      expect(a.stderr).not.toContain("not JSON")
      expect(a.code).toBe(0)
      // a crash can leave a zero-filled block after the lines that were written
      const zeros = path.join(dir, "zeros.jsonl")
      fs.writeFileSync(zeros, Buffer.concat([Buffer.from(lines.slice(0, 3).join("\n") + "\n"), Buffer.alloc(100), Buffer.from("\n" + lines[3] + "\n")]))
      const b = yield* cli("view", zeros, "--html", path.join(dir, "zeros.html"))
      expect(b.stdout).toMatch(/zeros\.jsonl: 4 trajectories, 4 in full$/)
      expect(b.stderr).toMatch(/warning: .*zeros\.jsonl:4: /)
      expect(b.code).toBe(1)
      // a real binary file is still said to be one
      const binary = path.join(dir, "binary.jsonl")
      fs.writeFileSync(binary, Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 0, 0, 10, 0, 1]))
      const c = yield* cli("view", binary, "--html", path.join(dir, "binary.html"))
      expect(c.stderr).toContain("is a binary file (it holds NUL bytes)")
      expect(c.code).toBe(1)
    }))
})

describe("effect-gym run --view, stopped by a signal", () => {
  it("SIGINT mid-run: exit 130 at once, without promising a page that stays (it said so, then exited)", async () => {
    const dir = Logs.tmp()
    const dataset = path.join(dir, "rows.jsonl")
    fs.writeFileSync(dataset, Array.from({ length: 400 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
    const output = path.join(dir, "out.jsonl")
    const child = spawn(process.execPath, [
      path.resolve(import.meta.dirname, "../../bin/effect-gym.js"), "run", "--dataset", dataset, "--env", "frozen_lake",
      "--policy", "random", "--policy-option", "latency_ms=20", "--concurrency", "4", "--output", output, "--view", "--view-port", "0"
    ], { stdio: ["ignore", "pipe", "pipe"] })
    let stderr = ""
    child.stderr.on("data", (chunk) => void (stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    try {
      for (const deadline = Date.now() + 30_000; !stderr.includes("http://127.0.0.1:") && Date.now() < deadline;) {
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      await new Promise((resolve) => setTimeout(resolve, 500))
      child.kill("SIGINT")
      expect(await exited, stderr).toBe(130)
      expect(stderr).not.toContain("its page stays")
    } finally {
      child.kill("SIGKILL")
    }
  })
})
