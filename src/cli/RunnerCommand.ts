/**
 * `effect-gym runner --cluster postgres://...`: a process that joins the cluster and runs the
 * groups sent to it (see `src/cluster/`). Its plugins and inference are its own: each node can
 * point at its local model server, or run a scripted policy.
 */
import { Effect, Fiber, Layer, Logger, Option, Schedule } from "effect"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { canonical } from "../internal/inspect.js"
import { Command, Flag } from "effect/cli"
import * as PluginLoader from "../node/PluginLoader.js"
import { checkPort, integer, OptionError, plugins, toggle } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as RolloutOptions from "./RolloutOptions.js"
import { documentedAll } from "./help.js"

// Sampling is the run's (the coordinator sends it with every group); the drift check is a local run's.
const {
  frequencyPenalty: _frequencyPenalty,
  maxTokens: _maxTokens,
  presencePenalty: _presencePenalty,
  stop: _stop,
  temperature: _temperature,
  titoCheck: _titoCheck,
  topK: _topK,
  topP: _topP,
  ...inferenceOptions
} = InferenceOptions.options

/** Options of `run` that belong to the coordinator (the run's), refused by name on a runner. */
const COORDINATOR_ONLY = [
  "--dataset", "--output", "--resume", "--resume-force", "--overwrite", "--json", "--run-id", "--view", "--view-port",
  "--seed", "--num-generations", "--max-turns", "--failed-groups",
  "--env", "--gym-env", "--scheduler", "--scheduler-option", "--max-concurrent-envs", "--reward-funcs", "--reward-weights",
  "--reset-timeout", "--step-timeout", "--close-timeout", "--trajectory-timeout", "--trajectory-retries",
  "--temperature", "--top-p", "--top-k", "--max-tokens", "--stop", "--presence-penalty", "--frequency-penalty"
]

/**
 * A coordinator's option given to `runner` (`argv` as `process.argv`): refused by name, with what
 * to do instead (effect/cli would only say it is not recognized).
 */
export const refusedOption = (argv: ReadonlyArray<string>): OptionError | undefined => {
  if (argv[2] !== "runner") return undefined
  for (const token of argv.slice(3)) {
    const flag = token.split("=")[0]
    if (flag === "--tito-check") {
      return new OptionError({
        option: flag,
        detail: "not on a runner: the drift check is a local run's (run without --cluster), it does not run on a cluster"
      })
    }
    if (COORDINATOR_ONLY.includes(flag)) {
      return new OptionError({
        option: flag,
        detail: "the run's option, not a runner's: give it to `effect-gym run --cluster` (the coordinator sends it " +
          "with every group)"
      })
    }
  }
  return undefined
}

export const runnerOptions = {
  cluster: Flag.String("cluster").pipe(
    Flag.withDescription("The cluster's PostgreSQL database (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)")
  ),
  host: Flag.String("host").pipe(
    Flag.withDescription("The address the other runners and coordinators reach this runner at"),
    Flag.withDefault("127.0.0.1")
  ),
  port: integer("port").pipe(Flag.withDescription("The port this runner listens on"), Flag.withDefault(24431)),
  listenHost: Flag.String("listen-host").pipe(
    Flag.withDescription("The address to bind (default: --host; 0.0.0.0: every interface)"),
    Flag.optional
  ),
  concurrency: integer("concurrency").pipe(
    Flag.withDescription("Groups this runner runs at once (each runs all its generations at once)"),
    Flag.withDefault(16)
  ),
  logGroups: toggle("log-groups", "Print a line on stderr for each group run"),
  plugins,
  policy: RolloutOptions.options.policy,
  policyOptions: RolloutOptions.options.policyOptions,
  isolateEnvs: RolloutOptions.isolateEnvs,
  ...RolloutOptions.isolationOptions(),
  ...inferenceOptions
}

/** The inference options of a runner as the inference layer takes them (no sampling: the run's). */
const inferenceArgs = (args: RunnerArgs): InferenceOptions.InferenceArgs => ({
  ...args,
  titoCheck: false,
  temperature: Option.none(),
  topP: Option.none(),
  topK: Option.none(),
  maxTokens: Option.none(),
  stop: [],
  presencePenalty: Option.none(),
  frequencyPenalty: Option.none()
})

export type RunnerArgs = Command.Command.Config.Infer<typeof runnerOptions>

/**
 * What a runner's samples depend on, which every runner of a run must share (see
 * `InferenceMismatch`): the mode, the model (a GGUF by its file name: each node has its own path),
 * the scripted policy and its options, and the inference options that change what is sampled or
 * returned. Not the server's URL (each node may use its own server), nor timeouts or sizes.
 */
export const inferenceIdentity = (
  args: RunnerArgs,
  kwargs: Readonly<Record<string, unknown>> | undefined
): Readonly<Record<string, unknown>> => {
  const model = Option.getOrNull(args.model)
  // (the scripted policies' latency_ms says when a reply comes, not what it is: a slow runner may
  // share a run with others)
  const { latency_ms: _latency, ...policyOptions } = args.policyOptions as Record<string, unknown>
  const identity: Record<string, unknown> = {
    mode: args.mode,
    model: model === null ? null : args.mode === "colocate" ? path.basename(model) : model,
    policy: args.mode === "scripted" ? Option.getOrElse(args.policy, () => "random") : null,
    policy_options: policyOptions
  }
  if (args.mode !== "scripted") {
    identity.options = {
      seeded_sampling: args.seededSampling,
      no_logprobs: args.noLogprobs,
      strict_openai: args.strictOpenai,
      token_path: Option.getOrElse(args.tokenPath, () => "auto"),
      chat_template_kwargs: kwargs ?? null,
      // (how tool calls are read out of a reply, and the prompt tokens the token path renders: a
      // runner with another parser or tokenizer makes other trajectories of the same samples)
      tool_parser: Option.getOrElse(args.toolParser, () => "hermes"),
      tokenizer: Option.match(args.tokenizer, { onNone: () => null, onSome: tokenizerDigest })
    }
  }
  return identity
}

/** A `--tokenizer` folder by the content of the files that render and tokenize (each node has its own path). */
const tokenizerDigest = (folder: string): string => {
  const hash = createHash("sha256")
  for (const name of ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]) {
    hash.update(`\0${name}\0`)
    try {
      hash.update(fs.readFileSync(path.join(folder, name)))
    } catch {
      hash.update("absent")
    }
  }
  return hash.digest("hex")
}

/**
 * Waits for `running` (a runner). Interrupted, it stops the runner and waits for its stop while the
 * database answers (the stop hands the shards back through it; envs close within their close
 * timeouts), but not once the database has not answered for `limitSeconds` (`downSince`: since when
 * it has not, `Date.now()` time): then `onGiveUp` and it returns, leaving the runner as a dead one (the
 * cluster takes its shards back when their leases run out). With the database down the stop never
 * ended, and after SIGHUP no one was left to send a second signal.
 */
export const joinStoppable = <A, E>(
  running: Fiber.Fiber<A, E>,
  downSince: () => number | undefined,
  limitSeconds: number,
  onGiveUp: () => void
): Effect.Effect<A, E> => {
  const givenUp = Effect.suspend(() => {
    const stopping = Date.now()
    const past = () => {
      const since = downSince()
      return since !== undefined && Date.now() - Math.max(since, stopping) >= limitSeconds * 1000
    }
    return Effect.sync(past).pipe(
      Effect.repeat({ until: (gone) => gone, schedule: Schedule.spaced("100 millis") }),
      Effect.andThen(Effect.sync(onGiveUp))
    )
  })
  return Fiber.join(running).pipe(
    Effect.onInterrupt(() =>
      Effect.gen(function*() {
        yield* Effect.forkDetach(Fiber.interrupt(running))
        // The wait on a fiber of its own: this one is being interrupted, and in an interruptible
        // region it would stop at once (the runner's stop cut short, its shards not handed back).
        const waiting = yield* Effect.forkDetach(
          Effect.interruptible(Effect.raceFirst(Effect.asVoid(Fiber.await(running)), givenUp))
        )
        yield* Fiber.await(waiting)
      })
    )
  )
}

/**
 * The runner's job: runs until interrupted (SIGINT/SIGTERM/SIGHUP hand its shards back first,
 * within the cluster's `runnerStopLimit`).
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
    if (!args.isolateEnvs && (Option.isSome(args.envWorkers) || args.envTimeout !== RolloutOptions.ENV_TIMEOUT_DEFAULT)) {
      return yield* new OptionError({
        option: Option.isSome(args.envWorkers) ? "--env-workers" : "--env-timeout",
        detail: "only with --isolate-envs"
      })
    }
    const loaded = yield* PluginLoader.registry(args.plugins)
    const { registryDigest } = yield* Effect.promise(() => import("../cluster/internal/digest.js"))
    // the digest of the names and plugin files (the same with envs in worker threads or not)
    const digest = registryDigest(loaded, args.plugins)
    const registry = args.isolateEnvs ? (yield* RolloutOptions.isolate(loaded, args)).registry : loaded
    // This runner's one inference layer (built before the runner joins: a bad option fails at start).
    const inferenceLayer = InferenceOptions.layer(inferenceArgs(args), {
      registry,
      policy: args.policy,
      policyOptions: args.policyOptions
    })
    const Runner = yield* Effect.promise(() => import("../cluster/Runner.js"))
    const { condensed } = yield* Effect.promise(() => import("../cluster/internal/log.js"))
    const name = `${args.host}:${args.port}`
    // the cluster's storage warnings while the database is away: one line, not a stack every 0.5 s
    const { answered, downSince, logger, waiting } = condensed(name, (line) => process.stderr.write(`${line}\n`), (text) => Cluster.scrub(url, text))
    const launched = Layer.launch(
      Runner.layer({
        url,
        host: args.host,
        port: args.port,
        listenHost: Option.getOrUndefined(args.listenHost),
        registry,
        plugins: args.plugins,
        digest,
        inference: canonical(inferenceIdentity(args, yield* InferenceOptions.chatTemplateKwargs(args.chatTemplateKwargs))),
        concurrency: args.concurrency,
        logGroups: args.logGroups,
        databaseBack: { waiting, answered },
        onWaitForDatabase: (why) =>
          process.stderr.write(
            `runner ${name}: the database at ${Cluster.redact(url)} does not answer (${why}): waiting for it up to ` +
              `${Cluster.databaseWait()} s (EFFECT_GYM_CLUSTER_DB_WAIT)\n`
          ),
        onReady: () =>
          process.stderr.write(
            `runner ${name} joined the cluster at ${Cluster.redact(url)} (registry digest ${digest.slice(0, 12)}, ` +
              `${args.concurrency} groups at once)\n`
          )
      }).pipe(Layer.provide(inferenceLayer))
    ).pipe(Effect.provideService(Logger.CurrentLoggers, new Set([logger])))
    // The runner on a fiber of its own, so that its stop can be given up (see joinStoppable).
    const running = yield* Effect.forkDetach(launched)
    const limit = Cluster.runnerStopLimit()
    return yield* joinStoppable(running, downSince, limit, () =>
      process.stderr.write(
        `runner ${name}: its shards not handed back: the database has not answered for ${limit} s ` +
          `(EFFECT_GYM_RUNNER_STOP_LIMIT): leaving without; the cluster takes them back when their leases run out\n`
      ))
  }).pipe(Effect.scoped)

export const command = Command.make("runner", documentedAll(runnerOptions)).pipe(
  Command.withDescription("Join a cluster (a PostgreSQL database) and run the groups that `run --cluster` sends"),
  Command.withHandler((args) => Effect.asVoid(runnerJob(args)))
)


