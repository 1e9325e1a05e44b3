/**
 * `effect-gym envs`: what is registered (after plugins).
 */
import { Console, Effect } from "effect"
import { Command } from "effect/cli"
import * as PluginLoader from "../node/PluginLoader.js"
import type * as Registry from "../Registry.js"
import { plugins, toggle } from "./common.js"
import { documentedAll } from "./help.js"

/**
 * What `envs` prints.
 *
 * @since 0.1.0
 * @category commands
 */
export const describeRegistry = (registry: Registry.Registry, json: boolean): string => {
  const sections = [
    ["envs", registry.envs],
    ["schedulers", registry.schedulers],
    ["reward functions", registry.rewards],
    ["policies", registry.policies]
  ] as const
  if (json) {
    return JSON.stringify(
      Object.fromEntries(
        sections.map(([title, map]) => [
          title.replace(" ", "_"),
          [...map.values()].map((d) => ({ name: d.name, description: d.description }))
        ])
      )
    )
  }
  const lines: Array<string> = []
  for (const [title, map] of sections) {
    lines.push(`${title}:`)
    const width = Math.max(0, ...[...map.keys()].map((k) => k.length))
    for (const d of map.values()) lines.push(`  ${d.name.padEnd(width)}  ${d.description}`)
  }
  return lines.join("\n")
}

/** The `envs` command. */
export const command = Command.make("envs", documentedAll({ plugins, json: toggle("json", "Print the list as JSON") })).pipe(
  Command.withDescription("List the registered envs, schedulers, reward functions and policies (after plugins)"),
  Command.withHandler((args) =>
    Effect.flatMap(PluginLoader.registry(args.plugins), (registry) => Console.log(describeRegistry(registry, args.json))))
)
