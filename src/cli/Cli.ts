/**
 * The `effect-gym` command line. Each command lives in its own module; this one composes them.
 *
 * `main(argv)` runs one invocation and gives its exit code: 0 when everything ran, 1 when a run
 * completed with failed trajectories or bad rows, 2 when the invocation itself was wrong (bad
 * options, unknown names, unreadable files, a plugin that does not load).
 *
 * @since 0.1.0
 */
import { CliConfig, Command } from "@effect/cli"
import * as Descriptor from "@effect/cli/CommandDescriptor"
import * as ValidationError from "@effect/cli/ValidationError"
import type { CliApp } from "@effect/cli/CliApp"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as NodeTerminal from "@effect/platform-node/NodeTerminal"
import * as Terminal from "@effect/platform/Terminal"
import { Cause, Console, Context, Effect, Layer, Logger } from "effect"
import { normalizeArgv } from "./argv.js"
import { ExitCode, OptionError, Signals, version } from "./common.js"
import * as CheckEnvCommand from "./CheckEnvCommand.js"
import * as DatasetCommand from "./DatasetCommand.js"
import * as EnvsCommand from "./EnvsCommand.js"
import * as OpenEnvCommand from "./OpenEnvCommand.js"
import * as RunCommand from "./RunCommand.js"
import * as RunnerCommand from "./RunnerCommand.js"
import * as ServeCommand from "./ServeCommand.js"
import * as ViewCommand from "./ViewCommand.js"


const command = Command.make("effect-gym").pipe(
  Command.withDescription("Multi-turn LLM rollouts against Gym-style environments"),
  Command.withSubcommands([
    RunCommand.command,
    RunnerCommand.command,
    DatasetCommand.command,
    EnvsCommand.command,
    CheckEnvCommand.command,
    OpenEnvCommand.command,
    ServeCommand.command,
    ViewCommand.command
  ])
)

/**
 * What the command line needs from the platform: files, paths and the terminal (@effect/cli's
 * `CliApp.Environment`). Not `NodeContext`, which adds a command executor and a worker manager that
 * no command uses, and whose loading (Node's child_process) was about a tenth of `--help`'s time.
 *
 * @since 0.1.0
 * @category running
 */
export type Environment = CliApp.Environment

/**
 * The Node layer of {@link Environment}.
 *
 * @since 0.1.0
 * @category running
 */
export const layer: Layer.Layer<Environment> = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer, NodeTerminal.layer)

const cli = Command.run(command, { name: "effect-gym", version: version() })

/**
 * `--wizard` asks its questions on stdin; on one that is not a terminal (a pipe, /dev/null, a
 * closed stdin in CI) @effect/cli's prompt waited forever at end of input. Refused instead, when
 * @effect/cli's own parse of the arguments starts the wizard: not for a `--wizard` that is another
 * option's value (`run --dataset --wizard`) or comes after `--`, nor when `--help` wins over it; and
 * for `--wizard=true` too (a search of the words for "--wizard" refused the first ones and let
 * the last wait forever).
 */
const wizardWithoutTerminal = (
  argv: ReadonlyArray<string>,
  terminal: { readonly stdin: boolean; readonly stdout: boolean }
): Effect.Effect<OptionError | undefined, never, Environment> => {
  // (the parse only for words that may ask for it: every other invocation starts as before)
  if ((terminal.stdin && terminal.stdout) || !mentionsWizard(argv)) return Effect.succeed(undefined)
  // stdout too: the questions are written there (`dataset ... --wizard > rows.jsonl` wrote them into the file)
  const which = terminal.stdin ? "stdout is not one (its questions would go where the output goes)" : "stdin is not one"
  return Effect.map(startsWizard(normalizeArgv(argv).slice(2)), (starts) =>
    starts
      ? new OptionError({
        option: "--wizard",
        detail: `asks its questions on a terminal, and ${which}: run it in a terminal, or give the options ` +
          "on the command line (`effect-gym COMMAND --help` lists them)"
      })
      : undefined)
}

/** Whether the arguments of `argv` (as `process.argv`) hold a `--wizard` word (it may start the wizard). */
const mentionsWizard = (argv: ReadonlyArray<string>): boolean =>
  argv.slice(2).some((arg) => arg === "--wizard" || arg.startsWith("--wizard="))

/** Whether `Command.run` would start the wizard for these arguments (after a `--log-level`, which it takes out and parses again). */
const startsWizard = (args: ReadonlyArray<string>): Effect.Effect<boolean, never, Environment> =>
  Descriptor.parse(command.descriptor, ["effect-gym", ...args], CliConfig.defaultConfig).pipe(
    Effect.flatMap((directive): Effect.Effect<boolean, never, Environment> => {
      if (directive._tag !== "BuiltIn") return Effect.succeed(false)
      if (directive.option._tag === "ShowWizard") return Effect.succeed(true)
      if (directive.option._tag !== "SetLogLevel") return Effect.succeed(false)
      // as @effect/cli's handling of --log-level: its words out, then parsed again
      const rest = args.filter((arg, i) => !(arg === "--log-level" || arg.startsWith("--log-level=") || args[i - 1] === "--log-level"))
      return rest.length === args.length ? Effect.succeed(false) : startsWizard(rest)
    }),
    // (a parse that fails is the command line's own error, which the run below prints)
    Effect.orElseSucceed(() => false)
  )

/**
 * Runs one invocation (`argv` as `process.argv`: node, script, then the arguments) and gives the
 * exit code. Errors, warnings and logs go to stderr; stdout carries only what a command prints as
 * its result. `onExitCode` hears every code a command sets, also one set while it is being
 * interrupted (a server that shut down cleanly on SIGTERM sets 0). `signals` lets a command stop
 * gracefully on SIGINT/SIGTERM/SIGHUP (see `Signals`); without it none arrive.
 *
 * Exit codes: 0 ok; 1 a run completed with failed trajectories or bad rows; 2 the invocation was
 * wrong; 3 the command stopped on an error of its own or of the system (with a message; a run
 * writes what finished first); 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP.
 *
 * @since 0.1.0
 * @category running
 */
export const main = (
  argv: ReadonlyArray<string>,
  onExitCode?: (code: number) => void,
  signals?: Context.Tag.Service<Signals>
): Effect.Effect<number, never, Environment> => {
  let exitCode = 0
  const withSignals = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    signals === undefined ? effect : Effect.provideService(effect, Signals, signals)
  // a coordinator's option given to a runner: named, not "unknown argument"
  const refusedRunner = RunnerCommand.refusedOption(argv)
  const refusal = refusedRunner === undefined
    ? wizardWithoutTerminal(argv, { stdin: process.stdin.isTTY === true, stdout: process.stdout.isTTY === true })
    : Effect.succeed(refusedRunner)
  // The wizard's terminal notes a Ctrl-C or Ctrl-D at its questions: @effect/cli then prints
  // "Quitting wizard mode..." and ends as if all went well; the exit code says it did not (130).
  let quitWizard = false
  const wizardTerminal = Layer.scoped(
    Terminal.Terminal,
    NodeTerminal.make((input) => {
      const quit = input.key.ctrl && (input.key.name === "c" || input.key.name === "d")
      if (quit) quitWizard = true
      return quit
    })
  )
  const invoke = (args: ReadonlyArray<string>) => (mentionsWizard(argv) ? Effect.provide(cli(args), wizardTerminal) : cli(args))
  return Effect.flatMap(refusal, (refused) => refused === undefined ? invoke(normalizeArgv(argv)) : Effect.fail(refused)).pipe(
    Effect.provideService(ExitCode, {
      set: (code) => {
        exitCode = code
        onExitCode?.(code)
      }
    }),
    withSignals,
    Effect.catchAll((error) => {
      exitCode = 2
      // @effect/cli prints its own validation errors (with the usage) already.
      if (ValidationError.isValidationError(error)) return Effect.void
      return Console.error(`error: ${error.message}`)
    }),
    Effect.catchAllDefect((defect) => {
      exitCode = 3
      return Console.error(`error: internal error: ${Cause.pretty(Cause.die(defect))}`)
    }),
    Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.stringLogger))),
    Effect.map(() => (quitWizard && exitCode === 0 ? 130 : exitCode))
  )
}
