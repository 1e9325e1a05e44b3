/**
 * Envs off the main thread: a pool of worker threads, each holding the same registry as the main
 * thread (the built-ins plus the same plugins, loaded again by path in each worker), and an
 * adapter that turns any registered `Env.Definition` into one whose envs live in a worker.
 *
 * An isolated env is just another `Env`: its `reset` and `step` are requests to its worker (plain
 * messages, batched per turn of each thread's event loop: see `internal/protocol.ts` for why not
 * `effect/rpc`), its close is the finalizer of the scope it was created in, as for any env. The
 * engine, the schedulers and the servers do not change; an env that blocks its thread (a
 * synchronous loop, a runaway generator) blocks only its worker, and the main thread keeps answering.
 *
 * - Each env lives in one worker at a time; a new env goes to the worker with the fewest envs.
 * - A create, reset or step that does not answer within `timeout` (a close: `closeTimeout`) fails
 *   with an `EnvError` whose `details.reason` is `"Timeout"`. Its worker is then probed: a worker
 *   that still answers (the env waits on something that never comes) keeps running, the late call
 *   is interrupted there, and no other env notices. A worker that does not answer (its thread is
 *   blocked) is terminated and replaced; its other envs are moved to a live worker and replayed
 *   there (created, reset and stepped again with the same requests, each answer checked against
 *   the one recorded), then their calls go on: they do not notice either, except for the time it
 *   takes. An env whose replay answers differently (it is not deterministic), or that was moved
 *   {@link MAX_MOVES} times, fails its next call with `details.reason: "WorkerLost"`.
 * - A worker that exits by itself (an env called `process.exit`, ran out of memory) is replaced
 *   the same way; the envs whose calls it was running may have caused it, so those calls fail
 *   with `"WorkerLost"` instead of being moved.
 * - A close that fails or times out makes closing the env's scope fail (a defect carrying the
 *   `EnvError`), as an in-process env's does: in a run, that trajectory's error.
 * - Closing the pool's scope terminates every worker.
 *
 * @since 0.1.0
 */
import { type Cause, Clock, Deferred, Duration, Effect, Exit, Result, Schema, type Scope } from "effect"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import { fileURLToPath, pathToFileURL } from "node:url"
import { isDeepStrictEqual } from "node:util"
import * as WorkerThreads from "node:worker_threads"
import * as Env from "../Env.js"
import { describe } from "../internal/lift.js"
import { CurrentWaits, type Waits } from "../internal/waits.js"
import type * as Message from "../Message.js"
import type * as Registry from "../Registry.js"
import type * as Protocol from "./internal/protocol.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The plugin files the main thread loaded (each worker loads them too, in this order). */
  readonly plugins: ReadonlyArray<string>
  /** Worker threads (default: the machine's available parallelism). */
  readonly workers?: number | undefined
  /** How long a create, reset or step may take before it fails and its worker is probed (default 60 s). */
  readonly timeout?: Duration.Input | undefined
  /**
   * How long a close may take (default 3 s: less than the servers wait for cut responses, so a
   * server that shuts down while an env blocks its worker still answers).
   */
  readonly closeTimeout?: Duration.Input | undefined
}

/**
 * How many times one env may be moved to another worker (its worker terminated under it) before
 * its next call fails with `WorkerLost` instead: an env that keeps bringing workers down (it
 * blocks, but another env's call timed out first) stops being moved.
 *
 * @since 0.1.0
 * @category constants
 */
export const MAX_MOVES = 3

/**
 * Live counts, for tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  /** Workers started, replacements included. */
  readonly started: number
  /** Workers terminated because a call timed out on a blocked thread, or the worker exited. */
  readonly replaced: number
  /** Calls that timed out. */
  readonly timedOut: number
  /** Envs alive in workers now. */
  readonly envs: number
  /** Envs moved to another worker (and replayed there) after theirs was terminated. */
  readonly moved: number
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
  moved = 0
}

type Phase = Env.EnvError["phase"]

/**
 * How a call ended: its answer, its failure, or `moved`: its worker was terminated before it
 * answered (because of another env), so it is made again once its env lives in another worker.
 */
type Settled =
  | { readonly _tag: "ok"; readonly value: Protocol.Outcome | undefined; readonly ms: number | undefined }
  | { readonly _tag: "failed"; readonly error: Env.EnvError }
  | { readonly _tag: "moved" }

const MOVED: Settled = { _tag: "moved" }

/** A call waiting for its worker's answer. */
interface Call {
  readonly env: Live
  readonly phase: Phase
  readonly limit: Duration.Duration
  readonly issued: number
  readonly deadline: number
  /** Posted to the thread (not only queued): a worker that exits may have been running it. */
  posted: boolean
  /** Past its deadline, waiting for the probe of its worker to say what to do. */
  overdue: boolean
  readonly settle: (settled: Settled) => void
}

/** One worker thread, while it lives. */
interface Handle {
  readonly thread: WorkerThreads.Worker
  readonly ready: Deferred.Deferred<void, string>
  readonly calls: Map<number, Call>
  /** Requests to post at the end of this turn of the event loop. */
  outbox: Array<Protocol.Request>
  queued: boolean
  /** The ping sent to learn whether the thread still answers (while a call is overdue). */
  probe: { readonly c: number; readonly deadline: number } | undefined
  readonly envs: Set<Live>
  /** Why the worker was terminated, once it was. */
  dead: string | undefined
}

/** A place in the pool: its current worker (replaced when it dies) and how many envs it holds. */
interface Slot {
  handle: Handle | undefined
  starting: Deferred.Deferred<Handle, WorkerStartError> | undefined
  envs: number
}

/** An isolated env, as the main thread knows it: where it lives and what it was asked (to replay it). */
interface Live {
  readonly id: number
  readonly name: string
  readonly config: Env.EnvConfig
  slot: Slot
  /** Its worker; `undefined` until created, and after that worker was terminated (until moved). */
  handle: Handle | undefined
  /** Why its last worker was terminated. */
  lost: string | undefined
  /** Created in a worker once (a create that failed is not replayed). */
  created: boolean
  /** One of its calls timed out on a blocked thread: it is not moved. */
  blamed: boolean
  moves: number
  /** The conversation its worker holds (the last one sent), so a step sends only what is new. */
  held: ReadonlyArray<Message.Message>
  /** What it was asked since its creation, with the answers, to replay it in another worker. */
  reset: { readonly request: Env.ResetRequest; readonly result: unknown } | undefined
  steps: Array<{ readonly messages: ReadonlyArray<Message.Message>; readonly result: unknown }>
}

/**
 * The worker's entry: the built `.js` next to this module (dist/isolation), or beside the chunk
 * of the command line's bundle that holds this module (dist/bundle/env-worker.js, see
 * scripts/bundle.mjs); when running from the TypeScript sources (as the tests do), the package's
 * built `dist/` one if there is one (compiling the sources in each thread takes seconds; `npm test`
 * builds first), else the `.ts` file through tsx, as plugins are loaded.
 */
const workerThread = (start: Protocol.Start): WorkerThreads.Worker => {
  const workerData = start
  for (const entry of ["./internal/worker.js", "./env-worker.js"]) {
    const js = new URL(entry, import.meta.url)
    if (fs.existsSync(fileURLToPath(js))) return new WorkerThreads.Worker(js, { workerData })
  }
  const built = new URL("../../dist/isolation/internal/worker.js", import.meta.url)
  if (process.env.EFFECT_GYM_WORKER_FROM_SOURCES === undefined && fs.existsSync(fileURLToPath(built))) {
    return new WorkerThreads.Worker(built, { workerData })
  }
  const ts = new URL("./internal/worker.ts", import.meta.url)
  // `require.resolve` gives tsx's CommonJS entry; its ES module sits next to it.
  const required = createRequire(import.meta.url).resolve("tsx/esm/api")
  const esm = required.replace(/\.cjs$/, ".mjs")
  const tsx = pathToFileURL(fs.existsSync(esm) ? esm : required).href
  const boot = `import(${JSON.stringify(tsx)}).then((m) => (m.tsImport ?? m.default.tsImport)(` +
    `${JSON.stringify(ts.href)}, ${JSON.stringify(import.meta.url)}))`
  return new WorkerThreads.Worker(boot, { eval: true, workerData })
}

const details = (reason: string, extra: Record<string, unknown> = {}) => ({ reason, ...extra })

/** What a replay compares: what the engine reads of an answer. */
const sameAnswer = (a: unknown, b: unknown): boolean => {
  const x = (a ?? {}) as Record<string, unknown>
  const y = (b ?? {}) as Record<string, unknown>
  return isDeepStrictEqual(x.observation, y.observation) && isDeepStrictEqual(x.reward, y.reward) &&
    isDeepStrictEqual(x.done, y.done)
}

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
    const shortest = Math.max(1, Math.min(Duration.toMillis(timeout), Duration.toMillis(closeTimeout)))
    /** How often the watchdog looks for overdue calls while some are waiting. */
    const tick = Math.min(200, Math.max(5, Math.floor(shortest / 10)))
    /** How long a worker has to answer a ping before its thread is taken as blocked. */
    const probeMillis = Math.min(1000, shortest)
    const clock = yield* Clock.Clock
    const now = () => clock.currentTimeMillisUnsafe()
    const pool = yield* Effect.scope
    const counts = new Counts()
    const handles = new Set<Handle>()
    const slots: Array<Slot> = Array.from({ length: size }, () => ({ handle: undefined, starting: undefined, envs: 0 }))
    let nextCall = 0
    let waiting = 0

    // Requests go out in one batch per worker and turn of the event loop.
    let flushing: Array<Handle> = []
    const flushAll = () => {
      const batch = flushing
      flushing = []
      for (const handle of batch) flush(handle)
    }
    const flush = (handle: Handle) => {
      handle.queued = false
      const batch = handle.outbox
      handle.outbox = []
      if (handle.dead !== undefined || batch.length === 0) return
      try {
        handle.thread.postMessage(batch)
        for (const request of batch) {
          const call = handle.calls.get(request.c)
          if (call !== undefined) call.posted = true
        }
      } catch {
        // a request that structured clone cannot copy fails alone
        for (const request of batch) {
          const call = handle.calls.get(request.c)
          try {
            handle.thread.postMessage([request])
            if (call !== undefined) call.posted = true
          } catch (error) {
            if (call === undefined) continue
            settle(handle, request.c, call, {
              _tag: "failed",
              error: new Env.EnvError({
                env: call.env.name,
                phase: call.phase,
                detail: `it cannot be sent to its worker thread: ${describe(error)}`,
                details: details("WorkerError")
              })
            })
          }
        }
      }
    }
    const enqueue = (handle: Handle, request: Protocol.Request) => {
      handle.outbox.push(request)
      if (handle.queued) return
      handle.queued = true
      if (flushing.length === 0) setImmediate(flushAll)
      flushing.push(handle)
    }

    const settle = (handle: Handle, c: number, call: Call, settled: Settled) => {
      if (!handle.calls.delete(c)) return
      waiting--
      call.settle(settled)
    }

    /** Terminates a worker; its envs are displaced (moved at their next call); its calls are moved or fail. */
    const terminate = (handle: Handle, reason: string, suspects: boolean) => {
      if (handle.dead !== undefined) return
      handle.dead = reason
      handles.delete(handle)
      counts.replaced++
      void handle.thread.terminate()
      for (const env of handle.envs) {
        env.handle = undefined
        env.lost = reason
      }
      handle.envs.clear()
      for (const [c, call] of handle.calls) {
        // a worker that exited may have been brought down by a call it was running: not replayed
        const suspect = suspects && call.posted
        if (suspect) call.env.blamed = true
        settle(handle, c, call, suspect ? lostCall(call, reason) : MOVED)
      }
      for (const slot of slots) if (slot.handle === handle) slot.handle = undefined
    }
    const lostCall = (call: Call, reason: string): Settled => ({
      _tag: "failed",
      error: new Env.EnvError({
        env: call.env.name,
        phase: call.phase,
        detail: `its worker was terminated: ${reason}`,
        details: details("WorkerLost")
      })
    })
    const timedOut = (call: Call, what: string): Settled => ({
      _tag: "failed",
      error: new Env.EnvError({
        env: call.env.name,
        phase: call.phase,
        detail: `no answer within ${Duration.format(call.limit)}: ${what}`,
        details: details("Timeout", { timeout_ms: Duration.toMillis(call.limit) })
      })
    })

    /** The worker answered its probe: its overdue calls fail alone and are stopped there. */
    const responsive = (handle: Handle) => {
      handle.probe = undefined
      for (const [c, call] of handle.calls) {
        if (!call.overdue) continue
        counts.timedOut++
        settle(handle, c, call, timedOut(call, "the call was abandoned (its worker thread still answers)"))
        enqueue(handle, { k: "interrupt", c })
      }
    }

    /** The worker did not answer its probe: the oldest overdue call is blamed, the thread terminated. */
    const blocked = (handle: Handle) => {
      handle.probe = undefined
      let oldest: [number, Call] | undefined
      for (const entry of handle.calls) if (entry[1].overdue && (oldest === undefined || entry[1].issued < oldest[1].issued)) oldest = entry
      if (oldest === undefined) return
      const [c, call] = oldest
      counts.timedOut++
      call.env.blamed = true
      handle.calls.delete(c)
      waiting--
      // terminated before the blamed call's caller resumes: what it does next goes to a live worker
      terminate(handle, `${call.phase} of env ${call.env.name} did not answer within ${Duration.format(call.limit)}`, false)
      call.settle(timedOut(call, "the env's worker was terminated"))
    }

    const check = () => {
      const at = now()
      for (const handle of handles) {
        if (handle.probe !== undefined) {
          if (at >= handle.probe.deadline) blocked(handle)
          continue
        }
        let overdue = false
        for (const call of handle.calls.values()) {
          if (!call.overdue && at >= call.deadline) call.overdue = overdue = true
        }
        if (overdue) {
          const c = nextCall++
          handle.probe = { c, deadline: at + probeMillis }
          enqueue(handle, { k: "ping", c })
        }
      }
    }

    // One watchdog for every call's deadline: it ticks while calls wait, and parks when none does.
    let parked: ((resume: Effect.Effect<void>) => void) | undefined
    const park = Effect.callback<void>((resume) => {
      parked = resume
      return Effect.sync(() => {
        parked = undefined
      })
    })
    const watchdog: Effect.Effect<never> = Effect.suspend(() => {
      let probing = false
      for (const handle of handles) if (handle.probe !== undefined) probing = true
      if (waiting === 0 && !probing) return Effect.andThen(park, watchdog)
      return Effect.andThen(Effect.andThen(Effect.sleep(tick), Effect.sync(check)), watchdog)
    })
    const wake = () => {
      if (parked === undefined) return
      const resume = parked
      parked = undefined
      resume(Effect.void)
    }

    const onReplies = (handle: Handle, replies: ReadonlyArray<Protocol.Reply>) => {
      for (const reply of replies) {
        if (handle.probe?.c === reply.c) {
          responsive(handle)
          continue
        }
        const call = handle.calls.get(reply.c)
        if (call === undefined) continue
        settle(
          handle,
          reply.c,
          call,
          reply.ok ? { _tag: "ok", value: reply.value, ms: reply.ms } : {
            _tag: "failed",
            error: new Env.EnvError({
              env: reply.failure.env === "?" ? call.env.name : reply.failure.env,
              phase: reply.failure.phase,
              detail: reply.failure.detail
            })
          }
        )
      }
    }

    const spawn: Effect.Effect<Handle, WorkerStartError> = Effect.gen(function*() {
      const thread = yield* Effect.try({
        try: () => workerThread({ plugins: [...options.plugins] }),
        catch: (error) => new WorkerStartError({ detail: describe(error) })
      })
      const handle: Handle = {
        thread,
        ready: Deferred.makeUnsafe<void, string>(),
        calls: new Map(),
        outbox: [],
        queued: false,
        probe: undefined,
        envs: new Set(),
        dead: undefined
      }
      thread.on("message", (message: Protocol.FromWorker) => {
        if (Array.isArray(message)) return onReplies(handle, message as ReadonlyArray<Protocol.Reply>)
        const status = message as Exclude<Protocol.FromWorker, ReadonlyArray<Protocol.Reply>>
        Deferred.doneUnsafe(handle.ready, status.k === "ready" ? Exit.void : Exit.fail(status.detail))
      })
      thread.on("error", (error) => {
        Deferred.doneUnsafe(handle.ready, Exit.fail(describe(error)))
        terminate(handle, `its worker thread failed: ${describe(error)}`, true)
      })
      thread.on("exit", (code) => {
        Deferred.doneUnsafe(handle.ready, Exit.fail(`the thread exited with code ${code}`))
        terminate(handle, `its worker thread exited unexpectedly (code ${code})`, true)
      })
      yield* Deferred.await(handle.ready).pipe(
        Effect.timeoutOrElse({ duration: Duration.seconds(60), orElse: () => Effect.fail("not ready within 60 s") }),
        Effect.mapError((detail) => new WorkerStartError({ detail })),
        Effect.onError(() => Effect.sync(() => void thread.terminate()))
      )
      counts.started++
      handles.add(handle)
      return handle
    })

    // Runs when the pool closes: every call still waiting fails, every thread ends.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const handle of [...handles]) {
          handle.dead = "the pool was closed"
          handles.delete(handle)
          for (const [c, call] of handle.calls) settle(handle, c, call, lostCall(call, "the pool was closed"))
          void handle.thread.terminate()
        }
      })
    )
    yield* Effect.forkIn(watchdog, pool)

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

    /** Sends one call to `handle` and waits for how it ends (never fails: see `Settled`). */
    const send = (handle: Handle, env: Live, phase: Phase, request: (c: number) => Protocol.Request, limit: Duration.Duration) =>
      Effect.callback<Settled>((resume) => {
        if (handle.dead !== undefined) return resume(Effect.succeed(MOVED))
        const c = nextCall++
        const issued = now()
        handle.calls.set(c, {
          env,
          phase,
          limit,
          issued,
          deadline: issued + Duration.toMillis(limit),
          posted: false,
          overdue: false,
          settle: (settled) => resume(Effect.succeed(settled))
        })
        if (waiting++ === 0) wake()
        enqueue(handle, request(c))
        return Effect.sync(() => {
          // the caller stopped waiting (its trajectory was cut): the call is stopped in the worker too
          if (handle.calls.delete(c)) {
            waiting--
            if (handle.dead === undefined) enqueue(handle, { k: "interrupt", c })
          }
        })
      })

    const lostEnv = (env: Live, phase: Phase, why: string) =>
      new Env.EnvError({ env: env.name, phase, detail: why, details: details("WorkerLost") })

    /** A step's request: only the messages the worker does not hold yet. */
    const stepRequest = (env: Live, messages: ReadonlyArray<Message.Message>) => (c: number): Protocol.Request => {
      const sent = env.held
      let from = sent.length <= messages.length ? sent.length : 0
      for (let i = 0; i < from; i++) {
        if (messages[i] !== sent[i]) {
          from = 0
          break
        }
      }
      return { k: "step", c, id: env.id, from, messages: from === 0 ? messages : messages.slice(from) }
    }

    /**
     * Moves an env whose worker was terminated to a live worker: created there and replayed (its
     * reset and steps, each answer checked against the recorded one). Placed only once the replay
     * is complete; an instance left half-replayed (an interruption, a failure) is closed there.
     */
    const relocate = (env: Live, phase: Phase): Effect.Effect<Handle, Env.EnvError> =>
      Effect.suspend(() => {
        const why = env.lost ?? "it was lost"
        if (env.blamed) return Effect.fail(lostEnv(env, phase, `its worker was terminated earlier: ${why}`))
        if (env.moves >= MAX_MOVES) {
          return Effect.fail(lostEnv(env, phase, `its worker was terminated (${why}); it was moved ${MAX_MOVES} times already`))
        }
        env.moves++
        counts.moved++
        const slot = pick()
        env.slot.envs--
        slot.envs++
        env.slot = slot
        return Effect.gen(function*() {
          const handle = yield* Effect.mapError(
            acquire(slot),
            (error) => lostEnv(env, phase, `its worker was terminated (${why}) and no other could start: ${error.message}`)
          )
          const unreplayable = (what: string) => lostEnv(env, phase, `its worker was terminated (${why}); it could not be moved: ${what}`)
          const replay = (
            what: string,
            request: (c: number) => Protocol.Request,
            recorded?: { readonly result: unknown }
          ): Effect.Effect<Protocol.Outcome | undefined, Env.EnvError | "moved"> =>
            Effect.flatMap(send(handle, env, phase, request, timeout), (settled): Effect.Effect<
              Protocol.Outcome | undefined,
              Env.EnvError | "moved"
            > => {
              if (settled._tag === "moved") return Effect.fail("moved" as const)
              if (settled._tag === "failed") return Effect.fail(unreplayable(`replaying its ${what} failed: ${settled.error.detail}`))
              if (recorded !== undefined && !sameAnswer(settled.value?.result, recorded.result)) {
                return Effect.fail(unreplayable(`replaying its ${what} gave another answer (the env is not deterministic)`))
              }
              return Effect.succeed(settled.value)
            })
          const replayed = Effect.gen(function*() {
            env.held = []
            yield* replay("creation", (c) => ({ k: "create", c, id: env.id, env: env.name, config: env.config }))
            if (env.reset !== undefined) {
              const request = env.reset.request
              yield* replay("reset", (c) => ({ k: "reset", c, id: env.id, request }), env.reset)
            }
            for (let i = 0; i < env.steps.length; i++) {
              const step = env.steps[i]
              yield* replay(`step ${i + 1}`, stepRequest(env, step.messages), step)
              env.held = step.messages
            }
          })
          const exit = yield* Effect.exit(replayed)
          if (Exit.isSuccess(exit)) {
            env.handle = handle
            handle.envs.add(env)
            return handle
          }
          // what the replay left in that worker goes
          if (handle.dead === undefined) enqueue(handle, { k: "close", c: nextCall++, id: env.id })
          const failure = Exit.findErrorOption(exit)
          // that worker was terminated too: move again
          if (failure._tag === "Some" && failure.value === "moved") return yield* relocate(env, phase)
          if (failure._tag === "Some") return yield* Effect.fail(failure.value as Env.EnvError)
          return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
        })
      })

    /** The env's live worker: its own, or another it is moved to. */
    const placed = (env: Live, phase: Phase): Effect.Effect<Handle, Env.EnvError> =>
      env.handle !== undefined && env.handle.dead === undefined ? Effect.succeed(env.handle) : relocate(env, phase)

    /** A call on a created env; moved with its env when its worker is terminated under it. */
    const invoke = (
      env: Live,
      phase: Phase,
      request: (c: number) => Protocol.Request
    ): Effect.Effect<Settled & { readonly _tag: "ok" }, Env.EnvError> =>
      Effect.flatMap(placed(env, phase), (handle) =>
        Effect.flatMap(send(handle, env, phase, request, timeout), (settled) =>
          settled._tag === "ok"
            ? Effect.succeed(settled)
            : settled._tag === "failed"
            ? Effect.fail(settled.error)
            : invoke(env, phase, request)))

    /**
     * {@link invoke} for a trajectory's reset or step: of the round trip, the time the call ran in
     * its worker is the env's; the rest (the crossings, its turn behind the other calls of its
     * worker and of this thread) is noted as waiting (`wait_ms`): at 64 trajectories on 2 workers a
     * FrozenLake step's env_ms was 3.8 ms of queueing for 0.002 ms of work.
     */
    const timed = (
      waits: Waits | undefined,
      env: Live,
      phase: Phase,
      request: (c: number) => Protocol.Request
    ): Effect.Effect<Protocol.Outcome | undefined, Env.EnvError> => {
      if (waits === undefined) return Effect.map(invoke(env, phase, request), (settled) => settled.value)
      return Effect.suspend(() => {
        const issued = waits.now()
        return Effect.map(invoke(env, phase, request), (settled) => {
          noteWaiting(waits, issued, settled.ms)
          return settled.value
        })
      })
    }

    /** Of a call issued at `issued` (the trajectory's clock) that ran `ms` in its worker: the rest of its round trip, as waiting. */
    const noteWaiting = (waits: Waits, issued: number, ms: number | undefined) => {
      if (ms !== undefined) waits.ms += Math.max(0, waits.now() - issued - ms)
    }

    /** The env's close: a close that fails or times out fails the scope's close, as in process. */
    const close = (env: Live): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (!env.created) {
          // a create that did not answer: its instance (if any) is closed by its worker, or gone with it
          const handle = env.handle
          if (handle !== undefined && handle.dead === undefined) enqueue(handle, { k: "close", c: nextCall++, id: env.id })
          return Effect.void
        }
        if (env.handle === undefined && env.blamed) return Effect.void
        return placed(env, "close").pipe(
          Effect.flatMap((handle) => send(handle, env, "close", (c) => ({ k: "close", c, id: env.id }), closeTimeout)),
          Effect.matchEffect({
            // its instance died with a terminated worker and could not be rebuilt: nothing is left to close
            onFailure: (error) => Effect.logWarning(error.message),
            onSuccess: (settled): Effect.Effect<void> =>
              settled._tag === "ok" ? Effect.void : settled._tag === "failed" ? Effect.die(settled.error) : close(env)
          })
        )
      })

    let nextId = 0
    const create = (name: string, config: Env.EnvConfig): Effect.Effect<Env.Env, Env.EnvError, Scope.Scope> =>
      Effect.gen(function*() {
        const slot = pick()
        const env: Live = {
          id: nextId++,
          name,
          config,
          slot,
          handle: undefined,
          lost: undefined,
          created: false,
          blamed: false,
          moves: 0,
          held: [],
          reset: undefined,
          steps: []
        }
        slot.envs++
        counts.envs++
        // Registered before the request goes out: an env created by a request that timed out or
        // was interrupted is still closed (or dies with its worker).
        yield* Effect.addFinalizer(() =>
          Effect.ensuring(
            close(env),
            Effect.sync(() => {
              env.slot.envs--
              counts.envs--
              env.handle?.envs.delete(env)
            })
          )
        )
        const handle = yield* Effect.mapError(
          acquire(slot),
          (error) => new Env.EnvError({ env: name, phase: "create", detail: error.message, details: details("WorkerStart") })
        )
        env.handle = handle
        handle.envs.add(env)
        // (the trajectory's, when a trajectory creates the env: its waiting is noted there)
        const waits = yield* Effect.service(CurrentWaits)
        const issued = waits?.now()
        const settled = yield* send(handle, env, "create", (c) => ({ k: "create", c, id: env.id, env: name, config }), timeout)
        if (settled._tag === "failed") return yield* settled.error
        if (settled._tag === "moved") yield* relocate(env, "create")
        else if (waits !== undefined && issued !== undefined) noteWaiting(waits, issued, settled.ms)
        env.created = true

        let view: Protocol.View | undefined
        const live: Env.Env & { openenv?: { observation: () => unknown; state: () => unknown } } = {
          reset: (request) =>
            Effect.map(timed(waits, env, "reset", (c) => ({ k: "reset", c, id: env.id, request })), (outcome) => {
              env.held = []
              env.reset = { request, result: outcome!.result }
              env.steps = []
              observe(outcome!.view)
              return outcome!.result as Env.ResetResult
            }),
          step: (messages) =>
            Effect.map(timed(waits, env, "step", stepRequest(env, messages)), (outcome) => {
              env.held = messages
              env.steps.push({ messages, result: outcome!.result })
              observe(outcome!.view)
              return outcome!.result as Env.StepResult
            })
        }
        // An env with an OpenEnv view (sudoku) keeps it: the latest one its worker sent.
        const observe = (next: Protocol.View | undefined) => {
          view = next
          if (next !== undefined && live.openenv === undefined) {
            live.openenv = { observation: () => view?.observation, state: () => view?.state }
          }
        }
        return live
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
