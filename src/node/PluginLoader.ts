/**
 * Loads plugin modules by path at run time: JavaScript as is; TypeScript (`.ts`, `.mts`, `.cts`)
 * compiled by esbuild in this thread (`internal/typescript.ts`), `.tsx` and, when
 * `EFFECT_GYM_TS_LOADER=tsx`, every TypeScript plugin through tsx's loader.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Module from "node:module"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Plugin from "../Plugin.js"
import * as Registry from "../Registry.js"
import * as Builtins from "./Builtins.js"
import { errorMessage } from "../internal/lift.js"
import * as TypeScript from "./internal/typescript.js"

const TS_EXTENSIONS = new Set([".ts", ".mts", ".cts", ".tsx"])

/** The packages a plugin may import without having them installed where it lives. */
const OWN = /^(?:effect-gym|effect|@effect\/[^/]+)(?:\/.*)?$/

let fallbackInstalled = false

/**
 * Lets plugins in any folder import `effect-gym`, `effect` and `@effect/...` (when they are not
 * installed next to the plugin, the copies this tool runs with): a resolve hook that, on "not
 * found" for one of those, resolves it from this package, for `import` and `require` alike (tsx
 * compiles a `.ts` file outside a `"type": "module"` package to CommonJS; `.cts` files).
 * `module.registerHooks`, run in this thread: `module.register` (now deprecated) ran its hooks on a
 * thread of their own, whose start cost each process that loaded a plugin about 0.45 s of CPU (1.45-1.54
 * against 1.03 s to import the package), and CommonJS needed a patch of `Module._resolveFilename`.
 */
const installResolveFallback = (): void => {
  if (fallbackInstalled) return
  fallbackInstalled = true
  const base = import.meta.url
  const own = createRequire(base)
  // (`own.resolve` runs this hook again: a package that this package lacks as well, e.g.
  // `@effect/nope`, fell back again and again, "Maximum call stack size exceeded")
  let fallingBack = false
  Module.registerHooks({
    resolve: (specifier, context, nextResolve) => {
      try {
        return nextResolve(specifier, context)
      } catch (error) {
        const code = (error as { readonly code?: unknown } | null)?.code
        if (!OWN.test(specifier) || fallingBack) throw error
        // (an import resolves from this package; a require, which resolves from its parent module
        // whatever the URL, is resolved here as this package requires it)
        if (code === "ERR_MODULE_NOT_FOUND") {
          try {
            return nextResolve(specifier, { ...context, parentURL: base })
          } catch (fallbackError) {
            // (not here either: the plugin's own error, which names the module that imported it,
            // not this package's bundle)
            throw (fallbackError as { readonly code?: unknown } | null)?.code === "ERR_MODULE_NOT_FOUND" ? error : fallbackError
          }
        }
        if (code !== "MODULE_NOT_FOUND") throw error
        fallingBack = true
        try {
          return { url: pathToFileURL(own.resolve(specifier)).href, shortCircuit: true }
        } catch (fallbackError) {
          // (not here either: the plugin's own error, which names the plugin that asked; another
          // error, e.g. a subpath the package does not export, as it is)
          throw (fallbackError as { readonly code?: unknown } | null)?.code === "MODULE_NOT_FOUND" ? error : fallbackError
        } finally {
          fallingBack = false
        }
      }
    }
  })
}

/** Whether tsx compiles this TypeScript file as CommonJS (by extension, then the nearest package.json). */
const isCommonJs = (file: string): boolean => {
  const extension = path.extname(file)
  if (extension === ".cts") return true
  if (extension === ".mts") return false
  return TypeScript.packageType(file) !== "module"
}

/** The folder of this package (the nearest package.json above this module), whose frames are not the plugin's. */
const ownRoot = (): string => {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  while (!fs.existsSync(path.join(dir, "package.json")) && path.dirname(dir) !== dir) dir = path.dirname(dir)
  return dir + path.sep
}

/**
 * Where a plugin's error was thrown: the first frame of its stack in a file of the user's (not
 * Node's, this package's or a package under node_modules), as "file:line:column". A plugin that
 * threw as it loaded said only its message ("failed to load: boom"), with tsx as now.
 */
const thrownAt = (cause: unknown): ReadonlyArray<string> => {
  const stack = cause instanceof Error && typeof cause.stack === "string" ? cause.stack : ""
  const own = ownRoot()
  for (const line of stack.split("\n").slice(1)) {
    const frame = /^\s*at (?:.*? \()?((?:file:\/\/)?\/.*?|[A-Za-z]:\\.*?):(\d+):(\d+)\)?$/.exec(line)
    if (frame === null) continue
    let file = frame[1]
    try {
      if (file.startsWith("file:")) file = fileURLToPath(file)
    } catch {
      continue
    }
    if (file.startsWith(own) || file.split(path.sep).includes("node_modules")) continue
    return [`${file}:${frame[2]}:${frame[3]}`]
  }
  return []
}

/**
 * Where a SyntaxError is: in the plugin's own file, else (a TypeScript plugin) in a module it
 * loaded ("Unexpected token ';'" for a `.js` helper, named by nothing: tsx named it), else where it
 * was thrown (`JSON.parse` as the plugin ran: it named nothing).
 */
const syntaxAt = (file: string, mark: number | undefined, cause: unknown): ReadonlyArray<string> => {
  const own = TypeScript.locate(file)
  if (own.length > 0) return own
  const loaded = mark === undefined ? [] : TypeScript.locateLoaded(mark)
  return loaded.length > 0 ? loaded : thrownAt(cause)
}

let typeScriptRegistered: Promise<void> | undefined

/**
 * Lets this process import TypeScript: tsx's loader registered once, for ES modules and CommonJS
 * (`.cts`, and `.ts` outside a `"type": "module"` package). Registered for the whole process, not
 * per import (`tsImport`'s namespaces): a namespaced load gives the CommonJS dependencies a plugin
 * loads first (e.g. undici, through the viewer) a second module instance beside the first, which
 * breaks packages that check their own symbols (undici: "Illegal constructor").
 */
const registerTypeScript = (): Promise<void> =>
  typeScriptRegistered ??= (async () => {
    const [esm, cjs] = await Promise.all([import("tsx/esm/api"), import("tsx/cjs/api")])
    esm.register()
    cjs.register()
  })()

/**
 * Imports one plugin file and checks its export.
 *
 * @since 0.1.0
 * @category loading
 */
export const load = (file: string): Effect.Effect<Plugin.Plugin, Plugin.PluginError> =>
  Effect.gen(function*() {
    const absolute = path.resolve(file)
    if (!fs.existsSync(absolute)) {
      return yield* new Plugin.PluginError({ file, detail: "file not found" })
    }
    const url = pathToFileURL(absolute).href
    // (`node dist/cli/bin.js` on an older Node, which has no launcher to run it again on the
    // clone's: it died with "internal error: TypeError: Module.registerHooks is not a function")
    if (typeof Module.registerHooks !== "function") {
      return yield* new Plugin.PluginError({
        file,
        detail: `effect-gym needs Node >= 24 to load plugins (package.json engines; module.registerHooks); this is Node ${process.versions.node}`
      })
    }
    installResolveFallback()
    // (the files loaded before this plugin: a syntax error is looked for in those loaded after)
    let mark: number | undefined
    const module = yield* Effect.tryPromise({
      try: async () => {
        if (!TS_EXTENSIONS.has(path.extname(absolute))) return (await import(url)) as unknown
        if (TypeScript.native(absolute)) {
          TypeScript.install()
          mark = TypeScript.loadedCount()
          return TypeScript.isCommonJs(absolute) ? createRequire(import.meta.url)(absolute) as unknown : (await import(url)) as unknown
        }
        await registerTypeScript()
        // CommonJS TypeScript (`.cts`, or `.ts` in a package that is not `"type": "module"`) is
        // required: tsx's CommonJS loader can require the ES modules it imports (effect-gym).
        return isCommonJs(absolute) ? createRequire(import.meta.url)(absolute) as unknown : (await import(url)) as unknown
      },
      catch: (cause) =>
        new Plugin.PluginError({
          file,
          // (Node's syntax errors in an imported module name no line: where it is in the plugin's
          // own file, esbuild's parse of that file says)
          detail: `failed to load: ${errorMessage(cause)}${
            (cause instanceof SyntaxError ? syntaxAt(absolute, mark, cause) : thrownAt(cause)).map((at) => ` (${at})`).join("")
          }`,
          cause
        })
    })
    return yield* Effect.fromResult(Plugin.fromModule(file, module))
  })

/**
 * Every plugin, loaded in order. tsx, when one of them needs it, is registered before any of them
 * loads: registered after a plugin compiled here, a later ES module plugin that imported a
 * CommonJS `.ts` module by name failed, "The requested module './h.ts' does not provide an export
 * named 'counter'" (`view --plugin` loaded them one by one and still did).
 *
 * @since 0.5.0
 * @category loading
 */
export const loadAll = (files: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<Plugin.Plugin>, Plugin.PluginError> => {
  const byTsx = files.find((file) => TS_EXTENSIONS.has(path.extname(file)) && !TypeScript.native(path.resolve(file)))
  return Effect.andThen(
    byTsx === undefined ? Effect.void : Effect.tryPromise({
      try: () => registerTypeScript(),
      catch: (cause) => new Plugin.PluginError({ file: byTsx, detail: `failed to load: ${errorMessage(cause)}`, cause })
    }),
    Effect.forEach(files, load)
  )
}

/**
 * The built-in registry (core and edge built-ins) plus every plugin, in order.
 *
 * @since 0.1.0
 * @category loading
 */
export const registry = (
  files: ReadonlyArray<string>,
  base: Registry.Registry = Builtins.registry
): Effect.Effect<Registry.Registry, Plugin.PluginError> =>
  Effect.map(loadAll(files), (plugins) => plugins.reduce(Registry.add, base))
