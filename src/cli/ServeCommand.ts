/**
 * `effect-gym serve`: the rollout server (`rollout-server/RolloutServer`) with the inference options of
 * `run`, until interrupted. SIGTERM or SIGINT shut it down gracefully (stop accepting, let
 * trajectories in flight finish for `--shutdown-grace` seconds, cut the rest, close every env) and
 * the process exits with 0.
 *
 * `--api-key-env VAR` protects this server; the key of an upstream model server (`--mode server`)
 * is `--inference-api-key-env VAR` here.
 */
import { Command, Options } from "@effect/cli"
import { Console, Duration, Effect, Exit, Layer, Option } from "effect"
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
  secret,
  setExitCode,
  version
} from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as RolloutOptions from "./RolloutOptions.js"

// --tito-check reports in a run's summary; a server has none.
const { apiKeyEnv: _upstreamKey, titoCheck: _titoCheck, ...inferenceOptions } = InferenceOptions.options

export const serveOptions = {
  port,
  host,
  apiKeyEnv: Options.text("api-key-env").pipe(
    Options.withDescription(
      "The environment variable holding this server's key: every request then needs Authorization: Bearer <key>"
    ),
    Options.optional
  ),
  ...networkOptions,
  ...RolloutOptions.options,
  inProcessEnvs: RolloutOptions.inProcessEnvs,
  ...inferenceOptions,
  inferenceApiKeyEnv: Options.text("inference-api-key-env").pipe(
    Options.withDescription("--mode server: the environment variable holding the model server's API key"),
    Options.optional
  ),
  seed: integer("seed").pipe(
    Options.withDescription("The seed of requests that give none"),
    Options.withDefault(0)
  ),
  numGenerations: integer("num-generations").pipe(
    Options.withDescription("Trajectories per row for requests that do not say (the GRPO group size)"),
    Options.withDefault(1)
  ),
  maxTurns: integer("max-turns").pipe(
    Options.withDescription("Turns after which a trajectory ends, for requests that do not say"),
    Options.withDefault(10)
  ),
  concurrency: integer("concurrency").pipe(
    Options.withDescription("Trajectories in flight over all requests; a request that does not fit gets 429"),
    Options.withDefault(256)
  ),
  maxRequestTrajectories: integer("max-request-trajectories").pipe(
    Options.withDescription("Trajectories one request may ask for (default: --concurrency); more gets 413"),
    Options.optional
  ),
  maxBody: integer("max-body").pipe(
    Options.withDescription("Largest request body in bytes; larger gets 413"),
    Options.withDefault(8 * 1024 * 1024)
  ),
  shutdownGrace: Options.text("shutdown-grace").pipe(
    Options.withDescription("Seconds trajectories in flight may run on after SIGTERM/SIGINT before they are cut"),
    Options.withDefault("30")
  ),
  onFailure: choice("on-failure", ["retry", "zero-reward"]).pipe(
    Options.withDescription(
      "POST /infer/: retry (run transient failures again with a fresh env; if some still fail, answer 500 listing " +
        "them) or zero-reward (answer failed trajectories as reward-0 outputs, the error in rollout_infos.error)"
    ),
    Options.withDefault("retry" as const)
  ),
  inferRetries: integer("infer-retries").pipe(
    Options.withDescription(
      "POST /infer/ with --on-failure retry: runs of a transiently failed trajectory after the first (default 2)"
    ),
    Options.optional
  )
}

export type ServeArgs = Command.Command.ParseConfig<typeof serveOptions>

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
    const network = yield* networkSettings(args)
    const { columns, defaultEnv, registry: loaded, retries, scheduler, schedulerOptions, timeouts } =
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
    // the one layer the options select, built first below (a bad option or an unreachable backend
    // fails at start) and released with the server's scope, after the server has shut down (its
    // finalizer is added first, so it runs last).
    const inferenceLayer = InferenceOptions.layer(upstream, {
      registry: loaded,
      policy: args.policy,
      policyOptions: args.policyOptions
    }).pipe(
      Layer.extendScope,
      // The upstream key has its own flag here: name it in errors.
      Layer.mapError((error) =>
        error._tag === "OptionError" && error.option === "--api-key-env"
          ? new OptionError({ option: "--inference-api-key-env", detail: error.detail })
          : error
      )
    )
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
        columns,
        numGenerations: args.numGenerations,
        maxTurns: args.maxTurns,
        seed: args.seed,
        sampling,
        timeouts,
        retries,
        maxTrajectoriesInFlight: args.concurrency,
        maxRequestTrajectories: Option.getOrUndefined(args.maxRequestTrajectories),
        maxBodyBytes: args.maxBody,
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
      Effect.provide(inferenceLayer),
      Effect.catchTag("ServeError", cannotListen(args.host, args.port))
    )
  })

/** The `serve` command. */
export const command = Command.make("serve", serveOptions).pipe(
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
        Exit.isInterrupted(exit) && stats !== undefined
          ? Effect.zipRight(
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
