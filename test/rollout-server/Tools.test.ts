/**
 * Tools on the rollout server (issue 30, item 5): ms-swift's `tools` on `POST /infer/` (and a row's
 * `tools` on `POST /v1/rollouts`) reach the backend on every call of the trajectory; the outputs carry
 * the calls as ms-swift's trainer reads them (`response.choices[0].message.tool_calls`, the
 * conversation with each reply's calls in its text); bad tools are 400s naming the field and index.
 * Against the loopback fake OpenAI server (chat path, and its token path with Qwen3's tokenizer).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import type { Service } from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as SwiftRollout from "../../src/inference/SwiftRollout.js"
import * as RolloutClient from "../../src/rollout-server/RolloutClient.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import * as Qwen3 from "../inference/qwen3.js"
import * as FakeSwift from "./FakeSwift.js"
import { Api, errorOf, request, resultsOf, start } from "./helpers.js"
import { HERMES_CALL, httpClient, lookup, registry, tokenPath } from "./toolServer.js"

/** The fake model: calls `name` (lookup by default) on the user's question, then says the tool's answer. */
const callingModel = (state: FakeOpenAi.FakeServerState, name = "lookup") => {
  state.toolCalls = (body) => {
    const messages = body.messages as Array<{ role: string }>
    return messages.at(-1)?.role === "user"
      ? [{ id: "call_1", type: "function", function: { name, arguments: "{\"key\": \"a\"}" } }]
      : undefined
  }
  state.reply = (body) => {
    const messages = body.messages as Array<{ role: string; content: string }>
    return messages.at(-1)?.role === "tool" ? `It is ${messages.at(-1)!.content}.` : ""
  }
}

/** A rollout server (env `answering`) over server mode against the fake OpenAI server. */
const setup = (options: Partial<OpenAiCompat.Options> = {}, maxTurns?: number) =>
  Effect.gen(function*() {
    const fake = yield* FakeOpenAi.make
    const client: Service = yield* OpenAiCompat.make({
      baseUrl: fake.baseUrl,
      model: "tiny",
      rejectedFields: "refuse",
      onWarning: () => Effect.void,
      ...options
    })
      .pipe(Effect.provide(httpClient), Effect.orDie)
    const server = yield* start({ policy: client, registry, defaultEnv: "answering", ...(maxTurns === undefined ? {} : { maxTurns }) })
    return { fake, server }
  })

const infer = (url: string, requests: ReadonlyArray<Record<string, unknown>>, config: Record<string, unknown> = {}) =>
  request(`${url}/infer/`, {
    body: {
      infer_requests: requests.map((r) => ({ messages: [{ role: "user", content: "<placeholder>" }], ...r })),
      request_config: { temperature: 0.9, logprobs: false, ...config }
    }
  })

const outputsOf = (text: string) => Schema.decodeUnknownSync(Schema.Array(Api.InferOutput))(JSON.parse(text))

describe("POST /infer/ with ms-swift's tools", () => {
  it.live("the tools reach the backend on every call; the output carries the calls as ms-swift's trainer reads them", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      // OpenAI's shape, and the function object alone (ms-swift's wrap_tool takes both)
      const reply = yield* infer(server.url, [{ tools: [lookup], uuid: "u-1" }, { tools: [lookup.function], uuid: "u-2" }])
      expect(reply.status, reply.text).toBe(200)
      for (const r of fake.state.requests) {
        expect(r.body.tools).toEqual([lookup])
        expect(r.body.tool_choice).toBe("auto")
      }
      expect(fake.state.requests.length).toBe(4)
      for (const output of outputsOf(reply.text)) {
        // the conversation as ms-swift's own rollout returns it: the call in the reply's text, no
        // tool_calls key (its template would render them again after the reply's tokens), the tool's answer
        expect(output.messages).toEqual([
          { role: "user", content: "What is the value of a?" },
          { role: "assistant", content: HERMES_CALL },
          { role: "tool", content: "value-of-a", tool_call_id: "call_1", name: "lookup" },
          { role: "assistant", content: "It is value-of-a." }
        ])
        expect(output.rollout_infos).toMatchObject({ total_reward: 1, num_turns: 2, end_reason: "done" })
        expect(output.response.choices[0].message).toEqual({ role: "assistant", content: "It is value-of-a." })
      }
    }))

  it.live("a last reply that made calls: response's message has them as tool_calls, its content the whole text, finish_reason stop", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup({}, 1)
      callingModel(fake.state)
      fake.state.reply = () => "Let me look."
      const reply = yield* infer(server.url, [{ tools: [lookup] }], { return_details: true })
      expect(reply.status, reply.text).toBe(200)
      const [output] = outputsOf(reply.text)
      expect(output.rollout_infos).toMatchObject({ num_turns: 1, end_reason: "max_turns" })
      const call = { id: "call_1", type: "function", function: { name: "lookup", arguments: "{\"key\": \"a\"}" } }
      // ms-swift's ChatCompletionResponseChoice: content is the reply's whole text, tool_calls its calls,
      // and the finish reason vLLM's (stop), not OpenAI's tool_calls
      expect(output.response.choices[0]).toMatchObject({
        message: { role: "assistant", content: `Let me look.\n${HERMES_CALL}`, tool_calls: [call] },
        finish_reason: "stop"
      })
      expect(output.messages.at(-1)).toEqual({ role: "assistant", content: `Let me look.\n${HERMES_CALL}` })
    }))

  it.live("a bad tools spec or tool_choice is a 400 naming the field and its index; nothing runs", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      const fn = lookup.function
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string, string]> = [
        [{ tools: "[]" }, "infer_requests[0].tools", "expected a list of tools, or null"],
        [{ tools: [lookup, 7] }, "infer_requests[0].tools[1]", "expected a tool"],
        [{ tools: [{ type: "function" }] }, "infer_requests[0].tools[0].function", "expected the function object"],
        [{ tools: [{ type: "code_interpreter", function: fn }] }, "infer_requests[0].tools[0].type", "expected \"function\""],
        [{ tools: [{ ...lookup, extra: 1 }] }, "infer_requests[0].tools[0].extra", "only type and function"],
        [{ tools: [{ type: "function", function: { ...fn, name: "" } }] }, "infer_requests[0].tools[0].function.name", "non-empty"],
        [{ tools: [lookup, fn] }, "infer_requests[0].tools[1].name", "offered twice (also infer_requests[0].tools[0])"],
        [{ tools: [{ ...fn, description: undefined }] }, "infer_requests[0].tools[0].description", "expected a string"],
        [{ tools: [{ ...fn, strict: true }] }, "infer_requests[0].tools[0].strict", "would not reach the model"],
        [{ tools: [{ ...fn, name_for_model: "x" }] }, "infer_requests[0].tools[0].name_for_model", "not a field of a function tool"],
        [{ tools: [{ ...fn, parameters: "{}" }] }, "infer_requests[0].tools[0].parameters", "expected a JSON Schema object"],
        [{ tools: [{ ...fn, parameters: { type: "array" } }] }, "infer_requests[0].tools[0].parameters", "expected a JSON Schema object"],
        [
          { tools: [{ ...fn, parameters: { type: "object", properties: { key: { type: "strin" } } } }] },
          "infer_requests[0].tools[0].parameters",
          "parameters.properties.key.type \"strin\" is not a JSON Schema type"
        ],
        [{ tool_choice: "auto" }, "infer_requests[0].tool_choice", "without tools"],
        [{ tools: [lookup], tool_choice: "sometimes" }, "infer_requests[0].tool_choice", "expected \"auto\", \"none\", \"required\""],
        [
          { tools: [lookup], tool_choice: { type: "function", function: { name: "search" } } },
          "infer_requests[0].tool_choice.function.name",
          "\"search\" is not one of the request's tools (lookup)"
        ]
      ]
      for (const [fields, path, message] of cases) {
        const what = JSON.stringify(fields)
        // (the second request is the bad one's neighbour: a good request does not hide a bad one)
        const reply = yield* request(`${server.url}/infer/`, {
          body: { infer_requests: [{ messages: [], ...fields }, { messages: [], tools: [lookup] }] }
        })
        expect(reply.status, what).toBe(400)
        const error = errorOf(reply)
        expect(error.path, what).toBe(path)
        expect(error.message, what).toContain(message)
      }
      expect(fake.state.requests.length).toBe(0)
    }))
})

describe("POST /infer/ tools the backend or the env cannot take", () => {
  it.live("a tool_choice the server rejects is a 400 naming the request's tool_choice, not a reward-0 sample", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      fake.state.rejectFields.add("tool_choice")
      const reply = yield* infer(server.url, [{}, { tools: [lookup], tool_choice: "required" }])
      expect(reply.status, reply.text).toBe(400)
      const error = errorOf(reply)
      expect(error.path).toBe("infer_requests[1].tool_choice")
      expect(error.message).toContain("cannot honour it")
    }))

  it.live("a request tool that clashes with one the env offers (same name, another spec) is a 400 naming the request's tools", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      const reply = yield* infer(server.url, [{ data_dict: { env_config: { name: "calculator" } }, tools: [lookup] }])
      expect(reply.status, reply.text).toBe(400)
      const error = errorOf(reply)
      expect(error.path).toBe("infer_requests[0].tools")
      expect(error.message).toContain("the env offers a tool named \"lookup\" too")
      expect(fake.state.requests.length).toBe(0)
      // the env's own tools, the same spec given again: offered once
      const calculator = yield* infer(server.url, [{ data_dict: { env_config: { name: "calculator" } } }])
      const offered = fake.state.requests.at(-1)!.body.tools as ReadonlyArray<typeof lookup>
      const same = yield* infer(server.url, [{ data_dict: { env_config: { name: "calculator" } }, tools: [offered[0]] }])
      expect([calculator.status, same.status]).toEqual([200, 200])
      expect(fake.state.requests.at(-1)!.body.tools).toEqual(offered)
    }))

  it.live("a call of a tool nobody offers reaches the env, which answers it; the output carries both", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state, "delete_everything")
      const reply = yield* infer(server.url, [{ tools: [lookup] }])
      expect(reply.status, reply.text).toBe(200)
      const [output] = outputsOf(reply.text)
      expect(output.messages.slice(1, 3)).toEqual([
        { role: "assistant", content: "<tool_call>\n{\"name\": \"delete_everything\", \"arguments\": {\"key\": \"a\"}}\n</tool_call>" },
        { role: "tool", content: "no tool named delete_everything", tool_call_id: "call_1", name: "delete_everything" }
      ])
    }))
})

describe("tools on the token path", () => {
  it.live("/v1/rollouts: a row's tools are rendered into the prompt; results carry the calls, the tool messages and one token sequence masking the tool's tokens", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* tokenPath
      const reply = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ tools: [lookup], tool_choice: "auto" }], seed: 1 } })
      expect(reply.status, reply.text).toBe(200)
      const [line] = resultsOf(reply)
      expect(line.error).toBeNull()
      // both turns' prompts (past the backend's probe) render the tool
      const prompts = fake.state.tokenPrompts.map((p) => Qwen3.text(p)).filter((p) => p.includes("value of a"))
      expect(prompts.map((p) => p.includes('{"type": "function", "function": {"name": "lookup"'))).toEqual([true, true])
      // OpenAI's form: the call as tool_calls, the tool's answer with its tool_call_id
      expect(line.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
      const call = line.messages[1].tool_calls![0]
      expect([call.function.name, call.function.arguments]).toEqual(["lookup", "{\"key\": \"a\"}"])
      expect(line.messages[2]).toMatchObject({ tool_call_id: call.id, content: "value-of-a" })
      // one token sequence: the calls' tokens trained (1), the tool's answer not (0)
      const ids = line.token_ids!
      const mask = line.loss_mask!
      expect(ids.length).toBe(mask.length)
      const trained = ids.filter((_, i) => mask[i] === 1)
      expect(trained).toEqual(line.response_token_ids!.flat())
      expect(Qwen3.text(line.response_token_ids![0]!)).toBe(`${HERMES_CALL}<|im_end|>`)
      const untrained = Qwen3.text(ids.filter((_, i) => mask[i] === 0))
      expect(untrained).toContain("<tool_response>\nvalue-of-a\n</tool_response>")
      expect(line.rollout_infos.total_reward).toBe(1)
    }))

  it.live("/infer/: per-turn token ids and masks; each reply's text in messages is what its tokens say", () =>
    Effect.gen(function*() {
      const { server } = yield* tokenPath
      const reply = yield* infer(server.url, [{ tools: [lookup] }], { logprobs: true, return_details: true })
      expect(reply.status, reply.text).toBe(200)
      const [output] = outputsOf(reply.text)
      expect(output.response_token_ids.length).toBe(2)
      expect(output.response_loss_mask).toEqual(output.response_token_ids.map((ids) => ids.map(() => 1)))
      const replies = output.messages.filter((m) => m.role === "assistant")
      expect(output.response_token_ids.map((ids) => Qwen3.text(ids))).toEqual(replies.map((m) => `${m.content}<|im_end|>`))
      expect(output.rollout_logprobs.map((l) => l.length)).toEqual(output.response_token_ids.map((ids) => ids.length))
    }))
})

describe("hostile tools", () => {
  it.live("a tools list as large as the body limit allows is planned in time; one past it is a 413", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      const many = Array.from({ length: 20_000 }, (_, i) => ({ ...lookup, function: { ...lookup.function, name: `lookup_${i}` } }))
      const started = Date.now()
      const reply = yield* infer(server.url, [{ tools: many }])
      expect(reply.status, reply.text.slice(0, 300)).toBe(200)
      expect((fake.state.requests[0].body.tools as ReadonlyArray<unknown>).length).toBe(20_000)
      expect(Date.now() - started).toBeLessThan(10_000)
      const over = yield* infer(server.url, [{ tools: many }, { tools: many }, { tools: many }])
      expect(over.status).toBe(413)
    }))

  it.live("parameters nested past any real schema is a 400 naming the tool, not a stack overflow", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      const depth = 200_000
      const nested = `${"{\"type\":\"object\",\"properties\":{\"a\":".repeat(depth)}{}${"}}".repeat(depth)}`
      const body = `{"infer_requests":[{"messages":[],"tools":[{"name":"deep","description":"d","parameters":${nested}}]}]}`
      const reply = yield* request(`${server.url}/infer/`, { body })
      expect(reply.status, reply.text.slice(0, 300)).toBe(400)
      const error = errorOf(reply)
      expect(error.path).toBe("infer_requests[0].tools[0].parameters")
      expect(error.message).toContain("nested deeper than")
      // every other place a deep value could be shown in the message
      const deepArray = `${"[".repeat(depth)}${"]".repeat(depth)}`
      const deepObject = `${"{\"a\":".repeat(depth)}1${"}".repeat(depth)}`
      const elsewhere: ReadonlyArray<readonly [string, string]> = [
        [`{"tools":[${deepArray}]}`, "infer_requests[0].tools[0]"],
        [`{"tools":[{"type":"function","function":${deepArray}}]}`, "infer_requests[0].tools[0].function"],
        [`{"tools":[{"name":"x","description":"d","parameters":${deepArray}}]}`, "infer_requests[0].tools[0].parameters"],
        [`{"tools":[${JSON.stringify(lookup)}],"tool_choice":${deepObject}}`, "infer_requests[0].tool_choice"]
      ]
      for (const [fields, path] of elsewhere) {
        const bad = yield* request(`${server.url}/infer/`, { body: `{"infer_requests":[{"messages":[],${fields.slice(1)}]}` })
        expect([bad.status, errorOf(bad).path], path).toEqual([400, path])
      }
      expect(fake.state.requests.length).toBe(0)
    }))
})

describe("hostile calls", () => {
  // (2,000 levels: JSON.parse reads them, a recursive writer overflows the stack; deeper, JSON.parse's reviver does)
  const deep = (depth: number) => `${"{\"a\":".repeat(depth)}1${"}".repeat(depth)}`

  it.live("a tool_call message nested past any real call is a 400 naming it, not a stack overflow", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      const content = `{"name": "lookup", "arguments": ${deep(2_000)}}`
      const reply = yield* infer(server.url, [{ messages: [{ role: "user", content: "a?" }, { role: "tool_call", content }] }])
      expect(reply.status, reply.text.slice(0, 300)).toBe(400)
      expect(errorOf(reply).path).toBe("infer_requests[0].messages[1].content")
      expect(fake.state.requests.length).toBe(0)
    }))

  it.live("a model's call with arguments nested past any real call is written back as their text, not a stack overflow", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup({}, 1)
      const args = deep(2_000)
      fake.state.toolCalls = () => [{ id: "call_1", type: "function", function: { name: "lookup", arguments: args } }]
      fake.state.reply = () => ""
      const reply = yield* infer(server.url, [{ tools: [lookup] }])
      expect(reply.status, reply.text.slice(0, 300)).toBe(200)
      const [output] = outputsOf(reply.text)
      expect(output.messages[1].content).toBe(`<tool_call>\n{"name": "lookup", "arguments": ${JSON.stringify(args)}}\n</tool_call>`)
    }))
})

describe("tools with --mode swift-rollout", () => {
  /** effect-gym serve --mode swift-rollout (env `answering`) in front of the fake backend, whose model calls lookup. */
  const swiftSetup = Effect.gen(function*() {
    const fake = yield* FakeSwift.make
    fake.state.reply = (messages) => {
      const last = messages.at(-1)!
      return last.role === "tool" ? `It is ${last.content}.` : HERMES_CALL
    }
    const swift = yield* SwiftRollout.make({ baseUrl: fake.url, retries: 0 }).pipe(Effect.provide(httpClient), Effect.orDie)
    const server = yield* start({ policy: swift.service, control: swift.control, registry, defaultEnv: "answering" })
    return { fake, server }
  })

  it.live("/infer/: the tools reach the backend's /infer/, its calls reach the env, and the output is what ms-swift's own rollout gives", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* swiftSetup
      const before = fake.state.infers.length
      const reply = yield* infer(server.url, [{ tools: [lookup] }], { logprobs: true, return_details: true })
      expect(reply.status, reply.text).toBe(200)
      const sent = fake.state.infers.slice(before).map((b) => (b.infer_requests as Array<Record<string, unknown>>)[0])
      expect(sent.map((r) => r.tools)).toEqual([[lookup], [lookup]])
      // the reply goes back as the backend wrote it (its calls in its text, which ms-swift's template
      // would write again from tool_calls), the tool's answer as a tool message
      expect(sent[1].messages).toEqual([
        { role: "user", content: "What is the value of a?" },
        { role: "assistant", content: HERMES_CALL },
        { role: "tool", content: "value-of-a" }
      ])
      const [output] = outputsOf(reply.text)
      expect(output.rollout_infos).toMatchObject({ total_reward: 1, num_turns: 2, end_reason: "done" })
      expect(output.messages).toEqual([
        { role: "user", content: "What is the value of a?" },
        { role: "assistant", content: HERMES_CALL },
        { role: "tool", content: "value-of-a", tool_call_id: "toolcall-0f0e1d2c3b4a5968778695a4b3c2d1e0f", name: "lookup" },
        { role: "assistant", content: "It is value-of-a." }
      ])
      // each turn's tokens are what the backend sampled: the reply's whole text and its end
      expect(output.response_token_ids.map((ids) => new TextDecoder().decode(new Uint8Array(ids)))).toEqual([
        `${HERMES_CALL}${FakeSwift.END}`,
        `It is value-of-a.${FakeSwift.END}`
      ])
    }))

  it.live("/v1/rollouts: each prompt the backend renders continues the previous tokens across the tool turn: one sequence", () =>
    Effect.gen(function*() {
      const { server } = yield* swiftSetup
      const [line] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ tools: [lookup] }], seed: 1 } }))
      expect(line.error).toBeNull()
      expect(line.messages[1].tool_calls?.map((c) => [c.function.name, c.function.arguments])).toEqual([["lookup", "{\"key\": \"a\"}"]])
      expect(line.finish_reasons).toEqual(["tool_calls", "stop"])
      expect(line.token_ids_unavailable).toBeUndefined()
      const text = new TextDecoder().decode(new Uint8Array(line.token_ids!))
      const masked = new TextDecoder().decode(new Uint8Array(line.token_ids!.filter((_, i) => line.loss_mask![i] === 0)))
      expect(text).toContain(HERMES_CALL)
      expect(masked).toBe(`\n<|im_start|>user\n<tool_response>\nvalue-of-a\n</tool_response>${FakeSwift.END}\n<|im_start|>assistant\n`)
    }))

  it.live("a tool_choice other than auto is a 400 naming it: ms-swift's /infer/ takes none", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* swiftSetup
      const before = fake.state.infers.length
      const reply = yield* infer(server.url, [{ tools: [lookup], tool_choice: "required" }])
      expect(reply.status, reply.text).toBe(400)
      expect(errorOf(reply)).toMatchObject({ path: "infer_requests[0].tool_choice" })
      expect(errorOf(reply).message).toContain("not supported in swift-rollout mode")
      expect(fake.state.infers.length).toBe(before)
    }))
})

describe("tools: more than one request, odd calls, ms-swift's agent format", () => {
  it.live("requests with different tools in one body and in concurrent bodies: each call carries its own request's tools and choice", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      const other = { ...lookup, function: { ...lookup.function, name: "search", description: "Searches" } }
      const named = { type: "function", function: { name: "lookup" } }
      const bodies = [
        [{ tools: [lookup] }, { tools: [other, lookup], tool_choice: named }],
        [{ tools: [other, lookup], tool_choice: named }, {}]
      ]
      const replies = yield* Effect.forEach(bodies, (body) => infer(server.url, body), { concurrency: "unbounded" })
      expect(replies.map((r) => r.status)).toEqual([200, 200])
      const seen = fake.state.requests.map((r) => JSON.stringify([r.body.tools ?? null, r.body.tool_choice ?? null]))
      const count = (tools: unknown, choice: unknown) => seen.filter((s) => s === JSON.stringify([tools, choice])).length
      // (each trajectory makes two calls: the lookup, then the answer; the fake calls lookup even unoffered)
      expect([count([lookup], "auto"), count([other, lookup], named), count(null, null)]).toEqual([2, 4, 2])
      expect(seen.length).toBe(8)
    }))

  it.live("a call whose arguments are not JSON is written as ms-swift would: the arguments as a string", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup({}, 1)
      fake.state.toolCalls = () => [{ id: "call_1", type: "function", function: { name: "lookup", arguments: "{not json" } }]
      fake.state.reply = () => ""
      const reply = yield* infer(server.url, [{ tools: [lookup] }])
      expect(reply.status, reply.text).toBe(200)
      const [output] = outputsOf(reply.text)
      const content = "<tool_call>\n{\"name\": \"lookup\", \"arguments\": \"{not json\"}\n</tool_call>"
      expect(output.messages[1]).toEqual({ role: "assistant", content })
      expect(output.response.choices[0].message.tool_calls?.[0].function.arguments).toBe("{not json")
    }))

  it.live("ms-swift's agent format (tool_call, tool_response messages) reaches the env in OpenAI's form; a bad call is a 400 naming it", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup()
      callingModel(fake.state)
      const call = (key: string) => `{"name": "lookup", "arguments": {"key": "${key}", "n": 1.0}}`
      const messages = [
        { role: "user", content: "a and b?" },
        { role: "assistant", content: "Looking." },
        { role: "tool_call", content: call("a") },
        { role: "tool_call", content: call("b") },
        { role: "tool_response", content: "value-of-a" },
        { role: "tool", content: "value-of-b" },
        { role: "tool_call", content: call("c") },
        { role: "tool_response", content: "value-of-c" },
        { role: "user", content: "and now?" }
      ]
      const reply = yield* infer(server.url, [{ messages, tools: [lookup] }])
      expect(reply.status, reply.text).toBe(200)
      const [output] = outputsOf(reply.text)
      const openAi = (id: string, key: string) => ({
        id,
        type: "function",
        function: { name: "lookup", arguments: `{"key": "${key}", "n": 1.0}` }
      })
      expect((output.rollout_infos.reset_info as { given: unknown }).given).toEqual([
        { role: "user", content: "a and b?" },
        { role: "assistant", content: "Looking.", tool_calls: [openAi("call_2", "a"), openAi("call_3", "b")] },
        { role: "tool", content: "value-of-a", tool_call_id: "call_2", name: "lookup" },
        { role: "tool", content: "value-of-b", tool_call_id: "call_3", name: "lookup" },
        { role: "assistant", content: "", tool_calls: [openAi("call_6", "c")] },
        { role: "tool", content: "value-of-c", tool_call_id: "call_6", name: "lookup" },
        { role: "user", content: "and now?" }
      ])
      for (const [content, detail] of [["lookup(a)", "lookup(a)"], ["{\"name\": \"lookup\"}", "{\"name\": \"lookup\"}"]] as const) {
        const bad = yield* infer(server.url, [{ messages: [{ role: "user", content: "a?" }, { role: "tool_call", content }] }])
        expect(bad.status).toBe(400)
        expect(errorOf(bad).path).toBe("infer_requests[0].messages[1].content")
        expect(errorOf(bad).message).toContain(`a call's JSON, {"name": ..., "arguments": {...}}; got ${JSON.stringify(detail)}`)
      }
      const unknownRole = yield* infer(server.url, [{ messages: [{ role: "function", content: "x" }] }])
      expect([unknownRole.status, errorOf(unknownRole).path]).toEqual([400, "infer_requests[0].messages[0].role"])
    }))
})

describe("RolloutClient with tools", () => {
  it.live("sends a row's and a request's tools; decodes results and outputs that carry the calls", () =>
    Effect.gen(function*() {
      const { fake, server } = yield* setup({}, 1)
      callingModel(fake.state)
      const rollouts = yield* RolloutClient.make({ baseUrl: server.url }).pipe(Effect.provide(httpClient))
      const [line] = yield* rollouts.run({ requests: [{ tools: [lookup], tool_choice: "auto" }] })
      expect(line.messages[1].tool_calls?.[0].function.name).toBe("lookup")
      const [output] = yield* rollouts.infer({ infer_requests: [{ messages: [], tools: [lookup] }] })
      expect(output.response.choices[0].message.tool_calls?.[0].function).toEqual({ name: "lookup", arguments: "{\"key\": \"a\"}" })
      const refused = yield* Effect.flip(rollouts.infer({ infer_requests: [{ messages: [], tools: [{ name: "x" }] }] }))
      expect(refused.message).toContain("infer_requests[0].tools[0].description")
    }))
})
