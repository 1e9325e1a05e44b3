/**
 * Envs off the main thread: a pool of worker threads, each holding the same registry as the main
 * thread (the built-ins plus the same plugins, loaded again by path in each worker), and an
 * adapter that turns any registered `Env.Definition` into one whose envs live in a worker.
 *
 * An isolated env is just another `Env`: its `reset` and `step` are requests to its worker (typed,
 * `effect/rpc` over `RpcClient.layerProtocolWorker` on `NodeWorker`), its close is the finalizer of the
 * scope it was created in, as for any env. The engine, the schedulers and the servers do not
 * change; an env that blocks its thread (a synchronous loop, a runaway generator) blocks only its
 * worker, and the main thread keeps answering.
 *
 * - Each env is pinned to one worker for its life (its state lives there); a new env goes to the
 *   worker with the fewest envs.
 * - A create, reset or step that does not answer within `timeout` ends that env with an `EnvError`
 *   (`details.reason: "Timeout"`), and its worker is terminated and replaced. The other envs of that
 *   worker cannot go on either (their state was in the terminated thread): their next call fails
 *   with an `EnvError` whose `details.reason` is `"WorkerLost"`. A close gets `closeTimeout` (3 s).
 * - A worker that exits by itself (an env called `process.exit`, ran out of memory) is replaced the
 *   same way.
 * - Closing the pool's scope terminates every worker.
 *
 * @since 0.1.0
 */
import * as NodeWorker from "@effect/platform-node/NodeWorker"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, References, Result, Schema, Scope } from "effect"
import { RpcClient } from "effect/rpc"
import type { RpcClientError } from "effect/rpc"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as WorkerThreads from "node:worker_threads"
import * as Env from "../Env.js"
import { describe } from "../internal/lift.js"
import type * as Message from "../Message.js"
import type * as Registry from "../Registry.js"
import * as Protocol from "./internal/protocol.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The plugin files the main thread loaded (each worker loads them too, in this order). */
  readonly plugins: ReadonlyArray<string>
  /** Worker threads (default: the machine's available parallelism). */
  readonly workers?: number | undefined
  /** How long a create, reset or step may take before its worker is terminated (default 60 s). */
  readonly timeout?: Duration.Input | undefined
  /**
   * How long a close may take (default 3 s: less than the servers wait for cut responses, so a
   * server that shuts down while an env blocks its worker still answers).
   */
  readonly closeTimeout?: Duration.Input | undefined
}

/**
 * Live counts, for tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  /** Workers started, replacements included. */
  readonly started: number
  /** Workers terminated because a call timed out or the worker exited. */
  readonly replaced: number
  /** Calls that timed out. */
  readonly timedOut: number
  /** Envs alive in workers now. */
  readonly envs: number
}

/**
 * The pool.
 *
 * @since 0.1.0
 * @category models
 */
export interface EnvWorkers {
  /** The same env, its instances in the pool's workers (the config is still checked here). */
  readonly wrap: (definition: Env.Definition) => Env.Definition
  /** The same registry, every env wrapped. */
  readonly registry: (registry: Registry.Registry) => Registry.Registry
  readonly stats: Stats
}

/**
 * A worker could not be started (its plugins do not load there, the thread failed).
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerStartError extends Schema.TaggedError<WorkerStartError>("effect-gym/WorkerStartError")(
  "WorkerStartError",
  { detail: Schema.String }
) {
  override get message(): string {
    return `env worker: cannot start: ${this.detail}`
  }
}

class Counts implements Stats {
  started = 0
  replaced = 0
  timedOut = 0
  envs = 0
}

/** One worker thread, while it lives. */
interface Handle {
  readonly worker: RpcClient.FromGroup<typeof Protocol.Requests, RpcClientError.RpcClientError>
  readonly scope: Scope.Closeable
  /** Failed (with why) when the worker is terminated: every call in flight on it fails at once. */
  readonly lost: Deferred.Deferred<never, string>
  thread: WorkerThreads.Worker | undefined
  /** Why the worker was terminated, once it was. */
  dead: string | undefined
}

/** A place in the pool: its current worker (replaced when it dies) and how many envs it holds. */
interface Slot {
  handle: Handle | undefined
  starting: Deferred.Deferred<Handle, WorkerStartError> | undefined
  envs: number
}

/**
 * The worker's entry: the built `.js` next to this module (dist/isolation), or beside the chunk
 * of the command line's bundle that holds this module (dist/bundle/env-worker.js, see
 * scripts/bundle.mjs); when running from the TypeScript sources (as the tests do), the package's
 * built `dist/` one if there is one (compiling the sources in each thread takes seconds; `npm test`
 * builds first), else the `.ts` file through tsx, as plugins are loaded.
 */
const workerThread = (): WorkerThreads.Worker => {
  for (const entry of ["./internal/worker.js", "./env-worker.js"]) {
    const js = new URL(entry, import.meta.url)
    if (fs.existsSync(fileURLToPath(js))) return new WorkerThreads.Worker(js)
  }
  const built = new URL("../../dist/isolation/internal/worker.js", import.meta.url)
  if (process.env.EFFECT_GYM_WORKER_FROM_SOURCES === undefined && fs.existsSync(fileURLToPath(built))) {
    return new WorkerThreads.Worker(built)
  }
  const ts = new URL("./internal/worker.ts", import.meta.url)
  // `require.resolve` gives tsx's CommonJS entry; its ES module sits next to it.
  const required = createRequire(import.meta.url).resolve("tsx/esm/api")
  const esm = required.replace(/\.cjs$/, ".mjs")
  const tsx = pathToFileURL(fs.existsSync(esm) ? esm : required).href
  const boot = `import(${JSON.stringify(tsx)}).then((m) => (m.tsImport ?? m.default.tsImport)(` +
    `${JSON.stringify(ts.href)}, ${JSON.stringify(import.meta.url)}))`
  return new WorkerThreads.Worker(boot, { eval: true })
}

const details = (reason: string, extra: Record<string, unknown> = {}) => ({ reason, ...extra })

/**
 * Starts the pool in the current scope, every worker at once (so a plugin that does not load in
 * a worker is an error here, not at the first env).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<EnvWorkers, WorkerStartError, Scope.Scope> =>
  Effect.gen(function*() {
    const size = Math.max(1, Math.floor(options.workers ?? os.availableParallelism()))
    const timeout = Duration.fromInputUnsafe(options.timeout ?? Duration.seconds(60))
    const closeTimeout = Duration.fromInputUnsafe(options.closeTimeout ?? Duration.seconds(3))
    const pool = yield* Effect.scope
    // The workers' scopes live in this one, so that the finalizer below runs before any of them closes.
    const workers = yield* Scope.fork(pool, "sequential")
    const counts = new Counts()
    const threads = new Map<number, WorkerThreads.Worker>()
    /** Why a thread that has not started yet failed (its error event, or its exit). */
    const startFailures = new Map<number, Deferred.Deferred<never, string>>()
    const handles = new Map<number, Handle>()
    const slots: Array<Slot> = Array.from({ length: size }, () => ({ handle: undefined, starting: undefined, envs: 0 }))

    /**
     * Marks a worker dead at once (its calls in flight fail with `lost`, its thread is terminated);
     * false when it already was.
     */
    const markDead = (handle: Handle, reason: string): boolean => {
      if (handle.dead !== undefined) return false
      handle.dead = reason
      counts.replaced++
      Deferred.doneUnsafe(handle.lost, Exit.fail(reason))
      void handle.thread?.terminate()
      return true
    }

    /** Terminates a worker: its calls in flight fail, its envs are gone, its slot starts a new one. */
    const kill = (handle: Handle, reason: string): Effect.Effect<void> =>
      Effect.suspend(() =>
        markDead(handle, reason) ? Effect.asVoid(Effect.forkIn(Scope.close(handle.scope, Exit.void), pool)) : Effect.void
      )

    const spawnThread = (id: number) => {
      const thread = workerThread()
      threads.set(id, thread)
      let failed = startFailures.get(id)
      if (failed === undefined) {
        failed = Deferred.makeUnsafe<never, string>()
        startFailures.set(id, failed)
      }
      const startFailed = failed
      thread.on("error", (error) => Deferred.doneUnsafe(startFailed, Exit.fail(describe(error))))
      thread.on("exit", (code) => {
        Deferred.doneUnsafe(startFailed, Exit.fail(`the thread exited with code ${code}`))
        threads.delete(id)
        const handle = handles.get(id)
        // Marked dead here, before the worker's protocol hears of the exit: its calls in flight fail as lost.
        if (handle !== undefined && markDead(handle, `its worker thread exited unexpectedly (code ${code})`)) {
          Effect.runFork(Effect.forkIn(Scope.close(handle.scope, Exit.void), pool))
        }
      })
      return thread
    }

    // Runs before the workers' scopes close: no worker waits for a polite close it may never read.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const handle of handles.values()) {
          handle.dead ??= "the pool was closed"
          Deferred.doneUnsafe(handle.lost, Exit.fail(handle.dead))
        }
        for (const thread of threads.values()) void thread.terminate()
      })
    )

    let spawned = 0
    const spawn: Effect.Effect<Handle, WorkerStartError> = Effect.gen(function*() {
      const scope = yield* Scope.fork(workers, "sequential")
      // Each worker is its own pool of one thread; the pool numbers them: a thread that fails before
      // it is ready (a bad entry, a crash while loading) fails its start instead of being started
      // again by the protocol.
      const id = spawned++
      const startFailed = Deferred.makeUnsafe<never, string>()
      startFailures.set(id, startFailed)
      const protocol = RpcClient.layerProtocolWorker({ size: 1, concurrency: Number.MAX_SAFE_INTEGER }).pipe(
        Layer.provide(NodeWorker.layer(() => spawnThread(id)))
      )
      const started = Effect.gen(function*() {
        const context = yield* Layer.build(protocol)
        const worker = yield* Effect.provideContext(RpcClient.make(Protocol.Requests), context)
        yield* worker.Init({ plugins: [...options.plugins] })
        return worker
      })
      const worker = yield* Effect.raceFirst(
        started,
        Effect.flatMap(Effect.flip(Deferred.await(startFailed)), Effect.fail)
      ).pipe(
        Effect.timeoutOrElse({ duration: Duration.seconds(60), orElse: () => Effect.fail("not ready within 60 s") }),
        Effect.ensuring(Effect.sync(() => startFailures.delete(id))),
        Scope.provide(scope),
        // The protocol restarts a worker that exits (and would log it); this pool replaces workers
        // itself (a restarted thread would hold no envs and no plugins) and says why.
        Effect.provideService(References.MinimumLogLevel, "None"),
        Effect.mapError((error) => new WorkerStartError({ detail: typeof error === "string" ? error : describe(error) })),
        Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
      )
      counts.started++
      const handle: Handle = {
        worker,
        scope,
        lost: Deferred.makeUnsafe<never, string>(),
        thread: threads.get(id),
        dead: undefined
      }
      handles.set(id, handle)
      yield* Scope.addFinalizer(scope, Effect.sync(() => handles.delete(id)))
      if (handle.thread === undefined) yield* kill(handle, "its worker thread exited while starting")
      return handle
    })

    /** The slot's live worker, started (once, shared by every caller) when it has none. */
    const acquire = (slot: Slot): Effect.Effect<Handle, WorkerStartError> =>
      Effect.suspend(() => {
        if (slot.handle !== undefined && slot.handle.dead === undefined) return Effect.succeed(slot.handle)
        if (slot.starting !== undefined) return Deferred.await(slot.starting)
        const starting = Deferred.makeUnsafe<Handle, WorkerStartError>()
        slot.starting = starting
        // Started in the pool's scope, not the caller's: a caller that is interrupted does not
        // leave the others waiting for a start that never finishes.
        return Effect.andThen(
          Effect.forkIn(
            Effect.exit(spawn).pipe(Effect.flatMap((exit) =>
              Effect.sync(() => {
                slot.starting = undefined
                if (Exit.isSuccess(exit)) slot.handle = exit.value
                Deferred.doneUnsafe(starting, exit)
              })
            )),
            pool
          ),
          Deferred.await(starting)
        )
      })

    const pick = (): Slot => {
      let best = slots[0]
      for (const slot of slots) if (slot.envs < best.envs) best = slot
      return best
    }

    /** One request to the env's worker, bounded by `limit`; a timeout terminates the worker. */
    const call = <A>(
      handle: Handle,
      env: string,
      phase: Env.EnvError["phase"],
      request: Effect.Effect<A, unknown>,
      limit: Duration.Duration
    ): Effect.Effect<A, Env.EnvError> => {
      const failed = (detail: string, info: Record<string, unknown>) =>
        new Env.EnvError({ env, phase, detail, details: info })
      if (handle.dead !== undefined) {
        return Effect.fail(failed(`its worker was terminated earlier: ${handle.dead}`, details("WorkerLost")))
      }
      return Effect.raceFirst(
        request.pipe(
          Effect.catchCause((cause): Effect.Effect<never, Env.EnvError> => {
            if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
            const failure = Cause.findErrorOption(cause)
            if (Option.isSome(failure) && failure.value instanceof Env.EnvError) return Effect.fail(failure.value)
            const error = Option.isSome(failure) ? failure.value : Cause.squash(cause)
            return Effect.fail(failed(`its worker could not run the call: ${describe(error)}`, details("WorkerError")))
          })
        ),
        Effect.flatMap(
          Effect.flip(Deferred.await(handle.lost)),
          (reason) => Effect.fail(failed(`its worker was terminated: ${reason}`, details("WorkerLost")))
        )
      ).pipe(
        Effect.timeoutOrElse({
          duration: limit,
          orElse: () =>
            Effect.fail(failed(
              `no answer within ${Duration.format(limit)}: the env's worker was terminated`,
              details("Timeout", { timeout_ms: Duration.toMillis(limit) })
            ))
        }),
        Effect.tapError((error) =>
          error.details?.reason === "Timeout"
            ? Effect.andThen(
              Effect.sync(() => void counts.timedOut++),
              kill(handle, `${phase} of env ${env} did not answer within ${Duration.format(limit)}`)
            )
            : Effect.void
        )
      )
    }

    let nextId = 0
    const create = (name: string, config: Env.EnvConfig): Effect.Effect<Env.Env, Env.EnvError, Scope.Scope> =>
      Effect.gen(function*() {
        const slot = pick()
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            slot.envs++
            counts.envs++
          }),
          () =>
            Effect.sync(() => {
              slot.envs--
              counts.envs--
            })
        )
        const handle = yield* Effect.mapError(
          acquire(slot),
          (error) => new Env.EnvError({ env: name, phase: "create", detail: error.message, details: details("WorkerStart") })
        )
        const id = nextId++
        // Registered before the request goes out: an env created by a request that timed out or
        // was interrupted is still closed (or dies with its worker).
        // The close runs in a fiber of its own, interruptible: a finalizer runs uninterruptibly,
        // maybe in a fiber being interrupted (a cut trajectory), where the request's race and
        // timeout could not stop their losing side.
        yield* Effect.addFinalizer(() =>
          handle.dead !== undefined
            ? Effect.void
            : Effect.flatMap(
              Effect.forkDetach(Effect.interruptible(
                call(handle, name, "close", handle.worker.Close({ id }), closeTimeout).pipe(
                  Effect.catch((error) => Effect.logWarning(error.message))
                )
              )),
              Fiber.join
            )
        )
        yield* call(handle, name, "create", handle.worker.Create({ id, env: name, config }), timeout)

        /** The conversation the worker holds (the last one sent), so a step sends only what is new. */
        let sent: ReadonlyArray<Message.Message> = []
        let view: typeof Protocol.View.Type | undefined
        const env: Env.Env & { openenv?: { observation: () => unknown; state: () => unknown } } = {
          reset: (request) =>
            Effect.map(
              call(handle, name, "reset", handle.worker.Reset({ id, request }), timeout),
              (outcome) => {
                sent = []
                observe(outcome.view)
                return outcome.result as Env.ResetResult
              }
            ),
          step: (messages) =>
            Effect.suspend(() => {
              let from = sent.length <= messages.length ? sent.length : 0
              for (let i = 0; i < from; i++) {
                if (messages[i] !== sent[i]) {
                  from = 0
                  break
                }
              }
              const fresh = from === 0 ? messages : messages.slice(from)
              return Effect.map(
                call(handle, name, "step", handle.worker.Step({ id, from, messages: fresh }), timeout),
                (outcome) => {
                  sent = messages
                  observe(outcome.view)
                  return outcome.result as Env.StepResult
                }
              )
            })
        }
        // An env with an OpenEnv view (sudoku) keeps it: the latest one its worker sent.
        const observe = (next: typeof Protocol.View.Type | undefined) => {
          view = next
          if (next !== undefined && env.openenv === undefined) {
            env.openenv = { observation: () => view?.observation, state: () => view?.state }
          }
        }
        return env
      })

    const wrap = (definition: Env.Definition): Env.Definition => ({
      name: definition.name,
      description: definition.description,
      prepare: (config) => Result.map(definition.prepare(config), () => create(definition.name, config))
    })

    // Every worker now, in parallel: a plugin that does not load in a worker fails here, and the
    // first requests do not wait for threads to start.
    yield* Effect.forEach(slots, acquire, { concurrency: "unbounded", discard: true })

    return {
      wrap,
      registry: (registry) => ({ ...registry, envs: new Map([...registry.envs].map(([k, d]) => [k, wrap(d)])) }),
      stats: counts
    }
  })
