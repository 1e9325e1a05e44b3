/**
 * Workload 4: the server-mode client. Chat completions per second through the OpenAI-compatible
 * layer (`--mode server`'s client, as the CLI builds it) against a zero-latency server on loopback,
 * run in its own process (a plain node:http server answering a canned completion), with
 * `concurrency` requests in flight.
 *
 *   --concurrency 256  --seconds 3
 */
import { Effect } from "effect"
import { fork } from "node:child_process"
import * as path from "node:path"
import * as Inference from "../../dist/Inference.js"
import * as OpenAiCompat from "../../dist/inference/OpenAiCompat.js"
import { flags, report } from "../lib.js"

const args = flags()
const concurrency = Number(args.concurrency ?? 256)
const seconds = Number(args.seconds ?? 3)

/** Starts the canned server in a child process; resolves with its port. */
const startServer = () =>
  new Promise<{ port: number; stop: () => void }>((resolve, reject) => {
    const child = fork(path.join(import.meta.dirname, "canned_openai_server.mjs"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] })
    child.once("message", (message) => resolve({ port: (message as { port: number }).port, stop: () => child.kill() }))
    child.once("error", reject)
  })

const main = async () => {
  const server = await startServer()
  // The layer the command line builds for --mode server.
  const layer = OpenAiCompat.layerUndici({ baseUrl: `http://127.0.0.1:${server.port}/v1`, model: "canned", concurrency })
  const program = Effect.gen(function*() {
    const service = yield* Inference.Inference
    const request = (i: number) => ({
      messages: [{ role: "user" as const, content: `hello ${i}` }],
      sampling: {},
      trajectoryId: `t${i}`,
      turn: 1,
      seed: i
    })
    let completed = 0
    let tokens = 0
    const deadline = (ms: number) => performance.now() + ms
    const runFor = (ms: number) => {
      const end = deadline(ms)
      const worker = (id: number): Effect.Effect<void> =>
        Effect.suspend(() =>
          performance.now() >= end
            ? Effect.void
            : Effect.flatMap(Effect.orDie(service.chat(request(id))), (c) => {
              completed++
              tokens += c.tokenIds?.length ?? 0
              return worker(id)
            })
        )
      return Effect.forEach(Array.from({ length: concurrency }, (_, i) => i), worker, {
        concurrency: "unbounded",
        discard: true
      })
    }
    yield* runFor(1000) // warm up
    completed = 0
    const started = performance.now()
    yield* runFor(seconds * 1000)
    const elapsed = (performance.now() - started) / 1000
    return { completions: completed, seconds: elapsed, completionsPerSecond: completed / elapsed, tokenIdsSeen: tokens }
  })
  try {
    report(await Effect.runPromise(program.pipe(Effect.provide(layer))))
  } finally {
    server.stop()
  }
}

main()
