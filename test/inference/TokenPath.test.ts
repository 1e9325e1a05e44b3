/**
 * Token in, token out in server mode, on Qwen3's real BPE vocabulary and chat template: the fake
 * server "samples" each reply one character at a time (each character's own tokens), as models do
 * sample non-canonical splits, so decoding and re-encoding really drifts.
 */
import type { HttpClient } from "effect/http"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Scope } from "effect"
import * as path from "node:path"
import type { CompletionLine } from "../../src/CompletionsLog.js"
import type { ChatRequest, Completion } from "../../src/Inference.js"
import { tokenState } from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as Message from "../../src/Message.js"
import { cli, frozenLakeDataset, readLines, tmp } from "./cli.js"
import * as FakeOpenAi from "./FakeOpenAi.js"
import * as RolloutServerHelpers from "../rollout-server/helpers.js"
import * as Qwen3 from "./qwen3.js"

const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })
const live = (name: string, f: () => Effect.Effect<void, unknown, HttpClient.HttpClient | Scope.Scope>) =>
  it.live(name, () => Effect.scoped(f()).pipe(Effect.provide(httpClient)))

const qwenServer = Effect.map(FakeOpenAi.make, (server) => {
  server.state.tokenizer = Qwen3.fake
  server.state.maxModelLen = 4096
  return server
})

const startsWith = (a: ReadonlyArray<number>, prefix: ReadonlyArray<number>) =>
  prefix.length <= a.length && prefix.every((x, i) => a[i] === x)

/** Each turn's prompt, from a line's sequence: the first prompt, then up to each reply's first token. */
const promptsOf = (line: CompletionLine): Array<Array<number>> => {
  const prompt = line.prompt_token_ids!
  const ids = line.token_ids!
  const mask = line.loss_mask!
  const prompts: Array<Array<number>> = []
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] === 1 && (i === 0 || mask[i - 1] === 0)) prompts.push([...prompt, ...ids.slice(0, i)])
  }
  return prompts
}

/** The runs of mask 0 between replies, as text. */
const insertedTexts = (line: CompletionLine): Array<string> => {
  const out: Array<string> = []
  let run: Array<number> = []
  line.loss_mask!.forEach((m, i) => {
    if (m === 0) run.push(line.token_ids![i])
    else if (run.length > 0) {
      out.push(Qwen3.text(run))
      run = []
    }
  })
  return out
}

const runArgs = (dir: string, output: string, ...extra: Array<string>) => [
  "run", "--dataset", frozenLakeDataset(dir, 6), "--env", "frozen_lake", "--mode", "server",
  "--model", "tiny", "--max-tokens", "64", "--num-generations", "2", "--max-turns", "6", "--seed", "4",
  "--output", output, "--json", ...extra
]

describe("server mode token path on Qwen3's vocabulary", () => {
  live("each prompt is the previous prompt + the sampled tokens + the new messages' tokens; the log holds the sequence", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout, stderr } = yield* cli(
        ...runArgs(dir, output, "--base-url", server.baseUrl, "--tokenizer", Qwen3.QWEN3_TOKENIZER, "--tito-check")
      )
      expect(stderr).toBe("")
      expect(code).toBe(0)
      const summary = JSON.parse(stdout)
      expect(summary).toMatchObject({ trajectories: 12, failures: 0 })
      const lines = readLines(output)
      const sent = new Set(server.state.tokenPrompts.map((p) => p.join(",")))
      let turns = 0
      let driftFree = 0
      for (const line of lines) {
        const n = line.rollout_infos.num_turns
        turns += n
        // per-turn fields stay, and the sequence's sampled runs are exactly them, in order
        const replies = line.response_token_ids!
        expect(replies.length).toBe(n)
        const sampled = line.token_ids!.filter((_, i) => line.loss_mask![i] === 1)
        expect(sampled).toEqual(replies.flat())
        expect(line.logprobs!.filter((x) => x !== null)).toEqual(line.rollout_logprobs!.flat())
        line.loss_mask!.forEach((m, i) => expect(line.logprobs![i] === null).toBe(m === 0))
        // the first prompt is Qwen3's template over the first messages, tokenized
        const first = line.messages.slice(0, line.messages.findIndex((m) => m.role === "assistant"))
        expect(line.prompt_token_ids).toEqual(
          Qwen3.tokenizer.encode(Qwen3.fake.render(first, { addGenerationPrompt: true }))
        )
        // every turn's prompt went to the server as is, and continues the previous prompt + its reply
        const prompts = promptsOf(line)
        expect(prompts.length).toBe(n)
        prompts.forEach((prompt, k) => {
          expect(sent.has(prompt.join(","))).toBe(true)
          if (k > 0 && startsWith(prompt, [...prompts[k - 1], ...replies[k - 1]!])) driftFree++
        })
        // between replies: the end of line after the sampled <|im_end|>, the observation, the generation prompt
        const observations = line.messages.filter((m, i) => m.role === "user" && i > first.length)
        expect(insertedTexts(line)).toEqual(
          observations.slice(0, n - 1).map((o) => `\n<|im_start|>user\n${o.content}<|im_end|>\n<|im_start|>assistant\n`)
        )
      }
      expect(turns).toBeGreaterThan(lines.length)
      expect(driftFree).toBe(turns - lines.length) // zero drift: every later prompt continues the previous one
      // a trainer re-tokenizing the conversations would get other tokens: non-zero drift
      console.log(`token path: ${turns - lines.length} later prompts, all continuing the previous tokens; --tito-check: ` +
        `${summary.tito_check.drifted} of ${summary.tito_check.checked} trajectories would drift if re-tokenized`)
      expect(summary.tito_check.checked).toBe(12)
      expect(summary.tito_check.drifted).toBeGreaterThan(0)
      expect(summary.tito_check.first.turn).toBeGreaterThanOrEqual(1)
    }))

  live("the chat path on the same server: the server re-tokenizes the conversation, and the prompts drift", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout } = yield* cli(...runArgs(dir, output, "--base-url", server.baseUrl, "--token-path", "off"))
      expect(code).toBe(0)
      expect(JSON.parse(stdout)).toMatchObject({ trajectories: 12, failures: 0 })
      let later = 0
      let drifted = 0
      for (const line of readLines(output)) {
        expect(line.token_ids).toBeNull()
        expect(line.token_ids_unavailable).toContain("--token-path off")
        // what the server tokenized at each turn, against the previous prompt + the tokens it sampled
        const assistants = line.messages.flatMap((m, i) => (m.role === "assistant" ? [i] : []))
        const prompts = assistants.map((at) => Qwen3.tokenizer.encode(Qwen3.fake.render(line.messages.slice(0, at), { addGenerationPrompt: true })))
        for (let k = 1; k < prompts.length; k++) {
          later++
          if (!startsWith(prompts[k], [...prompts[k - 1], ...line.response_token_ids![k - 1]!])) drifted++
        }
      }
      console.log(`chat path: ${drifted} of ${later} later prompts drift from the sampled tokens`)
      expect(later).toBeGreaterThan(0)
      expect(drifted).toBeGreaterThan(0)
    }))

  live("without --tokenizer the server's /tokenize renders and tokenizes: the same sequences as the local tokenizer", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      const dir = tmp()
      const local = path.join(dir, "local.jsonl")
      const remote = path.join(dir, "remote.jsonl")
      const a = yield* cli(...runArgs(dir, local, "--base-url", server.baseUrl, "--tokenizer", Qwen3.QWEN3_TOKENIZER))
      const b = yield* cli(...runArgs(dir, remote, "--base-url", server.baseUrl, "--token-path", "require"))
      expect([a.code, b.code]).toEqual([0, 0])
      expect(b.stderr).toBe("")
      const key = (file: string) => readLines(file).map((l) => JSON.stringify([l.id, l.prompt_token_ids, l.token_ids, l.loss_mask])).sort()
      expect(key(remote)).toEqual(key(local))
      expect(server.state.probes.some((p) => p.path === "/tokenize" && (p.body as { return_token_strs?: boolean }).return_token_strs === true)).toBe(true)
    }))

  live("--token-path require fails at start on a chat-only server, saying why; --tito-check needs a token backend", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const required = yield* cli(...runArgs(dir, output, "--base-url", server.baseUrl, "--token-path", "require"))
      expect(required.code).toBe(2)
      expect(required.stderr).toContain("--token-path require: no tokenizer")
      const check = yield* cli(...runArgs(dir, output, "--base-url", server.baseUrl, "--tito-check"))
      expect(check.code).toBe(2)
      expect(check.stderr).toContain("--tito-check: needs a backend that generates from tokens")
      const scripted = yield* cli("run", "--dataset", frozenLakeDataset(dir, 1), "--env", "frozen_lake", "--tito-check", "--output", output)
      expect(scripted.stderr).toContain("--tito-check: only with --mode server or --mode colocate")
    }))

  live("a scheduler-style rewrite of the conversation renders afresh and says why the sequence stops", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      const client = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER })
      const first: ChatRequest = { messages: [Message.user("S F\nF G")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }
      const a: Completion = yield* client.chat(first)
      expect(a.prompt).toMatchObject({ reused: 0 })
      const covered = [...first.messages, Message.assistant(a.text)]
      const previous = tokenState(a, covered)!
      // the env's observation appended: the prompt continues the tokens
      const b = yield* client.chat({ ...first, turn: 2, messages: [...covered, Message.user("F P\nF G")], previous })
      expect(b.prompt!.reused).toBe(previous.tokenIds.length)
      expect(b.prompt!.tokenIds.slice(0, previous.tokenIds.length)).toEqual(previous.tokenIds)
      // a rewritten conversation (the first message changed): a fresh prompt, with the reason
      const c = yield* client.chat({ ...first, turn: 2, messages: [Message.user("board only"), Message.user("F P")], previous })
      expect(c.prompt).toMatchObject({ reused: 0, restarted: expect.stringContaining("rewritten") })
    }))
})

describe("the rollout server on the token path", () => {
  live("/v1/rollouts results carry the token sequence, as completions lines do", () =>
    Effect.gen(function*() {
      const backend = yield* qwenServer
      const policy = yield* OpenAiCompat.make({ baseUrl: backend.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER })
      const server = yield* RolloutServerHelpers.start({ policy, numGenerations: 2, maxTurns: 4 })
      const reply = yield* RolloutServerHelpers.request(`${server.url}/v1/rollouts`, {
        body: { requests: [{ env_config: { seed: 3 } }], sampling: { max_tokens: 64 } }
      })
      expect(reply.status).toBe(200)
      const results = RolloutServerHelpers.resultsOf(reply)
      expect(results.length).toBe(2)
      for (const r of results) {
        expect(r.token_ids!.length).toBe(r.loss_mask!.length)
        expect(r.token_ids!.filter((_, i) => r.loss_mask![i] === 1)).toEqual(r.response_token_ids!.flat())
        expect(Qwen3.text(r.prompt_token_ids!)).toMatch(/<\|im_start\|>assistant\n$/)
      }
    }))

  live("/infer/ honours each request's chat_template_kwargs: Qwen3's enable_thinking false renders its empty think block, for that request only", () =>
    Effect.gen(function*() {
      const backend = yield* qwenServer
      const policy = yield* OpenAiCompat.make({ baseUrl: backend.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER })
      const server = yield* RolloutServerHelpers.start({ policy, maxTurns: 3 })
      const row = (kwargs: Record<string, unknown>) => ({
        messages: [{ role: "user", content: "<placeholder>" }],
        data_dict: { env_config: { seed: 3 } },
        chat_template_kwargs: kwargs
      })
      const reply = yield* RolloutServerHelpers.request(`${server.url}/infer/`, {
        body: { infer_requests: [row({ enable_thinking: false }), row({})], request_config: { max_tokens: 64, return_details: true } }
      })
      expect(reply.status).toBe(200)
      const [off, on] = JSON.parse(reply.text) as Array<{ response: { prompt_token_ids: Array<number> } }>
      expect(Qwen3.text(off.response.prompt_token_ids)).toMatch(/<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/)
      expect(Qwen3.text(on.response.prompt_token_ids)).toMatch(/<\|im_end\|>\n<\|im_start\|>assistant\n$/)
    }))
})

describe("server mode token path: max_tokens", () => {
  live("max_tokens is what fits under /v1/models' max_model_len; without either, one warning (the API's default is short)", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      server.state.maxModelLen = 300
      const warnings: Array<string> = []
      const onWarning = (message: string) => Effect.sync(() => void warnings.push(message))
      const request: ChatRequest = { messages: [Message.user("S F\nF G")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }
      const sized = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER, onWarning })
      const a = yield* sized.chat(request)
      expect(server.state.requests.at(-1)!.body.max_tokens).toBe(300 - a.prompt!.tokenIds.length)
      server.state.maxModelLen = undefined
      const unsized = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER, onWarning })
      yield* unsized.chat(request)
      yield* unsized.chat(request)
      expect(server.state.requests.at(-1)!.body).not.toHaveProperty("max_tokens")
      expect(warnings).toEqual([expect.stringContaining("set --max-tokens")])
      yield* unsized.chat({ ...request, sampling: { maxTokens: 9 } })
      expect(server.state.requests.at(-1)!.body.max_tokens).toBe(9)
    }))
})

describe("server mode fails fast on a dead server", () => {
  live("N transport failures in a row: halted fails, calls fail at once; after the pause one call tries, and an answer revives it", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const client = yield* OpenAiCompat.make({
        baseUrl: server.baseUrl,
        model: "tiny",
        retries: 0,
        maxTransportFailures: 3,
        downPause: "300 millis",
        tokenPath: "off"
      })
      server.state.faults.push({ kind: "drop" }, { kind: "drop" }, { kind: "status", status: 500 }, { kind: "drop" }, { kind: "drop" }, { kind: "drop" })
      const call = Effect.exit(client.chat({ messages: [Message.user("S F\nF G")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }))
      // an HTTP answer (the 500) breaks the run of failures: 2, then 3 in a row
      for (let i = 0; i < 6; i++) yield* call
      const halted = yield* Effect.result(client.halted!)
      expect(halted._tag === "Failure" && halted.failure.detail).toContain("3 requests in a row failed without a response")
      const sent = server.state.requests.length
      const fast = yield* call
      expect(fast._tag === "Failure" && String(fast.cause)).toContain("is not answering")
      expect(server.state.requests.length).toBe(sent) // nothing sent while down
      yield* Effect.sleep("350 millis")
      const back = yield* call
      expect(back._tag).toBe("Success")
      expect((yield* call)._tag).toBe("Success")
    }))
})

describe("server mode degrades politely on generic servers", () => {
  live("a server that rejects return_token_ids / top_k / seed with a 422: dropped for the run, one warning each, nothing fails", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      for (const field of ["return_token_ids", "top_k", "seed"]) server.state.rejectFields.add(field)
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout, stderr } = yield* cli(
        ...runArgs(dir, output, "--base-url", server.baseUrl, "--token-path", "off", "--top-k", "5", "--seeded-sampling")
      )
      expect(code).toBe(0)
      expect(JSON.parse(stdout)).toMatchObject({ trajectories: 12, failures: 0 })
      const warnings = stderr.split("\n").filter((l) => l.startsWith("warning: the server rejected"))
      expect(warnings.map((w) => w.match(/field (\w+)/)![1]).sort()).toEqual(["return_token_ids", "seed", "top_k"])
      for (const { body } of server.state.requests) {
        for (const field of ["return_token_ids", "top_k", "seed"]) expect(body).not.toHaveProperty(field)
      }
    }))

  // Issue 28, item 14: the "no /tokenize" warning said to check the base URL (the hint of a 404 under
  // it; /tokenize is at the server's root), and --token-path require printed the return_token_ids
  // warning of its probe before the fatal error.
  live("a server without /tokenize: the warning does not blame the base URL; --token-path require says only its error", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const dir = tmp()
      const auto = yield* cli(...runArgs(dir, path.join(dir, "a.jsonl"), "--base-url", server.baseUrl))
      expect(auto.code).toBe(0)
      expect(auto.stderr.split("\n")).toEqual([expect.stringContaining("warning: server mode on the chat path: no tokenizer")])
      expect(auto.stderr).toContain("/tokenize: no route POST /tokenize")
      expect(auto.stderr).not.toContain("base URL")

      const tokens = yield* qwenServer
      tokens.state.rejectFields.add("return_token_ids")
      const required = yield* cli(
        ...runArgs(dir, path.join(dir, "b.jsonl"), "--base-url", tokens.baseUrl, "--token-path", "require")
      )
      expect(required.code).toBe(2)
      const lines = required.stderr.split("\n").filter((l) => l !== "")
      expect(lines).toEqual([expect.stringContaining("--token-path require: POST")])
      expect(lines[0]).toContain("the token path needs return_token_ids")
      // Without require, the same server: the warning of the dropped field, then the chat path's.
      const fallback = yield* cli(...runArgs(dir, path.join(dir, "c.jsonl"), "--base-url", tokens.baseUrl))
      expect(fallback.code).toBe(0)
      expect(fallback.stderr.split("\n").filter((l) => l !== "")).toEqual([
        expect.stringContaining("warning: the server rejected the request field return_token_ids (HTTP 422)"),
        expect.stringContaining("warning: server mode on the chat path: POST")
      ])
    }))

  live("--strict-openai never sends a non-standard field, whatever asks (a call's own top_k, template kwargs)", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const client = yield* OpenAiCompat.make({
        baseUrl: server.baseUrl,
        model: "tiny",
        strict: true,
        chatTemplateKwargs: { enable_thinking: false }
      })
      yield* client.chat({
        messages: [Message.user("S F\nF G")],
        sampling: { topK: 7, temperature: 0.5 },
        trajectoryId: "t",
        turn: 1,
        seed: 1,
        chatTemplateKwargs: { x: 1 }
      })
      const body = server.state.requests[0].body
      expect(body).toMatchObject({ temperature: 0.5, logprobs: true })
      for (const field of OpenAiCompat.NON_STANDARD) expect(body).not.toHaveProperty(field)
    }))

  live("--chat-template-kwargs goes to a chat server as chat_template_kwargs (the call's own over the run's)", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const client = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", chatTemplateKwargs: { enable_thinking: false, a: 1 } })
      yield* client.chat({ messages: [Message.user("hi")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1, chatTemplateKwargs: { a: 2 } })
      expect(server.state.requests[0].body.chat_template_kwargs).toEqual({ enable_thinking: false, a: 2 })
    }))
})

describe("--chat-template-kwargs with Qwen3's template", () => {
  live("enable_thinking false changes the generation prompt the token path sends (an empty think block)", () =>
    Effect.gen(function*() {
      const server = yield* qwenServer
      const dir = tmp()
      const on = path.join(dir, "on.jsonl")
      const off = path.join(dir, "off.jsonl")
      yield* cli(...runArgs(dir, on, "--base-url", server.baseUrl, "--tokenizer", Qwen3.QWEN3_TOKENIZER))
      const r = yield* cli(
        ...runArgs(dir, off, "--base-url", server.baseUrl, "--tokenizer", Qwen3.QWEN3_TOKENIZER, "--chat-template-kwargs", "{\"enable_thinking\": false}")
      )
      expect(r.code).toBe(0)
      const tail = (file: string) => Qwen3.text(readLines(file)[0].prompt_token_ids!).slice(-80)
      expect(tail(on)).toMatch(/<\|im_end\|>\n<\|im_start\|>assistant\n$/)
      expect(tail(off)).toMatch(/<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/)
      // and every later prompt too
      for (const line of readLines(off)) {
        for (const text of insertedTexts(line)) expect(text).toMatch(/<think>\n\n<\/think>\n\n$/)
      }
      // (its own output: an existing log would be refused before the option is read)
      const bad = yield* cli(...runArgs(dir, path.join(dir, "bad.jsonl"), "--base-url", server.baseUrl, "--chat-template-kwargs", "[1]"))
      expect(bad.stderr).toContain("--chat-template-kwargs: must be a JSON object")
    }))
})
