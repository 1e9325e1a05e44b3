/**
 * `effect-gym dataset frozen-lake`: writes the example dataset.
 */
import { Command, Options } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { Console, Effect, Option } from "effect"
import { FileError, OptionError, parseNumbers } from "./common.js"

const datasetFrozenLake = Command.make("frozen-lake", {
  rows: Options.integer("rows").pipe(Options.withDescription("Number of rows (seeds start-seed, start-seed+1, ...)")),
  startSeed: Options.integer("start-seed").pipe(Options.withDefault(0)),
  size: Options.integer("size").pipe(Options.optional),
  p: Options.text("p").pipe(Options.optional),
  output: Options.text("output").pipe(
    Options.withDescription("Where to write the JSONL (default: standard output)"),
    Options.optional
  )
}).pipe(Command.withDescription("Write a FrozenLake dataset: one placeholder prompt per seed"))

/**
 * The JSONL text of a FrozenLake dataset (as `dataset frozen-lake` writes it).
 *
 * @since 0.1.0
 * @category commands
 */
export const frozenLakeDataset = (options: {
  readonly rows: number
  readonly startSeed?: number | undefined
  readonly size?: number | undefined
  readonly p?: number | undefined
}): string => {
  let out = ""
  for (let i = 0; i < options.rows; i++) {
    const envConfig: Record<string, unknown> = { seed: (options.startSeed ?? 0) + i }
    if (options.size !== undefined) envConfig.size = options.size
    if (options.p !== undefined) envConfig.p = options.p
    out += JSON.stringify({ messages: [{ role: "user", content: "<placeholder>" }], env_config: envConfig }) + "\n"
  }
  return out
}

/** The `dataset` command and its subcommands. */
export const command = Command.make("dataset").pipe(
  Command.withDescription("Write example datasets"),
  Command.withSubcommands([
    datasetFrozenLake.pipe(
      Command.withHandler((args) =>
          Effect.gen(function*() {
            if (args.rows < 0) return yield* new OptionError({ option: "--rows", detail: "must be >= 0" })
            const [p] = yield* parseNumbers("--p", Option.toArray(args.p))
            const text = frozenLakeDataset({
              rows: args.rows,
              startSeed: args.startSeed,
              size: Option.getOrUndefined(args.size),
              p
            })
            if (Option.isNone(args.output)) return yield* Console.log(text.trimEnd())
            const file = args.output.value
            const fs = yield* FileSystem.FileSystem
            yield* fs.writeFileString(file, text).pipe(
              Effect.mapError((error) => new FileError({ option: "--output", file, detail: error.message }))
            )
            yield* Console.error(`wrote ${args.rows} rows to ${file}`)
          }))
    )
  ])
)
