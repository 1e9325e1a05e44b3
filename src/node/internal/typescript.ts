/**
 * TypeScript plugins compiled in this thread by esbuild (the compiler tsx runs, with tsx's
 * semantics), through `module.registerHooks`: a load hook that gives Node the JavaScript of each
 * `.ts`, `.mts` and `.cts` file (under `node_modules` too, as tsx did), and a resolve hook that finds
 * the TypeScript file a TypeScript module names the way `tsc` lets it (`./util.js` for `./util.ts`,
 * `./util`, `./dir` for `./dir/index.ts`) and imports a JSON file it names without an import
 * attribute as JSON.
 *
 * tsx itself ran its hooks on a thread of their own (`module.register`): a `.ts` plugin outside a
 * `"type": "module"` package took 1-3.5 s to load, the `effect` package it imports going through
 * that thread file by file; here the hooks run where the modules load (BENCHMARKS.md). Node's own
 * transform (`module.stripTypeScriptTypes`) was tried first and given up: it keeps an import of a
 * type written without `type` ("does not provide an export named ..."), leaves decorators and
 * `accessor` to V8, and its errors name no line; guessing around it took regular expressions over
 * the source that a comment naming the type still defeated.
 *
 * Format, as tsx decides it: `.mts` an ES module, `.cts` CommonJS, `.ts` an ES module in a
 * `"type": "module"` package and CommonJS elsewhere (its `import`/`export` compiled to `require`,
 * so `__dirname` and `require` are there), except a file that CommonJS cannot hold (a top-level
 * `await`, `import.meta`: esbuild says so), which stays a module.
 *
 * tsx stays for `.tsx` files, and for any TypeScript plugin when `EFFECT_GYM_TS_LOADER=tsx`
 * (tsconfig's `paths`, which esbuild's transform does not read).
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Module from "node:module"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { getTsconfig, type TsConfigResult } from "get-tsconfig"

const TS = /\.(?:ts|mts|cts)$/

/** Whether `EFFECT_GYM_TS_LOADER=tsx` asks for tsx for every TypeScript plugin. */
export const tsxAsked = (): boolean => process.env.EFFECT_GYM_TS_LOADER === "tsx"

/** Whether this file is compiled here (else tsx loads it: `.tsx`, or tsx asked). */
export const native = (file: string): boolean => TS.test(file) && !tsxAsked()

interface EsbuildMessage {
  readonly text: string
  readonly location?: { readonly file: string; readonly line: number; readonly column: number } | null
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
      readonly logLevel?: "silent"
      readonly tsconfigRaw?: string
    }
  ) => { readonly code: string; readonly warnings: ReadonlyArray<EsbuildMessage> }
}

let esbuild: Esbuild | undefined

/** esbuild, loaded at the first TypeScript plugin (a dependency of this package, as of tsx). */
const esbuildOf = (): Esbuild => esbuild ??= createRequire(import.meta.url)("esbuild") as Esbuild

const target = `node${process.versions.node}`

/**
 * Where esbuild finds a syntax error in `file` ("/path/file.ts:2:18: Unexpected \";\""), none
 * when it parses the file (the error is elsewhere) or cannot read it. For JavaScript plugins too:
 * Node's syntax errors in an imported module name no line.
 */
export const locate = (file: string): ReadonlyArray<string> => {
  try {
    const loader = TS.test(file) ? "ts" : "js"
    const tsconfigRaw = loader === "ts" ? tsconfigOf(file) : undefined
    esbuildOf().transformSync(fs.readFileSync(file, "utf8"), {
      loader,
      sourcefile: file,
      target: "esnext",
      logLevel: "silent",
      ...(tsconfigRaw === undefined ? {} : { tsconfigRaw })
    })
    return []
  } catch (error) {
    const errors = (error as { readonly errors?: ReadonlyArray<EsbuildMessage> } | null)?.errors
    return (errors ?? []).slice(0, 1).flatMap((e) =>
      e.location === null || e.location === undefined ? [] : [`${e.location.file}:${e.location.line}:${e.location.column + 1}: ${e.text}`]
    )
  }
}

const tsconfigCache: Map<string, unknown> = new Map()
const raws = new Map<string, string | undefined>()

/**
 * The `compilerOptions` of the tsconfig.json that applies to `file`, as esbuild's `tsconfigRaw`
 * (`experimentalDecorators`, `useDefineForClassFields`, `target`, `verbatimModuleSyntax`, ...), as
 * tsx gave esbuild the project's: found, parsed (comments, trailing commas, `extends`) and matched
 * against its `include`, `exclude` and `files` by get-tsconfig (the library tsx bundles). None for a
 * file under `node_modules`, none that applies to the file, and none esbuild cannot read (tsx loaded
 * the plugin regardless). Without it, a parameter decorator failed ("Parameter decorators only work
 * when experimental decorators are enabled"), and legacy decorators, class fields and an import
 * kept for its side effect silently ran otherwise than under tsx.
 */
const tsconfigOf = (file: string): string | undefined => {
  if (file.split(path.sep).includes("node_modules")) return undefined
  let found: TsConfigResult | null
  try {
    found = getTsconfig(file, "tsconfig.json", tsconfigCache as Parameters<typeof getTsconfig>[2], true)
  } catch {
    return undefined
  }
  if (found === null) return undefined
  if (raws.has(found.path)) return raws.get(found.path)
  let raw: string | undefined = JSON.stringify({ compilerOptions: found.config.compilerOptions ?? {} })
  try {
    esbuildOf().transformSync("", { loader: "ts", sourcefile: found.path, target: "esnext", logLevel: "silent", tsconfigRaw: raw })
  } catch {
    raw = undefined
  }
  raws.set(found.path, raw)
  return raw
}

/** The `"type"` of the nearest package.json ("module", "commonjs"), or undefined where none says (or it is no JSON). */
export const packageType = (file: string): string | undefined => {
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

interface Prepared {
  readonly format: "module" | "commonjs"
  readonly code: string
}

/** Whether this TypeScript file is an ES module by its name alone: `.mts`, or a `.ts` in a `"type": "module"` package. */
const moduleByName = (file: string): boolean =>
  file.endsWith(".mts") || (!file.endsWith(".cts") && packageType(file) === "module")

/** What esbuild says when a module's syntax cannot be CommonJS (the file then stays a module). */
const MODULE_ONLY = /Top-level await is currently not supported with the "cjs" output format|"import\.meta" is not available with the "cjs" output format/

/**
 * A TypeScript file's JavaScript (with its source map inline: a stack trace names the TypeScript
 * file's lines) and how Node is to run it. An error of esbuild's names the file, line and column.
 */
const compile = (file: string): Prepared => {
  const source = fs.readFileSync(file, "utf8")
  const tsconfigRaw = tsconfigOf(file)
  const options = {
    loader: "ts",
    sourcefile: file,
    target,
    platform: "node",
    sourcemap: "inline",
    logLevel: "silent",
    ...(tsconfigRaw === undefined ? {} : { tsconfigRaw })
  } as const
  const asModule = (): Prepared => ({ format: "module", code: esbuildOf().transformSync(source, options).code })
  if (moduleByName(file)) return asModule()
  try {
    const compiled = esbuildOf().transformSync(source, { ...options, format: "cjs" })
    if (!file.endsWith(".cts") && compiled.warnings.some((w) => MODULE_ONLY.test(w.text))) return asModule()
    return { format: "commonjs", code: compiled.code }
  } catch (error) {
    const errors = (error as { readonly errors?: ReadonlyArray<EsbuildMessage> } | null)?.errors ?? []
    if (!file.endsWith(".cts") && errors.length > 0 && errors.every((e) => MODULE_ONLY.test(e.text))) return asModule()
    throw error
  }
}

/**
 * A plugin's JavaScript prepared by {@link isCommonJs}, for the load that follows (taken by it; kept
 * with the file's size and time, so that a load that does not follow, e.g. a `require` answered from
 * its cache, leaves nothing a changed file could be mistaken for).
 */
const prepared = new Map<string, Prepared & { readonly stamp: string }>()

const stampOf = (file: string): string => {
  const stat = fs.statSync(file)
  return `${stat.size}:${stat.mtimeMs}`
}

const prepare = (file: string): Prepared => {
  const kept = prepared.get(file)
  prepared.delete(file)
  if (kept !== undefined && kept.stamp === stampOf(file)) return kept
  return compile(file)
}

/**
 * Whether Node runs this TypeScript file as CommonJS (then the plugin is `require`d, as tsx's
 * CommonJS plugins were: under vitest, an `import` is vitest's own).
 */
export const isCommonJs = (file: string): boolean => {
  if (moduleByName(file)) return false
  const stamp = stampOf(file)
  const ready = compile(file)
  prepared.set(file, { ...ready, stamp })
  return ready.format === "commonjs"
}

/** The TypeScript files a relative specifier of a TypeScript module may name, in tsc's order. */
const candidates = (target: string): ReadonlyArray<string> => {
  const js = /\.(m|c)?js$/.exec(target)
  if (js !== null) return [target.slice(0, -js[0].length) + `.${js[1] ?? ""}ts`]
  if (path.extname(target) !== "") return []
  return [`${target}.ts`, `${target}.mts`, `${target}.cts`, path.join(target, "index.ts")]
}

/**
 * The file a "not found" error says Node looked for, where it says: an ES module's `url`; CommonJS's
 * absolute path in its message ("Cannot find module '/p/node_modules/x/src/index'. Please verify
 * that the package.json has a valid "main" entry").
 */
const missingFile = (error: unknown): string | undefined => {
  const url = (error as { readonly url?: unknown } | null)?.url
  if (typeof url === "string" && url.startsWith("file:")) return fileURLToPath(url)
  const file = /^Cannot find module '([^']+)'/.exec(error instanceof Error ? error.message : "")?.[1]
  return file !== undefined && path.isAbsolute(file) ? file : undefined
}

const isFile = (file: string): boolean => {
  try {
    return fs.statSync(file).isFile()
  } catch {
    return false
  }
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

/**
 * The files the hooks have seen loaded, in order (every format: a JavaScript neighbour too), for
 * {@link locateLoaded}.
 */
const loaded: Array<string> = []

/** How many files the hooks have seen loaded so far (a mark for {@link locateLoaded}). */
export const loadedCount = (): number => loaded.length

/**
 * Where esbuild finds a syntax error in a file loaded since `mark`, the latest first (Node compiles
 * each module as it loads it: the one that failed is the last, or near it). Node's SyntaxError for a
 * module a plugin imports names neither the module nor the line ("Unexpected token ';'"); tsx, which
 * compiled a `.js` neighbour with esbuild too, named them.
 */
export const locateLoaded = (mark: number): ReadonlyArray<string> => {
  for (let i = loaded.length - 1; i >= Math.max(mark, loaded.length - 20); i--) {
    const at = locate(loaded[i])
    if (at.length > 0) return at
  }
  return []
}

type Loaded = ReturnType<Parameters<Parameters<typeof Module.registerHooks>[0]["load"] & {}>[2]>
type LoadContext = Parameters<Parameters<typeof Module.registerHooks>[0]["load"] & {}>[1]

/**
 * A `.js` file outside `node_modules` and outside a `"type": "module"` package, with `import` or
 * `export` (Node takes it for an ES module), that is `require`d: as CommonJS, as tsx's `require`
 * compiled it (`require` and `__dirname` there; Node said "require is not defined in ES module
 * scope", and `__dirname` was undefined), unless CommonJS cannot hold it (a top-level `await`,
 * `import.meta`).
 */
const requiredAsCommonJs = (filename: string | undefined, context: LoadContext, loaded: Loaded): Loaded => {
  // (`require` leaves the format to be found as it compiles: undefined here)
  if (
    filename === undefined || (loaded.format !== undefined && loaded.format !== "module") || !filename.endsWith(".js") ||
    !context.conditions.includes("require") || loaded.source == null
  ) return loaded
  if (filename.split(path.sep).includes("node_modules") || packageType(filename) === "module") return loaded
  try {
    const source = typeof loaded.source === "string" ? loaded.source : Buffer.from(loaded.source as Uint8Array).toString("utf8")
    // (a statement that starts with import or export: else CommonJS, left as it is)
    if (!/^[ \t]*(?:import\s*[\w{*"']|export\s)/m.test(source)) return loaded
    const compiled = esbuildOf().transformSync(source, {
      loader: "js",
      sourcefile: filename,
      target,
      format: "cjs",
      platform: "node",
      sourcemap: "inline",
      logLevel: "silent"
    })
    if (compiled.warnings.some((w) => MODULE_ONLY.test(w.text))) return loaded
    return { format: "commonjs", source: compiled.code, shortCircuit: true }
  } catch {
    return loaded
  }
}

let installed = false

/** Installs the hooks in this thread, once (each thread that loads plugins installs its own). */
export const install = (): void => {
  if (installed) return
  installed = true
  // (the source maps esbuild writes, as tsx had them: a stack trace names the TypeScript file's lines)
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
        const code = (error as { readonly code?: unknown } | null)?.code
        if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND" && code !== "ERR_UNSUPPORTED_DIR_IMPORT") throw error
        // the file Node looked for, when it says (a package's "exports", "imports" or "main"): its TypeScript
        const missing = missingFile(error)
        for (const candidate of missing === undefined ? [] : candidates(missing)) {
          if (isFile(candidate)) return { url: pathToFileURL(candidate).href, shortCircuit: true }
        }
        // the specifier, as tsc lets TypeScript name a TypeScript file (from any module: tsx taught
        // require the extension too)
        const parent = context.parentURL
        if (parent === undefined || specifier.startsWith("node:") || Module.isBuiltin(specifier)) throw error
        if (parent.startsWith("file:") && (specifier.startsWith("./") || specifier.startsWith("../"))) {
          for (const candidate of candidates(path.resolve(path.dirname(fileURLToPath(parent)), specifier))) {
            if (isFile(candidate)) return { url: pathToFileURL(candidate).href, shortCircuit: true }
          }
          throw error
        }
        if (specifier.startsWith("#") || specifier.startsWith("/") || specifier.startsWith("file:")) throw error
        const js = /\.(m|c)?js$/.exec(specifier)
        const named = js !== null
          ? [specifier.slice(0, -js[0].length) + `.${js[1] ?? ""}ts`]
          : [`${specifier}.ts`, `${specifier}.mts`, `${specifier}.cts`, `${specifier}/index.ts`]
        for (const candidate of named) {
          try {
            return nextResolve(candidate, context)
          } catch {
            // (the next)
          }
        }
        throw error
      }
    },
    load: (url, context, nextLoad) => {
      // (the file's path, worked out once for the checks below: every module this thread loads comes here)
      const file = url.startsWith("file:") ? fileURLToPath(url.split(/[?#]/)[0]) : undefined
      if (file !== undefined && /\.(?:[cm]?[jt]s)$/.test(file)) loaded.push(file)
      if (file === undefined || !TS.test(file) || tsxAsked()) return requiredAsCommonJs(file, context, nextLoad(url, context))
      const { format, code } = prepare(file)
      return { format, source: code, shortCircuit: true }
    }
  })
}
