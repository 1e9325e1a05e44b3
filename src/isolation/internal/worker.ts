/**
 * The entry of an env worker thread: it loads the same plugins as the main thread (paths, on top
 * of the built-ins), so it holds the same registry, and serves `Create` / `Reset` / `Step` /
 * `Close` for any number of envs, each in its own scope. Requests are served by `effect/rpc`'s
 * `RpcServer` over the worker runner (one fiber each, interrupted when the caller is).
 *
 * Whatever an env does wrong comes back as an `EnvError` built here (plain data: the class of the
 * plugin's copy of the package may not be this one's), never as a lost request.
 */
import * as NodeWorkerRunner from "@effect/platform-node/NodeWorkerRunner"
import { Cause, Effect, Exit, Layer, Option, Result, Scope } from "effect"
import { RpcServer } from "effect/rpc"
import * as Env from "../../Env.js"
import { describe } from "../../internal/lift.js"
import type * as Message from "../../Message.js"
import * as PluginLoader from "../../node/PluginLoader.js"
import * as Registry from "../../Registry.js"
import * as Protocol from "./protocol.js"

interface Live {
  readonly name: string
  readonly env: Env.Env
  readonly scope: Scope.Closeable
  messages: ReadonlyArray<Message.Message>
}

let registry: Registry.Registry | undefined
const envs = new Map<number, Live>()

const envError = (env: string, phase: Env.EnvError["phase"], detail: string) =>
  new Env.EnvError({ env, phase, detail })

/** The env's failure as this module's EnvError; a defect becomes one too; interruption goes on. */
const asEnvError = (env: string, phase: Env.EnvError["phase"]) => <A>(effect: Effect.Effect<A, Env.EnvError>) =>
  Effect.catchCause(effect, (cause) => {
    if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
    const failure = Cause.findErrorOption(cause)
    if (Option.isSome(failure)) {
      const error = failure.value as { readonly phase?: unknown; readonly detail?: unknown; readonly message?: unknown }
      const detail = typeof error.detail === "string" ? error.detail : describe(error)
      const failedPhase = typeof error.phase === "string" ? error.phase as Env.EnvError["phase"] : phase
      return Effect.fail(envError(env, failedPhase, detail))
    }
    return Effect.fail(envError(env, phase, describe(Cause.squash(cause))))
  })

const viewOf = (env: Env.Env): typeof Protocol.View.Type | undefined => {
  const view = (env as { readonly openenv?: { readonly observation?: unknown; readonly state?: unknown } }).openenv
  if (typeof view !== "object" || view === null) return undefined
  if (typeof view.observation !== "function" || typeof view.state !== "function") return undefined
  return { observation: (view.observation as () => unknown)(), state: (view.state as () => unknown)() }
}

const live = (id: number, phase: Env.EnvError["phase"]) =>
  Effect.suspend(() => {
    const found = envs.get(id)
    return found === undefined
      ? Effect.fail(envError(`#${id}`, phase, "no such env in this worker (closed, or never created)"))
      : Effect.succeed(found)
  })

const handlers = Protocol.Requests.toLayer({
  Init: ({ plugins }) =>
    PluginLoader.registry(plugins).pipe(
      Effect.map((loaded) => {
        registry = loaded
      }),
      Effect.mapError((error) => error.message)
    ),

  Create: ({ config, env, id }) =>
    Effect.gen(function*() {
      const definition = Registry.env(registry ?? Registry.empty, env)
      if (Result.isFailure(definition)) return yield* envError(env, "create", definition.failure.message)
      const prepared = definition.success.prepare(config)
      if (Result.isFailure(prepared)) return yield* envError(env, "create", prepared.failure.message)
      const scope = yield* Scope.make()
      const created = yield* Effect.exit(asEnvError(env, "create")(Scope.provide(prepared.success, scope)))
      if (Exit.isFailure(created)) {
        yield* Scope.close(scope, created)
        return yield* Effect.failCause(created.cause)
      }
      envs.set(id, { name: env, env: created.value, scope, messages: [] })
    }),

  Reset: ({ id, request }) =>
    Effect.flatMap(live(id, "reset"), (it) =>
      asEnvError(it.name, "reset")(it.env.reset(request)).pipe(
        Effect.map((result) => {
          it.messages = []
          return { result, view: viewOf(it.env) }
        })
      )),

  Step: ({ from, id, messages }) =>
    Effect.flatMap(live(id, "step"), (it) => {
      const held = it.messages
      const conversation = from === held.length
        ? held.concat(messages as ReadonlyArray<Message.Message>)
        : held.slice(0, from).concat(messages as ReadonlyArray<Message.Message>)
      it.messages = conversation
      return asEnvError(it.name, "step")(it.env.step(conversation)).pipe(
        Effect.map((result) => ({ result, view: viewOf(it.env) }))
      )
    }),

  Close: ({ id }) =>
    Effect.suspend(() => {
      const it = envs.get(id)
      if (it === undefined) return Effect.void
      envs.delete(id)
      return Scope.close(it.scope, Exit.void)
    })
})

RpcServer.layer(Protocol.Requests, { concurrency: "unbounded" }).pipe(
  Layer.provide(handlers),
  Layer.provide(RpcServer.layerProtocolWorkerRunner),
  Layer.provide(NodeWorkerRunner.layer),
  Layer.launch,
  Effect.runFork
)
