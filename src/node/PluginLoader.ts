/**
 * Loads plugin modules by path at run time: TypeScript through tsx's loader, JavaScript as is.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Module from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import * as Plugin from "../Plugin.js"
import * as Registry from "../Registry.js"
import * as Builtins from "./Builtins.js"
import { errorMessage } from "../internal/lift.js"

const TS_EXTENSIONS = new Set([".ts", ".mts", ".cts", ".tsx"])

/** The packages a plugin may import without having them installed where it lives. */
const OWN = /^(?:effect-gym|effect|@effect\/[^/]+)(?:\/.*)?$/

let fallbackInstalled = false

/** The ES module resolve hook: on "not found" for one of `OWN`, resolve it from this package. */
const RESOLVE_HOOKS = `
const OWN = ${OWN.toString()}
let base
export function initialize(data) { base = data.base }
export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context)
  } catch (error) {
    if (!OWN.test(specifier) || error?.code !== "ERR_MODULE_NOT_FOUND") throw error
    return nextResolve(specifier, { ...context, parentURL: base })
  }
}
`

/**
 * Lets plugins in any folder import `effect-gym`, `effect` and `@effect/...` (when they are not
 * installed next to the plugin, the copies this tool runs with): for ES modules through a resolve
 * hook (`module.register`); for CommonJS (tsx compiles a `.ts` file outside a `"type": "module"`
 * package to CommonJS; `.cts` files) by falling back in `Module._resolveFilename`, as tsx itself
 * hooks CommonJS resolution (Node 20 has no public hook for `require`).
 */
const installResolveFallback = (): void => {
  if (fallbackInstalled) return
  fallbackInstalled = true
  Module.register(`data:text/javascript,${encodeURIComponent(RESOLVE_HOOKS)}`, {
    parentURL: import.meta.url,
    data: { base: import.meta.url }
  })
  const own = createRequire(import.meta.url)
  const cjs = Module.Module as unknown as {
    _resolveFilename: (request: string, parent: unknown, isMain: boolean, options?: unknown) => string
  }
  const original = cjs._resolveFilename
  cjs._resolveFilename = function(request, parent, isMain, options) {
    try {
      return original.call(this, request, parent, isMain, options)
    } catch (error) {
      if ((error as { readonly code?: unknown }).code === "MODULE_NOT_FOUND" && OWN.test(request)) {
        return own.resolve(request)
      }
      throw error
    }
  }
}

/** Whether tsx compiles this TypeScript file as CommonJS (by extension, then the nearest package.json). */
const isCommonJs = (file: string): boolean => {
  const extension = path.extname(file)
  if (extension === ".cts") return true
  if (extension === ".mts") return false
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, "package.json")
    if (fs.existsSync(manifest)) {
      try {
        return (JSON.parse(fs.readFileSync(manifest, "utf8")) as { readonly type?: unknown }).type !== "module"
      } catch {
        return true
      }
    }
    if (path.dirname(dir) === dir) return true
  }
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
    installResolveFallback()
    const module = yield* Effect.tryPromise({
      try: async () => {
        if (!TS_EXTENSIONS.has(path.extname(absolute))) return (await import(url)) as unknown
        await registerTypeScript()
        // CommonJS TypeScript (`.cts`, or `.ts` in a package that is not `"type": "module"`) is
        // required: tsx's CommonJS loader can require the ES modules it imports (effect-gym).
        return isCommonJs(absolute) ? createRequire(import.meta.url)(absolute) as unknown : (await import(url)) as unknown
      },
      catch: (cause) =>
        new Plugin.PluginError({
          file,
          detail: `failed to load: ${errorMessage(cause)}`,
          cause
        })
    })
    return yield* Effect.fromResult(Plugin.fromModule(file, module))
  })

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
  Effect.reduce(files, () => base, (registry, file) => Effect.map(load(file), (plugin) => Registry.add(registry, plugin)))
