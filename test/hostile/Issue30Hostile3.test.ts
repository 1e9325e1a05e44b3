/**
 * A third hostile pass on issue 30 (tool calls): adversarial text for the tool parsers, odd
 * `tool_calls` from a server, and tools that misbehave.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import * as EnvCheck from "../../src/check/EnvCheck.js"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Env from "../../src/Env.js"
import * as Inference from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as ToolParsers from "../../src/inference/ToolParsers.js"
import type * as Message from "../../src/Message.js"
import * as Rollout from "../../src/Rollout.js"
import * as Tool from "../../src/Tool.js"
import { records, toolkitEnv } from "../helpers.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import { serve } from "../openenv/helpers.js"

const MB = 1_000_000

describe("tool parsers on adversarial text", () => {
  // No clock is read: a rescan from every '{' is quadratic, and llama3_json took 78 s on 200 KB so,
  // which on these 1 MB texts is about 30 minutes a parser: the test's own time limit fails it.
  // (V8's own JSON.parse takes about half a second on 1 MB of `[`: what linear costs here.)
  it("1 MB replies that defeat a rescan from every '{' (llama3_json took 78 s on 200 KB) parse in linear time: no call, the text kept whole", () => {
    const texts = {
      braces: "{".repeat(MB),
      nestedInvalid: "{".repeat(MB / 2) + "}".repeat(MB / 2),
      unclosedStrings: "{\"".repeat(MB / 2),
      names: "{ \"name\"".repeat(MB / 8),
      tags: "<tool_call>".repeat(MB / 11),
      unclosedTag: "<tool_call>" + "[".repeat(MB),
      mistral: "[TOOL_CALLS]".repeat(MB / 12),
      mistralSpace: "[TOOL_CALLS]" + " ".repeat(MB) + "x"
    }
    for (const parser of ToolParsers.names) {
      for (const [label, text] of Object.entries(texts)) {
        const parsed = ToolParsers.parse(parser, text)
        expect([parser, label, parsed.toolCalls.length, parsed.content?.length]).toEqual([parser, label, 0, text.length])
      }
    }
  }, 180_000)

  it("llama3_json still reads the calls of a reply with many braces in prose before them", () => {
    const text = "{".repeat(1000) + " {\"name\": \"add\", \"parameters\": {\"a\": 1}}"
    expect(ToolParsers.parse("llama3_json", text).toolCalls.map((c) => c.function)).toEqual([{ name: "add", arguments: "{\"a\": 1}" }])
  })
})

const echo = Tool.make({
  name: "echo",
  description: "Echoes a text",
  parameters: Schema.Struct({ text: Schema.String }),
  run: ({ text }) => Effect.succeed(`${text.length}:${text}`)
})

const echoEnv = toolkitEnv("echo_env", () => Tool.toolkit([echo]))

/** One trajectory against the fake server, whose first reply carries `calls` as its `tool_calls`. */
const serverRun = (calls: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function*() {
    const server = yield* FakeOpenAi.make
    let n = 0
    server.state.toolCalls = () => (n++ === 0 ? calls : undefined)
    const lines = yield* Stream.make({}).pipe(
      Rollout.run(Rollout.make({ envs: [echoEnv], numGenerations: 1, maxTurns: 3, concurrency: 1 })),
      Stream.runCollect,
      Effect.map((items) => records(items).map(CompletionsLog.toLine)),
      Effect.provide(Layer.fresh(OpenAiCompat.layer({ baseUrl: server.baseUrl, model: "tiny", retries: 0 })))
    )
    return { line: lines[0], requests: server.state.requests }
  })

const live = (name: string, f: () => Effect.Effect<void, unknown, import("effect").Scope.Scope | import("effect/http").HttpClient.HttpClient>) =>
  it.live(name, () => Effect.scoped(f()).pipe(Effect.provide(NodeHttpClient.layerNodeHttpOptions({ keepAlive: true }))))

describe("server mode: odd tool_calls from the server", () => {
  live("arguments that are a JSON array, number or boolean are a malformed call answered by a tool message, not a failed reply", () =>
    Effect.gen(function*() {
      for (const args of [[1, 2], 42, true]) {
        const { line } = yield* serverRun([{ id: "a", function: { name: "echo", arguments: args } }])
        expect([line.error, line.reward, line.rollout_infos.step_infos[0]]).toEqual([null, 1, { errors: ["MalformedArguments"] }])
        expect(line.messages[2]).toMatchObject({
          role: "tool",
          tool_call_id: "a",
          content: `Error: MalformedArguments: the arguments must be a JSON object, got ${JSON.stringify(args)}`
        })
      }
    }))

  live("arguments nested 10,000 deep (JSON.stringify's stack overflows) are a malformed call, not a crash", () =>
    Effect.gen(function*() {
      for (const [open, close] of [["[", "]"], ["{\"a\":", "}"]]) {
        const server = yield* FakeOpenAi.make
        const deep = open.repeat(10_000) + "1" + close.repeat(10_000)
        server.state.faults.push({
          kind: "status",
          status: 200,
          body: `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"a","function":{"name":"echo","arguments":${deep}}}]},"finish_reason":"tool_calls"}]}`
        })
        const lines = yield* Stream.make({}).pipe(
          Rollout.run(Rollout.make({ envs: [echoEnv], numGenerations: 1, maxTurns: 3, concurrency: 1 })),
          Stream.runCollect,
          Effect.map((items) => records(items).map(CompletionsLog.toLine)),
          Effect.provide(Layer.fresh(OpenAiCompat.layer({ baseUrl: server.baseUrl, model: "tiny", retries: 0 })))
        )
        expect([lines[0].error, lines[0].reward, lines[0].rollout_infos.step_infos[0]]).toEqual([null, 1, { errors: ["MalformedArguments"] }])
      }
    }))

  live("an empty call id is replaced as a missing one is, so the tool message names its call", () =>
    Effect.gen(function*() {
      const { line, requests } = yield* serverRun([
        { id: "", function: { name: "echo", arguments: "{\"text\":\"x\"}" } },
        { id: "", function: { name: "echo", arguments: "{\"text\":\"y\"}" } }
      ])
      expect(line.error).toBe(null)
      const ids = line.messages[1].tool_calls?.map((c) => c.id)
      expect(ids).toEqual(["call_r0-g0_1_0", "call_r0-g0_1_1"])
      expect(line.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content])).toEqual([
        ["call_r0-g0_1_0", "1:x"],
        ["call_r0-g0_1_1", "1:y"]
      ])
      // the next request carries the ids the tool messages answer
      const sent = requests[1].body.messages as Array<{ role: string; tool_call_id?: string }>
      expect(sent.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(ids)
    }))
})

describe("openenv serve: an env's tools over POST /mcp, attacked", () => {
  /** Each step's view of the conversation: how many messages it was given. */
  const seen: Array<number> = []
  const slow = Tool.make({
    name: "slow",
    description: "Answers after 50 ms",
    parameters: Schema.Struct({}),
    run: () => Effect.as(Effect.sleep("50 millis"), "ok")
  })
  const slowEnv = Env.make({
    name: "slow_env",
    create: () => {
      const kit = Tool.toolkit([slow])
      return {
        reset: () => ({ observation: "go", info: {}, tools: kit.specs }),
        step: (messages: ReadonlyArray<Message.Message>) => {
          seen.push(messages.length)
          return Effect.map(kit.handle(messages.at(-1)!), (handled): Env.StepResult => ({
            observation: "",
            reward: 0,
            done: false,
            info: {},
            toolMessages: handled.messages
          }))
        }
      }
    }
  })
  const rpcAt = (url: string) => (method: string, params: Record<string, unknown>, id = 1) =>
    Effect.promise(async () => {
      const response = await fetch(`${url}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", method, params, id })
      })
      return (await response.json()) as { result?: { session_id?: string; content?: Array<{ text: string }> }; error?: unknown }
    })

  it.live("concurrent tools/call on one session step one after another, each on the conversation the one before left", () =>
    Effect.gen(function*() {
      seen.length = 0
      const server = yield* serve({ env: slowEnv, maxConcurrentEnvs: 2 })
      const rpc = rpcAt(server.url)
      const session = (yield* rpc("openenv/session/create", {})).result!.session_id!
      const answers = yield* Effect.all(
        Array.from({ length: 5 }, (_, i) => rpc("tools/call", { session_id: session, name: "slow", arguments: {} }, 10 + i)),
        { concurrency: "unbounded" }
      )
      expect(answers.map((a) => a.result?.content?.[0].text)).toEqual(["ok", "ok", "ok", "ok", "ok"])
      // opening (system-less user message) + reply, then each step adds its tool message and the next reply
      expect(seen).toEqual([2, 4, 6, 8, 10])
    }))

  it.live("tools/call with arguments that are not an object is refused with -32602, not run on {}", () =>
    Effect.gen(function*() {
      seen.length = 0
      const server = yield* serve({ env: slowEnv, maxConcurrentEnvs: 2 })
      const rpc = rpcAt(server.url)
      for (const args of [[1, 2], "x", 3, true]) {
        expect((yield* rpc("tools/call", { name: "slow", arguments: args })).error).toEqual({
          code: -32602,
          message: "Invalid params - 'arguments' must be an object",
          data: null
        })
      }
      expect(seen).toEqual([])
      // none, or null, is no arguments
      expect((yield* rpc("tools/call", { name: "slow", arguments: null })).result?.content?.[0].text).toBe("ok")
      expect((yield* rpc("tools/call", { name: "slow" })).result?.content?.[0].text).toBe("ok")
    }))
})

describe("Tool.toolkit: tools that misbehave", () => {
  const returning = (name: string, value: () => unknown) =>
    Tool.make({ name, description: "", parameters: Schema.Struct({}), run: () => Effect.sync(value) })
  const answer = (kit: Tool.Toolkit, name: string) =>
    Effect.map(kit.handle({ role: "assistant", content: "", tool_calls: [{ id: "c", type: "function", function: { name, arguments: "{}" } }] }), (h) => ({
      content: h.messages[0].content,
      errors: h.errors.map((e) => e.reason)
    }))

  it.effect("a 100 MB result is answered TooLarge (it would be the next prompt); maxResultLength sets the limit", () =>
    Effect.gen(function*() {
      const big = returning("big", () => "x".repeat(100_000_000))
      expect(yield* answer(Tool.toolkit([big]), "big")).toEqual({
        content: "Error: TooLarge: the result is 100000000 characters; the limit is 1048576",
        errors: ["TooLarge"]
      })
      const small = returning("small", () => "x".repeat(11))
      expect((yield* answer(Tool.toolkit([small], { maxResultLength: 10 }), "small")).errors).toEqual(["TooLarge"])
      expect((yield* answer(Tool.toolkit([small], { maxResultLength: 11 }), "small")).content).toBe("x".repeat(11))
    }))

  it.effect("a result that is not text is sent as JSON (NaN as null), or described when JSON cannot write it", () =>
    Effect.gen(function*() {
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const kit = Tool.toolkit([
        returning("nan", () => ({ a: Number.NaN, b: [Infinity] })),
        returning("bigint", () => 10n),
        returning("cyclic", () => cyclic)
      ])
      expect((yield* answer(kit, "nan")).content).toBe("{\"a\":null,\"b\":[null]}")
      expect((yield* answer(kit, "bigint")).content).toBe("10")
      expect(yield* answer(kit, "cyclic")).toEqual({ content: "[object Object]", errors: [] })
    }))
})

describe("check-env on a tool that hangs or answers too much", () => {
  const envOf = (tool: Tool.Tool) =>
    Env.define({
      name: `tool_${tool.spec.name}`,
      make: () =>
        Effect.sync((): Env.Env => {
          const kit = Tool.toolkit([tool], { timeout: "200 millis" })
          return {
            reset: () => Effect.succeed({ observation: "go", info: {}, tools: kit.specs }),
            step: (messages) => {
              const reply = messages.at(-1)!
              if (reply.tool_calls === undefined) return Effect.succeed({ observation: "", reward: 1, done: true, info: {} })
              return Effect.map(kit.handle(reply), (handled): Env.StepResult => ({
                observation: "",
                reward: 0,
                done: false,
                info: {},
                toolMessages: handled.messages
              }))
            }
          }
        })
    })

  it.live("a tool that never answers, or returns 2 MB, fails the round trip (the toolkit's Error tool message passed before)", () =>
    Effect.gen(function*() {
      const hang = Tool.make({ name: "hang", description: "", parameters: Schema.Struct({}), run: () => Effect.never })
      const flood = Tool.make({ name: "flood", description: "", parameters: Schema.Struct({}), run: () => "x".repeat(2_000_000) })
      const hung = yield* EnvCheck.check(envOf(hang), { seeds: 1, runs: 1 })
      expect(hung.failures.find((f) => f.check === "tools")?.message).toBe(
        "a call of hang with arguments valid by its schema ({}) was answered Error: Timeout: no answer within 200ms"
      )
      const flooded = yield* EnvCheck.check(envOf(flood), { seeds: 1, runs: 1 })
      expect(flooded.failures.find((f) => f.check === "tools")?.message).toBe(
        "a call of flood with arguments valid by its schema ({}) was answered Error: TooLarge: the result is 2000000 characters; the limit is 1048576"
      )
    }))
})

describe("code that interrupts itself (Effect.interrupt) fails its trajectory; the run does not take it for its stop", () => {
  const calling: Inference.Service = {
    name: "calling",
    chat: (request) =>
      Effect.succeed({
        text: "",
        finishReason: "tool_calls",
        toolCalls: [{ id: `c${request.turn}`, type: "function", function: { name: "quit", arguments: "{}" } }]
      })
  }
  const quitting = Tool.make({ name: "quit", description: "Interrupts itself", parameters: Schema.Struct({}), run: () => Effect.interrupt })
  const envWith = (step: "tool" | "step" | "sync-step") =>
    Env.make({
      name: `self_interrupt_${step}`,
      create: () => {
        const kit = Tool.toolkit([quitting])
        return {
          reset: () => ({ observation: "go", info: {}, tools: kit.specs }),
          step: (messages: ReadonlyArray<Message.Message>) =>
            step === "tool"
              ? Effect.map(kit.handle(messages.at(-1)!), (handled): Env.StepResult => ({
                observation: "",
                reward: 0,
                done: false,
                info: {},
                toolMessages: handled.messages
              }))
              : step === "step"
              ? Effect.andThen(Effect.promise(() => Promise.resolve()), Effect.interrupt)
              : Effect.interrupt
        }
      }
    })
  const run = (env: Env.Definition, policy: Inference.Service) =>
    Stream.make({}, {}).pipe(
      Rollout.run(Rollout.make({ envs: [env], numGenerations: 2, maxTurns: 3 })),
      Stream.runCollect,
      Effect.map((items) => records(items)),
      Effect.provideService(Inference.Inference, policy)
    )

  it.effect("a tool, an env's step (after a suspension or at once), a policy: each trajectory's error, every row recorded", () =>
    Effect.gen(function*() {
      for (const step of ["tool", "step", "sync-step"] as const) {
        const all = yield* run(envWith(step), calling)
        expect(all.length, step).toBe(4)
        for (const r of all) {
          expect(r.error?._tag, step).toBe("UnexpectedError")
          expect(r.error?.message, step).toContain("interrupted itself")
        }
      }
      const quitter: Inference.Service = { name: "quitter", chat: () => Effect.interrupt }
      const all = yield* run(envWith("tool"), quitter)
      expect(all.map((r) => r.error?._tag)).toEqual(["UnexpectedError", "UnexpectedError", "UnexpectedError", "UnexpectedError"])
    }))
})
