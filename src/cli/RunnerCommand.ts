/**
 * `effect-gym runner --cluster postgres://...`: a process that joins the cluster and runs the
 * groups sent to it (see `src/cluster/`). Its plugins and inference are its own: each node can
 * point at its local model server, or run a scripted policy.
 */
import { Command, Options } from "@effect/cli"
import { Effect, Layer, Option } from "effect"
import * as PluginLoader from "../node/PluginLoader.js"
import { checkPort, integer, OptionError, plugins } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as RolloutOptions from "./RolloutOptions.js"

const { titoCheck: _titoCheck, ...inferenceOptions } = InferenceOptions.options

export const runnerOptions = {
  cluster: Options.text("cluster").pipe(
    Options.withDescription("The cluster's PostgreSQL database (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)")
  ),
  host: Options.text("host").pipe(
    Options.withDescription("The address the other runners and coordinators reach this runner at"),
    Options.withDefault("127.0.0.1")
  ),
  port: integer("port").pipe(Options.withDescription("The port this runner listens on"), Options.withDefault(34431)),
  listenHost: Options.text("listen-host").pipe(
    Options.withDescription("The address to bind (default: --host; 0.0.0.0: every interface)"),
    Options.optional
  ),
  concurrency: integer("concurrency").pipe(
    Options.withDescription("Groups this runner runs at once (each runs all its generations at once)"),
    Options.withDefault(16)
  ),
  logGroups: Options.boolean("log-groups").pipe(Options.withDescription("Print a line on stderr for each group run")),
  plugins,
  policy: RolloutOptions.options.policy,
  policyOptions: RolloutOptions.options.policyOptions,
  ...inferenceOptions
}

export type RunnerArgs = Command.Command.ParseConfig<typeof runnerOptions>

/**
 * The runner's job: runs until interrupted (SIGINT/SIGTERM hand its shards back first).
 */
export const runnerJob = (args: RunnerArgs) =>
  Effect.gen(function*() {
    yield* checkPort(args.port)
    if (args.port === 0) {
      return yield* new OptionError({ option: "--port", detail: "a runner needs a fixed port (the others reach it there)" })
    }
    if (args.concurrency < 1 || args.concurrency > 10_000) {
      return yield* new OptionError({ option: "--concurrency", detail: `must be between 1 and 10000, got ${args.concurrency}` })
    }
    const Cluster = yield* Effect.promise(() => import("../cluster/Cluster.js"))
    const url = yield* Cluster.parseUrl(args.cluster)
    const registry = yield* PluginLoader.registry(args.plugins)
    const { registryDigest } = yield* Effect.promise(() => import("../cluster/internal/digest.js"))
    const digest = registryDigest(registry, args.plugins)
    yield* InferenceOptions.sampling({ ...args, titoCheck: false })
    // This runner's one inference layer (built before the runner joins: a bad option fails at start).
    const inferenceLayer = InferenceOptions.layer({ ...args, titoCheck: false }, {
      registry,
      policy: args.policy,
      policyOptions: args.policyOptions
    })
    const Runner = yield* Effect.promise(() => import("../cluster/Runner.js"))
    const name = `${args.host}:${args.port}`
    yield* Layer.launch(
      Runner.layer({
        url,
        host: args.host,
        port: args.port,
        listenHost: Option.getOrUndefined(args.listenHost),
        registry,
        plugins: args.plugins,
        digest,
        concurrency: args.concurrency,
        logGroups: args.logGroups,
        onReady: () =>
          process.stderr.write(
            `runner ${name} joined the cluster at ${Cluster.redact(url)} (registry digest ${digest.slice(0, 12)}, ` +
              `${args.concurrency} groups at once)\n`
          )
      }).pipe(Layer.provide(inferenceLayer))
    )
  }).pipe(Effect.scoped)

export const command = Command.make("runner", runnerOptions).pipe(
  Command.withDescription("Join a cluster (a PostgreSQL database) and run the groups that `run --cluster` sends"),
  Command.withHandler((args) => Effect.asVoid(runnerJob(args)))
)


