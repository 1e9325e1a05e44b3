/**
 * Server mode with tools (issue 30, item 2): the chat request carries `tools` and `tool_choice` in
 * OpenAI's format and the conversation's tool calls and tool messages; the response's `tool_calls`
 * come back as the completion's. Against the loopback fake OpenAI server, and a whole run.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import type { Scope } from "effect"
import type { HttpClient } from "effect/http"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Env from "../../src/Env.js"
import type { ChatRequest } from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as Message from "../../src/Message.js"
import * as SwiftRollout from "../../src/inference/SwiftRollout.js"
import * as Rollout from "../../src/Rollout.js"
import * as Tool from "../../src/Tool.js"
import { records } from "../helpers.js"
import * as FakeSwift from "../rollout-server/FakeSwift.js"
import * as FakeOpenAi from "./FakeOpenAi.js"
import * as Qwen3 from "./qwen3.js"

const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })
const live = (name: string, f: () => Effect.Effect<void, unknown, HttpClient.HttpClient | Scope.Scope>) =>
  it.live(name, () => Effect.scoped(f()).pipe(Effect.provide(httpClient)))

const add = Tool.make({
  name: "add",
  description: "Adds two integers",
  parameters: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  run: ({ a, b }) => Effect.succeed(a + b)
})

const call = (id: string, name: string, args: string): Message.ToolCall => ({
  id,
  type: "function",
  function: { name, arguments: args }
})

const conversation: ReadonlyArray<Message.Message> = [
  Message.user("2 + 40?"),
  Message.assistant("", [call("call_a", "add", "{\"a\":2,\"b\":40}")]),
  Message.tool("call_a", "add", "42")
]

const request = (over: Partial<ChatRequest> = {}): ChatRequest => ({
  messages: conversation,
  sampling: {},
  trajectoryId: "r0-g0",
  turn: 2,
  seed: 1,
  tools: [add.spec],
  toolChoice: "auto",
  ...over
})

const setup = (options: Partial<OpenAiCompat.Options> = {}) =>
  Effect.gen(function*() {
    const server = yield* FakeOpenAi.make
    const client = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", ...options })
    return { ...server, client }
  })

describe("OpenAiCompat: tools", () => {
  live("sends tools, tool_choice and the conversation's calls and tool messages in OpenAI's format", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.reply = () => "It is 42."
      yield* client.chat(request({ toolChoice: { name: "add" } }))
      const body = state.requests[0].body
      expect(body.tools).toEqual([{ type: "function", function: add.spec }])
      expect(body.tool_choice).toEqual({ type: "function", function: { name: "add" } })
      expect(body.messages).toEqual([
        { role: "user", content: "2 + 40?" },
        { role: "assistant", content: "", tool_calls: [call("call_a", "add", "{\"a\":2,\"b\":40}")] },
        { role: "tool", content: "42", tool_call_id: "call_a", name: "add" }
      ])
      // a text request has no tool fields
      yield* client.chat(request({ tools: undefined, toolChoice: undefined, messages: [Message.user("hi")] }))
      expect(Object.keys(state.requests[1].body).filter((k) => k.startsWith("tool"))).toEqual([])
    }))

  live("--strict-openai keeps tools and tool_choice, and leaves out a tool message's name", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup({ strict: true })
      yield* client.chat(request())
      const body = state.requests[0].body
      expect(body.tool_choice).toBe("auto")
      expect((body.messages as Array<Record<string, unknown>>)[2]).toEqual({ role: "tool", content: "42", tool_call_id: "call_a" })
    }))

  live("reads tool_calls back: content null is empty text, a missing id is made, object arguments become JSON text", () =>
    Effect.gen(function*() {
      const { client, state } = yield* setup()
      state.reply = () => ""
      state.toolCalls = () => [
        { id: "call_x", type: "function", function: { name: "add", arguments: "{\"a\": 1, \"b\": 2}" } },
        { function: { name: "add", arguments: { a: 3, b: 4 } } }
      ]
      const completion = yield* client.chat(request())
      expect(completion.text).toBe("")
      expect(completion.finishReason).toBe("tool_calls")
      expect(completion.toolCalls).toEqual([
        call("call_x", "add", "{\"a\": 1, \"b\": 2}"),
        call("call_r0-g0_2_1", "add", "{\"a\":3,\"b\":4}")
      ])
    }))
})

/** A fake vLLM with Qwen3's tokenizer, and a client on its token path (Qwen3's template in-process). */
const tokenPathClient = Effect.gen(function*() {
  const server = yield* FakeOpenAi.make
  server.state.tokenizer = Qwen3.fake
  server.state.maxModelLen = 4096
  const client = yield* OpenAiCompat.make({ baseUrl: server.baseUrl, model: "tiny", tokenizer: Qwen3.QWEN3_TOKENIZER })
  return { client, server }
})

describe("OpenAiCompat: tools on a server with a token path", () => {
  // Issue 30 item 3: such a call went by the chat path (no tokens); the template now renders the tools.
  live("a call with tools goes by the token path, its tools rendered into the token prompt by the template", () =>
    Effect.gen(function*() {
      const { client, server } = yield* tokenPathClient
      expect(client.name).toContain("token in/out")
      const withTools = yield* client.chat(request())
      expect(server.state.requests.at(-1)!.url).toBe("/v1/completions")
      expect(withTools.tokensUnavailable).toBeUndefined()
      const prompt = Qwen3.text(withTools.prompt!.tokenIds)
      expect(prompt).toContain("# Tools")
      expect(prompt).toContain('{"type": "function", "function": {"name": "add"')
      const text = yield* client.chat(request({ tools: undefined, toolChoice: undefined, messages: [Message.user("hi")] }))
      expect(server.state.requests.at(-1)!.url).toBe("/v1/completions")
      expect(Qwen3.text(text.prompt!.tokenIds)).not.toContain("# Tools")
    }))

  live("a tool_choice other than auto goes by the chat path, whose server enforces it, and says why it has no tokens", () =>
    Effect.gen(function*() {
      const { client, server } = yield* tokenPathClient
      for (const toolChoice of ["required", "none", { name: "add" }] as const) {
        const completion = yield* client.chat(request({ toolChoice }))
        expect(server.state.requests.at(-1)!.url).toBe("/v1/chat/completions")
        expect(server.state.requests.at(-1)!.body.tool_choice).toEqual(Tool.choiceToOpenAi(toolChoice))
        expect(completion.prompt).toBeUndefined()
        expect(completion.tokensUnavailable).toContain(`tool_choice ${JSON.stringify(toolChoice)} goes by the chat path`)
      }
    }))
})

/** Calls add with the numbers of the question, then answers with the last tool result. */
const toolModel = (body: Record<string, unknown>): ReadonlyArray<Record<string, unknown>> | undefined => {
  const messages = body.messages as Array<{ role: string; content: string }>
  if (messages.at(-1)?.role === "tool") return undefined
  const [a, b] = (messages.at(-1)?.content.match(/\d+/g) ?? []).map(Number)
  return [{ id: `call_${messages.length}`, type: "function", function: { name: "add", arguments: JSON.stringify({ a, b }) } }]
}

const adder = Env.make({
  name: "adder",
  create: () => {
    const tools = Tool.toolkit([add])
    let expected = 0
    return {
      reset: (r: Env.ResetRequest) => {
        expected = 2 * r.seed % 1000 + 7
        return { observation: `${(2 * r.seed) % 1000} + 7?`, info: {}, tools: tools.specs }
      },
      step: (messages: ReadonlyArray<Message.Message>) => {
        const reply = messages.at(-1)!
        if (reply.tool_calls !== undefined) {
          return Effect.map(tools.handle(reply), (handled) => ({
            observation: "",
            reward: 0,
            done: false,
            info: {},
            toolMessages: handled.messages
          }))
        }
        return { observation: "", reward: reply.content === String(expected) ? 1 : 0, done: true, info: {} }
      }
    }
  }
})

describe("server mode with tools: a whole run against the fake server", () => {
  live("the model's tool calls reach the env, its tool messages reach the model, and the run is rewarded", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      server.state.toolCalls = toolModel
      server.state.reply = (body) => {
        const messages = body.messages as Array<{ role: string; content: string }>
        return messages.at(-1)?.role === "tool" ? messages.at(-1)!.content : ""
      }
      const layer = OpenAiCompat.layer({ baseUrl: server.baseUrl, model: "tiny" })
      const items = yield* Stream.make({}, {}, {}).pipe(
        Rollout.run(Rollout.make({ envs: [adder], numGenerations: 2, maxTurns: 4, seed: 5 })),
        Stream.runCollect,
        Effect.provide(Layer.fresh(layer))
      )
      const lines = records(items).map(CompletionsLog.toLine)
      expect(lines.map((l) => [l.error, l.reward, l.end_reason])).toEqual(lines.map(() => [null, 1, "done"]))
      for (const line of lines) {
        expect(line.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
        expect(line.messages[1].tool_calls?.[0].function.name).toBe("add")
        expect(line.messages[2].tool_call_id).toBe(line.messages[1].tool_calls?.[0].id)
        expect(line.messages[3].content).toBe(line.messages[2].content)
        expect(line.finish_reasons).toEqual(["tool_calls", "stop"])
      }
      // every request offered the tool
      expect(server.state.requests.every((r) => Array.isArray(r.body.tools) && r.body.tool_choice === "auto")).toBe(true)
      expect(server.state.requests.length).toBe(12)
    }))
})

describe("swift-rollout mode with tools", () => {
  live("sends the tools in ms-swift's request and reads its tool_calls back; the reply keeps its calls in its text", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* SwiftRollout.make({ baseUrl: fake.url, retries: 0 })
      expect(swift.service.toolParser?.name).toBe("agent_template")
      const written = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 40}}\n</tool_call>"
      fake.state.reply = () => written
      const completion = yield* swift.service.chat(request())
      const sent = (fake.state.infers.at(-1)!.infer_requests as Array<Record<string, unknown>>)[0]
      expect(sent.tools).toEqual([{ type: "function", function: add.spec }])
      // a prompt's assistant message whose calls are not in its text keeps them, for ms-swift's agent template
      expect(sent.messages).toEqual([
        { role: "user", content: "2 + 40?" },
        { role: "assistant", content: "", tool_calls: [call("call_a", "add", "{\"a\":2,\"b\":40}")] },
        { role: "tool", content: "42" }
      ])
      expect(completion.text).toBe(written)
      expect(completion.finishReason).toBe("tool_calls")
      expect(completion.toolCalls).toEqual([call("toolcall-0f0e1d2c3b4a5968778695a4b3c2d1e0f", "add", "{\"a\": 2, \"b\": 40}")])
      // without tools, the backend's calls are not the reply's (its agent template reads every reply)
      const text = yield* swift.service.chat(request({ tools: undefined, toolChoice: undefined, messages: [Message.user("hi")] }))
      expect([text.toolCalls, text.finishReason, (fake.state.infers.at(-1)!.infer_requests as Array<Record<string, unknown>>)[0].tools])
        .toEqual([undefined, "stop", null])
      // ms-swift's request has no tool_choice: only auto, else refused naming it (never sent)
      const infers = fake.state.infers.length
      const refused = yield* Effect.flip(swift.service.chat(request({ toolChoice: "required" })))
      expect([refused.reason, refused.field]).toEqual(["InvalidRequest", "tool_choice"])
      expect(fake.state.infers.length).toBe(infers)
    }))
})
