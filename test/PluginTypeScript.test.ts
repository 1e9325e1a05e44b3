/**
 * TypeScript plugins compiled by esbuild in the thread that loads them (src/node/internal/typescript.ts), loaded the way a
 * user loads them: `effect-gym envs --plugin FILE` in a folder outside this package. Integration
 * layer (test/layers.ts): it runs the built command line.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const BIN = path.resolve(import.meta.dirname, "../bin/effect-gym.js")

const envs = (plugins: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const result = spawnSync(process.execPath, [BIN, "envs", ...plugins.flatMap((p) => ["--plugin", p])], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, ...env }
  })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

/**
 * `effect-gym envs --plugin plugin.ts` run in `dir`, without vitest's TSX_TSCONFIG_PATH (tsx reads
 * the tsconfig.json of the folder it runs in; vitest's is not the user's).
 */
const envsIn = (dir: string, env: Record<string, string> = {}) => {
  const { TSX_TSCONFIG_PATH: _, ...own } = process.env
  const result = spawnSync(process.execPath, [BIN, "envs", "--plugin", "plugin.ts"], {
    encoding: "utf8",
    timeout: 60_000,
    cwd: dir,
    env: { ...own, ...env }
  })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

/** Each plugin (a path in `dir`) fails to load, exit 2, its error naming `dir`'s file at line:column. */
const expectFailsAt = (dir: string, cases: ReadonlyArray<readonly [string, string]>): void => {
  for (const [name, at] of cases) {
    const file = path.join(dir, name)
    const { code, stderr } = envs([file])
    expect(code, `${name}: ${stderr}`).toBe(2)
    expect(stderr, name).toContain(`plugin ${file}: failed to load`)
    expect(stderr, name).toContain(path.join(dir, at))
  }
}

const write = (dir: string, files: Record<string, string>): void => {
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.writeFileSync(path.join(dir, name), text)
  }
}

const lake = (name: string) => `Plugin.make({ envs: [FrozenLake.definition(${name})] })`

describe("TypeScript plugins compiled in the loading thread (esbuild, tsx's semantics)", () => {
  it("ES modules and CommonJS, by extension, package type and syntax; tsc's specifiers; enums, parameter properties, decorators; nothing on stderr", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // an ES module .ts outside any package, naming its neighbours as tsc lets it
      "esm/lib/index.ts": `export enum Color { Red = "red" }\n`,
      "esm/helper.ts": `import { Color } from "./lib"\nexport const name = (n: string): string => \`\${n}_\${Color.Red}\`\n`,
      "esm/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nimport type { Message } from "effect-gym/Message"\n` +
        `import { name } from "./helper.js"\nconst m: Message | undefined = undefined\nvoid m\nexport default ${lake(`name("esm")`)}\n`,
      // CommonJS .ts outside any package: require, an extensionless TypeScript neighbour, a parameter property
      "cjs/helper.ts": `module.exports = { suffix: (s: string): string => s + "_cjs" }\n`,
      "cjs/plugin.ts":
        `const { Plugin, FrozenLake } = require("effect-gym")\nconst { suffix } = require("./helper")\n` +
        `class Holder { constructor(private readonly n: string) {} get(): string { return this.n } }\n` +
        `module.exports = { default: ${lake(`suffix(new Holder("plain").get())`)} }\n`,
      "cjs/plugin.cts":
        `const { Plugin, FrozenLake } = require("effect-gym")\nmodule.exports = { default: ${lake(`"cts" as string`)} }\n`,
      "mts/plugin.mts": `import { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"mts" as const`)}\n`,
      // import/export in a "type": "commonjs" package: tsx ran it as CommonJS; it runs as a module
      "pkg/package.json": `{ "type": "commonjs" }\n`,
      "pkg/plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"pkg"`)}\n`,
      // a `#!` line before an ES module's imports (it was taken for CommonJS: "Cannot use import statement")
      "shebang/plugin.ts": `#!/usr/bin/env node\nimport { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"shebang" as string`)}\n`,
      // decorators (which V8 has none of)
      "deco/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nconst named = (value: unknown, _context: unknown) => value\n` +
        `@named class Named { static id = "deco" }\nexport default ${lake(`Named.id`)}\n`
    })
    const plugins = ["esm/plugin.ts", "cjs/plugin.ts", "cjs/plugin.cts", "mts/plugin.mts", "pkg/plugin.ts", "deco/plugin.ts", "shebang/plugin.ts"]
      .map((p) => path.join(dir, p))
    const { code, stdout, stderr } = envs(plugins)
    expect(code, stderr).toBe(0)
    for (const name of ["esm_red", "plain_cjs", "cts", "mts", "pkg", "deco", "shebang"]) {
      expect(stdout, name).toMatch(new RegExp(`^\\s+${name}\\s`, "m"))
    }
    // (no warning of Node's, or of esbuild's, reaches the user)
    expect(stderr).toBe("")
  }, 120_000)

  it("a syntax error names the file, line and column, in TypeScript and JavaScript alike; exit 2", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      "bad.ts": `import { Plugin } from "effect-gym"\nconst x: number = ;\nexport default Plugin.make({})\n`,
      // (valid TypeScript whose JavaScript V8 refuses)
      "bad-js.ts": `import { Plugin } from "effect-gym"\nexport default Plugin.make({})\nconst q = 1 +* 2\n`,
      "bad.mjs": `export const x = 1\nconst y = ;\n`
    })
    expectFailsAt(dir, [
      ["bad.ts", "bad.ts:2:18"],
      ["bad-js.ts", "bad-js.ts:3:13"],
      ["bad.mjs", "bad.mjs:2:11"]
    ])
  }, 120_000)

  it("EFFECT_GYM_TS_LOADER=tsx loads TypeScript plugins with tsx (tsconfig's paths); without it, a path alias is a missing package, named", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      "tsconfig.json": `{ "compilerOptions": { "baseUrl": ".", "paths": { "@lib/*": ["./lib/*"] } } }\n`,
      "lib/name.ts": `export const name: string = "by_paths"\n`,
      "plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { name } from "@lib/name"\nexport default ${lake("name")}\n`
    })
    const tsx = envsIn(dir, { EFFECT_GYM_TS_LOADER: "tsx" })
    expect(tsx.code, tsx.stderr).toBe(0)
    expect(tsx.stdout).toMatch(/^\s+by_paths\s/m)
    const own = envsIn(dir)
    expect(own.code, own.stderr).toBe(2)
    expect(own.stderr).toContain(`plugin plugin.ts: failed to load`)
    expect(own.stderr).toContain("@lib/name")
  }, 120_000)

  it("what tsx loaded loads: a .cts module's named exports, accessor, a shebang, JSON without an attribute, __dirname and require in a module, types imported without type, a plugin under node_modules", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // (each failed on Node's own transform, which came first, where tsx loaded it)
      // "Named export 'c' not found. The requested module './c.cts' is a CommonJS module"
      "cts/c.cts": `export const c: string = "cts_named"\n`,
      "cts/plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { c } from "./c.cts"\nexport default ${lake("c")}\n`,
      // "Unexpected identifier 'tag'" (V8 has no auto-accessors), with no file or line
      "accessor/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nclass A { accessor tag: string = "accessor" }\nexport default ${lake("new A().tag")}\n`,
      // "Cannot use import statement outside a module" (run as CommonJS), and a warning
      "shebang/plugin.ts": `#!/usr/bin/env node\nimport { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"shebang" as string`)}\n`,
      // 'Module ".../data.json" needs an import attribute of "type: json"'
      "json/data.json": `{ "name": "json_plain" }\n`,
      "json/plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nimport data from "./data.json"\nexport default ${lake("data.name")}\n`,
      // "__dirname is not defined in ES module scope", "require is not defined in ES module scope":
      // a .ts outside a "type": "module" package is CommonJS, as tsx made it
      "globals/plugin.ts":
        `#!/usr/bin/env node\nimport { Plugin, FrozenLake } from "effect-gym"\nconst os = require("node:os")\n` +
        `export default ${lake(`typeof os.cpus === "function" && __dirname.endsWith("globals") ? "cjs_globals" : "no"`)}\n`,
      // but one that CommonJS cannot hold stays a module: import.meta, and a module it imports that
      // awaits at its top level ("require() cannot be used on an ESM graph with top-level await"
      // under tsx), and its own top-level await (tsx: "Top-level await is currently not supported
      // with the "cjs" output format")
      "module/wait.mts": `export const waited: string = await Promise.resolve("_waited")\n`,
      "module/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nimport { waited } from "./wait.mts"\n` +
        `const here: string = await Promise.resolve(import.meta.dirname)\n` +
        `export default ${lake(`here.endsWith("module") ? "esm_kept" + waited : "no"`)}\n`,
      // "The requested module './types.js' does not provide an export named 'Cfg'": types imported
      // without `type`, which tsc and tsx drop (in the plugin and in a module it imports)
      "types/types.ts": `export interface Cfg { readonly name: string }\nexport type Id = string\nexport const v = "types"\n`,
      "types/helper.ts": `import {\n  Cfg,\n  Id\n} from "./types.js"\nexport const make = (name: Id): Cfg => ({ name })\n`,
      // (and one whose name a comment or a string mentions: the guess that came before esbuild compiled
      // every file took that for a use, and kept the import)
      "types/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nimport { Cfg, v } from "./types.js"\nimport { make } from "./helper.js"\n` +
        `/** Cfg: the config */\nconst note = "Cfg"\nvoid note\n` +
        `const c: Cfg = make(v + "_elided")\nexport default ${lake("c.name")}\n`,
      // "Stripping types is currently unsupported for files under node_modules"
      "other/node_modules/plug/package.json": `{ "name": "plug", "type": "module" }\n`,
      "other/node_modules/plug/plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"in_node_modules" as string`)}\n`
    })
    const plugins = ["cts", "accessor", "shebang", "json", "globals", "module", "types", "other/node_modules/plug"].map((p) => path.join(dir, p, "plugin.ts"))
    const { code, stdout, stderr } = envs(plugins)
    expect(code, stderr).toBe(0)
    for (const name of ["cts_named", "accessor", "shebang", "json_plain", "cjs_globals", "esm_kept_waited", "types_elided", "in_node_modules"]) {
      expect(stdout, name).toMatch(new RegExp(`^\\s+${name}\\s`, "m"))
    }
    expect(stderr).toBe("")
  }, 120_000)

  it("a stack trace names the TypeScript file's own line, an enum or a decorator above it", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    // (the line of the stack's first frame, as the env's name: a compiler prints the file anew,
    // and without a source map line 9 read as line 18)
    const line = `(new Error().stack ?? "").split("\\n")[1].replace(/.*:(\\d+):\\d+\\)?$/, "$1")`
    const above = `enum E {\n  A,\n  B\n}\nnamespace N { export const x = 1; export const y = 2 }\nconst o = { a: 1, b: 2 }; const p = 3\n`
    write(dir, {
      "enum.ts": `import { Plugin, FrozenLake } from "effect-gym"\n${above}interface Q { a: number }\nexport default ${lake(`"enum_line_" + ${line}`)}\n`,
      "deco.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nconst named = (value: unknown, _context: unknown) => value\n` +
        `@named class Named {\n  static id = "deco"\n}\n${above}export default ${lake(`"deco_line_" + ${line}`)}\n`
    })
    const { code, stdout, stderr } = envs([path.join(dir, "enum.ts"), path.join(dir, "deco.ts")])
    expect(code, stderr).toBe(0)
    expect(stdout).toMatch(/^\s+enum_line_9\s/m)
    expect(stdout).toMatch(/^\s+deco_line_12\s/m)
  }, 120_000)

  it("a plugin that throws as it loads: the error names the file, line and column it was thrown at; exit 2", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // (an enum above, so that the line is the TypeScript file's, through the source map)
      "throws.ts": `import { Plugin } from "effect-gym"\nenum E {\n  A\n}\nif (E.A === 0) throw new Error("boom esm")\nexport default Plugin.make({})\n`,
      "throws-cjs.ts": `const { Plugin } = require("effect-gym")\ntype T = number\nconst n: T = 1\n;(null as any).foo\n`
    })
    const cases: ReadonlyArray<readonly [string, string, string]> = [
      ["throws.ts", "boom esm", "throws.ts:5:22"],
      ["throws-cjs.ts", "Cannot read properties of null", "throws-cjs.ts:4:16"]
    ]
    for (const [name, message, at] of cases) {
      const file = path.join(dir, name)
      const { code, stderr } = envs([file])
      expect(code, `${name}: ${stderr}`).toBe(2)
      expect(stderr, name).toContain(`plugin ${file}: failed to load: ${message}`)
      expect(stderr, name).toContain(`(${path.join(dir, at)})`)
    }
  }, 120_000)

  it("a .tsx plugin (tsx) among plugins compiled here: an ES module plugin after it imports a CommonJS .ts module by name", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      "first.ts": `import { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"first" as string`)}\n`,
      "view.tsx": `import { Plugin, FrozenLake } from "effect-gym"\nexport default ${lake(`"tsx_file" as string`)}\n`,
      // (tsx registered after the first plugin loaded: "The requested module './counter.ts' does
      // not provide an export named 'counter'")
      "counter.ts": `exports.counter = { n: 0 as number }\n`,
      "last.mts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { counter } from "./counter.ts"\nexport default ${lake(`"last_" + counter.n`)}\n`
    })
    const plugins = ["first.ts", "view.tsx", "last.mts"].map((p) => path.join(dir, p))
    const { code, stdout, stderr } = envs(plugins)
    expect(code, stderr).toBe(0)
    for (const name of ["first", "tsx_file", "last_0"]) expect(stdout, name).toMatch(new RegExp(`^\\s+${name}\\s`, "m"))
    // and `view`, which loaded its plugins one by one (the same error)
    fs.writeFileSync(path.join(dir, "rows.jsonl"), `{"messages":[{"role":"user","content":"x"}],"env_config":{"seed":1}}\n`)
    const cli = (args: ReadonlyArray<string>) => spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", timeout: 60_000, cwd: dir })
    const ran = cli(["run", "--dataset", "rows.jsonl", "--env", "frozen_lake", "--policy", "random", "--output", "log.jsonl"])
    expect(ran.status, ran.stderr).toBe(0)
    const viewed = cli(["view", "log.jsonl", "--html", "view.html", ...plugins.flatMap((p) => ["--plugin", p])])
    expect(viewed.status, viewed.stderr).toBe(0)
    expect(fs.existsSync(path.join(dir, "view.html"))).toBe(true)
  }, 120_000)

  it("a syntax error in a JavaScript module a TypeScript plugin imports names that module, line and column, as tsx did; a SyntaxError thrown at run time, where; exit 2", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // (Node's error was "Unexpected token ';'" alone; tsx, which compiled a .js neighbour, named it)
      "js/helper.js": `export const a = 1\nexport const b = ;\n`,
      "js/plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { a } from "./helper.js"\nexport default ${lake("`js_${a}`")}\n`,
      // (a module under it, from an .mts plugin)
      "deep/helper.js": `export { a } from "./inner.mjs"\n`,
      "deep/inner.mjs": `export const a = 1\n\nconst c = 2 +;\n`,
      "deep/plugin.mts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { a } from "./helper.js"\nexport default ${lake("`deep_${a}`")}\n`,
      // (a SyntaxError thrown as the plugin runs, not as it parses: where it was thrown; it named nothing)
      "json/plugin.ts": `import { Plugin } from "effect-gym"\ntype T = { a: number }\nconst t: T = JSON.parse("{bad")\nexport default Plugin.make({})\n`
    })
    expectFailsAt(dir, [
      ["js/plugin.ts", "js/helper.js:2:18"],
      ["deep/plugin.mts", "deep/inner.mjs:3:14"],
      ["json/plugin.ts", "json/plugin.ts:3:19"]
    ])
  }, 120_000)

  it("the tsconfig.json above a plugin is read, as tsx read the project's: legacy and parameter decorators, class fields, imports kept", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // (esbuild without it: "Parameter decorators only work when experimental decorators are enabled")
      "deco/tsconfig.json": `{\n  // as tsc and tsx read it\n  "compilerOptions": { "experimentalDecorators": true, },\n}\n`,
      "deco/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nconst Inject = (t: string) => (target: any, _key: any, _index: number) => { target.inj = t }\n` +
        `let kind = "none"\nfunction legacy(_target: any, key?: any, _desc?: any): any { kind = typeof key }\n` +
        `class S { constructor(@Inject("param") readonly d: string) {} @legacy m() {} }\nexport default ${lake("`deco_${(S as any).inj}_${kind}`")}\n`,
      // (a field that assigns through the base class's setter, as with tsc's useDefineForClassFields false; it was defined over it, silently)
      // (with a byte order mark, as some editors write it: it was taken for no JSON, and left out)
      "fields/tsconfig.json": `\uFEFF{ "compilerOptions": { "useDefineForClassFields": false } }\n`,
      "fields/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nclass B { set x(_v: string) { (this as any)._x = "setter" } }\nclass D extends B { x = "field" }\n` +
        `export default ${lake("`fields_${(new D() as any)._x}`")}\n`,
      // (an import whose names go unused, kept for its side effect: it was dropped, silently)
      "verbatim/tsconfig.json": `{ "compilerOptions": { "verbatimModuleSyntax": true } }\n`,
      "verbatim/package.json": `{ "type": "module" }\n`,
      "verbatim/effect.ts": `;(globalThis as any).sideEffect = "kept"\nexport const unused = 1\n`,
      "verbatim/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nimport { unused } from "./effect.js"\n` +
        `export default ${lake("`verbatim_${(globalThis as any).sideEffect ?? \"dropped\"}`")}\n`,
      // (the options of the files it extends, a relative one and a package: they were not read)
      "ext/tsconfig.json": `{ "extends": ["./base.json", "@team/tsconfig"], "compilerOptions": { /* "target": "ES2020", */ } }\n`,
      "ext/base.json": `{ "compilerOptions": { "experimentalDecorators": true, /* trailing, */ }, }\n`,
      "ext/node_modules/@team/tsconfig/package.json": `{ "name": "@team/tsconfig" }\n`,
      "ext/node_modules/@team/tsconfig/tsconfig.json": `{ "compilerOptions": { "useDefineForClassFields": false } }\n`,
      "ext/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nconst Inject = (t: string) => (target: any, _key: any, _index: number) => { target.inj = t }\n` +
        `class B { set x(_v: string) { (this as any)._x = "setter" } }\nclass D extends B { x = "field" }\n` +
        `class S { constructor(@Inject("param") readonly d: string) {} }\nexport default ${lake("`ext_${(S as any).inj}_${(new D() as any)._x}`")}\n`,
      // (a tsconfig.json whose include leaves the plugin out does not apply to it, as under tsx: it
      // applied to every file below it, "incl_setter" against tsx's "incl_undefined")
      "incl/tsconfig.json": `{ "include": ["src"], "compilerOptions": { "useDefineForClassFields": false } }\n`,
      "incl/plugin.ts":
        `import { Plugin, FrozenLake } from "effect-gym"\nclass B { set x(_v: string) { (this as any)._x = "setter" } }\nclass D extends B { x = "field" }\n` +
        `export default ${lake("`incl_${(new D() as any)._x}`")}\n`
    })
    for (const [name, expected] of [["deco", "deco_param_string"], ["fields", "fields_setter"], ["verbatim", "verbatim_kept"], ["ext", "ext_param_setter"], ["incl", "incl_undefined"]]) {
      // (tsx read the tsconfig.json of the folder it ran in: the same, here)
      for (const loader of [{}, { EFFECT_GYM_TS_LOADER: "tsx" }]) {
        const result = envsIn(path.join(dir, name), loader)
        expect(result.code, `${name} ${JSON.stringify(loader)}: ${result.stderr}`).toBe(0)
        expect(result.stdout, `${name} ${JSON.stringify(loader)}`).toMatch(new RegExp(`^\\s+${expected}\\s`, "m"))
      }
    }
  }, 120_000)

  it("TypeScript files named otherwise than by a relative specifier of a TypeScript module are found, as tsx found them: package imports and exports naming .js, a main without extension, index.ts, a subpath, require from JavaScript", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    const plugin = (imports: string, name: string) =>
      `import { Plugin, FrozenLake } from "effect-gym"\n${imports}\nexport default ${lake(`${name} as string`)}\n`
    write(dir, {
      // (each "Cannot find module": '.../lib/x.js', '.../src/index' ('Please verify that the package.json has a valid "main" entry'), 'wpkg', ...)
      "imports/package.json": `{ "imports": { "#lib/*": "./lib/*.js" } }\n`,
      "imports/lib/x.ts": `export const v = "imports_js"\n`,
      "imports/plugin.mts": plugin(`import { v } from "#lib/x"`, "v"),
      "main/node_modules/wmain/package.json": `{ "name": "wmain", "main": "src/index" }\n`,
      "main/node_modules/wmain/src/index.ts": `export const v = "main_bare"\n`,
      "main/node_modules/wexports/package.json": `{ "name": "wexports", "exports": { ".": "./src/index.js" } }\n`,
      "main/node_modules/wexports/src/index.ts": `export const v = "_exports_js"\n`,
      "main/node_modules/windex/package.json": `{ "name": "windex" }\n`,
      "main/node_modules/windex/index.ts": `export const v = "_index"\n`,
      "main/node_modules/windex/lib/util.ts": `export const v = "_subpath"\n`,
      "main/plugin.ts": plugin(
        `import { v as a } from "wmain"\nimport { v as b } from "wexports"\nimport { v as c } from "windex"\nimport { v as d } from "windex/lib/util"`,
        "a + b + c + d"
      ),
      "fromjs/helper.ts": `export const v = "fromjs"\n`,
      "fromjs/middle.cjs": `module.exports = require("./helper")\n`,
      "fromjs/plugin.ts": plugin(`import { v } from "./middle.cjs"`, "v")
    })
    const plugins = ["imports/plugin.mts", "main/plugin.ts", "fromjs/plugin.ts"].map((p) => path.join(dir, p))
    const { code, stdout, stderr } = envs(plugins)
    expect(code, stderr).toBe(0)
    for (const name of ["imports_js", "main_bare_exports_js_index_subpath", "fromjs"]) {
      expect(stdout, name).toMatch(new RegExp(`^\\s+${name}\\s`, "m"))
    }
    expect(envs(plugins, { EFFECT_GYM_TS_LOADER: "tsx" }).code).toBe(0)
  }, 120_000)

  it("a .js module with import/export outside a type-module package that a CommonJS TypeScript plugin requires runs as CommonJS, as tsx ran it: require and __dirname there", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plugin-ts-"))
    write(dir, {
      // (Node took it for an ES module: "require is not defined in ES module scope", and __dirname undefined, silently)
      "other.cjs": `module.exports = "_required"\n`,
      "helper.js": `const other = require("./other.cjs")\nexport const name = "js_" + typeof __dirname + other\n`,
      "plugin.ts": `import { Plugin, FrozenLake } from "effect-gym"\nimport { name } from "./helper.js"\nexport default ${lake("name")}\n`
    })
    const { code, stdout, stderr } = envs([path.join(dir, "plugin.ts")])
    expect(code, stderr).toBe(0)
    expect(stdout).toMatch(/^\s+js_string_required\s/m)
  }, 120_000)
})
