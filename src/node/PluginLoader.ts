/**
 * Loads plugin modules by path at run time: TypeScript through tsx's loader, JavaScript as is.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import * as Plugin from "../Plugin.js"
import * as Registry from "../Registry.js"
import * as Builtins from "./Builtins.js"
import { errorMessage } from "../internal/lift.js"

const TS_EXTENSIONS = new Set([".ts", ".mts", ".cts", ".tsx"])

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
    const module = yield* Effect.tryPromise({
      try: async () => {
        if (TS_EXTENSIONS.has(path.extname(absolute))) {
          const { tsImport } = await import("tsx/esm/api")
          return (await tsImport(url, import.meta.url)) as unknown
        }
        return (await import(url)) as unknown
      },
      catch: (cause) =>
        new Plugin.PluginError({
          file,
          detail: `failed to load: ${errorMessage(cause)}`,
          cause
        })
    })
    return yield* Plugin.fromModule(file, module)
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
  Effect.reduce(files, base, (registry, file) => Effect.map(load(file), (plugin) => Registry.add(registry, plugin)))
