/**
 * Plugins: modules, given by path at run time (`--plugin file.ts`), that add envs, schedulers,
 * reward functions and policies.
 *
 * A plugin may also carry env renderers for `effect-gym view` (`renderers`, made with the `view`
 * module's `Renderer.make`); the core only checks that each has a name and a `render` function.
 *
 * A plugin module's default export (or its export named `plugin`) is made with {@link make}:
 *
 * ```ts
 * import { Env, Plugin } from "effect-gym"
 * export default Plugin.make({ envs: [Env.make({ name: "my_env", create: (config) => new MyEnv(config) })] })
 * ```
 *
 * Plugins are values, not side effects on a global registry: loading the same plugin twice, or in
 * two runs of one process, is harmless.
 *
 * @since 0.1.0
 */
import { Result, Schema } from "effect"
import type * as Env from "./Env.js"
import type * as Policy from "./Policy.js"
import type * as Reward from "./Reward.js"
import type * as Scheduler from "./Scheduler.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Plugin {
  readonly name?: string | undefined
  readonly envs?: ReadonlyArray<Env.Definition> | undefined
  readonly schedulers?: ReadonlyArray<Scheduler.Definition> | undefined
  readonly rewards?: ReadonlyArray<Reward.Definition> | undefined
  readonly policies?: ReadonlyArray<Policy.Definition> | undefined
  /** Env renderers for `effect-gym view`, by env name (the viewer's own type, seen here only by shape). */
  readonly renderers?: ReadonlyArray<RendererSlot> | undefined
}

/**
 * What the core knows of an env renderer: a name (the env it draws) and a `render` function. The
 * renderer itself belongs to the viewer (an edge): see its `Renderer` module.
 *
 * @since 0.1.0
 * @category models
 */
export interface RendererSlot {
  readonly name: string
  readonly render: (line: never) => unknown
}

/**
 * @since 0.1.0
 * @category errors
 */
export class PluginError extends Schema.TaggedError<PluginError>()("PluginError", {
  file: Schema.String,
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `plugin ${this.file}: ${this.detail}`
  }
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = (plugin: Plugin): Plugin => plugin

const KINDS = {
  envs: ["prepare"],
  schedulers: ["make"],
  rewards: ["score"],
  policies: ["make"],
  renderers: ["render"]
} as const

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/**
 * The plugin a module exports: its default export or its export named `plugin`, also when
 * CommonJS interop nests them (`module.exports = { default: plugin }`, a TypeScript file compiled
 * to CommonJS, seen from an ES module as `{ default: { default: plugin } }`).
 */
const pluginExport = (module: unknown): unknown => {
  let exports: unknown = module
  for (let depth = 0; depth < 3 && isObject(exports); depth++) {
    const candidate = exports.default ?? exports.plugin
    if (!isObject(candidate)) return candidate
    // A module namespace (or CommonJS exports) rather than the plugin: look one level further.
    const keys = Object.keys(candidate).filter((key) => key !== "__esModule")
    const wrapper = (candidate.__esModule === true || keys.every((key) => key === "default" || key === "plugin")) &&
      keys.length > 0 && (isObject(candidate.default) || isObject(candidate.plugin))
    if (!wrapper) return candidate
    exports = candidate
  }
  return isObject(exports) ? exports.default ?? exports.plugin : undefined
}

/**
 * Checks the exports of a loaded module: its default export (or `plugin`) must be a plugin object
 * whose entries have names and the functions their kind needs.
 *
 * @since 0.1.0
 * @category validation
 */
export const fromModule = (file: string, module: unknown): Result.Result<Plugin, PluginError> => {
  const fail = (detail: string) => Result.fail(new PluginError({ file, detail }))
  const candidate = pluginExport(module)
  if (typeof candidate !== "object" || candidate === null) {
    return fail("has no plugin export: export default Plugin.make({ envs, schedulers, rewards, policies })")
  }
  const plugin = candidate as Record<string, unknown>
  const known = new Set(["name", ...Object.keys(KINDS)])
  const unknownKey = Object.keys(plugin).find((key) => !known.has(key))
  if (unknownKey !== undefined) {
    return fail(`unknown plugin field ${JSON.stringify(unknownKey)} (expected ${[...known].join(", ")})`)
  }
  for (const [kind, functions] of Object.entries(KINDS)) {
    const entries = plugin[kind]
    if (entries === undefined) continue
    if (!Array.isArray(entries)) return fail(`${kind} must be an array`)
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i] as Record<string, unknown> | null
      if (typeof entry !== "object" || entry === null || typeof entry.name !== "string" || entry.name === "") {
        return fail(`${kind}[${i}] must be a definition with a name`)
      }
      for (const fn of functions) {
        if (typeof entry[fn] !== "function") {
          return fail(`${kind}[${i}] (${entry.name}) has no ${fn} function: build it with the ${kind} helpers`)
        }
      }
    }
  }
  return Result.succeed(plugin as Plugin)
}
