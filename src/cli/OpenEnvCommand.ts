/**
 * `effect-gym openenv serve`: serves a registered env (built-in or from a plugin) over the OpenEnv
 * protocol until interrupted; SIGTERM or SIGINT end every session (their envs closed) and the
 * process exits with 0.
 *
 * Envs run in worker threads by default (`--in-process-envs` to keep them on the server's thread),
 * so one that blocks cannot freeze the server; a call that takes longer than `--env-timeout` ends
 * its session.
 */
import { Console, Duration, Effect, Exit, Option, Result } from "effect"
import { Command, Flag } from "effect/cli"
import * as Json from "../internal/Json.js"
import { isRecord } from "../internal/inspect.js"
import * as PluginLoader from "../node/PluginLoader.js"
import type * as OpenEnvServer from "../openenv/OpenEnvServer.js"
import * as Registry from "../Registry.js"
import {
  cannotListen,
  checkPort,
  host,
  integer,
  networkOptions,
  networkSettings,
  OptionError,
  parseSeconds,
  plugins,
  port,
  secondsText,
  secret,
  setExitCode,
  toggle
} from "./common.js"
import * as RolloutOptions from "./RolloutOptions.js"
import { documentedAll } from "./help.js"

/** `OpenEnvServer.MAX_FRAME_BYTES_LIMIT` (the server module is loaded only when the command runs). */
const MAX_FRAME_BYTES_LIMIT = 2 ** 29 - 24

const serve = Command.make("serve", documentedAll({
  env: Flag.String("env").pipe(Flag.withDescription("The registered env to serve")),
  port,
  host,
  ...networkOptions,
  apiKeyEnv: Flag.String("api-key-env").pipe(
    Flag.withDescription(
      "The environment variable holding this server's key: every request then needs it (Authorization: Bearer " +
        "<key>, X-API-Key: <key>, or a base_url of http://user:<key>@host:port from Python clients)"
    ),
    Flag.optional
  ),
  maxConcurrentEnvs: integer("max-sessions").pipe(
    Flag.withAlias("max-concurrent-envs"),
    Flag.withDescription("Sessions at once; more get CAPACITY_REACHED (--max-concurrent-envs: its old name)"),
    Flag.withDefault(8)
  ),
  idleTimeout: secondsText("idle-timeout").pipe(
    Flag.withDescription("Seconds without a message after which a session is ended (0: never, as the Python server)"),
    Flag.withDefault("0")
  ),
  requireReset: toggle(
    "require-reset",
    "A step or state before any reset is an error (default: played on a fresh env, as Python does)"
  ),
  strictReset: toggle(
    "strict-reset",
    "Reset's seed must be an integer >= 0 and episode_id a string (default: any value, as Python)"
  ),
  maxFrameBytes: integer("max-frame-bytes").pipe(
    Flag.withDescription("The largest WebSocket message a client may send, at most 536870888; larger closes the connection (1009)"),
    Flag.withDefault(16 * 1024 * 1024)
  ),
  envConfig: Flag.String("env-config").pipe(
    Flag.withDescription("The env's env_config as a JSON object, e.g. '{\"clues\": 40}'"),
    Flag.optional
  ),
  inProcessEnvs: RolloutOptions.inProcessEnvs,
  ...RolloutOptions.isolationOptions(),
  plugins
})).pipe(
  Command.withDescription(
    "Serve an env over the OpenEnv protocol (/ws, /reset, /step, /state, /mcp, /health, /metadata, /schema, /openapi.json, /docs)"
  ),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      yield* checkPort(args.port)
      if (args.maxConcurrentEnvs < 1) {
        return yield* new OptionError({
          option: "--max-sessions",
          detail: `must be >= 1, got ${args.maxConcurrentEnvs}`
        })
      }
      if (args.maxFrameBytes < 1 || args.maxFrameBytes > MAX_FRAME_BYTES_LIMIT) {
        return yield* new OptionError({
          option: "--max-frame-bytes",
          detail: `must be between 1 and ${MAX_FRAME_BYTES_LIMIT} (the longest string V8 holds), got ${args.maxFrameBytes}`
        })
      }
      const idle = yield* parseSeconds("--idle-timeout", args.idleTimeout, true)
      const callTimeout = yield* parseSeconds("--env-timeout", args.envTimeout)
      const network = yield* networkSettings(args)
      const envConfig = yield* Option.match(args.envConfig, {
        onNone: () => Effect.succeed({}),
        onSome: (text) => {
          const parsed = Result.try(() => Json.parse(text))
          return Result.isSuccess(parsed) && isRecord(parsed.success)
            ? Effect.succeed(parsed.success)
            : Effect.fail(new OptionError({ option: "--env-config", detail: "must be a JSON object" }))
        }
      })
      const apiKey = yield* Option.match(args.apiKeyEnv, {
        onNone: () => Effect.succeed(undefined),
        onSome: (name) => secret("--api-key-env", name)
      })
      const loaded = yield* PluginLoader.registry(args.plugins)
      // Checked here first: an unknown name or a bad --env-config is an error before any worker starts.
      yield* Effect.fromResult((yield* Effect.fromResult(Registry.env(loaded, args.env))).prepare(envConfig))
      const registry = args.inProcessEnvs ? loaded : (yield* RolloutOptions.isolate(loaded, args)).registry
      const env = yield* Effect.fromResult(Registry.env(registry, args.env))
      let sessions: OpenEnvServer.Sessions | undefined
      // Registered first, so it runs last: after every session has ended.
      yield* Effect.addFinalizer((exit) =>
        Exit.hasInterrupts(exit) && sessions !== undefined
          ? Effect.andThen(
            Console.error(`OpenEnv server: stopped (${sessions.accepted} sessions served)`),
            setExitCode(0)
          )
          : Effect.void
      )
      // The server (HTTP, WebSocket) is loaded when the command runs.
      const OpenEnvServerModule = yield* Effect.promise(() => import("../openenv/OpenEnvServer.js"))
      const running = yield* OpenEnvServerModule.serve({
        env,
        envConfig,
        host: args.host,
        port: args.port,
        maxConcurrentEnvs: args.maxConcurrentEnvs,
        idleTimeout: Duration.millis(Math.round(idle * 1000)),
        callTimeout: Duration.millis(Math.round(callTimeout * 1000)),
        // the env workers time each call themselves (and move the envs a blocked worker held)
        callGrace: args.inProcessEnvs ? Duration.zero : Duration.seconds(30),
        requireReset: args.requireReset,
        strictReset: args.strictReset,
        maxFrameBytes: args.maxFrameBytes,
        apiKey,
        ...network
      }).pipe(
        Effect.catchTag("ServeError", cannotListen(args.host, args.port))
      )
      sessions = running.sessions
      yield* Console.log(
        `OpenEnv server: env ${env.name} at ${running.url} (WebSocket /ws, /reset, /step, /state, /mcp; at most ` +
          `${args.maxConcurrentEnvs} sessions; envs ${args.inProcessEnvs ? "in process" : "in worker threads"}` +
          `${apiKey === undefined ? "" : "; key required"})`
      )
      // A signal interrupts the command: end the sessions at once (closing the scope alone waits
      // on the open WebSockets first).
      return yield* Effect.onInterrupt(Effect.never, () => running.shutdown)
    }).pipe(Effect.scoped)
  )
)

/** The `openenv` command and its subcommands. */
export const command = Command.make("openenv").pipe(
  Command.withDescription("OpenEnv: serve registered envs to OpenEnv clients"),
  Command.withSubcommands([serve])
)
