/** The package's public surface: what `exports` lists, and what tests and docs import through it. */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const root = path.resolve(import.meta.dirname, "..")
const read = (file: string) => fs.readFileSync(path.join(root, file), "utf8")

const pkg = JSON.parse(read("package.json")) as {
  readonly exports: Record<string, string | { readonly types: string; readonly default: string }>
}
const modules = Object.entries(pkg.exports).flatMap(([subpath, target]) =>
  typeof target === "string" ? [] : [{ name: subpath === "." ? "effect-gym" : `effect-gym/${subpath.slice(2)}`, target }]
)
const sourceOf = (dist: string) => dist.replace(/^\.\/dist\//, "./src/").replace(/\.js$/, ".ts")

describe("package exports", () => {
  it("list public modules only: no pattern, nothing internal, each built from a source file", () => {
    expect(modules.length).toBeGreaterThan(1)
    for (const { name, target } of modules) {
      expect(name).not.toContain("*")
      expect(target.default).not.toMatch(/\/internal\//)
      expect(target.types).toBe(target.default.replace(/\.js$/, ".d.ts"))
      expect(fs.existsSync(path.join(root, sourceOf(target.default))), `${name}: ${sourceOf(target.default)}`).toBe(true)
    }
  })

  it("tsconfig.test.json maps each exported name to its source (what vitest and tsx resolve in tests)", () => {
    const paths = (JSON.parse(read("tsconfig.test.json")) as {
      readonly compilerOptions: { readonly paths: Record<string, ReadonlyArray<string>> }
    }).compilerOptions.paths
    expect(paths).toEqual(Object.fromEntries(modules.map(({ name, target }) => [name, [sourceOf(target.default)]])))
  })

  it("a TypeScript plugin loaded at run time (tsx, as PluginLoader loads it) gets the sources too", async () => {
    const { tsImport } = await import("tsx/esm/api")
    const fixture = pathToFileURL(path.join(root, "test/fixtures/plugins/resolves.ts")).href
    const loaded = (await tsImport(fixture, import.meta.url)) as { readonly resolved: string; readonly modules: number }
    expect(new URL(loaded.resolved).pathname).toBe(path.join(root, "src/index.ts"))
    expect(loaded.modules).toBeGreaterThan(10)
  })

  it("every effect-gym import in the README, docs, examples, tests and benchmarks is an exported name", () => {
    const files = ["README.md", "ARCHITECTURE.md"]
    const walk = (dir: string) => {
      for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
        const file = path.join(dir, entry.name)
        if (entry.isDirectory()) walk(file)
        else if (/\.(ts|mts|mjs|js|md)$/.test(entry.name)) files.push(file)
      }
    }
    for (const dir of ["examples", "test", "bench", "docs"]) walk(dir)
    const exported = new Set(modules.map((m) => m.name))
    const used = new Set<string>()
    for (const file of files) {
      for (const match of read(file).matchAll(/(?:from|import)\s*\(?\s*"(effect-gym(?:\/[^"]*)?)"/g)) used.add(match[1])
    }
    expect(used.size).toBeGreaterThan(2)
    for (const name of used) expect(exported, name).toContain(name)
  })
})

describe("layers", () => {
  // The core: the env contract, scheduler, trajectory, rewards, runs and their shared helpers.
  const core = fs.readdirSync(path.join(root, "src")).filter((f) => f.endsWith(".ts") && f !== "index.ts" && f !== "Builtins.ts")
  const relativeImports = (file: string) =>
    [...read(file).matchAll(/^(?:import|export)[^"]*from "(\.[^"]+)"/gm)].map((m) => path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1])))

  it("the core imports neither the edges nor the built-ins (games, scripted policies)", () => {
    expect(core).toContain("Registry.ts")
    for (const file of core) {
      for (const target of relativeImports(`src/${file}`)) {
        expect(target, `${file} imports ${target}`).toMatch(/^src\/(internal\/[^]+|[A-Za-z]+\.js)$/)
        expect(target, `${file} imports ${target}`).not.toBe("src/Builtins.js")
      }
    }
  })

  it("the core's internal helpers (the run engine among them) import nothing outside the core", () => {
    const files = fs.readdirSync(path.join(root, "src/internal"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".ts"))
    expect(files).toContain("rollout/engine.ts")
    for (const file of files) {
      for (const target of relativeImports(`src/internal/${file}`)) {
        expect(target, `internal/${file} imports ${target}`).toMatch(/^src\/(internal\/[^]+|[A-Za-z]+\.js)$/)
        expect(target, `internal/${file} imports ${target}`).not.toBe("src/Builtins.js")
      }
    }
  })

  it("the cluster is an edge: only the command line imports it, and it reaches the engine through one adapter", () => {
    const walk = (dir: string): Array<string> =>
      fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory() ? walk(`${dir}/${entry.name}`) : entry.name.endsWith(".ts") ? [`${dir}/${entry.name}`] : []
      )
    const cluster = walk("src/cluster")
    expect(cluster).toContain("src/cluster/internal/engine.ts")
    for (const file of walk("src").filter((f) => !f.startsWith("src/cluster/") && !f.startsWith("src/cli/"))) {
      for (const target of relativeImports(file)) expect(target, `${file} imports ${target}`).not.toMatch(/^src\/cluster\//)
    }
    // the engine's running modules are imported by the adapter only
    for (const file of cluster.filter((f) => f !== "src/cluster/internal/engine.ts")) {
      for (const target of relativeImports(file)) {
        expect(target, `${file} imports ${target}`).not.toMatch(/^src\/(Rollout|Trajectory|Scheduler|CompletionsLog|Summary|Row)\.js$/)
      }
    }
  })
})
