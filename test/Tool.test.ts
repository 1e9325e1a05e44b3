/**
 * Tools (issue 30, item 1): Effect-native tools (a Schema for the arguments, an Effect for the
 * call), the toolkit that answers an assistant message's calls, and the env contract's tool path
 * through a run: tools offered at reset reach the model, its tool calls reach `step` on the
 * assistant message, the env's tool messages are appended, and the log line carries both in
 * OpenAI's format.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Schema, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import * as Message from "../src/Message.js"
import * as Rollout from "../src/Rollout.js"
import * as Summary from "../src/Summary.js"
import { specProblem } from "../src/check/internal/tools.js"
import * as Tool from "../src/Tool.js"
import { records } from "./helpers.js"

class Boom extends Schema.TaggedError<Boom>()("Boom", { why: Schema.String }) {}

const add = Tool.make({
  name: "add",
  description: "Adds two integers",
  parameters: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  run: ({ a, b }) => Effect.succeed(a + b)
})
const fails = Tool.make({
  name: "fails",
  description: "Always fails",
  parameters: Schema.Struct({}),
  run: () => Effect.fail(new Boom({ why: "no luck" }))
})
const throws = Tool.make({
  name: "throws",
  description: "Throws",
  parameters: Schema.Struct({}),
  run: (): number => {
    throw new Error("kaput")
  }
})
const hangs = Tool.make({
  name: "hangs",
  description: "Never answers",
  parameters: Schema.Struct({}),
  run: () => Effect.never
})
const lookup = Tool.make({
  name: "lookup",
  description: "Looks a key up",
  parameters: Schema.Struct({ key: Schema.String }),
  run: ({ key }) => Promise.resolve({ key, value: key.length })
})

const call = (id: string, name: string, args: string): Message.ToolCall => ({
  id,
  type: "function",
  function: { name, arguments: args }
})

const kit = Tool.toolkit([add, fails, throws, hangs, lookup], { timeout: "1 second", maxArgumentsLength: 100 })

describe("Tool.make", () => {
  it("the spec's parameters are the Schema's JSON Schema", () => {
    expect(add.spec).toEqual({
      name: "add",
      description: "Adds two integers",
      parameters: {
        type: "object",
        properties: {
          a: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 },
          b: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }
        },
        required: ["a", "b"],
        additionalProperties: true
      }
    })
    expect(Tool.toOpenAi(add.spec)).toEqual({ type: "function", function: add.spec })
  })

  it("a tool without arguments (Schema.Struct({})) has an object of no properties as parameters, as OpenAI and check-env need", () => {
    // Effect writes an empty struct { not: { type: "null" } }; kv_store's list_keys and commit failed check-env on it
    expect(fails.spec.parameters).toEqual({ type: "object", properties: {} })
    expect(specProblem([fails.spec])).toBeUndefined()
  })
})

describe("Tool.toolkit", () => {
  it.effect("answers each call in order with a tool message; non-text results are JSON", () =>
    Effect.gen(function*() {
      const handled = yield* kit.handle(
        Message.assistant("", [call("c1", "add", "{\"a\": 2, \"b\": 40}"), call("c2", "lookup", "{\"key\":\"abc\"}")])
      )
      expect(handled.errors).toEqual([])
      expect(handled.messages).toEqual([
        { role: "tool", content: "42", tool_call_id: "c1", name: "add" },
        { role: "tool", content: "{\"key\":\"abc\",\"value\":3}", tool_call_id: "c2", name: "lookup" }
      ])
      expect((yield* kit.handle(Message.assistant("no calls"))).messages).toEqual([])
    }))

  it.effect("a bad call becomes a tool message saying what is wrong, never a crash", () =>
    Effect.gen(function*() {
      const handled = yield* kit.handle(Message.assistant("", [
        call("u", "nope", "{}"),
        call("m", "add", "{\"a\": 1,"),
        call("n", "add", "[1, 2]"),
        call("i", "add", "{\"a\": 1, \"b\": 1.5}"),
        call("l", "lookup", JSON.stringify({ key: "x".repeat(200) })),
        call("f", "fails", "{}"),
        call("t", "throws", ""),
        call("ok", "add", "{\"a\": 1, \"b\": 2}")
      ]))
      expect(handled.errors.map((e) => [e.toolCallId, e.reason])).toEqual([
        ["u", "UnknownTool"],
        ["m", "MalformedArguments"],
        ["n", "MalformedArguments"],
        ["i", "InvalidArguments"],
        ["l", "TooLarge"],
        ["f", "Failed"],
        ["t", "Failed"]
      ])
      const contents = handled.messages.map((m) => m.content)
      expect(contents[0]).toBe("Error: UnknownTool: no tool \"nope\"; the tools are add, fails, throws, hangs, lookup")
      expect(contents[1]).toMatch(/^Error: MalformedArguments: the arguments are not JSON/)
      expect(contents[2]).toBe("Error: MalformedArguments: the arguments must be a JSON object, got [1,2]")
      expect(contents[3]).toMatch(/^Error: InvalidArguments: b: /)
      expect(contents[4]).toBe("Error: TooLarge: the arguments are 210 characters; the limit is 100")
      expect(contents[5]).toBe("Error: Failed: Boom {\"_tag\":\"Boom\",\"why\":\"no luck\"}")
      expect(contents[6]).toBe("Error: Failed: kaput")
      expect(handled.messages[7]).toEqual({ role: "tool", content: "3", tool_call_id: "ok", name: "add" })
      expect(handled.messages.map((m) => m.tool_call_id)).toEqual(["u", "m", "n", "i", "l", "f", "t", "ok"])
    }))

  it.effect("a tool that hangs is answered after the timeout (TestClock)", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(kit.handle(Message.assistant("", [call("h", "hangs", "{}")])))
      yield* TestClock.adjust("1001 millis")
      const handled = yield* Fiber.join(fiber)
      expect(handled.errors.map((e) => e.reason)).toEqual(["Timeout"])
      expect(handled.messages[0].content).toBe("Error: Timeout: no answer within 1s")
    }))

  it.effect("onBadCall: fail gives the typed ToolError instead", () =>
    Effect.gen(function*() {
      const strict = Tool.toolkit([add], { onBadCall: "fail" })
      const exit = yield* Effect.exit(strict.handle(Message.assistant("", [call("x", "add", "{\"a\": \"1\", \"b\": 2}")])))
      expect(exit).toEqual(Exit.fail(expect.any(Tool.ToolError)))
      if (Exit.isFailure(exit)) {
        const error = exit.cause.reasons[0]
        expect(error._tag === "Fail" && error.error.reason).toBe("InvalidArguments")
      }
    }))
})

// ---- the env contract, through a run --------------------------------------------------------------

/** An env that offers `add` from reset; answers calls with tool messages, and a final answer with a reward. */
const adder = Env.make({
  name: "adder",
  create: () => {
    const tools = Tool.toolkit([add])
    return {
      reset: () => ({ observation: "What is 2 + 40? Use the tool.", info: {}, tools: tools.specs }),
      step: (messages: ReadonlyArray<Message.Message>) => {
        const reply = messages.at(-1)!
        if (reply.tool_calls !== undefined) {
          return Effect.map(tools.handle(reply), (handled) => ({
            observation: "",
            reward: 0,
            done: false,
            info: { tool_errors: handled.errors.length },
            toolMessages: handled.messages
          }))
        }
        return { observation: "", reward: reply.content.trim() === "42" ? 1 : 0, done: true, info: {} }
      }
    }
  }
})

const seen: Array<Inference.ChatRequest> = []
/** Calls `add` badly, then well, then answers. */
const toolPolicy = Inference.layerFunction("tool-policy", (request) => {
  seen.push(request)
  switch (request.turn) {
    case 1:
      return Effect.succeed({ text: "", finishReason: "tool_calls", toolCalls: [call("call_1", "add", "{\"a\": 2}")] })
    case 2:
      return Effect.succeed({
        text: "Let me add.",
        finishReason: "tool_calls",
        toolCalls: [call("call_2", "add", "{\"a\": 2, \"b\": 40}")]
      })
    default:
      return Effect.succeed({ text: "42", finishReason: "stop" })
  }
})

describe("the env contract with tools", () => {
  it.live("tools reach the model, calls reach step, tool messages are appended, the log line carries both", () =>
    Effect.gen(function*() {
      seen.length = 0
      const items = yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [adder], numGenerations: 1, maxTurns: 5 })),
        Stream.runCollect,
        Effect.provide(toolPolicy)
      )
      const [record] = records(items)
      expect(record.error).toBeUndefined()
      expect(seen.map((r) => r.tools?.map((t) => t.name))).toEqual([["add"], ["add"], ["add"]])
      expect(seen.map((r) => r.toolChoice)).toEqual(["auto", "auto", "auto"])
      const line = CompletionsLog.toLine(record)
      expect(line.reward).toBe(1)
      expect(line.end_reason).toBe("done")
      expect(line.finish_reasons).toEqual(["tool_calls", "tool_calls", "stop"])
      expect(line.rollout_infos.step_infos).toEqual([{ tool_errors: 1 }, { tool_errors: 0 }, {}])
      expect(line.messages).toEqual([
        { role: "user", content: "What is 2 + 40? Use the tool." },
        { role: "assistant", content: "", tool_calls: [call("call_1", "add", "{\"a\": 2}")] },
        { role: "tool", content: "Error: InvalidArguments: b: is missing", tool_call_id: "call_1", name: "add" },
        { role: "assistant", content: "Let me add.", tool_calls: [call("call_2", "add", "{\"a\": 2, \"b\": 40}")] },
        { role: "tool", content: "42", tool_call_id: "call_2", name: "add" },
        { role: "assistant", content: "42" }
      ])
      // the summary counts the calls and the one answered with an error
      const summary = new Summary.Accumulator()
      for (const item of items) summary.add(item)
      expect(summary.summary(1).tools).toEqual({ calls: 2, errors: 1, malformed: 0 })
      // as a cluster runner sends its part: the counts survive JSON and merge
      const merged = new Summary.Accumulator()
      merged.merge(JSON.parse(JSON.stringify(summary)))
      expect(merged.summary(1).tools).toEqual({ calls: 2, errors: 1, malformed: 0 })
      // the written line decodes with the line's schema, messages included
      const text = CompletionsLog.encodeLine(record)
      const decoded = Schema.decodeUnknownSync(CompletionsLog.CompletionLine)(JSON.parse(text))
      expect(decoded.messages[2].tool_call_id).toBe("call_1")
    }))

  it.live("a text env's requests carry no tool fields, and its conversation has none", () =>
    Effect.gen(function*() {
      const requests: Array<Inference.ChatRequest> = []
      const text = Env.make({
        name: "text",
        create: () => ({
          reset: () => ({ observation: "hi", info: {} }),
          step: () => ({ observation: "", reward: 0, done: false, info: {} })
        })
      })
      const items = yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [text], numGenerations: 1, maxTurns: 2 })),
        Stream.runCollect,
        Effect.provide(Inference.layerFunction("p", (request) => {
          requests.push(request)
          return Effect.succeed({ text: "ok", finishReason: "stop" })
        }))
      )
      expect(requests.map((r) => "tools" in r || "toolChoice" in r)).toEqual([false, false])
      const summary = new Summary.Accumulator()
      for (const item of items) summary.add(item)
      expect("tools" in summary.summary(1)).toBe(false)
      // an empty observation without tool messages is still a user message, as before
      expect(records(items)[0].result.messages).toEqual([
        { role: "user", content: "hi" },
        { role: "assistant", content: "ok" },
        { role: "user", content: "" },
        { role: "assistant", content: "ok" }
      ])
    }))

  it.live("tool messages that answer no call of the reply fail the step with an EnvError naming the field", () =>
    Effect.gen(function*() {
      const liar = Env.make({
        name: "liar",
        create: () => ({
          reset: () => ({ observation: "go", info: {}, tools: [add.spec] }),
          step: () => ({
            observation: "",
            reward: 0,
            done: false,
            info: {},
            toolMessages: [Message.tool("call_9", "add", "1")]
          })
        })
      })
      const items = yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [liar], numGenerations: 1, maxTurns: 3 })),
        Stream.runCollect,
        Effect.provide(toolPolicy)
      )
      const error = records(items)[0].error
      expect(error?._tag).toBe("EnvError")
      expect(error?.message).toBe(
        "env liar: step failed: toolMessages[0].tool_call_id \"call_9\" answers no call of the reply (its calls: call_1)"
      )
    }))

  it.live("bad tool specs from reset fail the reset with an EnvError", () =>
    Effect.gen(function*() {
      const bad = Env.make({
        name: "bad_tools",
        create: () => ({
          reset: () => ({ observation: "go", info: {}, tools: [add.spec, add.spec] }),
          step: () => ({ observation: "", reward: 0, done: true, info: {} })
        })
      })
      const items = yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [bad], numGenerations: 1 })),
        Stream.runCollect,
        Effect.provide(toolPolicy)
      )
      expect(records(items)[0].error?.message).toBe("env bad_tools: reset failed: tools[1].name \"add\" is offered twice")
    }))
})
