/**
 * The `effect-gym` command line: `run`, `dataset frozen-lake`, `envs`.
 *
 * `main(argv)` runs one invocation and gives its exit code: 0 when everything ran, 1 when the run
 * completed with failed trajectories or bad rows, 2 when the invocation itself was wrong (bad
 * options, unknown names, unreadable files, a plugin that does not load).
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import * as ValidationError from "@effect/cli/ValidationError"
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Console, Effect, HashMap, Option, Schema, Stream } from "effect"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference } from "../Inference.js"
import * as Json from "../internal/Json.js"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import * as Reward from "../Reward.js"
import * as Rollout from "../Rollout.js"
import * as Row from "../Row.js"
import * as Summary from "../Summary.js"
import { normalizeArgv } from "./argv.js"
import * as Progress from "./Progress.js"

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

const VERSION = "0.1.0"

const plugins = Options.text("plugin").pipe(
  Options.withDescription("A plugin module (.ts or .js) that registers envs, schedulers, reward functions, policies"),
  Options.repeated
)

const keyValues = (name: string, description: string) =>
  Options.keyValueMap(name).pipe(
    Options.withDescription(description),
    Options.optional,
    Options.map(Option.match({
      onNone: (): Record<string, string> => ({}),
      onSome: (map) => Object.fromEntries(HashMap.toEntries(map))
    }))
  )

const runOptions = {
  dataset: Options.text("dataset").pipe(Options.withDescription("The dataset, one JSON row per line")),
  gymEnv: Options.text("gym-env").pipe(
    Options.withDescription("The env of rows whose env_config has no name"),
    Options.optional
  ),
  scheduler: Options.text("scheduler").pipe(
    Options.withDescription("The multi-turn scheduler"),
    Options.withDefault("gym_scheduler")
  ),
  schedulerOptions: keyValues("scheduler-option", "key=value options for the scheduler (repeatable)"),
  policy: Options.text("policy").pipe(
    Options.withDescription("The in-process policy that answers (random, frozen-lake-solver, or a plugin's)"),
    Options.withDefault("random")
  ),
  policyOptions: keyValues("policy-option", "key=value options for the policy, e.g. epsilon=0.1 (repeatable)"),
  seed: Options.integer("seed").pipe(Options.withDescription("The run's seed"), Options.withDefault(0)),
  numGenerations: Options.integer("num-generations").pipe(
    Options.withDescription("Trajectories per row (the GRPO group size)"),
    Options.withDefault(8)
  ),
  maxTurns: Options.integer("max-turns").pipe(
    Options.withDescription("Turns after which a trajectory ends"),
    Options.withDefault(10)
  ),
  concurrency: Options.integer("concurrency").pipe(
    Options.withDescription("Trajectories in flight"),
    Options.withDefault(64)
  ),
  output: Options.text("output").pipe(
    Options.withDescription("The completions log (one JSON line per trajectory)"),
    Options.withDefault("completions.jsonl")
  ),
  plugins,
  rewardFuncs: Options.text("reward-funcs").pipe(
    Options.withDescription("Reward functions (columns before gym_reward)"),
    Options.repeated
  ),
  rewardWeights: Options.text("reward-weights").pipe(
    Options.withDescription("One weight per reward column, the gym_reward weight last"),
    Options.repeated
  ),
  json: Options.boolean("json").pipe(Options.withDescription("Print the summary as JSON"))
}

type RunArgs = Command.Command.ParseConfig<typeof runOptions>

/** Numbers given as text (`1`, `0.2`, `-1e-3`); @effect/cli's float option rejects integers. */
const parseNumbers = (option: string, values: ReadonlyArray<string>) =>
  Effect.forEach(values, (text) => {
    const value = Number(text)
    return text.trim() === "" || !Number.isFinite(value)
      ? Effect.fail(new Reward.RewardConfigError({ option, detail: `${JSON.stringify(text)} is not a number` }))
      : Effect.succeed(value)
  })

const readText = (option: string, file: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(file)).pipe(
    Effect.mapError((error) =>
      new FileError({
        option,
        file,
        detail: error._tag === "SystemError" && error.reason === "NotFound" ? "no such file" : error.message
      })
    )
  )

/**
 * The `run` job: everything a command-line run does, for reuse by tests and other front ends.
 *
 * @since 0.1.0
 * @category commands
 */
export const runJob = (args: RunArgs) =>
  Effect.gen(function*() {
    yield* Rollout.validate(args)
    const registry = yield* PluginLoader.registry(args.plugins)
    const definition = yield* Registry.scheduler(registry, args.scheduler)
    const policy = yield* Registry.policy(registry, args.policy)
    const rewardDefs = yield* Effect.forEach(args.rewardFuncs, (name) => Registry.reward(registry, name))
    const columns = yield* Reward.columns(rewardDefs, yield* parseNumbers("--reward-weights", args.rewardWeights))
    const defaultEnv = Option.getOrUndefined(args.gymEnv)
    if (defaultEnv !== undefined && definition.usesRegistryEnvs) yield* Registry.env(registry, defaultEnv)

    const text = yield* readText("--dataset", args.dataset)
    const instance = yield* definition.make({ options: args.schedulerOptions })
    const inference = yield* policy.make(args.policyOptions)
    const writer = yield* CompletionsLog.open(args.output).pipe(
      Effect.mapError((error) => new FileError({ option: "--output", file: args.output, detail: error.message }))
    )
    const config: Rollout.Config = {
      registry,
      scheduler: { definition, instance },
      defaultEnv,
      numGenerations: args.numGenerations,
      maxTurns: args.maxTurns,
      concurrency: args.concurrency,
      seed: args.seed,
      columns
    }
    const accumulator = new Summary.Accumulator()
    const started = performance.now()
    const total = Row.countRows(text) * args.numGenerations
    yield* Progress.whileRunning(
      () => ({ accumulator, total, elapsedMs: performance.now() - started }),
      Rollout.stream(config, Row.decodeJsonl(args.dataset, text)).pipe(
        Stream.tap((item) => {
          accumulator.add(item)
          const report = item._tag === "RowFailure" ? Console.error(`bad row: ${item.error.message}`) : Effect.void
          return Effect.zipRight(
            report,
            Effect.mapError(
              writer.write(item),
              (error) => new FileError({ option: "--output", file: args.output, detail: error.message })
            )
          )
        }),
        Stream.runDrain,
        Effect.provideService(Inference, inference)
      )
    )
    const summary = accumulator.summary(performance.now() - started)
    yield* Console.log(
      args.json
        ? Json.stringify({ ...summary, output: args.output })
        : `${Summary.format(summary)}\ncompletions    ${args.output}`
    )
    return summary
  }).pipe(Effect.scoped)

const run = Command.make("run", runOptions).pipe(
  Command.withDescription("Run rollouts over a dataset and write the completions log")
)

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

const dataset = Command.make("dataset").pipe(
  Command.withDescription("Write example datasets"),
  Command.withSubcommands([datasetFrozenLake])
)

const envs = Command.make("envs", { plugins, json: Options.boolean("json") }).pipe(
  Command.withDescription("List the registered envs, schedulers, reward functions and policies (after plugins)")
)

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

/**
 * Runs one invocation (`argv` as `process.argv`: node, script, then the arguments) and gives the
 * exit code. Errors are printed on stderr.
 *
 * @since 0.1.0
 * @category running
 */
export const main = (argv: ReadonlyArray<string>): Effect.Effect<number, never, NodeContext.NodeContext> => {
  let exitCode = 0
  const command = Command.make("effect-gym").pipe(
    Command.withDescription("Multi-turn LLM rollouts against Gym-style environments"),
    Command.withSubcommands([
      Command.withHandler(run, (args) =>
        Effect.map(runJob(args), (summary) => {
          exitCode = summary.failures > 0 || summary.badRows > 0 ? 1 : 0
        })),
      Command.withSubcommands(dataset, [
        Command.withHandler(datasetFrozenLake, (args) =>
          Effect.gen(function*() {
            if (args.rows < 0) return yield* new Rollout.RunConfigError({ option: "--rows", detail: "must be >= 0" })
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
      ]),
      Command.withHandler(envs, (args) =>
        Effect.flatMap(PluginLoader.registry(args.plugins), (registry) =>
          Console.log(describeRegistry(registry, args.json))))
    ])
  )
  const cli = Command.run(command, { name: "effect-gym", version: VERSION })
  return cli(normalizeArgv(argv)).pipe(
    Effect.as(undefined),
    Effect.catchAll((error) => {
      exitCode = 2
      // @effect/cli prints its own validation errors (with the usage) already.
      if (ValidationError.isValidationError(error)) return Effect.void
      return Console.error(`error: ${error.message}`)
    }),
    Effect.map(() => exitCode)
  )
}
