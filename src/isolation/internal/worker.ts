/**
 * The entry of an env worker thread: it loads the same plugins as the main thread (paths, on top
 * of the built-ins, from `workerData`), so it holds the same registry, and serves create / reset /
 * step / close for any number of envs, each in its own scope, each call in its own fiber
 * (interrupted when the main thread says so). See `protocol.ts` for the messages.
 *
 * Whatever an env does wrong comes back as a failure built here (plain data: the class of the
 * plugin's copy of the package may not be this one's), never as a lost request.
 */
import { Cause, Effect, Exit, Option, Result, Scope } from "effect"
import { parentPort, workerData } from "node:worker_threads"
import type * as Env from "../../Env.js"
import { MAX_JSON_DEPTH, nestsDeeper } from "../../internal/inspect.js"
import { describe } from "../../internal/lift.js"
import type * as Message from "../../Message.js"
import * as PluginLoader from "../../node/PluginLoader.js"
import * as Registry from "../../Registry.js"
import type * as Protocol from "./protocol.js"

interface Live {
  readonly name: string
  readonly env: Env.Env
  readonly scope: Scope.Closeable
  messages: ReadonlyArray<Message.Message>
}

type Phase = Protocol.Failure["phase"]

let registry: Registry.Registry = Registry.empty
const envs = new Map<number, Live>()
/** The interruptors of the calls running now, by call number. */
const running = new Map<number, (interruptor?: number) => void>()

const failure = (env: string, phase: Phase, detail: string): Protocol.Failure => ({ env, phase, detail })

/** The env's failure (or defect) as plain data; interruption goes on. */
const asFailure = (env: string, phase: Phase) => <A>(effect: Effect.Effect<A, unknown>) =>
  Effect.catchCause(effect, (cause): Effect.Effect<never, Protocol.Failure> => {
    if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
    const found = Cause.findErrorOption(cause)
    // an EnvError may also come as a defect (a close that failed dies with it, as Env.fromHandlers does)
    const error = (Option.isSome(found) ? found.value : Cause.squash(cause)) as {
      readonly _tag?: unknown
      readonly phase?: unknown
      readonly detail?: unknown
    }
    if (typeof error === "object" && error !== null && error._tag === "EnvError" && typeof error.detail === "string") {
      return Effect.fail(failure(env, typeof error.phase === "string" ? error.phase as Phase : phase, error.detail))
    }
    return Effect.fail(failure(env, phase, describe(error)))
  })

const viewOf = (env: Env.Env): Protocol.View | undefined => {
  const view = (env as { readonly openenv?: { readonly observation?: unknown; readonly state?: unknown } }).openenv
  if (typeof view !== "object" || view === null) return undefined
  if (typeof view.observation !== "function" || typeof view.state !== "function") return undefined
  return { observation: (view.observation as () => unknown)(), state: (view.state as () => unknown)() }
}

const live = (id: number, phase: Phase): Effect.Effect<Live, Protocol.Failure> =>
  Effect.suspend(() => {
    const found = envs.get(id)
    return found === undefined
      ? Effect.fail(failure(`#${id}`, phase, "no such env in this worker (closed, or never created)"))
      : Effect.succeed(found)
  })

const create = (id: number, name: string, config: unknown): Effect.Effect<undefined, Protocol.Failure> =>
  Effect.gen(function*() {
    const definition = Registry.env(registry, name)
    if (Result.isFailure(definition)) return yield* Effect.fail(failure(name, "create", definition.failure.message))
    const prepared = definition.success.prepare(config as Env.EnvConfig)
    if (Result.isFailure(prepared)) return yield* Effect.fail(failure(name, "create", prepared.failure.message))
    const scope = yield* Scope.make()
    const created = yield* Effect.exit(asFailure(name, "create")(Scope.provide(prepared.success, scope)))
    if (Exit.isFailure(created)) {
      yield* Scope.close(scope, created)
      return yield* Effect.failCause(created.cause)
    }
    envs.set(id, { name, env: created.value, scope, messages: [] })
    return undefined
  })

const serve = (request: Exclude<Protocol.Request, { k: "interrupt" | "ping" }>): Effect.Effect<
  Protocol.Outcome | undefined,
  Protocol.Failure
> => {
  switch (request.k) {
    case "create":
      return create(request.id, request.env, request.config)
    case "reset":
      return Effect.flatMap(live(request.id, "reset"), (it) =>
        asFailure(it.name, "reset")(it.env.reset(request.request as Env.ResetRequest)).pipe(
          Effect.map((result) => {
            it.messages = []
            return { result, view: viewOf(it.env) }
          })
        ))
    case "step":
      return Effect.flatMap(live(request.id, "step"), (it) => {
        const held = it.messages
        const fresh = request.messages as ReadonlyArray<Message.Message>
        const conversation = request.from === held.length
          ? held.concat(fresh)
          : held.slice(0, request.from).concat(fresh)
        it.messages = conversation
        return asFailure(it.name, "step")(it.env.step(conversation)).pipe(
          Effect.map((result) => ({ result, view: viewOf(it.env) }))
        )
      })
    case "close":
      return Effect.suspend(() => {
        const it = envs.get(request.id)
        if (it === undefined) return Effect.succeed(undefined)
        envs.delete(request.id)
        return Effect.as(asFailure(it.name, "close")(Scope.close(it.scope, Exit.void)), undefined)
      })
  }
}

/** The levels of an outcome above an env's own data (`{ result: { info: ... } }`). */
const OUTCOME_LEVELS = 3

// Replies go out in one batch per turn of this thread's event loop.
let outbox: Array<Protocol.Reply> = []
let flushing = false
const flush = () => {
  flushing = false
  const batch = outbox
  outbox = []
  try {
    parentPort!.postMessage(batch)
  } catch {
    // a result that structured clone cannot copy (a function, a symbol): that call's failure, not the batch's
    for (const reply of batch) {
      try {
        parentPort!.postMessage([reply])
      } catch (error) {
        parentPort!.postMessage([{
          c: reply.c,
          ok: false,
          failure: failure("?", "step", `its result cannot be sent from the worker thread: ${describe(error)}`)
        }])
      }
    }
  }
}
const reply = (answer: Protocol.Reply) => {
  outbox.push(answer)
  if (!flushing) {
    flushing = true
    setImmediate(flush)
  }
}

const onRequest = (request: Protocol.Request) => {
  switch (request.k) {
    case "interrupt": {
      running.get(request.c)?.()
      return
    }
    case "ping":
      return reply({ c: request.c, ok: true })
    default: {
      const c = request.c
      let finished = false
      const started = performance.now()
      const interrupt = Effect.runCallback(serve(request), {
        onExit: (exit) => {
          finished = true
          running.delete(c)
          if (Exit.isSuccess(exit)) {
            // Structured clone writes deeper than it reads: a result a few thousand levels deep leaves
            // this thread and overflows the main thread's deserializer, which loses the whole batch
            // (every call answered with it). It fails here, alone; no log line could hold it anyway.
            if (nestsDeeper(exit.value, MAX_JSON_DEPTH + OUTCOME_LEVELS)) {
              return reply({
                c,
                ok: false,
                failure: failure("?", request.k, `its result nests more than ${MAX_JSON_DEPTH} levels deep, ` +
                  `deeper than a log line may hold (it cannot be sent from the worker thread)`)
              })
            }
            return reply({ c, ok: true, value: exit.value, ms: performance.now() - started })
          }
          const failed = Cause.findErrorOption(exit.cause)
          // an interrupted call is answered too (the main thread has stopped waiting for it)
          reply({
            c,
            ok: false,
            failure: Option.isSome(failed)
              ? failed.value
              : failure("?", request.k, describe(Cause.squash(exit.cause)))
          })
        }
      })
      // (a call that finished synchronously has nothing left to interrupt)
      if (!finished) running.set(c, interrupt)
    }
  }
}

const start = workerData as Protocol.Start
Effect.runFork(
  PluginLoader.registry(start.plugins).pipe(
    Effect.match({
      onFailure: (error) => parentPort!.postMessage({ k: "failed", detail: error.message }),
      onSuccess: (loaded) => {
        registry = loaded
        parentPort!.on("message", (batch: ReadonlyArray<Protocol.Request>) => {
          for (const request of batch) onRequest(request)
        })
        parentPort!.postMessage({ k: "ready" })
      }
    })
  )
)
