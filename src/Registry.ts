/**
 * The registry: envs, schedulers, reward functions and policies by name. A registry is a value:
 * start from {@link empty} (or the package's built-ins, `Builtins.registry`, composed at the edge),
 * then add each plugin in order (a plugin may replace an entry of the same name).
 *
 * @since 0.1.0
 */
import { Result, Schema } from "effect"
import type * as Env from "./Env.js"
import type * as Plugin from "./Plugin.js"
import type * as Policy from "./Policy.js"
import type * as Reward from "./Reward.js"
import type * as Scheduler from "./Scheduler.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Registry {
  readonly envs: ReadonlyMap<string, Env.Definition>
  readonly schedulers: ReadonlyMap<string, Scheduler.Definition>
  readonly rewards: ReadonlyMap<string, Reward.Definition>
  readonly policies: ReadonlyMap<string, Policy.Definition>
}

/**
 * @since 0.1.0
 * @category models
 */
export type Kind = "env" | "scheduler" | "reward function" | "policy"

/**
 * A name that is not registered. The message lists what is.
 *
 * @since 0.1.0
 * @category errors
 */
export class NotRegistered extends Schema.TaggedError<NotRegistered>()("NotRegistered", {
  kind: Schema.Literals(["env", "scheduler", "reward function", "policy"]),
  name: Schema.String,
  available: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `unknown ${this.kind} ${JSON.stringify(this.name)}; registered: ${
      this.available.length === 0 ? "(none)" : this.available.join(", ")
    }`
  }
}

const byName = <A extends { readonly name: string }>(
  base: ReadonlyMap<string, A>,
  more: ReadonlyArray<A> | undefined
): ReadonlyMap<string, A> => {
  if (more === undefined || more.length === 0) return base
  const out = new Map(base)
  for (const item of more) out.set(item.name, item)
  return out
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const empty: Registry = { envs: new Map(), schedulers: new Map(), rewards: new Map(), policies: new Map() }

/**
 * Adds a plugin's entries (later entries replace earlier ones of the same name).
 *
 * @since 0.1.0
 * @category combinators
 */
export const add = (registry: Registry, plugin: Plugin.Plugin): Registry => ({
  envs: byName(registry.envs, plugin.envs),
  schedulers: byName(registry.schedulers, plugin.schedulers),
  rewards: byName(registry.rewards, plugin.rewards),
  policies: byName(registry.policies, plugin.policies)
})

const lookup = <A>(kind: Kind, map: ReadonlyMap<string, A>, name: string): Result.Result<A, NotRegistered> => {
  const found = map.get(name)
  return found === undefined
    ? Result.fail(new NotRegistered({ kind, name, available: [...map.keys()].sort() }))
    : Result.succeed(found)
}

/**
 * @since 0.1.0
 * @category getters
 */
export const env = (registry: Registry, name: string) => lookup("env", registry.envs, name)

/**
 * Checks the env a run names for rows without one: an env its scheduler brings, or one of the
 * registry's (an unknown name lists what is registered).
 *
 * @since 0.4.0
 * @category getters
 */
export const checkDefaultEnv = (
  registry: Registry,
  scheduler: Scheduler.Definition,
  name: string | undefined
): Result.Result<void, NotRegistered> =>
  name === undefined || (scheduler.envs ?? []).some((env) => env.name === name)
    ? Result.void
    : Result.map(env(registry, name), () => undefined)

/**
 * @since 0.1.0
 * @category getters
 */
export const scheduler = (registry: Registry, name: string) => lookup("scheduler", registry.schedulers, name)

/**
 * @since 0.1.0
 * @category getters
 */
export const reward = (registry: Registry, name: string) => lookup("reward function", registry.rewards, name)

/**
 * @since 0.1.0
 * @category getters
 */
export const policy = (registry: Registry, name: string) => lookup("policy", registry.policies, name)
