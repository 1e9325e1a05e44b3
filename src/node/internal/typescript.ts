/**
 * TypeScript plugins on Node's own transform (`module.stripTypeScriptTypes`: mode `strip`, types
 * blanked out, each line where it was; mode `transform`, with a source map, where enums, namespaces
 * or parameter properties need compiling), in this thread, with `module.registerHooks`: a load
 * hook that gives Node the JavaScript of each `.ts`, `.mts` and `.cts` file (under `node_modules`
 * too, as tsx did), and a resolve hook that finds the TypeScript file a TypeScript module names the
 * way `tsc` lets it (`./util.js` for `./util.ts`, `./util`, `./dir` for `./dir/index.ts`).
 *
 * A file Node's transform refuses (its errors name no line), and one with decorators (which it
 * leaves for V8, which has none), is compiled by esbuild instead, the compiler tsx runs (tsx's own
 * copy): its output runs, or its error names the file, line and column.
 *
 * tsx (what every TypeScript plugin loaded with before) stays for what neither does: `.tsx` files,
 * and any plugin when `EFFECT_GYM_TS_LOADER=tsx` (tsconfig's `paths`, `experimentalDecorators`). Its
 * CommonJS loader cost a `.ts` plugin outside a `"type": "module"` package (a plain `npm init`
 * folder) about 3 s of CPU, the `effect` package it imports going through tsx's hooks thread
 * (BENCHMARKS.md).
 *
 * A `.ts` file is an ES module or CommonJS as Node decides it for JavaScript: `.mts` and `.cts` by
 * their extension, `.ts` by the nearest package.json's `"type"`, and where that says nothing, by its
 * syntax (an `import` or `export` statement, `import.meta` or a top-level `await` make it a module).
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Module from "node:module"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as vm from "node:vm"

const TS = /\.(?:ts|mts|cts)$/

/** Whether `EFFECT_GYM_TS_LOADER=tsx` asks for tsx for every TypeScript plugin. */
export const tsxAsked = (): boolean => process.env.EFFECT_GYM_TS_LOADER === "tsx"

/** Whether Node's own transform loads this file (else tsx does: `.tsx`, or tsx asked). */
export const native = (file: string): boolean =>
  TS.test(file) && !tsxAsked() && typeof (Module as { stripTypeScriptTypes?: unknown }).stripTypeScriptTypes === "function"

type Strip = (
  code: string,
  options: { readonly mode: "strip" | "transform"; readonly sourceUrl: string; readonly sourceMap?: boolean }
) => string

/**
 * The JavaScript of a TypeScript source: its types blanked out where that is all it takes (each
 * line where it was), else (enums, namespaces, parameter properties) compiled with a source map, so
 * that a stack trace names the line of the TypeScript file (the transform prints the file anew: an
 * error on line 9 of a plugin with an enum above it was reported on line 18). Node warns once that
 * the function is experimental; that warning is the tool's business, not the user's, so it is not
 * printed (any other warning is).
 */
const transform = (source: string, file: string): string => {
  const strip = (Module as unknown as { readonly stripTypeScriptTypes: Strip }).stripTypeScriptTypes
  const emitWarning = process.emitWarning
  process.emitWarning = ((warning: string | Error, ...rest: Array<unknown>) => {
    const text = typeof warning === "string" ? warning : warning.message
    if (text.includes("stripTypeScriptTypes")) return
    return (emitWarning as (...args: Array<unknown>) => void).call(process, warning, ...rest)
  }) as typeof process.emitWarning
  try {
    const sourceUrl = pathToFileURL(file).href
    try {
      return strip(source, { mode: "strip", sourceUrl })
    } catch (error) {
      if ((error as { readonly code?: unknown } | null)?.code !== "ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX") throw error
      return strip(source, { mode: "transform", sourceUrl, sourceMap: true })
    }
  } finally {
    process.emitWarning = emitWarning
  }
}

interface Esbuild {
  readonly transformSync: (
    code: string,
    options: {
      readonly loader: "ts" | "js"
      readonly sourcefile: string
      readonly target: string
      readonly format?: "cjs"
      readonly platform?: "node"
      readonly sourcemap?: "inline"
    }
  ) => { readonly code: string }
}

let esbuild: Esbuild | undefined

/** esbuild as tsx has it (a dependency of tsx, so present wherever tsx is). */
const esbuildOf = (): Esbuild =>
  esbuild ??= createRequire(createRequire(import.meta.url).resolve("tsx"))("esbuild") as Esbuild

/**
 * Where esbuild finds a syntax error in `file` ("/path/file.ts:2:18: Unexpected \";\""), none
 * when it parses the file (the error is elsewhere) or cannot read it.
 */
export const locate = (file: string): ReadonlyArray<string> => {
  try {
    const loader = /\.[mc]?ts$/.test(file) ? "ts" : "js"
    esbuildOf().transformSync(fs.readFileSync(file, "utf8"), { loader, sourcefile: file, target: "esnext" })
    return []
  } catch (error) {
    const errors = (error as { readonly errors?: ReadonlyArray<EsbuildMessage> } | null)?.errors
    return (errors ?? []).slice(0, 1).flatMap((e) =>
      e.location === null || e.location === undefined ? [] : [`${e.location.file}:${e.location.line}:${e.location.column + 1}: ${e.text}`]
    )
  }
}

interface EsbuildMessage {
  readonly text: string
  readonly location?: { readonly file: string; readonly line: number; readonly column: number } | null
}

/** A line that starts with a decorator (`@name`): Node's transform leaves those to V8, which has none. */
const DECORATOR = /^[ \t]*@[A-Za-z_$]/m

/**
 * An auto-accessor (`accessor name = ...`, decorators' proposal): Node's transform leaves it to V8,
 * which has none ("Unexpected identifier 'name'", no file, no line); esbuild compiles it to a
 * private field with a getter and setter, as tsx did.
 */
const ACCESSOR = /\baccessor\s+(?:[A-Za-z_$#[]|\d)/

const SYNTAX_CODES = new Set(["ERR_INVALID_TYPESCRIPT_SYNTAX", "ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX"])

/** The JavaScript of a TypeScript file: Node's transform, or esbuild where that cannot (see above). */
export const compile = (source: string, file: string): string => {
  const byEsbuild = () =>
    esbuildOf().transformSync(source, { loader: "ts", sourcefile: file, target: `node${process.versions.node}`, sourcemap: "inline" }).code
  if (DECORATOR.test(source) || ACCESSOR.test(source)) return byEsbuild()
  let code: string
  try {
    code = transform(source, file)
  } catch (error) {
    if (!SYNTAX_CODES.has((error as { readonly code?: unknown } | null)?.code as string)) throw error
    return byEsbuild()
  }
  return importsUnused(code) ? byEsbuild() : code
}

/** An import statement (over lines, as written, where the types were only blanked out): its clause. */
const IMPORT = /^import\s+([^"';]*?)\s*from\s*(["'])[^"'\n]*\2[^\n]*$/gm

/** The names an import clause (`D, { a as b, c }`, `* as NS`) binds. */
const importedNames = (clause: string): ReadonlyArray<string> => {
  const braces = /\{([^}]*)\}/.exec(clause)
  const named = (braces?.[1] ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "")
    .map((s) => s.split(/\s+as\s+/).pop()!.trim())
  const outside = clause.replace(/\{[^}]*\}/, "").split(",").map((s) => s.trim()).filter((s) => s !== "")
    .map((s) => s.replace(/^\*\s*as\s+/, ""))
  return [...outside, ...named].filter((name) => /^[\w$]+$/.test(name))
}

/**
 * Whether a name imported by this JavaScript is not used in it: a type imported without `type`
 * (`import { Config } from "./types.js"`, `Config` an interface). tsc and esbuild (tsx) drop such
 * imports; Node's transform keeps them, and the import fails, "The requested module './types.js'
 * does not provide an export named 'Config'". Such a file is compiled by esbuild, which drops them.
 */
const importsUnused = (code: string): boolean => {
  const statements = [...code.matchAll(IMPORT)]
  if (statements.length === 0) return false
  // (the words of the rest, in one pass: a regular expression per name was a pass per name)
  const used = new Set(code.replace(IMPORT, "").match(/[\w$]+/g) ?? [])
  return statements.some((statement) => importedNames(statement[1]).some((name) => !used.has(name)))
}

/** The `"type"` of the nearest package.json ("module", "commonjs"), or undefined where none says. */
const packageType = (file: string): string | undefined => {
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, "package.json")
    if (fs.existsSync(manifest)) {
      try {
        const type = (JSON.parse(fs.readFileSync(manifest, "utf8")) as { readonly type?: unknown }).type
        return typeof type === "string" ? type : undefined
      } catch {
        return undefined
      }
    }
    if (path.dirname(dir) === dir) return undefined
  }
}

/** The errors V8 gives a module's syntax compiled as a script: what Node's own detection looks for. */
const MODULE_ONLY: ReadonlyArray<string> = [
  "Cannot use import statement outside a module",
  "Unexpected token 'export'",
  "Cannot use 'import.meta' outside a module",
  "await is only valid in async functions and the top level bodies of modules"
]

const looksLikeModule = (code: string, file: string): boolean => {
  try {
    // (compiled, not run; wrapped as Node wraps CommonJS, so that a top-level `return` is no module;
    // a `#!` line, valid only at the start of a file, is left out: inside the wrapper it was a
    // syntax error, and an ES module with a shebang ran as CommonJS, "Cannot use import statement
    // outside a module")
    new vm.Script(`(function (exports, require, module, __filename, __dirname) {${code.replace(/^#!.*/, "")}\n})`, { filename: file })
    return false
  } catch (error) {
    return error instanceof SyntaxError && MODULE_ONLY.some((text) => error.message.includes(text))
  }
}

/**
 * How Node is to run a TypeScript file's JavaScript. A `.ts` file with `import`/`export` in a
 * package that says `"type": "commonjs"` runs as a module (tsx compiled it to CommonJS, so such
 * plugins loaded before; Node alone refuses them).
 */
export const formatOf = (file: string, code: string): "module" | "commonjs" => {
  if (file.endsWith(".mts")) return "module"
  if (file.endsWith(".cts")) return "commonjs"
  if (packageType(file) === "module") return "module"
  return looksLikeModule(code, file) ? "module" : "commonjs"
}

/** The TypeScript files a relative specifier of a TypeScript module may name, in tsc's order. */
const candidates = (target: string): ReadonlyArray<string> => {
  const js = /\.(m|c)?js$/.exec(target)
  if (js !== null) return [target.slice(0, -js[0].length) + `.${js[1] ?? ""}ts`]
  if (path.extname(target) !== "") return []
  return [`${target}.ts`, `${target}.mts`, `${target}.cts`, path.join(target, "index.ts")]
}

const isFile = (file: string): boolean => {
  try {
    return fs.statSync(file).isFile()
  } catch {
    return false
  }
}

/**
 * TypeScript compiled to CommonJS by esbuild, as tsx did; `platform: "node"` has it name the
 * exports in a form Node's CommonJS lexer reads, so that `import { x } from "./x.cts"` finds `x`
 * (without it: "Named export 'x' not found").
 */
const toCommonJs = (source: string, file: string): string =>
  esbuildOf().transformSync(source, {
    loader: "ts",
    sourcefile: file,
    target: `node${process.versions.node}`,
    format: "cjs",
    platform: "node",
    sourcemap: "inline"
  }).code

/** CommonJS's names, as an ES module can define them. */
const COMMONJS_GLOBALS: ReadonlyArray<readonly [string, string]> = [
  ["__filename", "import.meta.filename"],
  ["__dirname", "import.meta.dirname"],
  ["require", `process.getBuiltinModule("node:module").createRequire(import.meta.url)`]
]

/**
 * An ES module's JavaScript with `__dirname`, `__filename` and `require` defined where it uses
 * them and declares none of its own (tsx compiled such a `.ts` file to CommonJS, where they are:
 * "__dirname is not defined in ES module scope" on Node's transform alone). Defined at the start of
 * its first line (after a `#!` line), so that every other line stays where it was; it stays a
 * module (`import.meta`, a top-level `await`, an import of a module that awaits: what a compile to
 * CommonJS broke).
 */
const withCommonJsGlobals = (code: string): string => {
  const defined = COMMONJS_GLOBALS.filter(([name]) =>
    new RegExp(`(?<![.\\w$])${name}(?![\\w$])`).test(code) &&
    !new RegExp(`\\b(?:const|let|var|function|class)\\s+${name}(?![\\w$])|\\bas\\s+${name}(?![\\w$])|\\bimport\\s+${name}(?![\\w$])`).test(code)
  )
  if (defined.length === 0) return code
  const head = /^\uFEFF?(?:#![^\n]*\n)?/.exec(code)![0]
  return head + defined.map(([name, value]) => `var ${name} = ${value}; `).join("") + code.slice(head.length)
}

interface Prepared {
  readonly format: "module" | "commonjs"
  readonly code: string
}

/** A plugin's JavaScript prepared by {@link isCommonJs}, for the load that follows. */
const prepared = new Map<string, Prepared>()

/**
 * A TypeScript file's JavaScript and how Node is to run it. A `.cts` file written with
 * `import`/`export` is compiled to CommonJS by esbuild, as tsx did (Node alone refuses it).
 */
const prepare = (file: string): Prepared => {
  const kept = prepared.get(file)
  if (kept !== undefined) {
    prepared.delete(file)
    return kept
  }
  const source = fs.readFileSync(file, "utf8")
  const code = compile(source, file)
  const format = formatOf(file, code)
  if (format === "commonjs" && file.endsWith(".cts") && looksLikeModule(code, file)) {
    return { format, code: toCommonJs(source, file) }
  }
  // (an ES module `.ts` outside a `"type": "module"` package, which tsx compiled to CommonJS)
  if (format === "module" && file.endsWith(".ts") && packageType(file) !== "module") {
    return { format, code: withCommonJsGlobals(code) }
  }
  return { format, code }
}

/**
 * Whether Node runs this TypeScript file as CommonJS (then the plugin is `require`d, as tsx's
 * CommonJS plugins were; an `import` of it would give its `module.exports` as the default export
 * all the same).
 */
export const isCommonJs = (file: string): boolean => {
  if (file.endsWith(".mts") || (!file.endsWith(".cts") && packageType(file) === "module")) return false
  const ready = prepare(file)
  prepared.set(file, ready)
  return ready.format === "commonjs"
}

type Resolved = ReturnType<Parameters<Parameters<typeof Module.registerHooks>[0]["resolve"] & {}>[2]>
type ResolveContext = Parameters<Parameters<typeof Module.registerHooks>[0]["resolve"] & {}>[1]

/**
 * A JSON file a TypeScript module imports without `with { type: "json" }` (as tsx let it, and
 * bundlers do), imported as JSON: Node alone refused it, 'Module "file:///.../data.json" needs an
 * import attribute of "type: json"', naming neither the plugin nor the line.
 */
const jsonAsked = (resolved: Resolved, context: ResolveContext): Resolved => {
  const parent = context.parentURL
  if (
    parent === undefined || !parent.startsWith("file:") || !TS.test(parent.split(/[?#]/)[0]) ||
    !resolved.url.startsWith("file:") ||
    !resolved.url.split(/[?#]/)[0].endsWith(".json") || context.importAttributes?.type !== undefined ||
    !context.conditions.includes("import")
  ) return resolved
  return { ...resolved, importAttributes: { ...context.importAttributes, type: "json" } }
}

let installed = false

/** Installs the hooks in this thread, once (each thread that loads plugins installs its own). */
export const install = (): void => {
  if (installed) return
  installed = true
  // (the source maps of what Node's transform and esbuild compile, as tsx had them: a stack trace
  // names the TypeScript file's own lines)
  const maps = Module as unknown as {
    readonly getSourceMapsSupport?: () => { readonly enabled: boolean; readonly nodeModules: boolean; readonly generatedCode: boolean }
    readonly setSourceMapsSupport?: (enabled: boolean, options?: { readonly nodeModules?: boolean; readonly generatedCode?: boolean }) => void
  }
  const support = maps.getSourceMapsSupport?.()
  if (support !== undefined && !support.enabled) {
    maps.setSourceMapsSupport?.(true, { nodeModules: support.nodeModules, generatedCode: support.generatedCode })
  }
  Module.registerHooks({
    resolve: (specifier, context, nextResolve) => {
      try {
        return jsonAsked(nextResolve(specifier, context), context)
      } catch (error) {
        const parent = context.parentURL
        const code = (error as { readonly code?: unknown } | null)?.code
        if (
          (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND" && code !== "ERR_UNSUPPORTED_DIR_IMPORT") ||
          parent === undefined ||
          !parent.startsWith("file:") || !TS.test(parent) || !(specifier.startsWith("./") || specifier.startsWith("../"))
        ) throw error
        const base = path.dirname(fileURLToPath(parent))
        for (const candidate of candidates(path.resolve(base, specifier))) {
          if (isFile(candidate)) return { url: pathToFileURL(candidate).href, shortCircuit: true }
        }
        throw error
      }
    },
    load: (url, context, nextLoad) => {
      if (!url.startsWith("file:") || !TS.test(url.split(/[?#]/)[0]) || tsxAsked()) return nextLoad(url, context)
      const file = fileURLToPath(url)
      // (under node_modules too, where Node alone strips no types: a plugin in another project's
      // node_modules failed, "Stripping types is currently unsupported for files under
      // node_modules", where tsx, which compiles TypeScript wherever it is, loaded it)
      const { format, code } = prepare(file)
      return { format, source: code, shortCircuit: true }
    }
  })
}
