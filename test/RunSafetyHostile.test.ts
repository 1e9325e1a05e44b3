/**
 * A hostile user against issue 11's guarantees: datasets with a byte order mark, CRLF and blank
 * lines; a dataset that is a FIFO; a 64 MB line; a full disk under the log; infos no JSON can hold.
 * Each test failed before its fix (see the commit that added it).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { cli, readLines, tmp as makeTmp } from "./cli.js"
import * as Row from "../src/Row.js"

const root = path.resolve(import.meta.dirname, "..")
const hostile = path.join(root, "test/fixtures/plugins/hostile.mjs")
const tmp = () => makeTmp("effect-gym-hostile-")

const within = <A, E, R>(effect: Effect.Effect<A, E, R>, seconds = 60) =>
  Effect.timeoutOrElse(effect, {
    duration: `${seconds} seconds`,
    orElse: () => Effect.fail(new Error(`did not end within ${seconds} s`))
  })

const row = (seed: number) => JSON.stringify({ messages: [{ role: "user", content: "x" }], env_config: { seed } })
const lakeWith = (n: number) => ["--env", "frozen_lake", "--policy", "frozen-lake-solver", "--num-generations", `${n}`, "--json"]
const lake = lakeWith(2)

describe("run: datasets as editors and shells write them", () => {
  it.live("a byte order mark, CRLF line ends and blank lines: every row runs, none is a bad row", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "bom.jsonl")
      fs.writeFileSync(dataset, `\uFEFF${row(1)}\r\n\r\n   \n${row(2)}\r\n`)
      const output = path.join(dir, "out.jsonl")
      const result = yield* within(cli("run", "--dataset", dataset, "--output", output, ...lake))
      expect(result.stderr).not.toContain("bad row")
      const summary = JSON.parse(result.stdout)
      expect(summary.bad_rows).toBe(0)
      expect(summary.groups).toBe(2)
      expect(result.code).toBe(0)
      expect(readLines(output).map((l) => l.env_config.seed).sort()).toEqual([1, 1, 2, 2])
    }))

  it("Row.streamLines drops a leading byte order mark only on the first line", async () => {
    const bytes = new TextEncoder().encode(`\uFEFFa\n\uFEFFb\n`)
    const lines = await Effect.runPromise(Stream.runCollect(Row.streamLines(Stream.make(bytes))))
    expect(lines.map(([, text]) => text)).toEqual(["a", "\uFEFFb", ""])
    expect([...Row.lines(`\uFEFFa\n\uFEFFb`)].map(([, text]) => text)).toEqual(["a", "\uFEFFb"])
  })

  it.live("a dataset that is a FIFO (a shell's <(...) or a pipe) runs; it was ESPIPE: invalid seek", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const fifo = path.join(dir, "rows.fifo")
      execFileSync("mkfifo", [fifo])
      const writer = spawn("sh", ["-c", `printf '%s\\n%s\\n' '${row(3)}' '${row(4)}' > '${fifo}'`])
      const output = path.join(dir, "out.jsonl")
      const result = yield* within(cli("run", "--dataset", fifo, "--output", output, ...lake))
      writer.kill()
      expect(result.stderr).not.toContain("ESPIPE")
      expect(JSON.parse(result.stdout).groups).toBe(2)
      expect(result.code).toBe(0)
      expect(readLines(output)).toHaveLength(4)
    }))

  /** The built CLI on `args`, its exit and output; killed (SIGKILL) by `stop`. */
  const started = (args: ReadonlyArray<string>) => {
    const child = spawn(process.execPath, [path.join(root, "bin/effect-gym.js"), ...args], { stdio: ["ignore", "pipe", "pipe"] })
    const out = { stdout: "", stderr: "" }
    child.stdout.on("data", (chunk) => void (out.stdout += chunk))
    child.stderr.on("data", (chunk) => void (out.stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    return { child, out, exited }
  }
  const lines = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").length - 1 : 0)
  const waitFor = async (done: () => boolean, what: string, ms = 30_000) => {
    for (const deadline = Date.now() + ms; !done();) {
      if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }

  it("a FIFO whose writer stays open: SIGINT ends the run at once, the groups read are written (it waited for the writer to close)", async () => {
    const dir = tmp()
    const fifo = path.join(dir, "rows.fifo")
    execFileSync("mkfifo", [fifo])
    // the writer gives two rows, then holds the FIFO open for a minute without writing
    const writer = spawn("sh", ["-c", `exec 3>'${fifo}'; printf '%s\\n%s\\n' '${row(3)}' '${row(4)}' >&3; exec sleep 60`])
    const output = path.join(dir, "out.jsonl")
    const run = started(["run", "--dataset", fifo, "--output", output, ...lake])
    try {
      await waitFor(() => lines(output) === 4, "the two groups written")
      const signalled = Date.now()
      run.child.kill("SIGINT")
      expect(await run.exited, run.out.stderr).toBe(130)
      expect(Date.now() - signalled).toBeLessThan(10_000)
      const summary = JSON.parse(run.out.stdout)
      expect(summary.groups).toBe(2)
      expect(summary.interrupted).toBe("SIGINT")
      expect(readLines(output)).toHaveLength(4)
    } finally {
      writer.kill("SIGKILL")
      run.child.kill("SIGKILL")
    }
  })

  it("a FIFO no writer ever opens: SIGINT ends the run at once, with nothing run", async () => {
    const dir = tmp()
    const fifo = path.join(dir, "rows.fifo")
    execFileSync("mkfifo", [fifo])
    const output = path.join(dir, "out.jsonl")
    const run = started(["run", "--dataset", fifo, "--output", output, ...lake])
    try {
      // the run is under way (its log opened) before the signal
      await waitFor(() => fs.existsSync(output), "the log opened")
      await new Promise((resolve) => setTimeout(resolve, 300))
      const signalled = Date.now()
      run.child.kill("SIGINT")
      expect(await run.exited, run.out.stderr).toBe(130)
      expect(Date.now() - signalled).toBeLessThan(10_000)
      expect(JSON.parse(run.out.stdout).groups).toBe(0)
    } finally {
      run.child.kill("SIGKILL")
    }
  })

  it("a FIFO written in pieces, a row split across writes, a writer that opens late: every row runs", async () => {
    const dir = tmp()
    const fifo = path.join(dir, "rows.fifo")
    execFileSync("mkfifo", [fifo])
    const [a, b] = [row(5), row(6)]
    const writer = spawn("sh", [
      "-c",
      `sleep 0.5; exec 3>'${fifo}'; printf '%s' '${a.slice(0, 10)}' >&3; sleep 0.3; printf '%s\\n%s' '${a.slice(10)}' '${b}' >&3; sleep 0.3; printf '\\n' >&3`
    ])
    const output = path.join(dir, "out.jsonl")
    const run = started(["run", "--dataset", fifo, "--output", output, ...lake])
    try {
      expect(await run.exited, run.out.stderr).toBe(0)
      expect(JSON.parse(run.out.stdout).groups).toBe(2)
      expect(readLines(output).map((l) => l.env_config.seed).sort()).toEqual([5, 5, 6, 6])
    } finally {
      writer.kill("SIGKILL")
    }
  })

  it("--dataset /dev/stdin when stdin is a socket (a Node parent's `stdio: \"pipe\"`): every row runs; it was ENXIO", async () => {
    const dir = tmp()
    const output = path.join(dir, "out.jsonl")
    const child = spawn(process.execPath, [path.join(root, "bin/effect-gym.js"), "run", "--dataset", "/dev/stdin", "--output", output, ...lake], {
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => void (stdout += chunk))
    child.stderr.on("data", (chunk) => void (stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    child.stdin.end(`${row(7)}\n${row(8)}\n${row(9)}\n`)
    expect(await exited, stderr).toBe(0)
    expect(stderr).not.toContain("ENXIO")
    expect(JSON.parse(stdout).groups).toBe(3)
    expect(readLines(output).map((l) => l.env_config.seed).sort()).toEqual([7, 7, 8, 8, 9, 9])
  })

  it("a socket file as --dataset: refused at start (exit 2, what a dataset may be); it failed after the run had started", async () => {
    const dir = tmp()
    const socket = path.join(dir, "rows.sock")
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(socket, resolve))
    try {
      const output = path.join(dir, "out.jsonl")
      const result = await Effect.runPromise(cli("run", "--dataset", socket, "--output", output, ...lake))
      expect(result.code).toBe(2)
      expect(result.stderr).toContain(`--dataset ${socket}: is a socket: a dataset is a file, a pipe, a FIFO or /dev/stdin`)
      expect(fs.existsSync(output)).toBe(false)
    } finally {
      server.close()
    }
  })

  it("a 64 MB line read in 8 KB chunks is joined once (joining at every chunk copied ~256 GB)", async () => {
    const size = 64 * 1024 * 1024
    const chunkSize = 8 * 1024
    const line = new Uint8Array(size).fill(0x61)
    const chunks: Array<Uint8Array> = []
    for (let at = 0; at < size; at += chunkSize) chunks.push(line.subarray(at, at + chunkSize))
    chunks.push(new TextEncoder().encode("\nb\n"))
    const lines = await Effect.runPromise(Stream.runCollect(Row.streamLines(Stream.fromIterable(chunks))))
    const texts = lines.map(([, text]) => text)
    expect(texts).toHaveLength(3)
    expect(texts[0]!.length).toBe(size)
    expect(texts.slice(1)).toEqual(["b", ""])
  }, 60_000)
})

/** A 16 KB tmpfs (root only; skipped where mounting is not allowed). */
const tinyDisk = (): string | undefined => {
  const dir = tmp()
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=16k", "tmpfs", dir], { stdio: "ignore" })
    return dir
  } catch {
    return undefined
  }
}

/** Whether this machine lets the tests mount a tmpfs (probed once, unmounted at once). */
const canMount = ((): boolean => {
  const probe = tinyDisk()
  if (probe === undefined) {
    console.warn("NOTICE: the full-disk tests of RunSafetyHostile are SKIPPED: this user cannot mount a tmpfs (root only)")
    return false
  }
  execFileSync("umount", [probe])
  return true
})()

describe("run: a full disk under the log", () => {
  it.live.skipIf(!canMount)("the run stops with exit 3, and the log ends on a whole line (it ended in a torn one)", () =>
    Effect.gen(function*() {
      const disk = tinyDisk()
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 40 }, (_, i) => row(i)).join("\n") + "\n")
      const output = path.join(disk!, "out.jsonl")
      const result = yield* within(cli("run", "--dataset", dataset, "--output", output, ...lakeWith(8)))
      try {
        expect(result.stderr).toContain("no space left on device")
        expect(result.code).toBe(3)
        expect(JSON.parse(result.stdout).error).toContain("no space left on device")
        const text = fs.readFileSync(output, "utf8")
        expect(text === "" || text.endsWith("\n")).toBe(true)
        for (const line of text.split("\n").filter((l) => l !== "")) expect(() => JSON.parse(line)).not.toThrow()
      } finally {
        execFileSync("umount", [disk!])
      }
    }))
})

describe("run: a disk already full", () => {
  it.live.skipIf(!canMount)("the run record cannot be written: exit 2, and no temporary file is left behind", () =>
    Effect.gen(function*() {
      const disk = tinyDisk()
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      fs.writeFileSync(dataset, row(1) + "\n")
      try {
        try {
          fs.writeFileSync(path.join(disk!, "filler"), new Uint8Array(64 * 1024))
        } catch {
          // full
        }
        const result = yield* within(cli("run", "--dataset", dataset, "--output", path.join(disk!, "out.jsonl"), ...lake))
        expect(result.code).toBe(2)
        expect(result.stderr).toContain("no space left on device")
        expect(fs.readdirSync(disk!).filter((name) => name.endsWith(".tmp"))).toEqual([])
      } finally {
        execFileSync("umount", [disk!])
      }
    }))
})

describe("run: infos no JSON can hold become EncodeError records", () => {
  it.live("getters and Proxies that throw, toJSON that throws, Map, symbol, Infinity, sparse arrays, deep nesting", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      const faults = ["getter_throws", "proxy_throws", "tojson_throws", "map", "symbol", "infinity", "sparse", "deep", "date", "nullproto"]
      fs.writeFileSync(dataset, faults.map((fault) => JSON.stringify({ env_config: { name: "hostile", fault } })).join("\n") + "\n")
      const output = path.join(dir, "out.jsonl")
      const result = yield* within(cli("run", "--dataset", dataset, "--output", output, "--plugin", hostile, "--num-generations", "1", "--json"))
      const summary = JSON.parse(result.stdout)
      expect(result.code).toBe(1)
      expect(summary.failures_by_error).toEqual({ EncodeError: 8 })
      const lines = readLines(output)
      expect(lines).toHaveLength(faults.length)
      for (const line of lines) {
        const fault = faults[line.row]
        if (fault === "date" || fault === "nullproto") expect(line.error ?? undefined).toBeUndefined()
        else expect(line.error?._tag ?? line.error?.tag ?? JSON.stringify(line.error)).toContain("EncodeError")
      }
      // a path thousands of levels deep is cut, not written whole into every line and the summary
      const deep = lines.find((l) => faults[l.row] === "deep")!
      expect(JSON.stringify(deep).length).toBeLessThan(4_000)
    }))
})
