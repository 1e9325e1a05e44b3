/**
 * effect-gym as a library in a user's own project (issue 27): a fresh folder installs the packed
 * tarball with `effect@latest`, and the README's plugin and a pipeline run there on ONE copy of
 * `effect` (effect is a peer dependency: a user's program and effect-gym share one runtime). Colocate
 * mode without the optional `node-llama-cpp` says what to install.
 *
 * Needs the npm registry (the install); the packed tarball is made from the built `dist/`.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const root = path.resolve(import.meta.dirname, "..")
const npm = process.platform === "win32" ? "npm.cmd" : "npm"

/** Runs a command to its end; its output and exit code. */
const run = (command: string, args: ReadonlyArray<string>, cwd: string, timeout = 300_000) => {
  const out = spawnSync(command, args, {
    cwd,
    encoding: "utf8",
    timeout,
    // npm's scripts and bins run on this Node (24), whatever the system's node is
    env: { ...process.env, PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ""}`, NO_COLOR: "1" }
  })
  return { code: out.status, stdout: out.stdout ?? "", stderr: out.stderr ?? "" }
}

/** Every installed package named `name` under `dir`'s node_modules (nested copies included). */
const copiesOf = (dir: string, name: string): Array<string> => {
  const found: Array<string> = []
  const walk = (modules: string) => {
    if (!fs.existsSync(modules)) return
    for (const entry of fs.readdirSync(modules)) {
      if (entry.startsWith(".")) continue
      const scoped = entry.startsWith("@")
      const packages = scoped ? fs.readdirSync(path.join(modules, entry)).map((p) => path.join(entry, p)) : [entry]
      for (const pkg of packages) {
        const at = path.join(modules, pkg)
        if (pkg === name) found.push(at)
        walk(path.join(at, "node_modules"))
      }
    }
  }
  walk(path.join(dir, "node_modules"))
  return found
}

describe("a fresh project: npm install of the packed tarball and effect@latest", () => {
  let dir = ""
  let installed = { code: 0 as number | null, stdout: "", stderr: "" }

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-fresh-"))
    // The tarball of the built package (`npm test` builds first; no `prepare` here: it would rebuild
    // dist under the other tests).
    const packed = run(npm, ["pack", "--ignore-scripts", "--json", "--pack-destination", dir], root)
    expect(packed.code, packed.stderr).toBe(0)
    const tarball = path.join(dir, (JSON.parse(packed.stdout) as Array<{ filename: string }>)[0].filename)
    fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "fresh", private: true, type: "module" }))
    installed = run(npm, ["install", "--no-audit", "--no-fund", tarball, "effect@latest"], dir)
  }, 600_000)

  afterAll(() => {
    if (dir !== "") fs.rmSync(dir, { recursive: true, force: true })
  })

  it("installs one copy of effect (4.x), shared with effect-gym, and no node-llama-cpp", () => {
    expect(installed.code, installed.stderr).toBe(0)
    const effects = copiesOf(dir, "effect")
    expect(effects, effects.join("\n")).toHaveLength(1)
    const version = (JSON.parse(fs.readFileSync(path.join(effects[0], "package.json"), "utf8")) as { version: string }).version
    expect(version).toMatch(/^4\./)
    // @effect/platform-node is a peer too: npm installs it, once
    expect(copiesOf(dir, "@effect/platform-node")).toHaveLength(1)
    expect(copiesOf(dir, "node-llama-cpp")).toHaveLength(0)
  })

  it("the README's plugin runs through the installed command line", () => {
    for (const file of ["frozen_lake_plugin.ts", "frozen_lake.jsonl"]) {
      fs.copyFileSync(path.join(root, "examples", file), path.join(dir, file))
    }
    const bin = path.join(dir, "node_modules/effect-gym/bin/effect-gym.js")
    const out = run(process.execPath, [
      bin, "run", "--dataset", "frozen_lake.jsonl", "--plugin", "frozen_lake_plugin.ts", "--env",
      "slippery_frozen_lake", "--scheduler", "frozen_lake_hints", "--policy", "frozen-lake-solver",
      "--reward-funcs", "short_path", "--reward-weights", "0.5", "1.0", "--num-generations", "2", "--output", "out.jsonl", "--json"
    ], dir)
    expect(out.code, out.stderr).toBe(0)
    const summary = JSON.parse(out.stdout) as { trajectories: number; failures: number }
    expect(summary.trajectories).toBe(256)
    expect(summary.failures).toBe(0)
    expect(fs.readFileSync(path.join(dir, "out.jsonl"), "utf8").trimEnd().split("\n")).toHaveLength(256)
  })

  it("a pipeline composes effect-gym's streams in the user's own Effect program", () => {
    fs.copyFileSync(path.join(root, "examples/compose_streams.ts"), path.join(dir, "compose_streams.ts"))
    const tsx = path.join(dir, "node_modules/tsx/dist/loader.mjs")
    const out = run(process.execPath, ["--import", tsx, "compose_streams.ts"], dir)
    expect(out.code, out.stderr).toBe(0)
    const logged = out.stdout + out.stderr
    expect(logged).toMatch(/r0-g0 turn 1: reward/)
    expect(logged).toMatch(/row 1: rewards /)
  })

  it("colocate mode without node-llama-cpp (an optional peer) says what to install", () => {
    const bin = path.join(dir, "node_modules/effect-gym/bin/effect-gym.js")
    // (the GGUF magic: the file is checked before node-llama-cpp is imported)
    fs.writeFileSync(path.join(dir, "model.gguf"), "GGUF\u0003\u0000\u0000\u0000")
    const out = run(process.execPath, [
      bin, "run", "--dataset", "frozen_lake.jsonl", "--env", "frozen_lake", "--mode", "colocate", "--model", "model.gguf",
      "--output", "colocate.jsonl"
    ], dir)
    expect(out.code).not.toBe(0)
    expect(out.stderr).toContain("npm install node-llama-cpp")
  })
})
