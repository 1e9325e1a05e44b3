/**
 * `effect-gym run`: rollouts over a dataset, written to the completions log, with a summary.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Option, Stream } from "effect"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference } from "../Inference.js"
import * as Json from "../internal/Json.js"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import * as Reward from "../Reward.js"
import * as Rollout from "../Rollout.js"
import * as Row from "../Row.js"
import * as Summary from "../Summary.js"
import { FileError, keyValues, parseNumbers, plugins, readText, setExitCode } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as Progress from "./Progress.js"

export const runOptions = {
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
  maxConcurrentEnvs: Options.integer("max-concurrent-envs").pipe(
    Options.withDescription("Sessions per OpenEnv server at once (the scheduler option max_concurrent_envs)"),
    Options.optional
  ),
  policy: Options.text("policy").pipe(
    Options.withDescription(
      "--mode scripted: the in-process policy that answers (random, the default; frozen-lake-solver; or a plugin's)"
    ),
    Options.optional
  ),
  policyOptions: keyValues("policy-option", "key=value options for the policy, e.g. epsilon=0.1 (repeatable)"),
  ...InferenceOptions.options,
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

export type RunArgs = Command.Command.ParseConfig<typeof runOptions>

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
    const rewardDefs = yield* Effect.forEach(args.rewardFuncs, (name) => Registry.reward(registry, name))
    const columns = yield* Reward.columns(rewardDefs, yield* parseNumbers("--reward-weights", args.rewardWeights))
    const defaultEnv = Option.getOrUndefined(args.gymEnv)
    if (defaultEnv !== undefined && definition.usesRegistryEnvs) yield* Registry.env(registry, defaultEnv)

    const text = yield* readText("--dataset", args.dataset)
    const schedulerOptions = Option.match(args.maxConcurrentEnvs, {
      onNone: () => args.schedulerOptions,
      onSome: (n): Record<string, unknown> => ({ ...args.schedulerOptions, max_concurrent_envs: n })
    })
    const instance = yield* definition.make({ options: schedulerOptions })
    const inference = yield* InferenceOptions.make(args, {
      registry,
      policy: args.policy,
      policyOptions: args.policyOptions
    })
    const sampling = yield* InferenceOptions.sampling(args)
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
      columns,
      sampling
    }
    const accumulator = new Summary.Accumulator()
    const started = performance.now()
    const total = Row.countRows(text) * args.numGenerations
    yield* Progress.whileRunning(
      () => ({ accumulator, total, elapsedMs: performance.now() - started }),
      Rollout.stream(config, Row.decodeJsonl(args.dataset, text)).pipe(
        Stream.tap((item) => {
          accumulator.add(item)
          return item._tag === "RowFailure" ? Console.error(`bad row: ${item.error.message}`) : Effect.void
        }),
        // Groups are written in batches (at most 200 ms late), not one write per group.
        Stream.groupedWithin(256, "200 millis"),
        Stream.mapEffect((items) =>
          Effect.mapError(
            writer.write(items),
            (error) => new FileError({ option: "--output", file: args.output, detail: error.message })
          )
        ),
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

/** The `run` command. */
export const command = Command.make("run", runOptions).pipe(
  Command.withDescription("Run rollouts over a dataset and write the completions log"),
  Command.withHandler((args) =>
    Effect.flatMap(runJob(args), (summary) => setExitCode(summary.failures > 0 || summary.badRows > 0 ? 1 : 0)))
)
