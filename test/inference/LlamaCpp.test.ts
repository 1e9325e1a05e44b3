import { describe, expect, it, layer } from "@effect/vitest"
import { Console, Context, Effect, Layer, Result } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { ChatRequest, Completion } from "../../src/Inference.js"
import * as Binding from "../../src/inference/internal/nodeLlamaCpp.js"
import * as LlamaCpp from "../../src/inference/LlamaCpp.js"
import * as Message from "../../src/Message.js"
import type * as Tool from "../../src/Tool.js"
import * as Calculator from "../../src/envs/Calculator.js"
import { inferenceFailure as failure } from "../helpers.js"
import { cli, frozenLakeDataset, readLines, tmp } from "./cli.js"
import { IM_END, IM_START, qwen3TinyPath, tinyLlama, VOCAB_SIZE, writeTinyLlama } from "./gguf.js"
import * as Qwen3 from "./qwen3.js"
import * as Reference from "./reference.js"

// Decided once, before the suites are collected: whether node-llama-cpp and its prebuilt binary
// load on this machine. The detection itself is tested below.
const support = await Effect.runPromise(LlamaCpp.probe)
const unavailable = support.available ? undefined : support.reason
if (unavailable !== undefined) console.warn(`colocate tests skipped: ${unavailable}`)

const dir = tmp()
const modelPath = writeTinyLlama(path.join(dir, "tiny.gguf"))

/**
 * One engine shared by the tests of a `layer(sharedEngine(options))` block, which need the same
 * options: each load starts node-llama-cpp's binary check (a child process) and, for the
 * Qwen3-vocabulary file, costs seconds of CPU. Its tests run with the live clock, as `it.live` does.
 */
class SharedEngine extends Context.Service<SharedEngine, LlamaCpp.Engine>()("test/LlamaCpp/SharedEngine") {}
const sharedEngine = (options: LlamaCpp.Options) =>
  layer(Layer.effect(SharedEngine, LlamaCpp.makeEngine(options)), { excludeTestServices: true, timeout: "60 seconds" })

const request = (over: Partial<ChatRequest> = {}): ChatRequest => ({
  messages: [Message.system("be brief"), Message.user("hello")],
  sampling: { maxTokens: 12 },
  trajectoryId: "r0-g0",
  turn: 1,
  seed: 7,
  ...over
})

describe("colocate mode: detecting node-llama-cpp", () => {
  it.effect("the probe reports a missing package as unavailable, with the reason", () =>
    Effect.gen(function*() {
      const missing = yield* Binding.probe("node-llama-cpp-that-does-not-exist")
      expect(missing.available).toBe(false)
      if (!missing.available) expect(missing.reason).toContain("cannot load node-llama-cpp-that-does-not-exist")
      const error = failure(yield* Effect.exit(Binding.load("node-llama-cpp-that-does-not-exist")))
      expect(error.reason).toBe("Unavailable")
      expect(error.detail).toContain("npm install node-llama-cpp@3.22.1")
    }))

  it.effect("a missing package makes colocate mode fail with Unavailable, after the model file checks", () =>
    Effect.gen(function*() {
      const error = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath, module: "no-such-llama-module" }))))
      expect(error).toMatchObject({ reason: "Unavailable", backend: "node-llama-cpp" })
    }))

  it("the probe agrees with whether node-llama-cpp can be imported here", async () => {
    const importable = await import("node-llama-cpp").then(() => true, () => false)
    if (!importable) expect(support.available).toBe(false)
    else if (support.available) expect(support.gpu === false || typeof support.gpu === "string").toBe(true)
    else expect(support.reason).toContain("no usable llama.cpp binary")
  })
})

describe("colocate mode: bad model files", () => {
  it.effect("a missing path and a file that is not GGUF are InvalidRequest errors that say so", () =>
    Effect.gen(function*() {
      const missing = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath: path.join(dir, "nope.gguf") }))))
      expect(missing.reason).toBe("InvalidRequest")
      expect(missing.detail).toContain("nope.gguf: no such file")
      const text = path.join(dir, "notes.txt")
      fs.writeFileSync(text, "this is not a model")
      const notGguf = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath: text }))))
      expect(notGguf.detail).toContain("not a GGUF file")
      const folder = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath: dir }))))
      expect(folder.detail).toContain("not a file")
      const badSize = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath, contextSize: 0 }))))
      expect(badSize.detail).toContain("--context-size")
      const badSampling = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath, sampling: { topP: 2 } }))))
      expect(badSampling.detail).toContain("--top-p")
    }))
})

describe.skipIf(unavailable !== undefined)("colocate mode: the tiny GGUF model", () => {
  it.live("a GGUF cut short loads with a typed error, not a crash", () =>
    Effect.gen(function*() {
      const truncated = path.join(dir, "truncated.gguf")
      fs.writeFileSync(truncated, tinyLlama().subarray(0, 5000))
      const error = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath: truncated }))))
      expect(error.reason).toBe("InvalidRequest")
      expect(error.detail).toContain("cannot load the model")
    }))

  it.live("node-llama-cpp before 3.22.0 is refused at more than one sequence (batched sequences sampled each other's logits); one sequence runs", () =>
    Effect.gen(function*() {
      const old = path.join(import.meta.dirname, "../fixtures/node-llama-cpp/version-3.21.1.mjs")
      for (const sequences of [undefined, 2]) {
        const error = failure(yield* Effect.exit(Effect.scoped(LlamaCpp.make({ modelPath, module: old, sequences }))))
        expect(error.reason).toBe("InvalidRequest")
        expect(error.detail).toContain("node-llama-cpp 3.21.1 gives wrong logprobs with more than one sequence")
        expect(error.detail).toContain("npm install node-llama-cpp@3.22.1, or set --inference-concurrency 1")
      }
      const one = yield* LlamaCpp.makeEngine({ modelPath, module: old, sequences: 1, contextSize: 256 })
      expect((yield* one.service.chat(request())).tokenIds!.length).toBeGreaterThan(0)
    }).pipe(Effect.scoped))

  it.live("node-llama-cpp's chat wrapper is resolved only for a file without a usable template (it costs seconds for Qwen3's)", () =>
    Effect.gen(function*() {
      const counting = path.join(import.meta.dirname, "../fixtures/node-llama-cpp/counting.mjs")
      const { calls } = (yield* Effect.promise(() => import(counting))) as { calls: { resolveChatWrapper: number } }
      const qwen = yield* LlamaCpp.makeEngine({ modelPath: qwen3TinyPath(), module: counting, contextSize: 256, sequences: 1 })
      expect(qwen.chatWrapper).toBe("JinjaTemplate")
      expect(calls.resolveChatWrapper).toBe(0)
      console.log(`Qwen3-vocabulary GGUF with its own template: started in ${qwen.loadMs.toFixed(0)} ms`)
      const bare = writeTinyLlama(path.join(dir, "bare-counted.gguf"), { chatTemplate: null })
      const engine = yield* LlamaCpp.makeEngine({ modelPath: bare, module: counting, contextSize: 256, sequences: 1 })
      expect(engine.chatWrapper).not.toBe("JinjaTemplate")
      expect(calls.resolveChatWrapper).toBe(1)
    }).pipe(Effect.scoped))

  // (one engine for both: contextSize 256, 2 sequences)
  sharedEngine({ modelPath, contextSize: 256, sequences: 2 })((it) => {
    it.effect("loads once, uses the file's chat template, generates token ids and logprobs, deterministic per seed", () =>
      Effect.gen(function*() {
        const engine = yield* SharedEngine
        console.log(`tiny GGUF (${fs.statSync(modelPath).size} bytes) loaded in ${engine.loadMs.toFixed(0)} ms`)
        expect(engine.chatWrapper).toBe("JinjaTemplate")
        expect(engine.contextSize).toBe(256)
        const prompt = engine.formatPrompt([Message.system("be brief"), Message.user("hello")])
        expect(prompt.text).toBe("<s><|im_start|>system: be brief<|im_end|><|im_start|>user: hello<|im_end|><|im_start|>assistant: ")
        // byte-level vocabulary: one token per byte, plus BOS and the control tokens
        // (a space is the SentencePiece "\u2581" token, 259)
        const enc = (s: string) => Array.from(new TextEncoder().encode(s)).map((b) => (b === 0x20 ? 259 : b + 3))
        expect(prompt.tokens).toEqual([
          1, IM_START, ...enc("system: be brief"), IM_END, IM_START, ...enc("user: hello"), IM_END, IM_START, ...enc("assistant: ")
        ])

        const chat = engine.service.chat
        const a = yield* chat(request())
        const b = yield* chat(request({ trajectoryId: "other" }))
        const c = yield* chat(request({ seed: 8 }))
        for (const completion of [a, b, c]) {
          expect(completion.tokenIds!.length).toBeGreaterThan(0)
          expect(completion.tokenIds!.length).toBeLessThanOrEqual(12)
          expect(completion.logprobs!.length).toBe(completion.tokenIds!.length)
          for (const id of completion.tokenIds!) expect(id >= 0 && id < VOCAB_SIZE).toBe(true)
          for (const lp of completion.logprobs!) expect(lp <= 0 && lp >= -9999).toBe(true)
          expect(completion.promptTokens).toBe(prompt.tokens.length)
        }
        expect(b.tokenIds).toEqual(a.tokenIds)
        expect(b.logprobs!.map((x) => x.toFixed(4))).toEqual(a.logprobs!.map((x) => x.toFixed(4)))
        expect(c.tokenIds).not.toEqual(a.tokenIds)
        // without an end-of-generation token the text is the tokens, decoded
        if (a.finishReason === "length") expect(a.tokenIds!.length).toBe(12)

        // greedy decoding: the most likely token every time, whatever the seed
        const g1 = yield* chat(request({ sampling: { maxTokens: 8, temperature: 0 }, seed: 1 }))
        const g2 = yield* chat(request({ sampling: { maxTokens: 8, temperature: 0 }, seed: 2 }))
        expect(g2.tokenIds).toEqual(g1.tokenIds)
      }))

    it.effect("concurrent calls share the sequences without blocking the event loop; each seed gives its own answer", () =>
      Effect.gen(function*() {
        const engine = yield* SharedEngine
        const requests = Array.from({ length: 8 }, (_, i) => request({ trajectoryId: `t${i}`, seed: 100 + (i % 4), sampling: { maxTokens: 24 } }))
        let ticks = 0
        let maxGap = 0
        let last = performance.now()
        const ticker = Effect.forever(Effect.andThen(Effect.sleep("5 millis"), Effect.sync(() => {
          const now = performance.now()
          maxGap = Math.max(maxGap, now - last)
          last = now
          ticks++
        })))
        const started = performance.now()
        const results = yield* Effect.raceFirst(
          Effect.forEach(requests, engine.service.chat, { concurrency: "unbounded" }),
          Effect.andThen(ticker, Effect.never)
        )
        const ms = performance.now() - started
        const tokens = results.reduce((n, r) => n + r.tokenIds!.length, 0)
        console.log(`colocate: 8 completions (${tokens} tokens) on 2 sequences in ${ms.toFixed(0)} ms; event loop max gap ${maxGap.toFixed(1)} ms`)
        expect(ticks).toBeGreaterThan(0)
        expect(maxGap).toBeLessThan(250)
        // the same seed and prompt give the same completion, whichever sequence served it
        for (let i = 0; i < 4; i++) expect(results[i + 4].tokenIds).toEqual(results[i].tokenIds)
        expect(new Set(results.slice(0, 4).map((r) => r.tokenIds!.join(","))).size).toBeGreaterThan(1)
      }))
  })

  it.live("stop strings cut the text; max tokens and the context bound the completion", () =>
    Effect.gen(function*() {
      const engine = yield* LlamaCpp.makeEngine({ modelPath, contextSize: 64, sequences: 1 })
      const free: Completion = yield* engine.service.chat(request({ sampling: { maxTokens: 20, temperature: 0 } }))
      expect(free.tokenIds!.length).toBeGreaterThan(2)
      // a stop string made of a letter that greedy decoding produces after its first character
      const letter = [...free.text].find((ch, i) => i > 0 && /[a-zA-Z]/.test(ch))
      expect(letter).toBeDefined()
      const stopped = yield* engine.service.chat(request({ sampling: { maxTokens: 20, temperature: 0, stop: [letter!] } }))
      expect(stopped.finishReason).toBe("stop")
      expect(stopped.text).toBe(free.text.slice(0, free.text.indexOf(letter!)))
      // the tokens sampled up to and including the stop stay (they were generated and scored)
      expect(stopped.tokenIds).toEqual(free.tokenIds!.slice(0, stopped.tokenIds!.length))
      expect(stopped.tokenIds!.length).toBeLessThan(free.tokenIds!.length)
      const long = yield* Effect.exit(
        engine.service.chat(request({ messages: [Message.user("x".repeat(engine.contextSize + 10))] }))
      )
      expect(failure(long).detail).toContain("raise --context-size")
      // the context bounds what fits after the prompt
      const bounded = yield* engine.service.chat(request({ sampling: {} }))
      expect(bounded.tokenIds!.length).toBeLessThanOrEqual(engine.contextSize - bounded.promptTokens!)
    }).pipe(Effect.scoped))

  // (one engine for both: the file without a chat template, contextSize 256, 1 sequence)
  sharedEngine({ modelPath: writeTinyLlama(path.join(dir, "bare.gguf"), { chatTemplate: null }), contextSize: 256, sequences: 1 })((it) => {
    it.effect("a GGUF without a chat template falls back to node-llama-cpp's own format and still generates", () =>
      Effect.gen(function*() {
        const engine = yield* SharedEngine
        expect(engine.chatWrapper).not.toBe("JinjaTemplate")
        expect(engine.formatPrompt([Message.user("hello")]).text).toContain("hello")
        const completion = yield* engine.service.chat(request())
        expect(completion.tokenIds!.length).toBeGreaterThan(0)
      }))

    it.effect("a GGUF without a chat template cannot take tools: the call fails saying so, text calls go on", () =>
      Effect.gen(function*() {
        const engine = yield* SharedEngine
        const tools = [{ name: "add", description: "a + b", parameters: { type: "object", properties: {} } }]
        const error = yield* Effect.flip(engine.service.chat(request({ tools })))
        expect(error.reason).toBe("InvalidRequest")
        expect(error.detail).toContain("does not render tools")
        const completion = yield* engine.service.chat(request())
        expect(completion.tokenIds!.length).toBeGreaterThan(0)
        // with the file's template: tools render; a tool_choice nothing here can enforce is refused
        const templated = yield* LlamaCpp.makeEngine({ modelPath, contextSize: 256, sequences: 1 })
        expect((yield* templated.service.chat(request({ tools, toolChoice: "auto" }))).tokenIds!.length).toBeGreaterThan(0)
        const required = yield* Effect.flip(templated.service.chat(request({ tools, toolChoice: "required" })))
        expect(required.detail).toContain('tool_choice "required" is not supported in colocate mode')
      }))
  })

  it.live("a GGUF whose template does not parse: node-llama-cpp's own format, with a warning", () =>
    Effect.gen(function*() {
      const broken = writeTinyLlama(path.join(dir, "broken-template.gguf"), { chatTemplate: "{% for m in messages %}{{ m.content }}" })
      const warnings: Array<string> = []
      const engine = yield* LlamaCpp.makeEngine({ modelPath: broken, contextSize: 256, sequences: 1 }).pipe(
        Effect.provideService(Console.Console, { ...globalThis.console, error: (...xs: ReadonlyArray<unknown>) => void warnings.push(xs.join(" ")) })
      )
      expect(engine.chatWrapper).not.toBe("JinjaTemplate")
      expect(warnings).toEqual([expect.stringContaining("the chat template does not parse")])
      const completion = yield* engine.service.chat(request())
      expect(completion.tokenIds!.length).toBeGreaterThan(0)
    }).pipe(Effect.scoped))

  it.live("effect-gym run --mode colocate: every turn's token ids and logprobs in the log, the same for the same --seed", () =>
    Effect.gen(function*() {
      const work = tmp()
      const dataset = frozenLakeDataset(work, 2)
      const run = (seed: string, output: string) =>
        cli(
          "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "colocate", "--model", modelPath,
          "--context-size", "2048", "--inference-concurrency", "1", "--threads", "1", "--max-tokens", "6",
          "--num-generations", "2", "--max-turns", "3", "--seed", seed, "--output", output, "--json"
        )
      const first = yield* run("5", path.join(work, "a.jsonl"))
      expect(first.stderr).toBe("")
      expect(first.stdout).toContain("\"failures\":0")
      expect(first.code).toBe(0)
      expect(JSON.parse(first.stdout)).toMatchObject({ trajectories: 4, failures: 0 })
      const lines = readLines(path.join(work, "a.jsonl"))
      for (const line of lines) {
        const n = line.rollout_infos.num_turns
        expect(line.response_token_ids!.length).toBe(n)
        expect(line.rollout_logprobs!.length).toBe(n)
        line.response_token_ids!.forEach((ids, turn) => {
          expect(ids!.length).toBeGreaterThan(0)
          expect(ids!.length).toBeLessThanOrEqual(6)
          expect(line.response_loss_mask![turn]).toEqual(ids!.map(() => 1))
          expect(line.rollout_logprobs![turn]!.length).toBe(ids!.length)
        })
      }
      const again = yield* run("5", path.join(work, "b.jsonl"))
      expect(again.code).toBe(0)
      const ids = (file: string) => readLines(path.join(work, file)).map((l) => `${l.id}:${JSON.stringify(l.response_token_ids)}`).sort()
      expect(ids("b.jsonl")).toEqual(ids("a.jsonl"))
      yield* run("6", path.join(work, "c.jsonl"))
      expect(ids("c.jsonl")).not.toEqual(ids("a.jsonl"))
    }))
})

describe.skipIf(unavailable !== undefined)("colocate mode: token in, token out on Qwen3's vocabulary", () => {
  const qwenPath = qwen3TinyPath()
  const vectors = JSON.parse(
    fs.readFileSync(path.join(import.meta.dirname, "../fixtures/chat_template/qwen3_vectors.json"), "utf8")
  ) as { cases: Array<{ name: string; messages: Array<Message.Message>; add_generation_prompt: boolean; kwargs: Record<string, unknown>; ids: Array<number> }> }

  // (one engine for both: contextSize 1024, 1 sequence)
  sharedEngine({ modelPath: qwenPath, contextSize: 1024, sequences: 1 })((it) => {
    it.effect("the model's template as transformers renders it, tokenized by llama.cpp as transformers tokenizes it", () =>
      Effect.gen(function*() {
        const engine = yield* SharedEngine
        expect(engine.chatWrapper).toBe("JinjaTemplate")
        for (const c of vectors.cases) {
          const ids = yield* engine.renderer.tokenize(c.messages, { addGenerationPrompt: c.add_generation_prompt, kwargs: c.kwargs })
          expect(ids, c.name).toEqual(c.ids)
        }
        // the generation prompt leaves thinking on (node-llama-cpp's own Jinja wrapper ends in an empty think block)
        const prompt = engine.formatPrompt([Message.user("hi")])
        expect(prompt.text.endsWith("<|im_start|>assistant\n")).toBe(true)
        expect(engine.formatPrompt([Message.user("hi")], { enable_thinking: false }).text.endsWith("<think>\n\n</think>\n\n")).toBe(true)
      }))

    // Issue 30, item 3: the tools, calls and tool results rendered by the file's template, tokenized by llama.cpp.
    it.effect("with tools: every conversation of transformers' tool vectors, the same token ids", () =>
      Effect.gen(function*() {
        const tools = JSON.parse(
          fs.readFileSync(path.join(import.meta.dirname, "../fixtures/chat_template/tool_vectors.json"), "utf8")
        ) as { qwen3: { cases: Array<{ name: string; tools: Array<{ function: Tool.Spec }>; messages: Array<Message.Message>; add_generation_prompt: boolean; kwargs: Record<string, unknown>; ids: Array<number> }> } }
        const engine = yield* SharedEngine
        for (const c of tools.qwen3.cases) {
          const ids = yield* engine.renderer.tokenize(c.messages, {
            addGenerationPrompt: c.add_generation_prompt,
            kwargs: c.kwargs,
            tools: c.tools.map((t) => t.function)
          })
          expect(ids, c.name).toEqual(c.ids)
        }
      }))
  })

  it.live("effect-gym run --mode colocate --env calculator: the env's tools are in the first prompt; --tito-check checks them", () =>
    Effect.gen(function*() {
      const work = tmp()
      const output = path.join(work, "calc.jsonl")
      const dataset = path.join(work, "rows.jsonl")
      fs.writeFileSync(dataset, JSON.stringify({ env_config: { seed: 1, items: 1 } }) + "\n")
      const { code, stdout, stderr } = yield* cli(
        "run", "--dataset", dataset, "--env", "calculator", "--mode", "colocate", "--model", qwenPath,
        "--context-size", "2048", "--inference-concurrency", "1", "--threads", "1", "--max-tokens", "8",
        "--num-generations", "2", "--max-turns", "2", "--seed", "1", "--output", output, "--json", "--tito-check"
      )
      expect(stderr).toBe("")
      expect(code).toBe(0)
      expect(JSON.parse(stdout).tito_check).toMatchObject({ checked: 2, unavailable: 0 })
      // the tool parser: the one the GGUF's own template writes calls for
      expect(JSON.parse(stdout).tool_parser).toEqual({ name: "hermes", chosen_by: "the chat template (it writes <tool_call>)" })
      const specs = Calculator.tools({}, new Set()).specs
      for (const line of readLines(output)) {
        const first = line.messages.slice(0, 2)
        const text = Result.getOrThrow(Qwen3.tokenizer.template!.render(first, { addGenerationPrompt: true, tools: specs }))
        expect(text).toContain("<tools>")
        expect(line.prompt_token_ids).toEqual(Qwen3.tokenizer.encode(text))
      }
    }))

  // Issue 28, item 5: llama.cpp does not apply tokenizer.json's NFC normalizer, so the NFC cases above
  // tokenized otherwise than transformers (combining accents, the Ohm sign, compatibility ideographs).
  it.live("Qwen3's NFC normalizer is applied (the file's pre-tokenizer is qwen2); normalizer none is llama.cpp's own tokenization", () =>
    Effect.gen(function*() {
      const nfc = vectors.cases.find((c) => c.name === "NFC normalization")!
      const engine = yield* LlamaCpp.makeEngine({ modelPath: qwenPath, contextSize: 256, sequences: 1, normalizer: "none" })
      const raw = yield* engine.renderer.tokenize(nfc.messages, { addGenerationPrompt: true, kwargs: nfc.kwargs })
      expect(raw).not.toEqual(nfc.ids)
      const refused = yield* Effect.flip(
        LlamaCpp.makeEngine({ modelPath: qwenPath, normalizer: "nfc" as unknown as "NFC" })
      )
      expect(refused.detail).toBe(`normalizer: "nfc" is not NFC, NFD, NFKC, NFKD or none`)
    }).pipe(Effect.scoped))

  // Issue 28: at 4 sequences, tokens here and there had the logprob (and were sampled from the
  // distribution) of another sequence of the batch. node-llama-cpp 3.21.1 samples the sequences of
  // one batch on parallel threads, and each read of the logits applies llama.cpp's pending output
  // reorder (rows swapped in place when the batch was split by sequence) without a lock: two threads
  // swapping the same rows leave some sequence reading another's. The reference here is not llama.cpp
  // at all: `reference.ts` reads the same GGUF and runs the model's forward pass in TypeScript.
  it.live("at 4 sequences, every sampled token's logprob is the model's: an independent forward pass of the same weights agrees", () =>
    Effect.gen(function*() {
      const model = Reference.load(qwenPath)
      const engine = yield* LlamaCpp.makeEngine({ modelPath: qwenPath, contextSize: 512, sequences: 4, threads: 1 })
      // Prompts of different lengths, so that batches mix prompt chunks with generated tokens.
      const requests = Array.from({ length: 16 }, (_, i) =>
        request({
          messages: [Message.user(`${"hello ".repeat(1 + ((i * 7) % 23))}number ${i}`)],
          sampling: { maxTokens: 24 },
          trajectoryId: `t${i}`,
          seed: 100 + i
        }))
      const results = yield* Effect.forEach(requests, engine.service.chat, { concurrency: "unbounded" })
      const off: Array<string> = []
      let tokens = 0
      let worst = 0
      results.forEach((completion, i) => {
        const prompt = completion.prompt!.tokenIds
        const expected = model.logprobs([...prompt, ...completion.tokenIds!], prompt.length - 1)
        completion.tokenIds!.forEach((id, j) => {
          const gap = Math.abs(completion.logprobs![j] - expected[j][id])
          tokens++
          worst = Math.max(worst, gap)
          if (gap > 0.01) off.push(`request ${i} token ${j}: ${completion.logprobs![j].toFixed(4)} vs ${expected[j][id].toFixed(4)}`)
        })
      })
      console.log(`colocate at 4 sequences: ${tokens} tokens, largest gap to the forward pass ${worst.toFixed(5)} nats`)
      expect(tokens).toBeGreaterThan(300)
      expect(off).toEqual([])
    }).pipe(Effect.scoped), 300_000)

  it.live("effect-gym run --mode colocate: one token sequence per trajectory; --tito-check finds the drift re-tokenizing would cause", () =>
    Effect.gen(function*() {
      const work = tmp()
      const output = path.join(work, "q.jsonl")
      const { code, stdout, stderr } = yield* cli(
        "run", "--dataset", frozenLakeDataset(work, 2), "--env", "frozen_lake", "--mode", "colocate", "--model", qwenPath,
        "--context-size", "2048", "--inference-concurrency", "1", "--threads", "1", "--max-tokens", "8",
        "--num-generations", "2", "--max-turns", "3", "--seed", "1", "--output", output, "--json", "--tito-check",
        "--chat-template-kwargs", "{\"enable_thinking\": false}"
      )
      expect(stderr).toBe("")
      expect(code).toBe(0)
      const summary = JSON.parse(stdout)
      console.log(`colocate on Qwen3's vocabulary: --tito-check ${JSON.stringify(summary.tito_check)}`)
      expect(summary.tito_check).toMatchObject({ checked: 4, unavailable: 0 })
      expect(summary.tito_check.drifted).toBeGreaterThan(0)
      const hf = Qwen3.tokenizer
      for (const line of readLines(output)) {
        const n = line.rollout_infos.num_turns
        expect(n).toBe(3)
        const replies = line.response_token_ids!
        const ids = line.token_ids!
        const mask = line.loss_mask!
        expect(ids.filter((_, i) => mask[i] === 1)).toEqual(replies.flat())
        expect(line.logprobs!.filter((x) => x !== null)).toEqual(line.rollout_logprobs!.flat())
        // the first prompt: Qwen3's template with the kwargs, tokenized as transformers would
        const first = line.messages.slice(0, 2)
        expect(line.prompt_token_ids).toEqual(hf.encode(Qwen3.fake.render(first, { addGenerationPrompt: true, kwargs: { enable_thinking: false } })))
        // between replies: the turn's end (unless the model sampled it), the observation, the generation prompt
        let at = 0
        const observations = line.messages.filter((m, i) => m.role === "user" && i > 1)
        for (let turn = 0; turn < n - 1; turn++) {
          at += replies[turn]!.length
          const start = at
          while (mask[at] === 0) at++
          const inserted = hf.decode(ids.slice(start, at))
          const closing = replies[turn]!.at(-1) === Qwen3.QWEN3.imEnd ? "" : "<|im_end|>"
          expect(inserted).toBe(`${closing}\n<|im_start|>user\n${observations[turn].content}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`)
        }
      }
    }))
})
