import type { HttpClient } from "effect/http"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted, Result } from "effect"
import type { Scope } from "effect"
import type { ChatRequest, Completion } from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as Message from "../../src/Message.js"
import { inferenceFailure as failure } from "../helpers.js"
import * as FakeOpenAi from "./FakeOpenAi.js"

const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })

const GRID = "P F G\nH H H"

const request = (over: Partial<ChatRequest> = {}): ChatRequest => ({
  messages: [Message.system("play"), Message.user(GRID)],
  sampling: {},
  trajectoryId: "r0-g0",
  turn: 1,
  seed: 1234,
  ...over
})

const { bytes } = FakeOpenAi

/** A fake server and a client on it (fast backoff so retries take milliseconds). */
const setup = (options: Partial<OpenAiCompat.Options> = {}) =>
  Effect.gen(function*() {
    const server = yield* FakeOpenAi.make
    const client = yield* OpenAiCompat.make({
      baseUrl: server.baseUrl,
      model: "tiny",
      backoff: "5 millis",
      maxBackoff: "20 millis",
      ...options
    })
    return { ...server, client }
  })

const live = (name: string, f: () => Effect.Effect<void, unknown, HttpClient.HttpClient | Scope.Scope>) =>
  it.live(name, () => Effect.scoped(f()).pipe(Effect.provide(httpClient)))

describe("OpenAiCompat: requests and token-level output", () => {
  live("vLLM style: token ids, logprobs, finish reason and prompt size come back; the request carries the sampling", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ apiKey: Redacted.make("sk-secret"), seeded: true })
      const completion = yield* client.chat(request({
        sampling: { temperature: 0.7, topP: 0.9, topK: 20, maxTokens: 64, stop: ["</answer>"], presencePenalty: 0.5, frequencyPenalty: -0.5 }
      }))
      expect(completion.text).toBe("<action>right</action>")
      expect(completion.finishReason).toBe("stop")
      expect(completion.tokenIds).toEqual(bytes("<action>right</action>"))
      expect(completion.logprobs).toEqual(completion.tokenIds!.map((_, i) => -(i + 1) / 100))
      expect(completion.promptTokens).toBe(bytes(GRID).length)
      const sent = state.requests[0]
      expect(sent.headers.authorization).toBe("Bearer sk-secret")
      expect(sent.body).toMatchObject({
        model: "tiny",
        messages: [{ role: "system", content: "play" }, { role: "user", content: GRID }],
        temperature: 0.7,
        top_p: 0.9,
        top_k: 20,
        max_tokens: 64,
        stop: ["</answer>"],
        presence_penalty: 0.5,
        frequency_penalty: -0.5,
        seed: 1234,
        logprobs: true,
        return_token_ids: true,
        stream: false
      })
      // the key is never part of what gets printed
      expect(client.name).not.toContain("sk-secret")
    }))

  live("without a key there is no Authorization header; without --seeded-sampling no seed; unset sampling is not sent", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      yield* client.chat(request())
      const sent = state.requests[0]
      expect(sent.headers.authorization).toBeUndefined()
      for (const key of ["seed", "temperature", "top_p", "top_k", "max_tokens", "stop"]) expect(sent.body).not.toHaveProperty(key)
    }))

  live("llama.cpp style: ids from logprobs.content[].id; vLLM token strings token_id:N; Ollama: logprobs only; plain: neither", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      const expected = bytes("<action>right</action>")
      const by: Record<string, Completion> = {}
      for (const flavor of ["llamacpp", "vllm-token-strings", "ollama", "plain"] as const) {
        state.flavor = flavor
        by[flavor] = yield* client.chat(request())
      }
      expect(by.llamacpp.tokenIds).toEqual(expected)
      expect(by.llamacpp.logprobs?.length).toBe(expected.length)
      expect(by["vllm-token-strings"].tokenIds).toEqual(expected)
      expect(by.ollama.tokenIds).toBeUndefined()
      expect(by.ollama.logprobs?.length).toBe(expected.length)
      expect(by.plain.tokenIds).toBeUndefined()
      expect(by.plain.logprobs).toBeUndefined()
      expect(by.plain.text).toBe("<action>right</action>")
    }))

  live("max_tokens cuts the completion: finish reason length, ids of what was generated", () =>
    Effect.gen(function*() {
      const { client } = yield* setup()
      const completion = yield* client.chat(request({ sampling: { maxTokens: 5 } }))
      expect(completion).toMatchObject({ text: "<acti", finishReason: "length", tokenIds: bytes("<acti") })
    }))

  live("--strict-openai sends no top_k and no return_token_ids; --no-logprobs asks for nothing", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ strict: true })
      yield* client.chat(request())
      expect(state.requests[0].body).toMatchObject({ logprobs: true })
      expect(state.requests[0].body).not.toHaveProperty("return_token_ids")
      const completion = yield* client.chat(request({ sampling: { logprobs: false } }))
      expect(state.requests[1].body).not.toHaveProperty("logprobs")
      expect(completion.tokenIds).toBeUndefined()
      const rejected = yield* Effect.exit(OpenAiCompat.make({ baseUrl: "http://127.0.0.1:1/v1", model: "m", strict: true, sampling: { topK: 5 } }))
      expect(failure(rejected).detail).toContain("--top-k is not part of the OpenAI API")
    }))
})

describe("OpenAiCompat: faults", () => {
  live("500 and 503 are retried with backoff and then succeed", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.faults.push({ kind: "status", status: 500, body: "{\"error\":\"boom\"}" }, { kind: "status", status: 503 })
      const completion = yield* client.chat(request())
      expect(completion.text).toBe("<action>right</action>")
      expect(state.requests.length).toBe(3)
    }))

  live("retries run out: a ServerError with the server's message, the status and the number of attempts", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ retries: 2 })
      for (let i = 0; i < 3; i++) {
        state.faults.push({ kind: "status", status: 500, body: "{\"error\":{\"message\":\"CUDA out of memory\",\"type\":\"server_error\"}}" })
      }
      const error = failure(yield* Effect.exit(client.chat(request())))
      expect(error.reason).toBe("ServerError")
      expect(error.status).toBe(500)
      expect(error.detail).toContain("CUDA out of memory")
      expect(error.detail).toContain("after 3 attempts")
      expect(state.requests.length).toBe(3)
    }))

  live("429 honours retry-after-ms and Retry-After (seconds) before trying again", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.faults.push(
        { kind: "status", status: 429, body: "{\"error\":{\"message\":\"slow down\"}}", headers: { "retry-after-ms": "300" } },
        { kind: "status", status: 429, headers: { "retry-after": "1" } }
      )
      yield* client.chat(request())
      const [first, second, third] = state.requests.map((r) => r.at)
      expect(second - first).toBeGreaterThanOrEqual(290)
      expect(third - second).toBeGreaterThanOrEqual(990)
    }))

  live("a 429 that does not stop is a RateLimited error", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ retries: 1 })
      state.faults.push({ kind: "status", status: 429, body: "rate limit reached" }, { kind: "status", status: 429, body: "rate limit reached" })
      const error = failure(yield* Effect.exit(client.chat(request())))
      expect(error.reason).toBe("RateLimited")
      expect(error.detail).toContain("rate limit reached")
    }))

  live("other 4xx fail at once with the server's message (and a hint for 404 / 401)", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.faults.push({
        kind: "status",
        status: 400,
        body: "{\"object\":\"error\",\"message\":\"This model's maximum context length is 4096 tokens\",\"type\":\"BadRequestError\"}"
      })
      const bad = failure(yield* Effect.exit(client.chat(request())))
      expect(bad).toMatchObject({ reason: "InvalidRequest", status: 400 })
      expect(bad.detail).toContain("maximum context length is 4096 tokens")
      expect(state.requests.length).toBe(1)
      state.faults.push({ kind: "status", status: 404, body: "{\"detail\":\"Not Found\"}" })
      expect(failure(yield* Effect.exit(client.chat(request()))).detail).toContain("Not Found (is the base URL right?")
      state.faults.push({ kind: "status", status: 401, body: "{\"error\":{\"message\":\"Incorrect API key\"}}" })
      expect(failure(yield* Effect.exit(client.chat(request()))).detail).toContain("Incorrect API key (check the API key")
    }))

  live("a dropped connection is retried; one that keeps dropping is a Transport error", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ retries: 2 })
      state.faults.push({ kind: "drop" })
      expect((yield* client.chat(request())).text).toBe("<action>right</action>")
      expect(state.requests.length).toBe(2)
      state.faults.push({ kind: "drop" }, { kind: "drop" }, { kind: "drop" })
      const error = failure(yield* Effect.exit(client.chat(request())))
      expect(error.reason).toBe("Transport")
      expect(error.detail).toContain("after 3 attempts")
    }))

  live("a server that is not there: Unavailable at start (GET /models); without the check, Transport per call", () =>
    Effect.gen(function*() {
      const start = failure(yield* Effect.exit(OpenAiCompat.make({ baseUrl: "http://127.0.0.1:9/v1", model: "m" })))
      expect(start.reason).toBe("Unavailable")
      expect(start.detail).toContain("cannot reach the inference server (GET http://127.0.0.1:9/v1/models: connect ECONNREFUSED")
      const client = yield* OpenAiCompat.make({
        baseUrl: "http://127.0.0.1:9/v1",
        model: "m",
        retries: 1,
        backoff: "5 millis",
        checkServer: false
      })
      const error = failure(yield* Effect.exit(client.chat(request())))
      expect(error.reason).toBe("Transport")
      expect(error.detail).toContain("ECONNREFUSED")
      expect(error.detail).toContain("http://127.0.0.1:9/v1/chat/completions")
    }))

  live("a slow response times out per attempt; the retry gets the answer", () =>
    Effect.gen(function*() {
      // (600 ms per attempt: the retry's answer must come within it, and with 150 ms it did not once,
      // in a whole suite on 2 busy cores)
      const { client, state } = yield* setup({ requestTimeout: "600 millis", retries: 0 })
      state.faults.push({ kind: "delay", ms: 1500 })
      // Timeout, not the answer the server sends after 1.5 s: the attempt was cut at the request timeout
      const error = failure(yield* Effect.exit(client.chat(request())))
      expect(error.reason).toBe("Timeout")
      expect(error.detail).toContain("no response within")

      const second = yield* setup({ requestTimeout: "600 millis", retries: 1 })
      second.state.faults.push({ kind: "delay", ms: 1500 })
      expect((yield* second.client.chat(request())).text).toBe("<action>right</action>")
      expect(second.state.requests.length).toBe(2)
      expect(state.requests.length).toBe(1)
    }))

  live("malformed JSON, an unexpected shape and no choice are typed errors, not retried", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.faults.push({ kind: "malformed" })
      const malformed = failure(yield* Effect.exit(client.chat(request())))
      expect(malformed.reason).toBe("BadResponse")
      expect(malformed.detail).toContain("malformed JSON")
      expect(malformed.detail).toContain("{\"choices\": [{\"message\":")
      state.faults.push({ kind: "wrongShape" })
      const shape = failure(yield* Effect.exit(client.chat(request())))
      expect(shape.reason).toBe("BadResponse")
      expect(shape.detail).toContain("content")
      state.faults.push({ kind: "noChoice" })
      expect(failure(yield* Effect.exit(client.chat(request()))).reason).toBe("NoChoice")
      expect(state.requests.length).toBe(3)
    }))
})

describe("OpenAiCompat: limits and validation", () => {
  live("the concurrency limit holds across every caller (the server counts requests in flight)", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ concurrency: 3 })
      state.latencyMs = 40
      yield* Effect.forEach(Array.from({ length: 12 }, (_, i) => request({ trajectoryId: `t${i}` })), client.chat, {
        concurrency: "unbounded"
      })
      expect(state.requests.length).toBe(12)
      expect(state.maxInFlight).toBe(3)
    }))

  live("many calls at once: all answered, never more than --inference-concurrency in flight", () =>
    Effect.gen(function*() {
      // Its speed is measured by bench/ (workload 4, bench/workloads/server_client.ts), not here.
      const { client, state } = yield* setup({ concurrency: 32 })
      const n = 400
      yield* Effect.forEach(Array.from({ length: n }, (_, i) => request({ trajectoryId: `t${i}` })), client.chat, {
        concurrency: 64,
        discard: true
      })
      expect(state.requests.length).toBe(n)
      expect(state.maxInFlight).toBeLessThanOrEqual(32)
    }))

  it.effect("bad options and sampling values are InvalidRequest errors at startup, naming the option", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[Partial<OpenAiCompat.Options>, string]> = [
        [{ baseUrl: "::nope" }, "is not a URL"],
        // a mistyped URL is shown with its password and query values masked
        [{ baseUrl: "http//admin:hunter22@host/v1?key=sk-123" }, `"http//admin:***@host/v1?key=***" is not a URL`],
        [{ baseUrl: "localhost:8000" }, "only http:// and https://"],
        [{ baseUrl: "ftp://x/v1" }, "only http:// and https://"],
        [{ model: " " }, "--model"],
        [{ retries: -1 }, "--retries"],
        [{ concurrency: 0 }, "--inference-concurrency"],
        [{ requestTimeout: 0 }, "--request-timeout"],
        [{ sampling: { temperature: -1 } }, "--temperature must be a number >= 0, got -1"],
        [{ sampling: { topP: 0 } }, "--top-p must be a number in (0, 1]"],
        [{ sampling: { topK: 0 } }, "--top-k must be a whole number >= 1"],
        [{ sampling: { maxTokens: 1.5 } }, "--max-tokens must be a whole number >= 1"],
        [{ sampling: { presencePenalty: 3 } }, "--presence-penalty must be a number in [-2, 2]"],
        [{ sampling: { frequencyPenalty: Number.NaN } }, "--frequency-penalty"],
        [{ sampling: { stop: [""] } }, "stop strings must not be empty"]
      ]
      for (const [over, message] of cases) {
        const result = OpenAiCompat.validate({ baseUrl: "http://127.0.0.1:8000/v1", model: "m", ...over })
        expect(Result.isFailure(result), message).toBe(true)
        if (Result.isFailure(result)) {
          expect(result.failure.reason).toBe("InvalidRequest")
          expect(result.failure.detail).toContain(message)
        }
      }
    }))

  live("a call with out-of-range sampling fails that call only", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      const error = failure(yield* Effect.exit(client.chat(request({ sampling: { temperature: -2 } }))))
      expect(error.detail).toContain("--temperature")
      expect(state.requests.length).toBe(0)
      expect((yield* client.chat(request())).text).toBe("<action>right</action>")
    }))

  live("min_p and repetition_penalty go as vLLM's extra parameters (values that mean none are not sent); a regex, or --strict-openai, is refused, not ignored", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      expect(client.honours).toEqual(new Set(["topK", "minP", "repetitionPenalty", "chatTemplateKwargs"]))
      yield* client.chat(request({ sampling: { minP: 0.05, repetitionPenalty: 1.1, topK: -1 } }))
      expect(state.requests.at(-1)!.body).toMatchObject({ min_p: 0.05, repetition_penalty: 1.1, top_k: -1 })
      yield* client.chat(request({ sampling: { minP: 0, repetitionPenalty: 1 } }))
      expect(state.requests.at(-1)!.body).not.toHaveProperty("min_p")
      expect(state.requests.at(-1)!.body).not.toHaveProperty("repetition_penalty")
      const regex = failure(yield* Effect.exit(client.chat(request({ sampling: { structuredOutputsRegex: "x" } }))))
      expect(regex.detail).toBe("structured_outputs_regex is not supported by this backend")
      const strict = yield* setup({ strict: true })
      expect(strict.client.honours).toEqual(new Set())
      const refused = failure(yield* Effect.exit(strict.client.chat(request({ sampling: { minP: 0.05 } }))))
      expect(refused.detail).toBe("min_p is not supported by this backend")
    }))

  it("errorMessage reads the usual error bodies", () => {
    expect(OpenAiCompat.errorMessage("{\"error\":{\"message\":\"m1\"}}")).toBe("m1")
    expect(OpenAiCompat.errorMessage("{\"error\":\"m2\"}")).toBe("m2")
    expect(OpenAiCompat.errorMessage("{\"detail\":\"m3\"}")).toBe("m3")
    expect(OpenAiCompat.errorMessage("{\"message\":\"m4\",\"object\":\"error\"}")).toBe("m4")
    expect(OpenAiCompat.errorMessage("Bad Gateway")).toBe("Bad Gateway")
    expect(OpenAiCompat.errorMessage("")).toBe("(empty body)")
  })
})
