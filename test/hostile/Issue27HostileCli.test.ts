/**
 * Issue 27's hostile pass (2026-12-03), the repros that need the built command line (integration
 * layer, test/layers.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const BIN = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
const DATASET = path.resolve(import.meta.dirname, "../../examples/frozen_lake.jsonl")
const lake = ["--dataset", DATASET, "--env", "frozen_lake", "--policy", "random", "--num-generations", "2", "--max-turns", "4"]

/** Runs the binary with its stdout a pipe read by this process: exit code, stdout, stderr. */
const piped = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => void (stdout += chunk))
    child.stderr.on("data", (chunk) => void (stderr += chunk))
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

describe("issue 27, hostile, the command line (2026-12-03)", () => {
  it("--output /dev/stdout into a pipe writes the log there (every write failed: ESPIPE, exit 3, nothing written)", async () => {
    // (a shell pipe: node's own stdio "pipe" is a socket, which /dev/stdout cannot be opened on)
    const quoted = [process.execPath, BIN, "run", ...lake, "--output", "/dev/stdout"].map((a) => `'${a}'`).join(" ")
    const { code, stderr, stdout } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn("bash", ["-c", `set -o pipefail; ${quoted} | cat`], { stdio: ["ignore", "pipe", "pipe"] })
      let out = ""
      let err = ""
      child.stdout.on("data", (chunk) => void (out += chunk))
      child.stderr.on("data", (chunk) => void (err += chunk))
      child.on("close", (exit) => resolve({ code: exit, stdout: out, stderr: err }))
    })
    expect(stderr).not.toMatch(/ESPIPE/)
    expect(code, stderr).toBe(0)
    const rows = fs.readFileSync(DATASET, "utf8").split("\n").filter((line) => line.trim() !== "").length
    expect(stdout.split("\n").filter((line) => line.startsWith("{")).length).toBeGreaterThanOrEqual(rows * 2)
  }, 120_000)

  it("--output a FIFO read slowly: every group arrives (every write failed: ESPIPE, exit 3)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "issue27-"))
    const fifo = path.join(dir, "out.fifo")
    execFileSync("mkfifo", [fifo])
    // a slow reader: sleeps before it reads, then reads it all
    const reader = spawn("sh", ["-c", `sleep 1; cat '${fifo}' > '${path.join(dir, "read.jsonl")}'`])
    const readerDone = new Promise((resolve) => reader.on("close", resolve))
    const { code, stderr } = await piped(["run", ...lake, "--output", fifo, "--json"])
    await readerDone
    expect(stderr).not.toMatch(/ESPIPE/)
    expect(code, stderr).toBe(0)
    const rows = fs.readFileSync(DATASET, "utf8").split("\n").filter((line) => line.trim() !== "").length
    expect(fs.readFileSync(path.join(dir, "read.jsonl"), "utf8").trim().split("\n")).toHaveLength(rows * 2)
  }, 120_000)
})
