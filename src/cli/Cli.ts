/**
 * The `effect-gym` command line. Each command lives in its own module; this one composes them.
 *
 * `main(argv)` runs one invocation and gives its exit code: 0 when everything ran, 1 when a run
 * completed with failed trajectories or bad rows, 2 when the invocation itself was wrong (bad
 * options, unknown names, unreadable files, a plugin that does not load).
 *
 * @since 0.1.0
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as NodeStdio from "@effect/platform-node/NodeStdio"
import * as NodeTerminal from "@effect/platform-node/NodeTerminal"
import { Cause, ConfigProvider, Console, Context, Effect, type FileSystem, Layer, Logger, type Path, Terminal } from "effect"
import { CliConfig, CliError, CliOutput, Command, Flag, GlobalFlag } from "effect/cli"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import { currentName, elsewhere, normalizeArgv, oldNamesOf, renamedOptions, withoutNoColor } from "./argv.js"
import { ExitCode, OptionError, signalExitCode, Signals, version } from "./common.js"
import * as CheckEnvCommand from "./CheckEnvCommand.js"
import * as DatasetCommand from "./DatasetCommand.js"
import * as EnvsCommand from "./EnvsCommand.js"
import * as Help from "./help.js"
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
 * Every command's path below the top level (`[]`, `["run"]`, `["openenv", "serve"]`, ...), by name:
 * the commands whose `--help` the build renders ahead for the launcher (scripts/help-pages.mjs).
 *
 * @since 0.3.0
 * @category running
 */
export const commandPaths = (): ReadonlyArray<ReadonlyArray<string>> => {
  const out: Array<ReadonlyArray<string>> = []
  const walk = (at: Command.Command.Any, path: ReadonlyArray<string>): void => {
    out.push(path)
    for (const group of at.subcommands) for (const sub of group.commands) walk(sub, [...path, sub.name])
  }
  walk(command, [])
  return out
}

/**
 * What the command line needs from the platform: files, paths, the terminal, standard input and
 * output, and a process spawner (effect/cli's `Command.Environment`).
 *
 * @since 0.1.0
 * @category running
 */
export type Environment = Command.Environment

/**
 * A process spawner that loads Node's (and `node:child_process`) when it first spawns. effect/cli's
 * environment holds one, which no command uses: loading Node's at start-up was a cost of every
 * invocation, `--help` included (as `NodeContext`'s was, on Effect 3).
 */
const spawnerOnDemand: Layer.Layer<
  ChildProcessSpawner.ChildProcessSpawner,
  never,
  FileSystem.FileSystem | Path.Path
> = Layer.effect(
  ChildProcessSpawner.ChildProcessSpawner,
  Effect.gen(function*() {
    const services = yield* Effect.context<FileSystem.FileSystem | Path.Path>()
    const scope = yield* Effect.scope
    const node = yield* Effect.cached(
      Effect.promise(() => import("@effect/platform-node/NodeChildProcessSpawner")).pipe(
        Effect.flatMap((module) => Layer.buildWithScope(module.layer, scope)),
        Effect.map(Context.get(ChildProcessSpawner.ChildProcessSpawner)),
        Effect.provideContext(services)
      )
    )
    return ChildProcessSpawner.make((command) => Effect.flatMap(node, (spawner) => spawner.spawn(command)))
  })
)

/**
 * The Node layer of {@link Environment}.
 *
 * @since 0.1.0
 * @category running
 */
export const layer: Layer.Layer<Environment> = Layer.mergeAll(
  NodeFileSystem.layer,
  NodePath.layer,
  NodeTerminal.layer,
  NodeStdio.layer,
  spawnerOnDemand.pipe(Layer.provide(Layer.merge(NodeFileSystem.layer, NodePath.layer)))
)

/** `--version`, without the `-v` that effect/cli's adds (it was never one). */
const versionFlag = GlobalFlag.Action({
  flag: Flag.Boolean("version").pipe(
    Flag.withoutNegation,
    Flag.withDescription("Show the version"),
    Flag.withDefault(false)
  ),
  run: (_, { command, version }) =>
    Effect.flatMap(Effect.service(CliOutput.Presenter), (presenter) =>
      presenter.present({ _tag: "Version", name: command.name, version }))
})

/**
 * The command line's own options, in the order they win when several are given: `--help` over
 * `--wizard` over `--version` (as before), then `--completions`, and `--log-level`. `wizard` is
 * effect/cli's wizard, or the refusal that takes its place without a terminal.
 */
const builtIns = (wizard: GlobalFlag.Action<boolean>): CliConfig.CliConfig.Service =>
  CliConfig.make({ builtIns: [GlobalFlag.Help, wizard, versionFlag, GlobalFlag.Completions, GlobalFlag.LogLevel] })

/** Whether the arguments of `argv` (as `process.argv`) hold a `--wizard` word (it may start the wizard). */
const mentionsWizard = (argv: ReadonlyArray<string>): boolean =>
  argv.slice(2).some((arg) => arg === "--wizard" || arg.startsWith("--wizard="))

/**
 * What the command line prints of a wrong invocation, on stderr (stdout stays the commands'
 * output): its errors, in the words they have always had where effect/cli's errors have a
 * counterpart (`Expected to find option: '--dataset'`), else effect/cli's own.
 */
const usageError = (error: CliError.NonShowHelpErrors): string => {
  switch (error._tag) {
    case "MissingOption":
      return `Expected to find option: '--${error.option}'`
    case "MissingArgument":
      return `Missing argument <${error.argument}>`
    case "UnrecognizedOption": {
      const where = (error.command ?? []).slice(1).join(" ")
      const other = elsewhere(error.option, where)
      if (other !== undefined) return `The flag '${error.option}' is not recognized. Did you mean '${other.meant}'? (${other.why})`
      // (effect/cli suggests among the command's own options only: `--hlp`, `--verison` got none)
      const global = error.option.startsWith("--") ? Help.closest(error.option.slice(2), GLOBAL_OPTIONS) : undefined
      const suggested = error.suggestions[0] ?? (global === undefined ? undefined : `--${global}`)
      const meant = suggested === undefined ? undefined : currentName(suggested, where)
      return meant !== undefined
        ? `The flag '${error.option}' is not recognized. Did you mean '${meant}'?`
        : `Received unknown argument: '${error.option}'`
    }
    case "UnexpectedArgument":
      return `Received unknown argument: '${error.arguments[0]}'`
    case "UnknownSubcommand": {
      const names = subcommandNames(error.parent ?? [])
      const meant = error.suggestions[0] ?? Help.closest(error.subcommand, names)
      return `Invalid subcommand for ${(error.parent ?? ["effect-gym"]).join(" ")} - use one of ${
        names.map((name) => `'${name}'`).join(", ")
      }${meant === undefined ? "" : `. Did you mean '${meant}'?`}`
    }
    case "InvalidValue": {
      if (error.kind === "flag" && error.value === "") return `Expected a value following option: '--${error.option}'`
      // (effect/cli's "Invalid value for flag --env: \"2 occurrences\"": read as a value, and with
      // --env and its old name --gym-env both given, it named neither the repeat nor the alias)
      const times = error.kind === "flag" && error.expected === "at most 1 value" ? /^(\d+) occurrences$/.exec(error.value) : null
      if (times !== null) {
        const old = oldNamesOf(error.option)
        return `--${error.option}: given ${times[1]} times${
          old.length === 0 ? "" : ` (counting its old name ${old.join(", ")})`
        }; it takes one value (give it once)`
      }
      return error.message
    }
    default:
      return error.message
  }
}

/** The options every command takes (effect/cli's built-ins, and `--no-color`). */
const GLOBAL_OPTIONS = ["help", "wizard", "version", "completions", "log-level", "no-color"]

/** The subcommands of the command at `path` (`["effect-gym", "dataset"]`). */
const subcommandNames = (path: ReadonlyArray<string>): ReadonlyArray<string> => {
  let current: Command.Command.Any = command
  for (const name of path.slice(1)) {
    const next = current.subcommands.flatMap((group) => group.commands).find((sub) => sub.name === name)
    if (next === undefined) break
    current = next
  }
  return current.subcommands.flatMap((group) => group.commands.map((sub) => sub.name))
}

/**
 * Help on stdout, a wrong invocation's errors on stderr without the help, the version alone (as
 * they have always been printed; effect/cli's adds the name).
 */
const presenter: CliOutput.Presenter = {
  present: (event) =>
    Effect.flatMap(Effect.service(CliOutput.Formatter), (formatter) => {
      switch (event._tag) {
        case "Help":
          return Console.log(formatter.formatHelpDoc(event.helpDoc))
        case "InvalidInvocation":
          return Console.error(event.errors.map(usageError).join("\n"))
        case "Version":
          return Console.log(event.version)
      }
    })
}

const cli = Command.runWith(command, { version: version() })

/**
 * `--wizard` asks its questions on stdin; on one that is not a terminal (a pipe, /dev/null, a
 * closed stdin in CI) the prompt would wait forever at end of input, and with stdout not one its
 * questions would go where the output goes (`dataset ... --wizard > rows.jsonl`). Refused instead,
 * exactly when effect/cli's parse of the arguments starts the wizard: this action takes the
 * wizard's place among the built-ins (not for a `--wizard` after `--`, nor when `--help` wins over it).
 */
const refusingWizard = (onRefused: (error: OptionError) => void, which: string): GlobalFlag.Action<boolean> =>
  GlobalFlag.Action({
    flag: GlobalFlag.Wizard.flag,
    run: () =>
      Effect.sync(() =>
        onRefused(
          new OptionError({
            option: "--wizard",
            detail: `asks its questions on a terminal, and ${which}: run it in a terminal, or give the options ` +
              "on the command line (`effect-gym COMMAND --help` lists them)"
          })
        )
      )
  })

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
 * `color` decides colour instead of the terminal and the environment (the build's help pages, see
 * {@link commandPaths}, are rendered both ways).
 *
 * @since 0.1.0
 * @category running
 */
export const main = (
  argv: ReadonlyArray<string>,
  onExitCode?: (code: number) => void,
  signals?: Context.Service.Shape<typeof Signals>,
  color?: boolean
): Effect.Effect<number, never, Environment> => {
  let exitCode = 0
  const withSignals = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    signals === undefined ? effect : Effect.provideService(effect, Signals, signals)
  // a coordinator's option given to a runner: named, not "unknown argument"
  const refusedRunner = RunnerCommand.refusedOption(argv)
  const terminal = { stdin: process.stdin.isTTY === true, stdout: process.stdout.isTTY === true }
  let refusedWizard: OptionError | undefined
  // stdout too: the questions are written there
  const wizard = terminal.stdin && terminal.stdout
    ? GlobalFlag.Wizard
    : refusingWizard(
      (error) => void (refusedWizard = error),
      terminal.stdin ? "stdout is not one (its questions would go where the output goes)" : "stdin is not one"
    )
  // The wizard's terminal notes a Ctrl-C or Ctrl-D at its questions: effect/cli then says the
  // wizard was cancelled and ends as if all went well; the exit code says it did not (130).
  let quitWizard = false
  const wizardTerminal = Layer.effect(
    Terminal.Terminal,
    NodeTerminal.make((input) => {
      const quit = input.key.ctrl && (input.key.name === "c" || input.key.name === "d")
      if (quit) quitWizard = true
      return quit
    })
  )
  const { args, noColor } = withoutNoColor(normalizeArgv(argv).slice(2))
  // colour only on a terminal, and never with NO_COLOR (any value but empty), --no-color or
  // TERM=dumb (a terminal that shows escapes as they are: Emacs' shell, some CI log viewers)
  const colored = color ?? (terminal.stdout && !noColor && (process.env.NO_COLOR ?? "") === "" && process.env.TERM !== "dumb")
  const renamed = renamedOptions(args)
  const invoke = Effect.andThen(
    Effect.andThen(
      renamed.length === 0 ? Effect.void : Console.error(renamed.join("\n")),
      mentionsWizard(argv) && wizard === GlobalFlag.Wizard ? Effect.provide(cli(args), wizardTerminal) : cli(args)
    ),
    Effect.suspend(() => (refusedWizard === undefined ? Effect.void : Effect.fail(refusedWizard)))
  )
  return (refusedRunner === undefined ? invoke : Effect.fail(refusedRunner)).pipe(
    Effect.provideService(CliConfig.CliConfig, builtIns(wizard)),
    Effect.provideService(CliOutput.Presenter, presenter),
    Effect.provideService(CliOutput.Formatter, Help.formatter(CliOutput.defaultFormatter({ colors: colored }), colored)),
    Effect.provideService(ExitCode, {
      set: (code) => {
        exitCode = code
        onExitCode?.(code)
      }
    }),
    withSignals,
    Effect.catch((error) => {
      if (CliError.isCliError(error)) {
        // Printed already (the errors, or the help of a command given without its subcommand).
        exitCode = error._tag === "ShowHelp" && error.errors.length === 0 ? 0 : 2
        return Effect.void
      }
      exitCode = 2
      return Console.error(`error: ${error.message}`)
    }),
    Effect.catchDefect((defect) => {
      exitCode = signals?.hungUp?.() === true ? signalExitCode("SIGHUP") : 3
      return Console.error(`error: internal error: ${Cause.pretty(Cause.die(defect))}`)
    }),
    Effect.provideService(Logger.CurrentLoggers, new Set([Logger.withConsoleError(Logger.formatSimple)])),
    // The environment as it is when this command runs (`--api-key-env`, ...): Effect 4's default
    // provider reads it once per process, and the commands run in-process by tests and front ends
    // saw the variables of the first one.
    (effect) =>
      Effect.suspend(() =>
        Effect.provideService(effect, ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ ...process.env }))
      ),
    Effect.map(() => (quitWizard && exitCode === 0 ? 130 : exitCode))
  )
}
