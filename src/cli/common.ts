/**
 * Pieces shared by the commands: errors, common options, the exit code channel.
 */
import { Config, Context, Duration, Effect, FileSystem, Option, PlatformError, Redacted, Schema } from "effect"
import { CliError, Flag } from "effect/cli"
import { createRequire } from "node:module"
import { errorMessage } from "../internal/lift.js"
import * as RunSpec from "../RunSpec.js"
import type { StopSignal } from "../Summary.js"

/**
 * A file the command needs that cannot be read or written.
 *
 * @since 0.1.0
 * @category errors
 */
export class FileError extends Schema.TaggedError<FileError>("effect-gym/FileError")("FileError", {
  option: Schema.String,
  file: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.option} ${this.file}: ${this.detail}`
  }
}

/**
 * A command-line value that cannot be used.
 *
 * @since 0.1.0
 * @category errors
 */
export class OptionError extends Schema.TaggedError<OptionError>("effect-gym/OptionError")("OptionError", {
  option: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * How a command reports its exit code (0 ok, 1 ran with failures, 2 bad invocation) to `main`.
 */
export class ExitCode extends Context.Service<ExitCode, { readonly set: (code: number) => void }>()(
  "effect-gym/cli/ExitCode"
) {}

/** Sets the invocation's exit code. */
export const setExitCode = (code: number) => ExitCode.use((exit) => Effect.sync(() => exit.set(code)))

/** A text option given any number of times (`--plugin a.ts --plugin b.ts`). */
export const repeated = (name: string, description: string): Flag.Flag<ReadonlyArray<string>> =>
  Flag.String(name).pipe(Flag.withDescription(description), Flag.atLeast(0))

/** A switch: `true` when given, else `false` (no `--no-NAME` form, as before). */
export const toggle = (name: string, description?: string): Flag.Flag<boolean> => {
  const flag = Flag.Boolean(name).pipe(Flag.withoutNegation, Flag.withDefault(false))
  return description === undefined ? flag : Flag.withDescription(flag, description)
}

export const plugins = repeated(
  "plugin",
  "A plugin module (.ts or .js) that registers envs, schedulers, reward functions, policies"
)

/** A command-line value that cannot be parsed, as the command line reports it, naming its option. */
const invalidValue = (option: string, detail: string) => new CliError.ValidationError({ message: `${option}: ${detail}` })

/** Parses a whole number given as text (`12`, `-3`, `1e6`); the error names the option. */
export const parseInteger = (option: string, text: string): Effect.Effect<number, CliError.ValidationError> => {
  const trimmed = text.trim()
  const value = Number(trimmed)
  const whole = /^[+-]?\d+(?:[eE]\+?\d+)?$/.test(trimmed)
  if (whole && Number.isSafeInteger(value)) return Effect.succeed(value)
  // (1e30 is a whole number: it was said not to be one)
  return Effect.fail(invalidValue(
    option,
    whole
      ? `${JSON.stringify(text)} is too large: whole numbers are exact up to ${Number.MAX_SAFE_INTEGER} in magnitude`
      : `${JSON.stringify(text)} is not a whole number`
  ))
}

/**
 * An integer option whose parse errors name it and say what was given (`Flag.Int`'s say only what
 * was expected, and it takes neither `1e6` nor a leading `+`).
 */
export const integer = (name: string): Flag.Flag<number> =>
  Flag.String(name).pipe(Flag.withMetavar("integer"), Flag.mapEffect((text) => parseInteger(`--${name}`, text)))

/** A number of seconds given as text (its command checks it), shown in help as `seconds`. */
export const secondsText = (name: string): Flag.Flag<string> => Flag.String(name).pipe(Flag.withMetavar("seconds"))

/** An option with a fixed set of values whose parse errors name it. */
export const choice = <const A extends string>(name: string, values: ReadonlyArray<A>): Flag.Flag<A> =>
  Flag.String(name).pipe(
    Flag.withMetavar(values.join("|")),
    Flag.mapEffect((text) =>
      values.includes(text as A)
        ? Effect.succeed(text as A)
        : Effect.fail(invalidValue(`--${name}`, `${JSON.stringify(text)} is not one of ${values.join(", ")}`))
    )
  )

/** The port a serving command listens on; check it with {@link checkPort}. */
export const port = integer("port").pipe(
  Flag.withDescription("The port (0 picks a free one)"),
  Flag.withDefault(8000)
)

/** The address a serving command binds. */
export const host = Flag.String("host").pipe(
  Flag.withDescription("The address to bind (127.0.0.1: this machine only; 0.0.0.0: every interface)"),
  Flag.withDefault("127.0.0.1")
)

/** Fails unless `value` is a TCP port number (0 picks a free one). */
export const checkPort = (value: number): Effect.Effect<void, OptionError> =>
  value < 0 || value > 65535
    ? Effect.fail(new OptionError({ option: "--port", detail: `must be between 0 and 65535, got ${value}` }))
    : Effect.void

/** `key=value` pairs given with repeated flags (`--policy-option epsilon=0.1`); none: `{}`. */
export const keyValues = (name: string, description: string): Flag.Flag<Readonly<Record<string, string>>> =>
  Flag.KeyValuePair(name).pipe(
    Flag.withDescription(description),
    Flag.optional,
    Flag.map(Option.getOrElse((): Readonly<Record<string, string>> => ({})))
  )

/**
 * Numbers given as text (`1`, `0.2`, `-1e-3`). Not `Flag.Finite`: its error for a bad value does not
 * say what was given; this one says
 * `--timeout: "soon" is not a number`, like every other bad value of the command line.
 */
export const parseNumbers = (option: string, values: ReadonlyArray<string>) =>
  Effect.forEach(values, (text) => {
    const value = Number(text)
    return text.trim() === "" || !Number.isFinite(value)
      ? Effect.fail(new OptionError({ option, detail: `${JSON.stringify(text)} is not a number` }))
      : Effect.succeed(value)
  })

/** One number given as text (see {@link parseNumbers}). */
export const parseNumber = (option: string, text: string) => Effect.map(parseNumbers(option, [text]), ([n]) => n)

/**
 * A number of seconds given as text, checked as every timeout of a run is: more than 0 (or at least
 * 0 with `zero`, where 0 means none) and at most the run spec's cap (`RunSpec.MAX_TIMEOUT_SECONDS`).
 */
export const parseSeconds = (option: string, text: string, zero = false) =>
  Effect.flatMap(parseNumber(option, text), (value) =>
    (zero ? value >= 0 : value > 0) && value <= RunSpec.MAX_TIMEOUT_SECONDS
      ? Effect.succeed(value)
      : Effect.fail(
        new OptionError({
          option,
          detail: `must be a number of seconds ${zero ? ">= 0" : "> 0"} and <= ${RunSpec.MAX_TIMEOUT_TEXT}, got ${value}`
        })
      ))

/** A serving command that cannot listen on its address says so as an error of its port option. */
export const cannotListen = (host: string, port: number, option = "--port") => (error: { readonly cause: unknown }) =>
  Effect.fail(
    new OptionError({
      option,
      detail: `cannot listen on ${host}:${port}: ${errorMessage(error.cause)}`
    })
  )

/** The package's version (package.json is two levels up from both src/cli and dist/cli). */
export const version = (): string => {
  const pkg = createRequire(import.meta.url)("../../package.json") as { readonly version?: unknown }
  return typeof pkg.version === "string" ? pkg.version : "unknown"
}

/** Reads a text file named by an option; a missing file says so plainly. */
export const readText = (option: string, file: string) =>
  FileSystem.FileSystem.use((fs) => fs.readFileString(file)).pipe(
    Effect.mapError((error) => new FileError({ option, file, detail: fileProblem(error) }))
  )

/**
 * An error's message, with the system's own words for a failed system call: Effect 4's
 * `PlatformError` keeps Node's message ("ENOSPC: no space left on device, write") only as its
 * cause, and its message alone says "Unknown: FileSystem.writeAll (27)".
 */
export const errorDetail = (error: { readonly message: string }): string => {
  if (!PlatformError.isPlatformError(error) || error.reason._tag === "BadArgument") return error.message
  const { cause, description } = error.reason
  return description === undefined && cause instanceof Error ? `${error.message}: ${cause.message}` : error.message
}

/** What is wrong with a file, as the commands say it: a missing one is "no such file". */
export const fileProblem = (error: PlatformError.PlatformError): string =>
  error.reason._tag === "NotFound" ? "no such file" : errorDetail(error)


/**
 * A duration option in seconds, or `none` for no limit; `fallback` when it is not given. The value
 * is in milliseconds (`undefined`: none).
 */
export const seconds = (name: string, description: string, fallback: number | "none") =>
  Flag.String(name).pipe(
    Flag.withMetavar("seconds|none"),
    Flag.withDescription(`${description} (default ${fallback === "none" ? "none" : `${fallback} s`})`),
    Flag.withDefault(String(fallback)),
    Flag.mapEffect((text): Effect.Effect<number | undefined, CliError.ValidationError> => {
      if (text.trim() === "none") return Effect.succeed(undefined)
      const value = Number(text)
      // the run spec's cap on every timeout, checked here too so that the message is in seconds
      return text.trim() !== "" && Number.isFinite(value) && value > 0 && value <= RunSpec.MAX_TIMEOUT_SECONDS
        ? Effect.succeed(value * 1000)
        : Effect.fail(invalidValue(
          `--${name}`,
          `must be a number of seconds > 0 and <= ${RunSpec.MAX_TIMEOUT_TEXT}, or none; got ${JSON.stringify(text)}`
        ))
    })
  )

/**
 * Signals for commands that stop gracefully (`run`): `received` completes with the first SIGINT,
 * SIGTERM or SIGHUP once `handle()` was called (before that a signal interrupts the command, as for
 * the others); a second SIGINT or SIGTERM ends the process at once. Absent (in-process use): no
 * signals arrive.
 */
export class Signals extends Context.Service<Signals, {
  readonly handle: () => void
  readonly received: Effect.Effect<StopSignal>
  /**
   * Whether a terminal the command started on has hung up: a command that dies after that died on
   * the gone terminal (the wizard's next prompt), which is the hangup's stop (129), not an internal
   * error (3).
   */
  readonly hungUp?: (() => boolean) | undefined
}>()("effect-gym/cli/Signals") {}

/** The exit code of a process stopped by a signal: 128 + the signal's number. */
export const signalExitCode = (signal: StopSignal): number =>
  signal === "SIGINT" ? 130 : signal === "SIGTERM" ? 143 : 129


/** The secret held by an environment variable named by an option (`--api-key-env VAR`). */
export const secret = (option: string, name: string) =>
  Config.Redacted(name).pipe(
    Effect.mapError(() => new OptionError({ option, detail: `the environment variable ${name} is not set` })),
    Effect.filterOrFail(
      (key) => Redacted.value(key).trim() !== "",
      () => new OptionError({ option, detail: `the environment variable ${name} is empty` })
    )
  )

/** The network options the serving commands share: who may talk to them, and connection limits. */
export const networkOptions = {
  allowHost: repeated(
    "allow-host",
    "Another Host name this server answers to (repeatable); on a loopback address only loopback names are " +
      "answered by default (DNS rebinding)"
  ),
  corsOrigin: repeated(
    "cors-origin",
    "A browser origin allowed to call this server cross-origin, e.g. https://app.example (repeatable; * for any)"
  ),
  maxConnections: integer("max-connections").pipe(
    Flag.withDescription("Connections open at once; more are dropped"),
    Flag.withDefault(1024)
  ),
  headerTimeout: secondsText("header-timeout").pipe(
    Flag.withDescription("Seconds a client has to send a request's headers"),
    Flag.withDefault("30")
  ),
  bodyTimeout: secondsText("body-timeout").pipe(
    Flag.withDescription("Seconds a client has to send a request's body after its headers"),
    Flag.withDefault("30")
  )
}

/** The network options, checked. */
export const networkSettings = (args: {
  readonly allowHost: ReadonlyArray<string>
  readonly corsOrigin: ReadonlyArray<string>
  readonly maxConnections: number
  readonly headerTimeout: string
  readonly bodyTimeout: string
}) =>
  Effect.gen(function*() {
    if (args.maxConnections < 1) {
      return yield* new OptionError({ option: "--max-connections", detail: `must be >= 1, got ${args.maxConnections}` })
    }
    const seconds = (option: string, text: string) =>
      Effect.flatMap(parseNumber(option, text), (n) =>
        n > 0
          ? Effect.succeed(Duration.millis(Math.round(n * 1000)))
          : Effect.fail(new OptionError({ option, detail: `must be > 0 seconds, got ${n}` })))
    for (const origin of args.corsOrigin) {
      if (origin !== "*" && !/^https?:\/\/[^/\s]+\/?$/i.test(origin)) {
        return yield* new OptionError({
          option: "--cors-origin",
          detail: `${JSON.stringify(origin)} is not an origin (scheme://host[:port], or *)`
        })
      }
    }
    return {
      allowHosts: args.allowHost,
      corsOrigins: args.corsOrigin,
      maxConnections: args.maxConnections,
      headerTimeout: yield* seconds("--header-timeout", args.headerTimeout),
      bodyTimeout: yield* seconds("--body-timeout", args.bodyTimeout)
    }
  })
