/**
 * The messages between the main thread and an env worker thread, posted as they are (structured
 * clone), in batches: each side queues what it has to say during one turn of its event loop and
 * posts it as one array at the end of that turn (`setImmediate`).
 *
 * Why not `effect/rpc` (which this module used before): with 64 sessions stepping at once, the
 * RPC client's per-request machinery (fibers, schema encode and decode of every payload and exit,
 * the pool's latch) cost 170-450 µs of the main thread's time per step, against 9-25 µs for these
 * plain messages (bench/workloads/openenv_python.ts and the probe in BENCHMARKS.md, issue 28
 * item 7); the main thread is the one every session shares.
 *
 * Env data (messages, infos, observations) is passed as it is: structured clone copies it, and the
 * env contract does not constrain its shape further. A step sends only the messages the worker has
 * not seen yet (`from` is how many of the conversation it already holds).
 */

/** A call from the main thread; `c` numbers it (the reply carries it). */
export type Request =
  | { readonly k: "create"; readonly c: number; readonly id: number; readonly env: string; readonly config: unknown }
  | { readonly k: "reset"; readonly c: number; readonly id: number; readonly request: unknown }
  | {
    readonly k: "step"
    readonly c: number
    readonly id: number
    readonly from: number
    readonly messages: ReadonlyArray<unknown>
  }
  | { readonly k: "close"; readonly c: number; readonly id: number }
  /** Stops call `c` (its fiber in the worker is interrupted). No reply. */
  | { readonly k: "interrupt"; readonly c: number }
  /** Answered at once by a worker whose thread is free (a liveness probe). */
  | { readonly k: "ping"; readonly c: number }

/** An env's failure as plain data (the worker's `EnvError`, rebuilt on the main thread). */
export interface Failure {
  readonly env: string
  readonly phase: "create" | "reset" | "step" | "close"
  readonly detail: string
}

/** The live env's OpenEnv view, read after each reset and step (only for envs that carry one). */
export interface View {
  readonly observation: unknown
  readonly state: unknown
}

/** A reset or step result and the view after it. */
export interface Outcome {
  readonly result: unknown
  readonly view?: View | undefined
}

/**
 * The answer to call `c`; `ms`: how long the call ran in the worker, from its start to its end (the
 * env's own time). The rest of the round trip (the batches' crossings, the call's turn behind others
 * on either thread) is waiting, reported apart from the env's time (`wait_ms`).
 */
export type Reply =
  | { readonly c: number; readonly ok: true; readonly value?: Outcome | undefined; readonly ms?: number | undefined }
  | { readonly c: number; readonly ok: false; readonly failure: Failure }

/** What a worker posts: a batch of replies, or (once, first) whether its plugins loaded. */
export type FromWorker =
  | ReadonlyArray<Reply>
  | { readonly k: "ready" }
  | { readonly k: "failed"; readonly detail: string }

/** The worker's `workerData`: the plugins to load (paths), in order, on top of the built-ins. */
export interface Start {
  readonly plugins: ReadonlyArray<string>
}
