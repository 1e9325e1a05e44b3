/**
 * Loading node-llama-cpp lazily: the package is imported the first time colocate mode is used, so
 * the rest of the tool works on machines where it is missing or its native binary cannot load.
 */
import { Effect } from "effect"
import type * as NodeLlamaCpp from "node-llama-cpp"
import { InferenceError } from "../../Inference.js"
import { errorMessage } from "../../internal/lift.js"

export type Binding = typeof NodeLlamaCpp

export const BACKEND = "node-llama-cpp"

/** Imports the package (by default `node-llama-cpp`; another specifier for tests and forks). */
export const load = (specifier = "node-llama-cpp"): Effect.Effect<Binding, InferenceError> =>
  Effect.tryPromise({
    try: () => import(specifier) as Promise<Binding>,
    catch: (cause) =>
      new InferenceError({
        reason: "Unavailable",
        backend: BACKEND,
        detail: `cannot load ${specifier} (colocate mode needs it: npm install node-llama-cpp@3.22.1): ` +
          errorMessage(cause),
        cause
      })
  })

/**
 * The first node-llama-cpp whose sequences of one batch are sampled from their own logits. Earlier
 * versions sample them on parallel threads, and each read of the logits applies llama.cpp's pending
 * reorder of the batch's output rows in place, unlocked: two threads swapping the same rows leave a
 * sequence sampling (and scoring) its token from another sequence's logits. 3.22.0 locks it.
 */
export const BATCHED_SAMPLING_FIXED = "3.22.0"

/** The package's version (`getModuleVersion`), or undefined for a module that does not say. */
export const version = (binding: Binding): Effect.Effect<string | undefined> =>
  typeof binding.getModuleVersion !== "function"
    ? Effect.succeed(undefined)
    : Effect.tryPromise(() => binding.getModuleVersion()).pipe(Effect.orElseSucceed(() => undefined))

/** Whether `version` (x.y.z) is older than `than`. */
export const older = (version: string, than: string): boolean => {
  const parts = (v: string) => v.split(/[.+-]/).slice(0, 3).map(Number)
  const [a, b] = [parts(version), parts(than)]
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return (a[i] ?? 0) < (b[i] ?? 0)
  return false
}

/** Recent llama.cpp log lines, to explain a failed load. */
export class LogTail {
  private readonly lines: Array<string> = []
  push = (level: string, text: string): void => {
    const line = text.trim()
    if (line === "") return
    this.lines.push(`[${level}] ${line}`)
    if (this.lines.length > 8) this.lines.shift()
  }
  get text(): string {
    return this.lines.join("; ")
  }
}

/**
 * A llama.cpp runtime from the prebuilt binaries shipped in the npm packages: never builds from
 * source or downloads at run time. `gpu: false` keeps CPU-only machines off the GPU probes.
 */
export const getLlama = (
  binding: Binding,
  options: { readonly gpu: boolean; readonly log: LogTail }
): Effect.Effect<NodeLlamaCpp.Llama, InferenceError> =>
  Effect.tryPromise({
    try: () =>
      binding.getLlama({
        gpu: options.gpu ? "auto" : false,
        build: "never",
        skipDownload: true,
        progressLogs: false,
        logLevel: binding.LlamaLogLevel.warn,
        logger: (level, text) => options.log.push(level, text)
      }),
    catch: (cause) =>
      new InferenceError({
        reason: "Unavailable",
        backend: BACKEND,
        detail: `node-llama-cpp has no usable llama.cpp binary on ${process.platform}-${process.arch}: ` +
          errorMessage(cause),
        cause
      })
  })

/**
 * Whether colocate mode can run here: the package imports and a llama.cpp runtime starts. The
 * runtime is disposed again; nothing is loaded.
 */
export const probe = (specifier = "node-llama-cpp"): Effect.Effect<
  { readonly available: true; readonly gpu: string | false } | { readonly available: false; readonly reason: string }
> =>
  load(specifier).pipe(
    Effect.flatMap((binding) => getLlama(binding, { gpu: false, log: new LogTail() })),
    Effect.flatMap((llama) => {
      const gpu = llama.gpu
      return Effect.as(Effect.promise(() => llama.dispose()), { available: true as const, gpu })
    }),
    Effect.catch((error) => Effect.succeed({ available: false as const, reason: error.message }))
  )
