/**
 * The launcher's code cache (src/cli/launch.ts, bin/effect-gym.js): it is an optimisation only. The
 * command line prints the same with it, without it and with a cache that is corrupt, stale or cannot
 * be written; a cache that cannot be used is rewritten. Runs the built binary from a copy of bin/ and
 * dist/bundle/ (as installed), so that each test starts from its own cache.
 */
import { afterEach, beforeEach, describe, expect, it } from "@effect/vitest"
import { isAscii } from "node:buffer"
import { spawn, spawnSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import { commandPaths, main } from "../src/cli/Cli.js"
import { commandOf, readCache, SEMI_SPACE_MB, youngGenerationArgv } from "../src/cli/launch.js"

const root = path.resolve(import.meta.dirname, "..")
const plugin = path.join(root, "test/fixtures/plugins/js_plugin.mjs")
let copy = ""
let bundle = ""
let cacheFile = ""

/**
 * A fresh copy of the installation in a new folder inside `parent`; it becomes the tests' `copy`.
 * Without the help pages rendered ahead (dist/bundle/help.json) unless `pages`: the code cache's
 * tests run `--help` through the bundle.
 */
const makeCopy = (parent: string, prefix: string, pages = false) => {
  copy = fs.mkdtempSync(path.join(parent, prefix))
  fs.cpSync(path.join(root, "bin"), path.join(copy, "bin"), { recursive: true })
  fs.cpSync(path.join(root, "dist/bundle"), path.join(copy, "dist/bundle"), {
    recursive: true,
    filter: (source) => !source.endsWith(".cache") && (pages || path.basename(source) !== "help.json")
  })
  fs.copyFileSync(path.join(root, "package.json"), path.join(copy, "package.json"))
  bundle = path.join(copy, "dist/bundle/cli.cjs")
  cacheFile = `${bundle}.cache`
}
// (inside the package, where a TypeScript plugin's tsx resolves from node_modules)
beforeEach(() => {
  fs.mkdirSync(path.join(root, "scratch"), { recursive: true })
  makeCopy(path.join(root, "scratch"), "launch-")
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
/**
 * `envs` and `dataset frozen-lake --rows 3` without the cache: what the tests compare their runs
 * with. Every copy is the same installation and neither output names its folder, so each is run once
 * (by the first test, on its fresh copy) and shared: a start of the command line costs about 0.3 s of CPU.
 */
const shared = new Map<string, ReturnType<typeof run>>()
const withoutOnce = (args: ReadonlyArray<string>) => {
  const key = args.join("\0")
  const known = shared.get(key)
  if (known !== undefined) return known
  const result = without(args)
  shared.set(key, result)
  return result
}
const rowsArgs = ["dataset", "frozen-lake", "--rows", "3"]
const sourceHash = () => crypto.createHash("sha256").update(fs.readFileSync(bundle, "utf8")).digest("hex")
const valid = () => readCache(cacheFile, sourceHash()) !== undefined
const commands = () => readCache(cacheFile, sourceHash())?.commands
/** A small `run` job (16 rows, 2 generations) in the scratch copy. */
const job = () => {
  const dataset = path.join(copy, "rows.jsonl")
  fs.writeFileSync(dataset, Array.from({ length: 16 }, (_, i) => `{"env_config":{"seed":${i}}}`).join("\n") + "\n")
  return ["run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--num-generations", "2", "--output", path.join(copy, "out.jsonl"), "--overwrite"]
}
/** The valid cache on disk with its header's `commands` replaced. */
const withCommands = (value: unknown): Buffer => {
  const data = fs.readFileSync(cacheFile)
  const newline = data.indexOf(10)
  const header = JSON.parse(data.subarray(0, newline).toString("utf8")) as Record<string, unknown>
  return Buffer.concat([Buffer.from(JSON.stringify({ ...header, commands: value }) + "\n"), data.subarray(newline + 1)])
}

describe("the launcher's code cache", () => {
  it("is written by the first run and used by the next; the output is the same as without it", () => {
    const expected = without(["envs"])
    shared.set("envs", expected)
    expect(expected.code).toBe(0)
    expect(fs.existsSync(cacheFile)).toBe(false)
    expect(run(["envs"])).toEqual(expected)
    expect(valid()).toBe(true)
    expect(commands()).toEqual(["envs"])
    const written = fs.readFileSync(cacheFile)
    // warm: the same output, and the cache is left as it is for a command it names
    expect(run(["envs"])).toEqual(expected)
    expect(fs.readFileSync(cacheFile).equals(written)).toBe(true)
    // other commands: the same output; each one's first run adds it to the cache
    expect(run(["--help"])).toEqual(without(["--help"]))
    // (a command's --help is the top level's: it compiles none of the command; hostile pass)
    expect(run(["dataset", "--help"])).toEqual(without(["dataset", "--help"]))
    expect(commands()).toEqual(["envs", ""])
    expect(run(rowsArgs)).toEqual(withoutOnce(rowsArgs))
    expect(commands()).toEqual(["envs", "", "dataset"])
    const all = fs.readFileSync(cacheFile)
    // the bundle's import() (a plugin) works from a cached script
    const withPlugin = without(["envs", "--plugin", plugin])
    expect(withPlugin.code).toBe(0)
    expect(run(["envs", "--plugin", plugin])).toEqual(withPlugin)
    expect(fs.readFileSync(cacheFile).equals(all)).toBe(true)
  }, 120_000)

  it("a cache made by --help gets run's code at run's first run (it held none of the engine), then stays", () => {
    expect(run(["--help"]).code).toBe(0)
    const help = fs.readFileSync(cacheFile)
    expect(commands()).toEqual([""])
    expect(run(job()).code).toBe(0)
    const both = fs.readFileSync(cacheFile)
    expect(commands()).toEqual(["", "run"])
    expect(both.length).toBeGreaterThan(help.length + 100_000)
    expect(run(job()).code).toBe(0)
    expect(fs.readFileSync(cacheFile).equals(both)).toBe(true)
    // a cache naming as many commands as it may is not written again for one more
    const full = withCommands(Array.from({ length: 16 }, (_, i) => `c${i}`))
    fs.writeFileSync(cacheFile, full)
    expect(run(["envs"]).code).toBe(0)
    expect(fs.readFileSync(cacheFile).equals(full)).toBe(true)
  }, 120_000)

  it("a corrupt cache is ignored and rewritten: flipped payload bytes, a cut file, no header, garbage", () => {
    const expected = withoutOnce(["envs"])
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
    const expected = withoutOnce(["envs"])
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

  it("a bundle that is not ASCII (the launcher decodes an ASCII one as Latin-1) runs with its text intact, with and without the cache", () => {
    // The build writes ASCII (scripts/bundle.mjs escapes what esbuild leaves: a regular
    // expression's characters); a bundle that is not (a hand edit) is decoded as UTF-8
    expect(isAscii(fs.readFileSync(bundle)), "the built bundle is ASCII, as the launcher tells it").toBe(true)
    const probe = `if (process.env.EFFECT_GYM_PROBE === "1") process.stdout.write("h\u00e9llo \u2713 \u{1F600}\\n");\n`
    // (after the first line, which holds the bundle's "use strict")
    const text = fs.readFileSync(bundle, "utf8")
    const firstLine = text.indexOf("\n") + 1
    fs.writeFileSync(bundle, text.slice(0, firstLine) + probe + text.slice(firstLine))
    const env = { EFFECT_GYM_PROBE: "1" }
    const first = run(["--version"], env)
    expect(first.code).toBe(0)
    expect(first.stdout.startsWith("h\u00e9llo \u2713 \u{1F600}\n")).toBe(true)
    expect(valid()).toBe(true)
    expect(run(["--version"], env)).toEqual(first)
    expect(run(["--version"], { ...env, EFFECT_GYM_CODE_CACHE: "off" })).toEqual(first)
  }, 120_000)

  it("where the cache cannot be written, commands run as without it", () => {
    const expected = withoutOnce(["envs"])
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
    const expected = withoutOnce(["envs"])
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
    const expected = withoutOnce(["envs"])
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
    const expected = withoutOnce(["envs"])
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
      // a plugin in a folder with no node_modules: effect-gym and effect resolve to the tool's (the
      // copy's package.json names dist/index.js; the copy holds only the bundle, so the rest of
      // dist/ is linked to the build's)
      for (const entry of fs.readdirSync(path.join(root, "dist"))) {
        if (entry !== "bundle") fs.symlinkSync(path.join(root, "dist", entry), path.join(copy, "dist", entry))
      }
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

  // The read-only installation runs as another user: as root (CI), as the user nobody through
  // setpriv (root writes anywhere); as an ordinary user, as that user itself, on folders whose
  // modes deny it (its own mode-000 cache, a mode-555 folder), which such a user cannot pass over.
  const asRoot = process.getuid?.() === 0
  const other = asRoot
    ? (spawnSync("setpriv", ["--version"]).status === 0 ? { uid: 65534, prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] } : undefined)
    : { uid: process.getuid?.() ?? -1, prefix: [] as Array<string> }
  it.skipIf(other === undefined)("a read-only installation, run by another user: no cache written; an unreadable cache is ignored", (ctx) => {
    const { prefix, uid } = other!
    const spawnAs = (args: ReadonlyArray<string>, options: Parameters<typeof spawnSync>[2]) =>
      prefix.length === 0 ? spawnSync(args[0], args.slice(1), options) : spawnSync(prefix[0], [...prefix.slice(1), ...args], options)
    // A copy that user can reach: the package's own folders may sit in a private one (a clone in
    // a home or `mktemp -d` folder of mode 700: issue 31), so it goes in a folder of the system's
    // temporary one, which it makes enterable by all; checked, and skipped with a notice where
    // that user still cannot reach it (a private TMPDIR, a node that user cannot run).
    fs.rmSync(copy, { recursive: true, force: true })
    makeCopy(os.tmpdir(), "effect-gym-launch-other-")
    fs.chmodSync(copy, 0o755)
    const reach = spawnAs([process.execPath, "-e", "require('fs').accessSync(process.argv[1], 4)", bundle], { encoding: "utf8", timeout: 60_000 })
    if (reach.status !== 0) {
      const notice = `uid ${uid} cannot reach ${bundle} with ${process.execPath} (${/^\w*Error.*$/m.exec(String(reach.stderr ?? reach.error))?.[0] ?? `exit ${reach.status}`}): skipped`
      console.warn(`NOTICE: the launcher's other-user test is SKIPPED: ${notice}`)
      ctx.skip(notice)
    }
    const expected = withoutOnce(["envs"])
    const asOther = () => {
      const result = spawnAs([process.execPath, path.join(copy, "bin/effect-gym.js"), "envs"], { cwd: copy, encoding: "utf8", timeout: 60_000 })
      return { code: result.status, stdout: result.stdout, stderr: result.stderr }
    }
    const bundleDir = path.join(copy, "dist/bundle")
    try {
      // no cache, a folder it cannot write
      fs.chmodSync(bundleDir, 0o555)
      expect(asOther()).toEqual(expected)
      expect(fs.existsSync(cacheFile)).toBe(false)
      // a valid cache it can read: used, left as it is
      fs.chmodSync(bundleDir, 0o755)
      expect(run(["envs"])).toEqual(expected)
      const written = fs.readFileSync(cacheFile)
      fs.chmodSync(bundleDir, 0o555)
      expect(asOther()).toEqual(expected)
      expect(fs.readFileSync(cacheFile).equals(written)).toBe(true)
      // a cache it cannot read, in a folder it cannot write
      fs.chmodSync(cacheFile, 0o000)
      expect(asOther()).toEqual(expected)
      // ... in a folder it can write: replaced by one it made
      fs.chmodSync(bundleDir, 0o777)
      expect(asOther()).toEqual(expected)
      expect(fs.statSync(cacheFile).uid).toBe(uid)
      expect(valid()).toBe(true)
      expect(fs.readdirSync(bundleDir).filter((f) => f.endsWith(".tmp"))).toEqual([])
    } finally {
      fs.chmodSync(bundleDir, 0o755)
    }
  }, 120_000)

  it("the bundle's lines are short: an uncaught error prints its source line, not 260 KB of minified code", () => {
    const lines = fs.readFileSync(bundle, "utf8").split("\n")
    expect(Math.max(...lines.map((line) => line.length))).toBeLessThan(2_000)
  })
})


describe("the launcher's code cache, hostile: which runs name their command", () => {
  const tmpFiles = () => fs.readdirSync(path.join(copy, "dist/bundle")).filter((f) => f.endsWith(".tmp"))

  it("commandOf: a command's built-ins (--help, -h, --version, --wizard, --completions) are the top level's; odd words are \"\"", () => {
    const of = (...args: Array<string>) => commandOf(["node", "bin", ...args])
    expect(of("run", "--dataset", "x")).toBe("run")
    expect(of("check-env", "frozen_lake")).toBe("check-env")
    for (const args of [["run", "--help"], ["run", "-h"], ["envs", "--version"], ["run", "--wizard"], ["run", "--wizard=true"], ["envs", "--completions", "bash"], ["openenv", "serve", "--help"]]) {
      expect(of(...args), args.join(" ")).toBe("")
    }
    // after --, words are the command's arguments
    expect(of("run", "--", "--help")).toBe("run")
    for (const word of ["../x", "a".repeat(33), "ränn", "RUN", "run\n", "run/..", "", "-", "--help", "1run", "\u0000"]) expect(of(word), JSON.stringify(word)).toBe("")
    expect(of()).toBe("")
    // a --log-level before the command (@effect/cli takes it there too)
    expect(of("--log-level", "debug", "run", "--dataset", "x")).toBe("run")
    expect(of("--log-level=debug", "envs")).toBe("envs")
    expect(of("--log-level", "debug", "run", "--help")).toBe("")
    expect(of("--log-level")).toBe("")
    expect(of("--log-level", "debug")).toBe("")
  })

  it("run --help first: the cache names the top level, and run's first real run adds run's code (+100 KB) (it named run, and never got its engine)", () => {
    expect(run(["run", "--help"]).code).toBe(0)
    expect(commands()).toEqual([""])
    const help = fs.readFileSync(cacheFile).length
    expect(run(job()).code).toBe(0)
    expect(commands()).toEqual(["", "run"])
    expect(fs.readFileSync(cacheFile).length).toBeGreaterThan(help + 100_000)
  }, 120_000)

  it("a run refused at its options (exit 2) or a typo names nothing: written where there was no cache, else left; the next run that goes through is named", () => {
    expect(run(["run", "--bogus"]).code).toBe(2)
    expect(valid()).toBe(true)
    expect(commands()).toEqual([])
    const refused = fs.readFileSync(cacheFile)
    for (const typo of [["rnu"], ["../x"], ["envs", "--no-such-option"]]) {
      expect(run(typo).code, typo.join(" ")).toBe(2)
      expect(fs.readFileSync(cacheFile).equals(refused), typo.join(" ")).toBe(true)
    }
    expect(run(job()).code).toBe(0)
    expect(commands()).toEqual(["run"])
    expect(fs.readFileSync(cacheFile).length).toBeGreaterThan(refused.length + 100_000)
    expect(tmpFiles()).toEqual([])
  }, 120_000)

  it("a run stopped by SIGINT does not name run; one killed by SIGKILL writes nothing, leaves no temporary file", async () => {
    const fifo = path.join(copy, "rows.fifo")
    if (spawnSync("mkfifo", [fifo]).status !== 0) return
    // a run that waits for rows: its dataset a FIFO that gives one row, then stays open
    const stopped = (signal: NodeJS.Signals) =>
      new Promise<number | null>((resolve) => {
        const writer = spawn("sh", ["-c", `{ printf '%s\\n' '{"env_config":{"seed":1}}'; exec sleep 60; } > '${fifo}'`], { detached: true })
        const child = spawn(process.execPath, [
          path.join(copy, "bin/effect-gym.js"), "run", "--dataset", fifo, "--env", "frozen_lake", "--policy", "random",
          "--output", path.join(copy, "out.jsonl"), "--overwrite"
        ], { cwd: copy })
        let stderr = ""
        child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
        const endRows = () => {
          try {
            process.kill(-writer.pid!, "SIGKILL")
          } catch {
            // gone
          }
        }
        // (the rows end soon after the signal: a run stopped by SIGINT waits for its dataset's
        // read, which on a FIFO kept open waits for the writer)
        const timer = setTimeout(() => {
          child.kill(signal)
          setTimeout(endRows, 500)
        }, 4_000)
        child.on("close", (code) => {
          clearTimeout(timer)
          endRows()
          resolve(code)
        })
      })
    expect(await stopped("SIGKILL")).toBeNull()
    expect(fs.existsSync(cacheFile)).toBe(false)
    expect(tmpFiles()).toEqual([])
    expect(await stopped("SIGINT")).toBe(130)
    expect(valid()).toBe(true)
    expect(commands()).toEqual([])
    expect(run(job()).code).toBe(0)
    expect(commands()).toEqual(["run"])
  }, 120_000)

  it("a header whose commands are not a list, hold other things, repeat one name or are huge: the command line runs as without it, and the cache ends valid", () => {
    const expected = withoutOnce(["envs"])
    expect(run(["--help"]).code).toBe(0)
    const huge = Array.from({ length: 100_000 }, (_, i) => `c${i}`)
    const cases: Array<[unknown, ReadonlyArray<string>]> = [
      ["envs", ["envs"]],
      [{ 0: "envs", length: 1 }, ["envs"]],
      [42, ["envs"]],
      [null, ["envs"]],
      [[1, null, {}, ["x"], "dataset"], ["dataset", "envs"]],
      [["x".repeat(1_000_000)], ["envs"]],
      // 16 times one name: one name (it kept every command from being added)
      [Array.from({ length: 16 }, () => "x"), ["x", "envs"]],
      [huge, huge.slice(0, 16)]
    ]
    for (const [value, after] of cases) {
      fs.writeFileSync(cacheFile, withCommands(value))
      expect(run(["envs"]), JSON.stringify(value).slice(0, 60)).toEqual(expected)
      expect(valid()).toBe(true)
      expect(commands(), JSON.stringify(value).slice(0, 60)).toEqual(after)
      expect(fs.statSync(cacheFile).size).toBeLessThan(8 * 1024 * 1024)
    }
    expect(tmpFiles()).toEqual([])
  }, 120_000)

  it("two commands starting at once from a cache naming neither: both run, one valid cache naming what its writer ran, no temporary files", async () => {
    const once = (args: ReadonlyArray<string>) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, [path.join(copy, "bin/effect-gym.js"), ...args], { cwd: copy })
        let stdout = ""
        let stderr = ""
        child.stdout.on("data", (chunk) => void (stdout += String(chunk)))
        child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
        child.on("close", (code) => resolve({ code, stdout, stderr }))
      })
    const envs = withoutOnce(["envs"])
    const rows = rowsArgs
    const dataset = withoutOnce(rows)
    expect(run(["--help"]).code).toBe(0)
    for (let round = 0; round < 2; round++) {
      const [a, b] = await Promise.all([once(["envs"]), once(rows)])
      expect(a).toEqual(envs)
      expect(b).toEqual(dataset)
      expect(valid()).toBe(true)
      const named = commands()!
      // the last writer's: its own and what the cache it started from named (never a name whose code it does not hold)
      expect([["", "envs"], ["", "dataset"], ["", "envs", "dataset"], ["", "dataset", "envs"]]).toContainEqual(named)
      expect(tmpFiles()).toEqual([])
    }
  }, 120_000)
})

describe("run's young generation (issue 27: semi-spaces of 8 MB, V8's size read as the process starts)", () => {
  const flags = [`--min-semi-space-size=${SEMI_SPACE_MB}`, `--max-semi-space-size=${SEMI_SPACE_MB}`]

  it("youngGenerationArgv: run starts again with the flag; other commands, built-ins, a size of the user's, or the switch off do not", () => {
    const argv = (...args: Array<string>) => ["/usr/bin/node", "/x/bin/effect-gym.js", ...args]
    expect(youngGenerationArgv(argv("run", "--dataset", "d"), [], {})).toEqual([...flags, "/x/bin/effect-gym.js", "run", "--dataset", "d"])
    // Node's own flags stay, before it
    expect(youngGenerationArgv(argv("run"), ["--enable-source-maps"], {})).toEqual(["--enable-source-maps", ...flags, "/x/bin/effect-gym.js", "run"])
    for (const args of [["run", "--help"], ["envs"], ["openenv", "serve"], ["check-env", "frozen_lake"], []]) {
      expect(youngGenerationArgv(argv(...args), [], {}), args.join(" ")).toBeUndefined()
    }
    for (const given of ["--max-semi-space-size=2", "--min-semi-space-size=16", "--max_semi_space_size=4", "--inspect", "--inspect-brk=0", "--inspect-wait"]) {
      expect(youngGenerationArgv(argv("run"), [given], {}), given).toBeUndefined()
      expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: `--enable-source-maps ${given}` }), given).toBeUndefined()
    }
    expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: "--max-old-space-size=4096" })).toBeDefined()
    expect(youngGenerationArgv(argv("run"), [], { EFFECT_GYM_YOUNG_GENERATION: "off" })).toBeUndefined()
  })

  it("a run is the same process started again (its pid, its parent) with the flag; a size of the user's is kept; off: as it is", () => {
    const probe = path.join(copy, "probe.mjs")
    fs.writeFileSync(probe, "console.error(`PROBE ${process.pid} ${process.ppid} ${process.execArgv.join(' ')}`)\nexport default {}\n")
    const probed = (env: Record<string, string>, nodeArgs: Array<string> = []) => {
      const result = spawnSync(process.execPath, [...nodeArgs, path.join(copy, "bin/effect-gym.js"), ...job(), "--plugin", probe], {
        cwd: copy,
        timeout: 60_000,
        encoding: "utf8",
        env: { ...process.env, ...env }
      })
      expect(result.status, result.stderr).toBe(0)
      const [pid, ppid, ...execArgv] = /PROBE (.*)/.exec(result.stderr)![1].split(" ")
      return { same: Number(pid) === result.pid && Number(ppid) === process.pid, execArgv: execArgv.filter((a) => a !== "") }
    }
    expect(probed({})).toEqual({ same: true, execArgv: flags })
    expect(probed({}, ["--max-semi-space-size=2"])).toEqual({ same: true, execArgv: ["--max-semi-space-size=2"] })
    expect(probed({ NODE_OPTIONS: "--max-semi-space-size=4" })).toEqual({ same: true, execArgv: [] })
    expect(probed({ EFFECT_GYM_YOUNG_GENERATION: "off" })).toEqual({ same: true, execArgv: [] })
  })
})

describe("the help pages rendered ahead (dist/bundle/help.json, issue 27: --help at most 250 ms)", () => {
  const pagesFile = () => path.join(copy, "dist/bundle/help.json")
  beforeEach(() => {
    fs.rmSync(copy, { recursive: true, force: true })
    makeCopy(path.join(root, "scratch"), "pages-", true)
  })
  const asked = [[], ...commandPaths().flatMap((p) => [[...p, "--help"], [...p, "-h"]])]
  const hasScript = spawnSync("script", ["--version"]).status === 0
  /** `effect-gym ...args` on a terminal (script's pty), with `env`: what it printed there and its exit code. */
  const onTerminal = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
    const line = [process.execPath, path.join(copy, "bin/effect-gym.js"), ...args].map((a) => `'${a}'`).join(" ")
    const result = spawnSync("script", ["-qefc", line, "/dev/null"], {
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, TERM: "xterm", NO_COLOR: "", ...env }
    })
    return { code: result.status, out: result.stdout }
  }

  /** What the command line (in this process) prints for `effect-gym ...args` off a terminal. */
  const printed = (args: ReadonlyArray<string>) =>
    Effect.runPromise(Effect.gen(function*() {
      const out: Array<string> = []
      const err: Array<string> = []
      const console: Console.Console = {
        ...globalThis.console,
        log: (...xs: ReadonlyArray<unknown>) => void out.push(`${xs.join(" ")}\n`),
        error: (...xs: ReadonlyArray<unknown>) => void err.push(`${xs.join(" ")}\n`)
      }
      const code = yield* main(["node", "effect-gym", ...args], undefined, undefined, false).pipe(
        Effect.provideService(Console.Console, console)
      )
      return { code, stdout: out.join(""), stderr: err.join("") }
    }).pipe(Effect.provide(NodeServices.layer)))

  it("every command's --help and -h, and no arguments: the same output and exit code as the command line prints, without running it", async () => {
    expect(fs.existsSync(pagesFile())).toBe(true)
    expect(asked.length).toBeGreaterThan(20)
    for (const args of asked) {
      const expected = await printed(args)
      expect(expected.stdout.length, args.join(" ")).toBeGreaterThan(200)
      expect(run(args), args.join(" ")).toEqual(expected)
    }
    // and as the bundle itself prints them
    for (const args of [["--help"], ["run", "--help"], ["openenv", "serve", "-h"], []]) expect(run(args)).toEqual(without(args))
    // printed from the pages: the bundle never ran, so no code cache was written
    expect(fs.existsSync(cacheFile)).toBe(false)
    // anything else runs the command line (and writes its cache)
    expect(run(["run", "--bogus", "--help"])).toEqual(without(["run", "--bogus", "--help"]))
    expect(run(["--version"])).toEqual(without(["--version"]))
    expect(fs.existsSync(cacheFile)).toBe(true)
  }, 240_000)

  it.skipIf(!hasScript)("on a terminal: the coloured page, as the command line prints it; NO_COLOR and TERM=dumb: the plain one", () => {
    for (const args of [["--help"], ["run", "--help"], ["openenv", "serve", "-h"]]) {
      const colored = onTerminal(args)
      expect(colored.code).toBe(0)
      expect(colored.out).toContain("\u001b[")
      expect(colored).toEqual(onTerminal(args, { EFFECT_GYM_CODE_CACHE: "off" }))
      for (const env of [{ NO_COLOR: "1" }, { TERM: "dumb" }]) {
        const plain = onTerminal(args, env)
        expect(plain.out).not.toContain("\u001b[")
        expect(plain).toEqual(onTerminal(args, { ...env, EFFECT_GYM_CODE_CACHE: "off" }))
      }
    }
    expect(fs.existsSync(cacheFile)).toBe(false)
  }, 240_000)

  it("pages of another bundle, corrupt or odd ones are not used: the command line prints its help itself", () => {
    const expected = without(["run", "--help"])
    const good = fs.readFileSync(pagesFile(), "utf8")
    const parsed = JSON.parse(good) as { bundle: string; pages: Record<string, { stdout: string }> }
    const wrong = (pages: unknown) => JSON.stringify({ ...parsed, pages })
    const corruptions = [
      JSON.stringify({ ...parsed, bundle: "0".repeat(64), pages: { ...parsed.pages, ["plain\0run\0--help"]: { code: 0, stdout: "stale", stderr: "" } } }),
      good.slice(0, good.length >> 1),
      "garbage",
      "null",
      wrong(null),
      wrong({ ...parsed.pages, ["plain\0run\0--help"]: { code: "0", stdout: 5, stderr: null } }),
      wrong({ ...parsed.pages, ["plain\0run\0--help"]: undefined })
    ]
    for (const corrupt of corruptions) {
      fs.writeFileSync(pagesFile(), corrupt)
      expect(run(["run", "--help"])).toEqual(expected)
    }
    // the bundle changed since the pages were rendered (a rebuilt or edited cli.cjs)
    fs.writeFileSync(pagesFile(), good)
    fs.appendFileSync(bundle, "\n// changed\n")
    const stale = JSON.parse(good) as { pages: Record<string, { stdout: string }> }
    stale.pages["plain\0run\0--help"].stdout = "stale"
    fs.writeFileSync(pagesFile(), JSON.stringify(stale))
    expect(run(["run", "--help"])).toEqual(expected)
    // a FIFO at its path is not read (it would block)
    fs.rmSync(pagesFile())
    spawnSync("mkfifo", [pagesFile()])
    expect(run(["run", "--help"])).toEqual(expected)
  }, 120_000)
})
