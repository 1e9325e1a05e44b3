/**
 * The launcher's code cache (src/cli/launch.ts, bin/effect-gym.js): it is an optimisation only. The
 * command line prints the same with it, without it and with a cache that is corrupt, stale or cannot
 * be written; a cache that cannot be used is rewritten. Runs the built binary from a copy of bin/ and
 * dist/bundle/ (as installed), so that each test starts from its own cache.
 */
import { afterEach, beforeEach, describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { readCache } from "../src/cli/launch.js"

const root = path.resolve(import.meta.dirname, "..")
const plugin = path.join(root, "test/fixtures/plugins/js_plugin.mjs")
let copy = ""
let bundle = ""
let cacheFile = ""

beforeEach(() => {
  fs.mkdirSync(path.join(root, "scratch"), { recursive: true })
  copy = fs.mkdtempSync(path.join(root, "scratch", "launch-"))
  fs.cpSync(path.join(root, "bin"), path.join(copy, "bin"), { recursive: true })
  fs.cpSync(path.join(root, "dist/bundle"), path.join(copy, "dist/bundle"), {
    recursive: true,
    filter: (source) => !source.endsWith(".cache")
  })
  fs.copyFileSync(path.join(root, "package.json"), path.join(copy, "package.json"))
  bundle = path.join(copy, "dist/bundle/cli.cjs")
  cacheFile = `${bundle}.cache`
})
afterEach(() => {
  fs.chmodSync(path.join(copy, "dist/bundle"), 0o755)
  fs.rmSync(copy, { recursive: true, force: true })
})

const run = (args: ReadonlyArray<string>, env: Record<string, string> = {}, entry = path.join(copy, "bin/effect-gym.js"), cwd = copy) => {
  const result = spawnSync(process.execPath, [entry, ...args], {
    cwd,
    timeout: 60_000,
    encoding: "utf8",
    env: { ...process.env, ...env }
  })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}
const without = (args: ReadonlyArray<string>) => run(args, { EFFECT_GYM_CODE_CACHE: "off" })
const sourceHash = () => crypto.createHash("sha256").update(fs.readFileSync(bundle, "utf8")).digest("hex")
const valid = () => readCache(cacheFile, sourceHash()) !== undefined

describe("the launcher's code cache", () => {
  it("is written by the first run and used by the next; the output is the same as without it", () => {
    const expected = without(["envs"])
    expect(expected.code).toBe(0)
    expect(fs.existsSync(cacheFile)).toBe(false)
    expect(run(["envs"])).toEqual(expected)
    expect(valid()).toBe(true)
    expect(readCache(cacheFile, sourceHash())?.commands).toEqual(["envs"])
    const written = fs.readFileSync(cacheFile)
    // warm: the same output, and the cache is left as it is for a command it names
    expect(run(["envs"])).toEqual(expected)
    expect(fs.readFileSync(cacheFile).equals(written)).toBe(true)
    // other commands: the same output; each one's first run adds it to the cache
    expect(run(["--help"])).toEqual(without(["--help"]))
    expect(run(["dataset", "--help"])).toEqual(without(["dataset", "--help"]))
    expect(readCache(cacheFile, sourceHash())?.commands).toEqual(["envs", "", "dataset"])
    const all = fs.readFileSync(cacheFile)
    // the bundle's import() (a plugin) works from a cached script
    const withPlugin = without(["envs", "--plugin", plugin])
    expect(withPlugin.code).toBe(0)
    expect(run(["envs", "--plugin", plugin])).toEqual(withPlugin)
    expect(fs.readFileSync(cacheFile).equals(all)).toBe(true)
  }, 120_000)

  it("a cache made by --help gets run's code at run's first run (it held none of the engine), then stays", () => {
    const dataset = path.join(copy, "rows.jsonl")
    fs.writeFileSync(dataset, Array.from({ length: 16 }, (_, i) => `{"env_config":{"seed":${i}}}`).join("\n") + "\n")
    const job = ["run", "--dataset", dataset, "--gym-env", "frozen_lake", "--policy", "random", "--num-generations", "2", "--output", path.join(copy, "out.jsonl"), "--overwrite"]
    expect(run(["--help"]).code).toBe(0)
    const help = fs.readFileSync(cacheFile)
    expect(readCache(cacheFile, sourceHash())?.commands).toEqual([""])
    expect(run(job).code).toBe(0)
    const both = fs.readFileSync(cacheFile)
    expect(readCache(cacheFile, sourceHash())?.commands).toEqual(["", "run"])
    expect(both.length).toBeGreaterThan(help.length + 100_000)
    expect(run(job).code).toBe(0)
    expect(fs.readFileSync(cacheFile).equals(both)).toBe(true)
    // a cache naming as many commands as it may is not written again for one more
    const newline = both.indexOf(10)
    const header = JSON.parse(both.subarray(0, newline).toString("utf8")) as Record<string, unknown>
    const full = Buffer.concat([
      Buffer.from(JSON.stringify({ ...header, commands: Array.from({ length: 16 }, (_, i) => `c${i}`) }) + "\n"),
      both.subarray(newline + 1)
    ])
    fs.writeFileSync(cacheFile, full)
    expect(run(["envs"]).code).toBe(0)
    expect(fs.readFileSync(cacheFile).equals(full)).toBe(true)
  }, 120_000)

  it("a corrupt cache is ignored and rewritten: flipped payload bytes, a cut file, no header, garbage", () => {
    const expected = without(["envs"])
    expect(run(["envs"])).toEqual(expected)
    const good = fs.readFileSync(cacheFile)
    const flipped = Buffer.from(good)
    for (let i = good.indexOf(10) + 1000; i < flipped.length; i += 4099) flipped[i] ^= 0x5a
    const corruptions = [flipped, good.subarray(0, good.length >> 1), good.subarray(good.indexOf(10) + 1), Buffer.from("garbage")]
    for (const corrupt of corruptions) {
      fs.writeFileSync(cacheFile, corrupt)
      expect(valid()).toBe(false)
      expect(run(["envs"])).toEqual(expected)
      expect(valid()).toBe(true)
    }
  }, 120_000)

  it("a stale cache (another bundle, another Node version) is ignored and rewritten", () => {
    const expected = without(["envs"])
    expect(run(["envs"])).toEqual(expected)
    const good = fs.readFileSync(cacheFile)
    const newline = good.indexOf(10)
    const header = JSON.parse(good.subarray(0, newline).toString("utf8")) as Record<string, unknown>
    for (const stale of [{ node: "v0.0.0" }, { arch: "other" }, { format: 2 }]) {
      fs.writeFileSync(cacheFile, Buffer.concat([Buffer.from(JSON.stringify({ ...header, ...stale }) + "\n"), good.subarray(newline + 1)]))
      expect(valid()).toBe(false)
      expect(run(["envs"])).toEqual(expected)
      expect(valid()).toBe(true)
    }
    // another build of the bundle: the old cache is not used for it
    fs.appendFileSync(bundle, "\n// another build\n")
    expect(valid()).toBe(false)
    expect(run(["envs"])).toEqual(expected)
    expect(valid()).toBe(true)
  }, 120_000)

  it("where the cache cannot be written, commands run as without it", () => {
    const expected = without(["envs"])
    // the cache's path is taken by a folder: neither read nor written
    fs.mkdirSync(cacheFile)
    expect(run(["envs"])).toEqual(expected)
    expect(fs.statSync(cacheFile).isDirectory()).toBe(true)
    fs.rmdirSync(cacheFile)
    // a read-only installation (root writes anyway: checked only as another user)
    fs.chmodSync(path.join(copy, "dist/bundle"), 0o555)
    expect(run(["envs"])).toEqual(expected)
    if (process.getuid?.() !== 0) expect(fs.existsSync(cacheFile)).toBe(false)
    expect(fs.readdirSync(path.join(copy, "dist/bundle")).filter((f) => f.endsWith(".tmp"))).toEqual([])
  }, 120_000)

  it("something other than a cache file at its path (a FIFO, a link to /dev/zero, an empty file) is ignored and replaced", () => {
    const expected = without(["envs"])
    const odd: Array<() => void> = [
      () => fs.writeFileSync(cacheFile, ""),
      () => fs.symlinkSync("/dev/zero", cacheFile)
    ]
    // a FIFO: reading it waits for a writer, for ever (the launcher hung before it checked)
    if (process.platform !== "win32") odd.push(() => spawnSync("mkfifo", [cacheFile]))
    for (const make of odd) {
      fs.rmSync(cacheFile, { force: true })
      make()
      const result = run(["envs"])
      expect(result).toEqual(expected)
      expect(fs.lstatSync(cacheFile).isFile()).toBe(true)
      expect(valid()).toBe(true)
    }
  }, 120_000)

  it("processes starting at once with no cache all run and leave one valid cache, no temporary files", async () => {
    const expected = without(["envs"])
    const once = () =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, [path.join(copy, "bin/effect-gym.js"), "envs"], { cwd: copy })
        let stdout = ""
        let stderr = ""
        child.stdout.on("data", (chunk) => void (stdout += String(chunk)))
        child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
        child.on("close", (code) => resolve({ code, stdout, stderr }))
      })
    for (let round = 0; round < 2; round++) {
      fs.rmSync(cacheFile, { force: true })
      const results = await Promise.all(Array.from({ length: 4 }, once))
      for (const result of results) expect(result).toEqual(expected)
      expect(valid()).toBe(true)
      expect(fs.readdirSync(path.join(copy, "dist/bundle")).filter((f) => f.endsWith(".tmp"))).toEqual([])
    }
    // and the cache they left is used
    expect(run(["envs"])).toEqual(expected)
  }, 120_000)

  it("another Node flag (NODE_OPTIONS=--max-old-space-size): V8 rejects the cache; same output, rewritten", () => {
    const expected = without(["envs"])
    expect(run(["envs"])).toEqual(expected)
    const flagged = { NODE_OPTIONS: "--max-old-space-size=300" }
    expect(run(["envs"], flagged)).toEqual(expected)
    expect(valid()).toBe(true)
    expect(run(["envs"], flagged)).toEqual(expected)
    expect(run(["envs"])).toEqual(expected)
  }, 120_000)

  it("through a symlink to bin (npm's node_modules/.bin), from another folder, with a TypeScript plugin there", () => {
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-launch-"))
    try {
      const link = path.join(elsewhere, "effect-gym")
      fs.symlinkSync(path.join(copy, "bin/effect-gym.js"), link)
      // a plugin in a folder with no node_modules: effect-gym and effect resolve to the tool's
      fs.copyFileSync(path.join(root, "examples/frozen_lake_plugin.ts"), path.join(elsewhere, "plugin.ts"))
      const args = ["envs", "--plugin", "plugin.ts"]
      const expected = run(args, { EFFECT_GYM_CODE_CACHE: "off" }, link, elsewhere)
      expect(expected.code, expected.stderr).toBe(0)
      expect(expected.stdout).toContain("slippery_frozen_lake")
      expect(run(args, {}, link, elsewhere)).toEqual(expected)
      expect(valid()).toBe(true)
      expect(run(args, {}, link, elsewhere)).toEqual(expected)
    } finally {
      fs.rmSync(elsewhere, { recursive: true, force: true })
    }
  }, 120_000)

  // root writes anywhere: as root (CI), the read-only cases run as the user nobody, through setpriv
  const asNobody = process.getuid?.() === 0 && spawnSync("setpriv", ["--version"]).status === 0
  it.skipIf(!asNobody)("a read-only installation, run by another user: no cache written; an unreadable cache is ignored", () => {
    const expected = without(["envs"])
    const nobody = () => {
      const result = spawnSync("setpriv", [
        "--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, path.join(copy, "bin/effect-gym.js"), "envs"
      ], { cwd: copy, encoding: "utf8", timeout: 60_000 })
      return { code: result.status, stdout: result.stdout, stderr: result.stderr }
    }
    fs.chmodSync(copy, 0o755)
    fs.chmodSync(path.join(copy, "dist/bundle"), 0o755)
    // no cache, a folder it cannot write
    expect(nobody()).toEqual(expected)
    expect(fs.existsSync(cacheFile)).toBe(false)
    // a valid cache it can read: used, left as it is
    expect(run(["envs"])).toEqual(expected)
    const written = fs.readFileSync(cacheFile)
    expect(nobody()).toEqual(expected)
    expect(fs.readFileSync(cacheFile).equals(written)).toBe(true)
    // a cache it cannot read, in a folder it cannot write
    fs.chmodSync(cacheFile, 0o000)
    expect(nobody()).toEqual(expected)
    // ... in a folder it can write: replaced by one it made
    fs.chmodSync(path.join(copy, "dist/bundle"), 0o777)
    expect(nobody()).toEqual(expected)
    expect(fs.statSync(cacheFile).uid).toBe(65534)
    expect(valid()).toBe(true)
    expect(fs.readdirSync(path.join(copy, "dist/bundle")).filter((f) => f.endsWith(".tmp"))).toEqual([])
  }, 120_000)

  it("the bundle's lines are short: an uncaught error prints its source line, not 260 KB of minified code", () => {
    const lines = fs.readFileSync(bundle, "utf8").split("\n")
    expect(Math.max(...lines.map((line) => line.length))).toBeLessThan(2_000)
  })
})
