/**
 * Issue 27's fifth hostile pass (2026-12-04): plugins in another folder and the resolve fallback
 * (src/node/PluginLoader.ts, `module.registerHooks`). Integration layer (test/layers.ts): it runs
 * the built command line.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const BIN = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
const UNBUNDLED = path.resolve(import.meta.dirname, "../../dist/cli/bin.js")
// (the system's Node, older than the package's on some machines: the unbundled command line has no
// launcher to run it again on the clone's Node)
const SYSTEM_NODE = "/usr/bin/node"
const systemMajor = (() => {
  if (!fs.existsSync(SYSTEM_NODE)) return undefined
  const out = spawnSync(SYSTEM_NODE, ["-p", "process.versions.node"], { encoding: "utf8" })
  return out.status === 0 ? Number(out.stdout.trim().split(".")[0]) : undefined
})()

const envs = (plugin: string) => {
  const result = spawnSync(process.execPath, [BIN, "envs", "--plugin", plugin], { encoding: "utf8", timeout: 60_000 })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe("issue 27, hostile 5 (2026-12-04): plugin resolution", () => {
  it("a plugin that requires a missing @effect/* package or effect/* module fails naming it (it recursed: 'Maximum call stack size exceeded')", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "issue27-h5-"))
    const cases: ReadonlyArray<readonly [string, string, string]> = [
      ["package.cjs", `require("@effect/nope-not-installed")\n`, "@effect/nope-not-installed"],
      ["subpath.cjs", `require("effect/NoSuchModule")\n`, "effect/NoSuchModule"],
      // (a .ts with a require, outside a "type": "module" package: CommonJS)
      ["package.ts", `const x = require("@effect/nope-not-installed")\nmodule.exports = x\n`, "@effect/nope-not-installed"]
    ]
    for (const [name, source, missing] of cases) {
      const file = path.join(dir, name)
      fs.writeFileSync(file, source)
      const { code, stderr } = envs(file)
      expect(stderr, name).not.toMatch(/Maximum call stack/)
      expect(code, `${name}: ${stderr}`).toBe(2)
      expect(stderr, name).toContain(`plugin ${file}: failed to load`)
      expect(stderr, name).toContain(missing)
      // (the error names the plugin that asked, not this package's files)
      expect(stderr, name).toContain(`- ${file}`)
    }
    // an import of it from an ES module there: its own error, naming the plugin that asked (not the
    // bundle, where the fallback looked next)
    const esm = path.join(dir, "package-esm.mts")
    fs.writeFileSync(esm, `import x from "@effect/nope-not-installed"\nexport default x\n`)
    const imported = envs(esm)
    expect(imported.stderr).not.toMatch(/Maximum call stack/)
    expect(imported.code, imported.stderr).toBe(2)
    expect(imported.stderr).toContain(`plugin ${esm}: failed to load`)
    expect(imported.stderr).toContain(`Cannot find package '@effect/nope-not-installed' imported from ${esm}`)
    // a subpath this package does not export: said so, as by an import
    const subpath = path.join(dir, "subpath-of-ours.cjs")
    fs.writeFileSync(subpath, `require("effect-gym/nope")\n`)
    const { code, stderr } = envs(subpath)
    expect(code, stderr).toBe(2)
    expect(stderr).toContain(`plugin ${subpath}: failed to load`)
    expect(stderr).toContain(`Package subpath './nope' is not defined by "exports"`)
  }, 120_000)

  it.skipIf(!(systemMajor !== undefined && systemMajor < 24))("node dist/cli/bin.js on an older Node: a plugin is refused saying which Node it needs (it was 'internal error: TypeError: Module.registerHooks is not a function', exit 3)", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "issue27-h5-"))
    const file = path.join(dir, "plugin.mjs")
    fs.writeFileSync(file, `import { Plugin } from "effect-gym"\nexport default Plugin.make({ name: "old-node" })\n`)
    const result = spawnSync(SYSTEM_NODE, [UNBUNDLED, "envs", "--plugin", file], { encoding: "utf8", timeout: 60_000 })
    expect(result.stderr).not.toContain("internal error")
    expect(result.status, result.stderr).toBe(2)
    expect(result.stderr).toContain(`plugin ${file}:`)
    expect(result.stderr).toContain("needs Node >= 24")
  }, 60_000)
})
