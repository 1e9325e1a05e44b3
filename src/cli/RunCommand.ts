/**
 * `effect-gym run`: rollouts over a dataset, written to the completions log, with a summary.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Stream } from "effect"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference } from "../Inference.js"
import * as Json from "../internal/Json.js"
import * as Rollout from "../Rollout.js"
import * as Row from "../Row.js"
import * as Summary from "../Summary.js"
import { FileError, readText, setExitCode } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as Progress from "./Progress.js"
import * as RolloutOptions from "./RolloutOptions.js"
import * as RunView from "./RunView.js"

export const runOptions = {
  dataset: Options.text("dataset").pipe(Options.withDescription("The dataset, one JSON row per line")),
  ...RolloutOptions.options,
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
  json: Options.boolean("json").pipe(Options.withDescription("Print the summary as JSON")),
  ...RunView.options
}

export type RunArgs = Command.Command.ParseConfig<typeof runOptions>

/**
 * The `run` job: everything a command-line run does, for reuse by tests and other front ends.
 *
 * @since 0.1.0
 * @category commands
 */
export const runJob = (args: RunArgs, view?: RunView.Handle) =>
  Effect.gen(function*() {
    yield* Rollout.validate(args)
    const { columns, defaultEnv, registry, scheduler: definition, schedulerOptions } = yield* RolloutOptions.resolve(
      args
    )

    const text = yield* readText("--dataset", args.dataset)
    const instance = yield* definition.make({ options: schedulerOptions })
    const sampling = yield* InferenceOptions.sampling(args)
    const inference = yield* InferenceOptions.make(args, {
      registry,
      policy: args.policy,
      policyOptions: args.policyOptions
    })
    const outputError = (error: { readonly message: string }) =>
      new FileError({ option: "--output", file: args.output, detail: error.message })
    const writer = yield* Effect.mapError(CompletionsLog.open(args.output), outputError)
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
    const drift = yield* InferenceOptions.driftCheck(args, inference)
    const halt = InferenceOptions.haltOn(inference)
    const started = performance.now()
    // The progress line's total, counted only if a progress line is drawn (on a terminal).
    let total: number | undefined
    const snapshot = () => ({ accumulator, total: total ??= Row.countRows(text) * args.numGenerations, elapsedMs: performance.now() - started })
    if (view !== undefined) yield* view.attach(args.output, snapshot)
    yield* Progress.whileRunning(
      snapshot,
      Rollout.stream(config, Row.decodeJsonl(args.dataset, text)).pipe(
        halt.stream,
        Stream.tap((item) => {
          accumulator.add(item)
          return item._tag === "RowFailure" ? Console.error(`bad row: ${item.error.message}`) : drift.add(item)
        }),
        // Groups are written in batches (at most 200 ms late), not one write per group.
        Stream.groupedWithin(256, "200 millis"),
        Stream.mapEffect((items) => Effect.mapError(writer.write(items), outputError)),
        Stream.runDrain,
        Effect.provideService(Inference, inference)
      )
    )
    const summary = drift.into(accumulator.summary(performance.now() - started))
    if (view !== undefined) yield* view.finish
    yield* Console.log(
      args.json
        ? Json.stringify({ ...summary, output: args.output })
        : `${Summary.format(summary)}\ncompletions    ${args.output}`
    )
    yield* halt.check
    return summary
  }).pipe(Effect.scoped)

/** The `run` command. */
export const command = Command.make("run", runOptions).pipe(
  Command.withDescription("Run rollouts over a dataset and write the completions log"),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      // --view: the page lives in the command's scope, so it outlives the run.
      const view = yield* RunView.make(args)
      const summary = yield* runJob(args, view)
      yield* setExitCode(summary.failures > 0 || summary.badRows > 0 ? 1 : 0)
      yield* view.hold
    }).pipe(Effect.scoped))
)
