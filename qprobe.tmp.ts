import * as fs from "node:fs"
import { Effect, Either } from "effect"
import { qwen3Tiny, QWEN3_TOKENIZER } from "./test/inference/gguf.js"
import * as LlamaCpp from "./src/inference/LlamaCpp.js"
import * as HfTokenizer from "./src/inference/HfTokenizer.js"
import * as Message from "./src/Message.js"
let t = performance.now()
fs.writeFileSync("/tmp/tito/q.gguf", qwen3Tiny({ outputScale: Number(process.env.OS ?? 0.15) }))
console.log("write ms", performance.now() - t, fs.statSync("/tmp/tito/q.gguf").size)
const v = JSON.parse(fs.readFileSync("test/fixtures/chat_template/qwen3_vectors.json", "utf8"))
await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
  t = performance.now()
  const engine = yield* LlamaCpp.makeEngine({ modelPath: "/tmp/tito/q.gguf", contextSize: 1024, sequences: 1 })
  console.log("load ms", performance.now() - t, engine.chatWrapper)
  const hf = yield* HfTokenizer.load(QWEN3_TOKENIZER)
  let bad = 0
  for (const c of v.cases) {
    const ids = Effect.runSync(engine.renderer.tokenize(c.messages, { addGenerationPrompt: c.add_generation_prompt, kwargs: c.kwargs }))
    if (JSON.stringify(ids) !== JSON.stringify(c.ids)) { bad++; console.log("MISMATCH", c.name, JSON.stringify(ids), JSON.stringify(c.ids)) }
  }
  console.log("llama.cpp tokenizer vs transformers:", v.cases.length, "cases,", bad, "mismatches")
  const r = yield* engine.service.chat({ messages: [Message.user("hi")], sampling: { maxTokens: 30 }, trajectoryId: "a", turn: 1, seed: 1 })
  console.log(JSON.stringify(r.text), r.tokenIds, JSON.stringify(hf.encode(r.text)))
})))
