/**
 * `effect-gym serve`: the rollout server (`rollout-server/RolloutServer`) with the inference options of
 * `run`, until interrupted. SIGTERM or SIGINT shut it down gracefully (stop accepting, let
 * trajectories in flight finish for `--shutdown-grace` seconds, cut the rest, close every env) and
 * the process exits with 0.
 *
 * `--api-key-env VAR` protects this server; the key of an upstream model server (`--mode server`)
 * is `--model-api-key-env VAR` here (`--inference-api-key-env`: its old name).
 */
import { Console, Duration, Effect, Exit, Layer, Option } from "effect"
import { Command, Flag } from "effect/cli"
import type * as RolloutServer from "../rollout-server/RolloutServer.js"
import {
  cannotListen,
  checkPort,
  choice,
  host,
  integer,
  networkOptions,
  networkSettings,
  OptionError,
  parseNumber,
  port,
  secondsText,
  secret,
  setExitCode,
  version
} from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as RolloutOptions from "./RolloutOptions.js"
import { documentedAll } from "./help.js"

// --tito-check reports in a run's summary; a server has none.
const { apiKeyEnv: _upstreamKey, titoCheck: _titoCheck, ...inferenceOptions } = InferenceOptions.options

export const serveOptions = {
  port,
  host,
  apiKeyEnv: Flag.String("api-key-env").pipe(
    Flag.withDescription(
      "The environment variable holding this server's key: every request then needs Authorization: Bearer <key>"
    ),
    Flag.optional
  ),
  ...networkOptions,
  ...RolloutOptions.options,
  inProcessEnvs: RolloutOptions.inProcessEnvs,
  ...inferenceOptions,
  inferenceApiKeyEnv: Flag.String("model-api-key-env").pipe(
    Flag.withAlias("inference-api-key-env"),
    Flag.withDescription(
      "--mode server: the environment variable holding the model server's API key (--inference-api-key-env: its old name)"
    ),
    Flag.optional
  ),
  seed: integer("seed").pipe(
    Flag.withDescription("The seed of requests that give none"),
    Flag.withDefault(0)
  ),
  numGenerations: integer("num-generations").pipe(
    Flag.withDescription("Trajectories per row for requests that do not say (the GRPO group size)"),
    Flag.withDefault(1)
  ),
  maxTurns: integer("max-turns").pipe(
    Flag.withDescription("Turns after which a trajectory ends, for requests that do not say"),
    Flag.withDefault(10)
  ),
  concurrency: integer("concurrency").pipe(
    Flag.withDescription("Trajectories in flight over all requests; a request that does not fit gets 429"),
    Flag.withDefault(256)
  ),
  maxRequestTrajectories: integer("max-request-trajectories").pipe(
    Flag.withDescription("Trajectories one request may ask for (default: --concurrency); more gets 413"),
    Flag.optional
  ),
  maxBody: integer("max-body").pipe(
    Flag.withDescription("Largest request body in bytes; larger gets 413"),
    Flag.withDefault(8 * 1024 * 1024)
  ),
  maxResponseBytes: integer("max-response-bytes").pipe(
    Flag.withDescription(
      "Bytes of one response's results that may wait for its client (a JSON batch is held whole: a larger one " +
        "gets 413; a stream past it is cut)"
    ),
    Flag.withDefault(256 * 1024 * 1024)
  ),
  maxBufferedBytes: integer("max-buffered-bytes").pipe(
    Flag.withDescription(
      "Bytes of results that may wait for their clients over all responses; from half of it new requests get 429, " +
        "and a response that goes past it is cut"
    ),
    Flag.withDefault(512 * 1024 * 1024)
  ),
  writeTimeout: secondsText("write-timeout").pipe(
    Flag.withDescription("Seconds a client may read nothing while its results wait before its response is cut"),
    Flag.withDefault("60")
  ),
  shutdownGrace: secondsText("shutdown-grace").pipe(
    Flag.withDescription("Seconds trajectories in flight may run on after SIGTERM/SIGINT before they are cut"),
    Flag.withDefault("30")
  ),
  onFailure: choice("on-failure", ["retry", "zero-reward"]).pipe(
    Flag.withDescription(
      "POST /infer/: retry (run transient failures again with a fresh env; if some still fail, answer 500 listing " +
        "them) or zero-reward (answer failed trajectories as reward-0 outputs, the error in rollout_infos.error)"
    ),
    Flag.withDefault("retry" as const)
  ),
  inferRetries: integer("infer-retries").pipe(
    Flag.withDescription(
      "POST /infer/ with --on-failure retry: runs of a transiently failed trajectory after the first (default 2)"
    ),
    Flag.optional
  )
}

export type ServeArgs = Command.Command.Config.Infer<typeof serveOptions>

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"])

/**
 * The `serve` job: checks the options, starts the server in the current scope and gives it back
 * (for reuse by tests and other front ends).
 *
 * @since 0.1.0
 * @category commands
 */
export const serveJob = (args: ServeArgs) =>
  Effect.gen(function*() {
    yield* checkPort(args.port)
    const grace = yield* parseNumber("--shutdown-grace", args.shutdownGrace)
    if (grace < 0) {
      return yield* new OptionError({ option: "--shutdown-grace", detail: `must be >= 0 seconds, got ${grace}` })
    }
    const writeTimeout = yield* parseNumber("--write-timeout", args.writeTimeout)
    if (writeTimeout <= 0) {
      return yield* new OptionError({ option: "--write-timeout", detail: `must be > 0 seconds, got ${writeTimeout}` })
    }
    const network = yield* networkSettings(args)
    const { defaultEnv, registry: loaded, retries, rewards, rewardWeights, scheduler, schedulerOptions, timeouts } =
      yield* RolloutOptions.resolve(args)
    const apiKey = yield* Option.match(args.apiKeyEnv, {
      onNone: () => Effect.succeed(undefined),
      onSome: (name) => secret("--api-key-env", name)
    })
    // The upstream model server's key has its own flag here.
    const upstream = { ...args, apiKeyEnv: args.inferenceApiKeyEnv, titoCheck: false }
    const sampling = yield* InferenceOptions.sampling(upstream)
    const inferRetries = Option.getOrElse(args.inferRetries, () => 2)
    if (inferRetries < 0 || inferRetries > 100) {
      return yield* new OptionError({ option: "--infer-retries", detail: `must be between 0 and 100, got ${inferRetries}` })
    }
    if (args.onFailure === "zero-reward" && Option.isSome(args.inferRetries)) {
      return yield* new OptionError({ option: "--infer-retries", detail: "only with --on-failure retry" })
    }
    // The composition root: the server gets its `Inference` (and the backend's control side) from
    // the one layer the options select, built first here (a bad option or an unreachable backend
    // fails at start) in the caller's scope, so released with the server's scope, after the server
    // has shut down (its finalizer is added first, so it runs last).
    const inference = yield* Layer.build(InferenceOptions.layer(upstream, {
      registry: loaded,
      policy: args.policy,
      policyOptions: args.policyOptions
    }, "refuse"))
    // The server (HTTP) is loaded when the command runs (startup of the other commands stays light).
    const RolloutServer = yield* Effect.promise(() => import("../rollout-server/RolloutServer.js"))
    return yield* Effect.gen(function*() {
      const control = yield* InferenceOptions.Control
      const options: RolloutServer.ServeOptions = {
        host: args.host,
        port: args.port,
        registry: loaded,
        scheduler,
        schedulerOptions,
        defaultEnv,
        rewards,
        rewardWeights,
        numGenerations: args.numGenerations,
        maxTurns: args.maxTurns,
        seed: args.seed,
        sampling,
        timeouts,
        retries,
        maxTrajectoriesInFlight: args.concurrency,
        maxRequestTrajectories: Option.getOrUndefined(args.maxRequestTrajectories),
        maxBodyBytes: args.maxBody,
        maxResponseBytes: args.maxResponseBytes,
        maxBufferedBytes: args.maxBufferedBytes,
        writeTimeout: Duration.millis(writeTimeout * 1000),
        apiKey,
        ...network,
        shutdownGrace: Duration.millis(grace * 1000),
        control: Option.getOrUndefined(control),
        onFailure: args.onFailure,
        inferRetries,
        info: { version: version(), mode: args.mode, model: Option.getOrUndefined(args.model) }
      }
      yield* RolloutServer.checkOptions(options)
      // Last, once everything else is known to be right: the env workers take a moment to start.
      const registry = args.inProcessEnvs ? loaded : (yield* RolloutOptions.isolate(loaded, args)).registry
      return yield* RolloutServer.serve({ ...options, registry })
    }).pipe(
      Effect.provideContext(inference),
      Effect.catchTag("ServeError", cannotListen(args.host, args.port))
    )
  })

/** The `serve` command. */
export const command = Command.make("serve", documentedAll(serveOptions)).pipe(
  Command.withDescription(
    "Serve rollouts over HTTP to a trainer: POST /v1/rollouts (JSON or NDJSON stream), POST /infer/, " +
      "GET /info, GET /health, GET /dashboard (a live page)"
  ),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      let stats: RolloutServer.Stats | undefined
      // Registered first, so it runs last: after the server has shut down and every env is closed.
      // A signal interrupts the command; for a server that is the normal way to stop: exit code 0.
      yield* Effect.addFinalizer((exit) =>
        Exit.hasInterrupts(exit) && stats !== undefined
          ? Effect.andThen(
            Console.error(
              `rollout server: stopped (${stats.completed} trajectories completed, ${stats.cancelled} cut)`
            ),
            setExitCode(0)
          )
          : Effect.void
      )
      const running = yield* serveJob(args)
      stats = running.stats
      if (Option.isNone(args.apiKeyEnv) && !LOOPBACK.has(args.host)) {
        yield* Console.error(
          `rollout server: warning: listening on ${args.host} without --api-key-env: anyone who reaches this port ` +
            `can run rollouts on this machine`
        )
      }
      yield* Effect.addFinalizer(() =>
        Console.error(
          `rollout server: shutting down (${running.stats.trajectoriesInFlight} trajectories in flight, ` +
            `grace ${args.shutdownGrace} s)`
        )
      )
      yield* Console.log(
        `rollout server: ${running.url} (POST /v1/rollouts, POST /infer/, GET /info, GET /health, GET /dashboard; ` +
          `at most ${args.concurrency} trajectories in flight` +
          `${Option.isSome(args.apiKeyEnv) ? "; bearer key required" : ""})`
      )
      return yield* Effect.never
    }).pipe(Effect.scoped))
)
