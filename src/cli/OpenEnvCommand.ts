/**
 * `effect-gym openenv serve`: serves a registered env (built-in or from a plugin) over the OpenEnv
 * WebSocket protocol until interrupted.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Either, Option } from "effect"
import * as Json from "../internal/Json.js"
import * as PluginLoader from "../node/PluginLoader.js"
import * as Registry from "../Registry.js"
import { isRecord } from "../internal/inspect.js"
import { cannotListen, checkPort, host, integer, OptionError, parseNumber, plugins, port } from "./common.js"

const serve = Command.make("serve", {
  env: Options.text("env").pipe(Options.withDescription("The registered env to serve")),
  port,
  host,
  maxConcurrentEnvs: integer("max-concurrent-envs").pipe(
    Options.withDescription("Sessions at once; more get CAPACITY_REACHED"),
    Options.withDefault(8)
  ),
  idleTimeout: Options.text("idle-timeout").pipe(
    Options.withDescription("Seconds without a message after which a session is ended (0: never)"),
    Options.withDefault("300")
  ),
  envConfig: Options.text("env-config").pipe(
    Options.withDescription("The env's env_config as a JSON object, e.g. '{\"clues\": 40}'"),
    Options.optional
  ),
  plugins
}).pipe(
  Command.withDescription("Serve an env over the OpenEnv WebSocket protocol (/ws, /health, /metadata, /schema)"),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      yield* checkPort(args.port)
      if (args.maxConcurrentEnvs < 1) {
        return yield* new OptionError({
          option: "--max-concurrent-envs",
          detail: `must be >= 1, got ${args.maxConcurrentEnvs}`
        })
      }
      const idle = yield* parseNumber("--idle-timeout", args.idleTimeout)
      if (idle < 0) return yield* new OptionError({ option: "--idle-timeout", detail: `must be >= 0, got ${idle}` })
      const envConfig = yield* Option.match(args.envConfig, {
        onNone: () => Effect.succeed({}),
        onSome: (text) => {
          const parsed = Either.try(() => Json.parse(text))
          return Either.isRight(parsed) && isRecord(parsed.right)
            ? Effect.succeed(parsed.right)
            : Effect.fail(new OptionError({ option: "--env-config", detail: "must be a JSON object" }))
        }
      })
      const registry = yield* PluginLoader.registry(args.plugins)
      const env = yield* Registry.env(registry, args.env)
      // The server (HTTP, WebSocket) is loaded when the command runs.
      const OpenEnvServer = yield* Effect.promise(() => import("../openenv/OpenEnvServer.js"))
      const running = yield* OpenEnvServer.serve({
        env,
        envConfig,
        host: args.host,
        port: args.port,
        maxConcurrentEnvs: args.maxConcurrentEnvs,
        idleTimeout: `${idle} seconds`
      }).pipe(
        Effect.catchTag("ServeError", cannotListen(args.host, args.port))
      )
      yield* Console.log(
        `OpenEnv server: env ${env.name} at ${running.url} (WebSocket /ws, at most ${args.maxConcurrentEnvs} sessions)`
      )
      return yield* Effect.never
    }).pipe(Effect.scoped)
  )
)

/** The `openenv` command and its subcommands. */
export const command = Command.make("openenv").pipe(
  Command.withDescription("OpenEnv: serve registered envs to OpenEnv clients"),
  Command.withSubcommands([serve])
)
