/**
 * The bundled command line (bin/effect-gym.js: dist/bundle/cli.cjs through the launcher, with its
 * code cache) against the unbundled build (dist/cli/bin.js), as a user meets them: the same output
 * and exit codes (0, 1, 2, 3), signals mid-run, stdout closed early by `| head`, the lazily imported
 * packages (node-llama-cpp, tsx for TypeScript plugins), env worker threads, servers started and
 * stopped. Both run from the built dist/ (`npm run build`).
 */
import { describe, expect, it } from "@effect/vitest"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { tmp } from "./cli.js"

const root = path.resolve(import.meta.dirname, "..")
const bundled = path.join(root, "bin/effect-gym.js")
const unbundled = path.join(root, "dist/cli/bin.js")
const dataset = path.join(root, "examples/frozen_lake.jsonl")
const tsPlugin = path.join(root, "examples/frozen_lake_plugin.ts")

interface Ran {
  readonly code: number | null
  readonly signal: string | null
  readonly stdout: string
  readonly stderr: string
}

/** Starts `node entry ...args`; `onStdout` sees each chunk (to close the pipe early). */
const start = (
  entry: string,
  args: ReadonlyArray<string>,
  options: { cwd?: string; env?: Record<string, string>; onStdout?: (child: ChildProcess, chunk: string) => void } = {}
) => {
  const child = spawn(process.execPath, [entry, ...args], {
    cwd: options.cwd ?? root,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout.on("data", (chunk) => {
    stdout += String(chunk)
    options.onStdout?.(child, String(chunk))
  })
  // a pipe the test destroys on purpose
  child.stdout.on("error", () => {})
  child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
  const done = new Promise<Ran>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  )
  return { child, done }
}
const exec = (entry: string, args: ReadonlyArray<string>, options: Parameters<typeof start>[2] = {}) =>
  start(entry, args, options).done

/** The summary without what depends on timing: the text lines `elapsed`, `throughput`, the JSON's rates. */
const untimed = (output: string) =>
  output.startsWith("{")
    ? JSON.stringify({ ...JSON.parse(output), elapsed_ms: 0, turns_per_second: 0, trajectories_per_second: 0 })
    : output.split("\n").filter((line) => !/^(elapsed|throughput) /.test(line)).join("\n")

/** Both builds on the same arguments: the same exit code, stdout (timing aside) and stderr. */
const same = async (args: (output: string) => ReadonlyArray<string>) => {
  const dir = tmp("effect-gym-parity-")
  const a = await exec(bundled, args(path.join(dir, "a.jsonl")), { cwd: dir })
  const b = await exec(unbundled, args(path.join(dir, "b.jsonl")), { cwd: dir })
  // (a file descriptor's number, in a platform error's text, depends on what else was open at that moment)
  const fds = (text: string) => text.replace(/(FileSystem\.\w+) \(\d+\)/g, "$1 (FD)")
  const clean = (ran: Ran, out: string) => ({
    code: ran.code,
    stdout: fds(untimed(ran.stdout).replaceAll(out, "OUT")),
    stderr: fds(ran.stderr.replaceAll(out, "OUT"))
  })
  const bundledRun = clean(a, path.join(dir, "a.jsonl"))
  expect(bundledRun).toEqual(clean(b, path.join(dir, "b.jsonl")))
  return bundledRun
}

const until = async (check: () => boolean, ms: number) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out")
    await new Promise((r) => setTimeout(r, 50))
  }
}
const lineCount = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").length - 1 : 0)

describe("the bundled command line against the unbundled one", () => {
  it("exit codes 0, 1, 2 and 3, with the same output", async () => {
    const run = ["run", "--dataset", dataset, "--num-generations", "2", "--json", "--output"]
    // 0: everything ran
    expect((await same((out) => [...run, out, "--env", "frozen_lake"])).code).toBe(0)
    // 1: bad rows (a row that names no env, after one that does), recorded
    const mixed = path.join(tmp("effect-gym-parity-"), "mixed.jsonl")
    fs.writeFileSync(mixed, `{"env_config":{"name":"frozen_lake","seed":1}}\n{"env_config":{"seed":2}}\n`)
    expect((await same((out) => ["run", "--dataset", mixed, "--num-generations", "2", "--json", "--output", out])).code).toBe(1)
    // 2: rows that name no env, and no --env
    expect((await same((out) => [...run, out])).code).toBe(2)
    // 2: a bad invocation, an unknown env, a plugin that does not load
    expect((await same((out) => [...run, out, "--env", "nope"])).code).toBe(2)
    expect((await same(() => ["run", "--no-such-flag"])).code).toBe(2)
    expect((await same(() => ["envs", "--plugin", path.join(root, "test/fixtures/plugins/syntax_error.ts")])).code).toBe(2)
    // 3: the output cannot be written (a full disk)
    if (fs.existsSync("/dev/full")) {
      const full = await same(() => [...run, "/dev/full", "--overwrite", "--env", "frozen_lake"])
      expect(full.code).toBe(3)
      expect(full.stderr).toContain("ENOSPC")
    }
    // commands other than run
    expect((await same(() => ["check-env", "frozen_lake", "--seeds", "2", "--json"])).code).toBe(0)
    expect((await same(() => ["check-env", "nope"])).code).toBe(2)
    expect((await same(() => ["envs", "--plugin", tsPlugin])).code).toBe(0)
    expect((await same(() => ["openenv"])).code).toBe(0)
  }, 180_000)

  it("SIGINT, SIGTERM and SIGHUP mid-run: the finished groups are written, the summary says so, 130, 143 and 129", async () => {
    const dir = tmp("effect-gym-parity-")
    for (const entry of [bundled, unbundled]) {
      for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143], ["SIGHUP", 129]] as const) {
        const output = path.join(dir, `${path.basename(path.dirname(entry))}-${signal}.jsonl`)
        const running = start(entry, [
          "run", "--dataset", dataset, "--env", "frozen_lake", "--num-generations", "4", "--concurrency", "8",
          "--policy-option", "latency_ms=20", "--output", output, "--json"
        ])
        await until(() => lineCount(output) >= 8, 60_000).catch((e) => {
          running.child.kill("SIGKILL")
          throw e
        })
        running.child.kill(signal)
        const ran = await running.done
        expect(ran.code, ran.stderr).toBe(code)
        expect(JSON.parse(ran.stdout)).toMatchObject({ interrupted: signal })
        const text = fs.readFileSync(output, "utf8")
        expect(text.endsWith("\n")).toBe(true)
        const lines = text.trim().split("\n")
        expect(lines.length % 4).toBe(0)
        expect(JSON.parse(ran.stdout).trajectories).toBe(lines.length)
      }
    }
  }, 180_000)

  it("stdout closed early (`| head -1`): the same exit code, no EPIPE trace", async () => {
    for (const args of [["dataset", "frozen-lake", "--rows", "200000"], ["envs"], ["--help"]]) {
      const close = { onStdout: (child: ChildProcess) => child.stdout?.destroy() }
      const a = await exec(bundled, args, close)
      const b = await exec(unbundled, args, close)
      expect([a.code, a.signal], a.stderr).toEqual([b.code, b.signal])
      expect(a.stderr).not.toMatch(/EPIPE|at .*cli\.cjs/)
    }
  }, 120_000)

  it("dataset to a reader that has gone stops making rows: 100 million rows (minutes of work before) end at once, exit 0", async () => {
    for (const entry of [bundled, unbundled]) {
      const ran = await exec(entry, ["dataset", "frozen-lake", "--rows", "100000000"], {
        onStdout: (child) => child.stdout?.destroy()
      })
      expect([ran.code, ran.signal], ran.stderr).toEqual([0, null])
      expect(ran.stderr).toBe("")
    }
  }, 60_000)

  it("a TypeScript plugin's envs in worker threads (--isolate-envs), from another folder", async () => {
    const result = await same((out) => [
      "run", "--dataset", dataset, "--plugin", tsPlugin, "--env", "slippery_frozen_lake",
      "--policy", "frozen-lake-solver", "--num-generations", "2", "--isolate-envs", "--env-workers", "2",
      "--json", "--output", out
    ])
    expect(result.code).toBe(0)
    expect(JSON.parse(result.stdout)).toMatchObject({ trajectories: 256, failures: 0 })
  }, 120_000)

  it("colocate mode imports node-llama-cpp from the bundle: a file that is no model is a typed error (2)", async () => {
    const dir = tmp("effect-gym-parity-")
    // GGUF's magic and version, then garbage: node-llama-cpp itself (imported) reads and rejects it
    const model = path.join(dir, "broken.gguf")
    fs.writeFileSync(model, Buffer.concat([Buffer.from("GGUF"), Buffer.from([3, 0, 0, 0]), Buffer.from("garbage".repeat(4))]))
    const result = await same((out) => [
      "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "colocate", "--model", model, "--output", out
    ])
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("node-llama-cpp")
    expect(result.stderr).toContain("cannot load the model")
    expect(result.stderr).not.toContain("cannot load node-llama-cpp")
  }, 120_000)

  it("view, serve and openenv serve start, answer and stop on SIGTERM with 0, as the unbundled ones do", async () => {
    const dir = tmp("effect-gym-parity-")
    const log = path.join(dir, "log.jsonl")
    expect((await exec(bundled, ["run", "--dataset", dataset, "--env", "frozen_lake", "--num-generations", "1", "--output", log])).code)
      .toBe(0)
    const servers: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["view", log, "--port", "0"], "/"],
      [["serve", "--port", "0", "--env", "frozen_lake"], "/health"],
      [["openenv", "serve", "--env", "frozen_lake", "--port", "0"], "/health"]
    ]
    for (const entry of [bundled, unbundled]) {
      for (const [args, page] of servers) {
        let url = ""
        const server = start(entry, args, {
          onStdout: (_, chunk) => void (url ||= /http:\/\/127\.0\.0\.1:\d+/.exec(chunk)?.[0] ?? "")
        })
        try {
          await until(() => url !== "", 60_000)
          expect((await fetch(`${url}${page}`)).status, args.join(" ")).toBe(200)
          server.child.kill("SIGTERM")
          const ran = await server.done
          expect(ran.code, `${entry} ${args.join(" ")}: ${ran.stderr}`).toBe(0)
        } finally {
          if (server.child.exitCode === null) server.child.kill("SIGKILL")
        }
      }
    }
  }, 180_000)

  it("a pipe read slowly gets all the output: the exit waits for it (before, only what the pipe held came through)", async () => {
    for (const entry of [bundled, unbundled]) {
      let paused = false
      const ran = await exec(entry, ["dataset", "frozen-lake", "--rows", "20000"], {
        onStdout: (child) => {
          // the reader stalls for a second at its first chunk: the pipe fills, the writes queue
          if (paused) return
          paused = true
          child.stdout?.pause()
          setTimeout(() => child.stdout?.resume(), 1_000)
        }
      })
      expect(ran.code, ran.stderr).toBe(0)
      expect(ran.stdout.split("\n").length - 1).toBe(20_000)
    }
  }, 120_000)
})
