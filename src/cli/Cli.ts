/**
 * The `effect-gym` command line. Each command lives in its own module; this one composes them.
 *
 * `main(argv)` runs one invocation and gives its exit code: 0 when everything ran, 1 when a run
 * completed with failed trajectories or bad rows, 2 when the invocation itself was wrong (bad
 * options, unknown names, unreadable files, a plugin that does not load).
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import * as ValidationError from "@effect/cli/ValidationError"
import type { NodeContext } from "@effect/platform-node"
import { Console, Effect } from "effect"
import { normalizeArgv } from "./argv.js"
import { ExitCode, version } from "./common.js"
import * as CheckEnvCommand from "./CheckEnvCommand.js"
import * as DatasetCommand from "./DatasetCommand.js"
import * as EnvsCommand from "./EnvsCommand.js"
import * as OpenEnvCommand from "./OpenEnvCommand.js"
import * as RunCommand from "./RunCommand.js"
import * as ServeCommand from "./ServeCommand.js"
import * as ViewCommand from "./ViewCommand.js"


const command = Command.make("effect-gym").pipe(
  Command.withDescription("Multi-turn LLM rollouts against Gym-style environments"),
  Command.withSubcommands([
    RunCommand.command,
    DatasetCommand.command,
    EnvsCommand.command,
    CheckEnvCommand.command,
    OpenEnvCommand.command,
    ServeCommand.command,
    ViewCommand.command
  ])
)

const cli = Command.run(command, { name: "effect-gym", version: version() })

/**
 * Runs one invocation (`argv` as `process.argv`: node, script, then the arguments) and gives the
 * exit code. Errors are printed on stderr. `onExitCode` hears every code a command sets, also one set
 * while it is being interrupted (a server that shut down cleanly on SIGTERM sets 0).
 *
 * @since 0.1.0
 * @category running
 */
export const main = (
  argv: ReadonlyArray<string>,
  onExitCode?: (code: number) => void
): Effect.Effect<number, never, NodeContext.NodeContext> => {
  let exitCode = 0
  return cli(normalizeArgv(argv)).pipe(
    Effect.provideService(ExitCode, {
      set: (code) => {
        exitCode = code
        onExitCode?.(code)
      }
    }),
    Effect.catchAll((error) => {
      exitCode = 2
      // @effect/cli prints its own validation errors (with the usage) already.
      if (ValidationError.isValidationError(error)) return Effect.void
      return Console.error(`error: ${error.message}`)
    }),
    Effect.map(() => exitCode)
  )
}
