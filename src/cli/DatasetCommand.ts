/**
 * `effect-gym dataset frozen-lake`: writes the example dataset. Its options are checked as `run`
 * checks a row's `env_config` (a dataset that `run` would reject is not written).
 */
import { Console, Effect, FileSystem, Option, Result, Stream } from "effect"
import { Command, Flag } from "effect/cli"
import { FrozenLake } from "../envs/FrozenLake.js"
import { nextTurn } from "../internal/nextTurn.js"
import { errorDetail, FileError, integer, OptionError, parseNumbers } from "./common.js"
import { documentedAll } from "./help.js"

const datasetFrozenLake = Command.make("frozen-lake", documentedAll({
  rows: integer("rows").pipe(Flag.withDescription("Number of rows (seeds start-seed, start-seed+1, ...)")),
  startSeed: integer("start-seed").pipe(Flag.withDescription("The first row's seed"), Flag.withDefault(0)),
  size: integer("size").pipe(Flag.withDescription("The map's side, 2 to 256 (default 4)"), Flag.optional),
  p: Flag.String("p").pipe(Flag.withDescription("The probability that a tile is frozen (default 0.8)"), Flag.optional),
  output: Flag.String("output").pipe(
    Flag.withDescription("Where to write the JSONL (default: standard output)"),
    Flag.optional
  )
})).pipe(Command.withDescription("Write a FrozenLake dataset: one placeholder prompt per seed"))

interface DatasetOptions {
  readonly rows: number
  readonly startSeed?: number | undefined
  readonly size?: number | undefined
  readonly p?: number | undefined
}

const line = (options: DatasetOptions, i: number): string => {
  const envConfig: Record<string, unknown> = { seed: (options.startSeed ?? 0) + i }
  if (options.size !== undefined) envConfig.size = options.size
  if (options.p !== undefined) envConfig.p = options.p
  return JSON.stringify({ messages: [{ role: "user", content: "<placeholder>" }], env_config: envConfig }) + "\n"
}

/**
 * The JSONL text of a FrozenLake dataset (as `dataset frozen-lake` writes it).
 *
 * @since 0.1.0
 * @category commands
 */
export const frozenLakeDataset = (options: DatasetOptions): string => {
  let out = ""
  for (let i = 0; i < options.rows; i++) out += line(options, i)
  return out
}

/** The dataset's lines in chunks of at most 4096 rows (any number of rows, in little memory). */
const chunks = (options: DatasetOptions): Stream.Stream<string> =>
  Stream.unfold(0, (start) => {
    if (start >= options.rows) return Effect.succeed(undefined)
    const end = Math.min(options.rows, start + 4096)
    let text = ""
    for (let i = start; i < end; i++) text += line(options, i)
    return Effect.succeed([text, end] as const)
  })

/**
 * After a chunk is written (through the `Console`, which tests replace), gives the event loop a
 * turn, and waits while standard output's buffer is full, so that a slow reader holds the rows back
 * instead of them piling up in memory; `false` once the reader has gone (EPIPE destroys the stream:
 * `dataset frozen-lake --rows 1000000 | head -1` stops there instead of making every row).
 */
const taken: Effect.Effect<boolean> = Effect.suspend(() => {
  const out = process.stdout
  if (out.destroyed || out.writableEnded) return Effect.succeed(false)
  // A turn of the event loop even so: writes to a terminal (or a file) complete at once, and a
  // loop that never gave one could not see Ctrl-C (`dataset` to a terminal ran to its end).
  if (!out.writableNeedDrain) return Effect.as(nextTurn, true)
  return Effect.callback<boolean>((resume) => {
    const done = (ok: boolean) => () => {
      out.off("drain", onDrain).off("close", onClose)
      resume(Effect.succeed(ok))
    }
    const onDrain = done(true)
    const onClose = done(false)
    out.once("drain", onDrain).once("close", onClose)
    return Effect.sync(() => void out.off("drain", onDrain).off("close", onClose))
  })
})

const OPTION_OF_FIELD: Record<string, string> = { "env_config.size": "--size", "env_config.p": "-p", "env_config.seed": "--start-seed" }

/** Checks the options as `run` checks a row's env_config (the first and the last seed). */
const check = (options: DatasetOptions) => {
  // (past 2^53 - 1, seed + 1 is seed again: the last rows would repeat a seed)
  const last = (options.startSeed ?? 0) + Math.max(0, options.rows - 1)
  if (!Number.isSafeInteger(last)) {
    return Effect.fail(new OptionError({
      option: "--start-seed",
      detail: `with --rows ${options.rows} the last seed would be past ${Number.MAX_SAFE_INTEGER}, where whole numbers ` +
        `are no longer exact and seeds repeat`
    }))
  }
  return Effect.forEach([0, Math.max(0, options.rows - 1)], (i) => {
    const config = JSON.parse(line(options, i)).env_config as Record<string, unknown>
    return Result.match(FrozenLake.prepare(config), {
      onFailure: (error) =>
        Effect.fail(new OptionError({ option: OPTION_OF_FIELD[error.path] ?? error.path, detail: error.reason })),
      onSuccess: () => Effect.void
    })
  }, { discard: true })
}

/** The `dataset` command and its subcommands. */
export const command = Command.make("dataset").pipe(
  Command.withDescription("Write example datasets"),
  Command.withSubcommands([
    datasetFrozenLake.pipe(
      Command.withHandler((args) =>
        Effect.gen(function*() {
          if (args.rows < 0) return yield* new OptionError({ option: "--rows", detail: `must be >= 0, got ${args.rows}` })
          const [p] = yield* parseNumbers("-p", Option.toArray(args.p))
          const options: DatasetOptions = {
            rows: args.rows,
            startSeed: args.startSeed,
            size: Option.getOrUndefined(args.size),
            p
          }
          yield* check(options)
          if (Option.isNone(args.output)) {
            // each chunk ends with a newline, which Console.log writes back
            return yield* chunks(options).pipe(
              Stream.mapEffect((text) => Effect.andThen(Console.log(text.slice(0, -1)), taken)),
              Stream.takeWhile((more) => more),
              Stream.runDrain
            )
          }
          const file = args.output.value
          const fs = yield* FileSystem.FileSystem
          const encoder = new TextEncoder()
          yield* Effect.scoped(Effect.gen(function*() {
            const handle = yield* fs.open(file, { flag: "w" })
            yield* Stream.runForEach(chunks(options), (text) => handle.writeAll(encoder.encode(text)))
          })).pipe(Effect.mapError((error) => new FileError({ option: "--output", file, detail: errorDetail(error) })))
          yield* Console.error(`wrote ${args.rows} rows to ${file}`)
        }))
    )
  ])
)
