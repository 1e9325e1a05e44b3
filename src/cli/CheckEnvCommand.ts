/**
 * `effect-gym check-env NAME`: runs the env conformance checker (`EnvCheck`) and prints its report.
 * Exit code 0 when every check passes, 1 when some fail, 2 for a bad invocation (unknown env, bad
 * option, a configs file with bad lines).
 */
import { Console, Duration, Effect, Option, Result } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type * as Env from "../Env.js"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import * as Row from "../Row.js"
import { isRecord } from "../internal/inspect.js"
import { FileError, integer, OptionError, parseNumber, plugins, readText, repeated, secondsText, setExitCode, toggle } from "./common.js"
import { documentedAll } from "./help.js"

// The checker is loaded when the command runs (startup of the other commands stays light).
const loadEnvCheck = Effect.promise(() => import("../check/EnvCheck.js"))

export const checkEnvOptions = {
  name: Argument.String("NAME").pipe(
    Argument.withDescription("The env to check (a built-in, or one a plugin registers); or give it as --env NAME"),
    Argument.optional
  ),
  // (`--env` names the env on every other command: `check-env --env frozen_lake` was "Received unknown argument")
  env: Flag.String("env").pipe(Flag.withDescription("The env to check, as NAME"), Flag.optional),
  plugins,
  configs: Flag.String("configs").pipe(
    Flag.withDescription("A JSONL file of env_configs to try (a line may also be a dataset row: its env_config is used)"),
    Flag.optional
  ),
  seeds: integer("seeds").pipe(
    Flag.withDescription("Try the env_configs {\"seed\":0} .. {\"seed\":N-1} (default 3)"),
    Flag.optional
  ),
  runs: integer("runs").pipe(
    Flag.withDescription("Fresh envs played per env_config, compared for determinism"),
    Flag.withDefault(3)
  ),
  timeout: secondsText("timeout").pipe(
    Flag.withDescription("Seconds a create, reset, step or close may take before it counts as hung"),
    Flag.withDefault("10")
  ),
  maxSteps: integer("max-steps").pipe(
    Flag.withDescription("Steps per episode before it is cut"),
    Flag.withDefault(16)
  ),
  actions: repeated("action", "A well-formed reply of the env, e.g. '<action>up</action>' (repeatable)"),
  seed: integer("seed").pipe(
    Flag.withDescription("The seed of the replies and reset requests"),
    Flag.withDefault(0)
  ),
  json: toggle("json", "Print the report as JSON")
}

export type CheckEnvArgs = Command.Command.Config.Infer<typeof checkEnvOptions>

const FLAGS: Readonly<Record<string, string>> = {
  runs: "--runs",
  seeds: "--seeds",
  maxSteps: "--max-steps",
  timeout: "--timeout",
  seed: "--seed",
  configs: "--configs"
}

/**
 * One line of a configs file: an env_config object, or a dataset row whose `env_config` is used.
 * Errors say `file:line: field: problem`, as dataset errors do.
 */
const configLine = (
  definition: Env.Definition,
  file: string,
  index: number,
  text: string
): Result.Result<Env.EnvConfig, Row.RowError> | undefined => {
  const parsed = Row.parseLine(file, index, text)
  if (parsed === undefined) return undefined
  if (Result.isFailure(parsed)) return Result.fail(parsed.failure)
  const value = parsed.success
  const isObject = isRecord(value)
  const isRow = isObject && Object.prototype.hasOwnProperty.call(value, "env_config")
  // A bare env_config is checked as the env_config of a row, so that its errors name the field.
  return Result.flatMap(Row.decodeValue(file, index, isRow || !isObject ? value : { env_config: value }), (row) => {
    const fail = (path: string, detail: string) => Result.fail(new Row.RowError({ file, line: index + 1, path, detail }))
    const name = row.envConfig.name
    if (name !== undefined && name !== definition.name) {
      const detail = `names env ${JSON.stringify(name)}, but the check is of ${JSON.stringify(definition.name)}`
      return fail("env_config.name", detail)
    }
    return Result.match(definition.prepare(row.envConfig), {
      onFailure: (error) => fail(error.path, error.reason),
      onSuccess: () => Result.succeed(row.envConfig)
    })
  })
}

/** Reads a configs file; every bad line is printed, and any bad line fails the invocation. */
const readConfigs = (definition: Env.Definition, file: string) =>
  Effect.gen(function*() {
    const text = yield* readText("--configs", file)
    const configs: Array<Env.EnvConfig> = []
    const errors: Array<Row.RowError> = []
    for (const [index, line] of Row.lines(text)) {
      const decoded = configLine(definition, file, index, line)
      if (decoded === undefined) continue
      if (Result.isFailure(decoded)) errors.push(decoded.failure)
      else configs.push(decoded.success)
    }
    for (const error of errors) yield* Console.error(`bad env_config: ${error.message}`)
    if (errors.length > 0) {
      return yield* new FileError({ option: "--configs", file, detail: `${errors.length} bad line(s)` })
    }
    if (configs.length === 0) return yield* new FileError({ option: "--configs", file, detail: "no env_config in the file" })
    return configs
  })

/** The env to check: NAME or `--env NAME` (one of them; both only when they agree). */
const envName = (args: CheckEnvArgs): Effect.Effect<string, OptionError> => {
  const names = [...new Set([Option.getOrUndefined(args.name), Option.getOrUndefined(args.env)])].filter((n) => n !== undefined)
  if (names.length === 1) return Effect.succeed(names[0])
  return Effect.fail(
    names.length === 0
      ? new OptionError({ option: "NAME", detail: "missing: the env to check (effect-gym check-env NAME, or --env NAME)" })
      : new OptionError({ option: "--env", detail: `${names[1]} and NAME ${names[0]} disagree: give the env once` })
  )
}

/**
 * The `check-env` job: the report of one env (for reuse by tests and other front ends).
 *
 * @since 0.1.0
 * @category commands
 */
export const checkEnvJob = (args: CheckEnvArgs) =>
  Effect.gen(function*() {
    if (Option.isSome(args.configs) && Option.isSome(args.seeds)) {
      return yield* new OptionError({ option: "--configs", detail: "give --configs FILE or --seeds N, not both" })
    }
    const seconds = yield* parseNumber("--timeout", args.timeout)
    if (seconds <= 0) {
      return yield* new OptionError({ option: "--timeout", detail: `must be > 0 seconds, got ${args.timeout}` })
    }
    const name = yield* envName(args)
    const registry = yield* PluginLoader.registry(args.plugins)
    const definition = yield* Effect.fromResult(Registry.env(registry, name))
    const configs = Option.isSome(args.configs) ? yield* readConfigs(definition, args.configs.value) : undefined
    const EnvCheck = yield* loadEnvCheck
    return yield* EnvCheck.check(definition, {
      configs,
      seeds: Option.getOrUndefined(args.seeds),
      runs: args.runs,
      maxSteps: args.maxSteps,
      timeout: Duration.millis(seconds * 1000),
      seed: args.seed,
      actions: args.actions
    }).pipe(
      Effect.catchTag("CheckOptionError", (error) =>
        Effect.fail(new OptionError({ option: FLAGS[error.option] ?? error.option, detail: error.detail })))
    )
  })

/** The `check-env` command. */
export const command = Command.make("check-env", documentedAll(checkEnvOptions)).pipe(
  Command.withDescription("Check an env against the env contract (determinism, types, close, timeouts, isolation)"),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      const report = yield* checkEnvJob(args)
      const EnvCheck = yield* loadEnvCheck
      yield* Console.log(args.json ? EnvCheck.toCliJson(report) : EnvCheck.format(report))
      yield* setExitCode(report.ok ? 0 : 1)
    }))
)
