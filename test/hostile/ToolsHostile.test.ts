/**
 * Attacks on the tool path (issue 30, "attack it"): huge arguments, a flood of calls, calls that are
 * not calls (a backend's bad `toolCalls`, repeated ids), a server's malformed `tool_calls`, and a
 * tool that hangs in a whole run. Each fails at most its own trajectory, with a typed error, or is
 * answered by a tool message; the run goes on.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Inference from "../../src/Inference.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import type * as Message from "../../src/Message.js"
import * as Rollout from "../../src/Rollout.js"
import * as Tool from "../../src/Tool.js"
import { records, toolkitEnv } from "../helpers.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"

const echo = Tool.make({
  name: "echo",
  description: "Echoes a text",
  parameters: Schema.Struct({ text: Schema.String }),
  run: ({ text }) => Effect.succeed(text.length)
})
const sleepy = Tool.make({
  name: "sleepy",
  description: "Never answers",
  parameters: Schema.Struct({}),
  run: () => Effect.never
})

const toolEnv = toolkitEnv("tool_env", () => Tool.toolkit([echo, sleepy], { timeout: "50 millis" }))

const call = (id: string, name: string, args: string): Message.ToolCall => ({ id, type: "function", function: { name, arguments: args } })

/** Row 0 gets `first` as its first reply, the others a good call; every second turn answers. */
const run = (first: (turn: number) => Partial<Inference.Completion>, rows = 2) =>
  Stream.fromIterable(Array.from({ length: rows }, () => ({}))).pipe(
    Rollout.run(Rollout.make({ envs: [toolEnv], numGenerations: 1, maxTurns: 3 })),
    Stream.runCollect,
    Effect.map((items) => records(items).map(CompletionsLog.toLine)),
    Effect.provide(Inference.layerFunction("hostile", (request) =>
      Effect.succeed({
        text: "",
        finishReason: "stop" as const,
        ...(request.turn === 1
          ? request.trajectoryId === "r0-g0" ? first(request.turn) : { toolCalls: [call("ok", "echo", "{\"text\":\"hi\"}")] }
          : {})
      } as Inference.Completion)))
  )

describe("tools under attack", () => {
  it.live("a 4 MB arguments text is answered TooLarge at once; a 1,000-call reply is answered call by call", () =>
    Effect.gen(function*() {
      const huge = JSON.stringify({ text: "x".repeat(4_000_000) })
      const [big] = yield* run(() => ({ toolCalls: [call("big", "echo", huge)] }), 1)
      expect(big.rollout_infos.step_infos[0]).toEqual({ errors: ["TooLarge"] })
      expect(big.reward).toBe(1)
      const many = Array.from({ length: 1000 }, (_, i) => call(`c${i}`, "echo", `{"text":"${i}"}`))
      const [flood] = yield* run(() => ({ toolCalls: many }), 1)
      expect(flood.messages.filter((m) => m.role === "tool").length).toBe(1000)
      expect(flood.messages[2 + 999]).toMatchObject({ role: "tool", tool_call_id: "c999", content: "3" })
    }))

  it.live("a tool that hangs is answered Timeout and the trajectory goes on", () =>
    Effect.gen(function*() {
      const [line] = yield* run(() => ({ toolCalls: [call("s", "sleepy", "{}")] }), 1)
      expect(line.rollout_infos.step_infos[0]).toEqual({ errors: ["Timeout"] })
      expect(line.end_reason).toBe("done")
    }))

  it.live("a backend's calls that are not calls, or repeat an id, fail that trajectory with BadResponse; the others run", () =>
    Effect.gen(function*() {
      for (
        const [bad, detail] of [
          ["not a list", "the completion's toolCalls must be a list, got \"not a list\""],
          [[{ id: 1 }], "toolCalls[0] must have a string id, function.name and function.arguments: {\"id\":1}"],
          [[call("a", "echo", "{}"), call("a", "echo", "{}")], "toolCalls[1]: the id \"a\" is used twice in the reply"]
        ] as const
      ) {
        const lines = yield* run(() => ({ toolCalls: bad as unknown as ReadonlyArray<Message.ToolCall> }))
        expect(lines[0].error).toMatchObject({ _tag: "InferenceError", reason: "BadResponse", detail })
        expect([lines[1].error, lines[1].reward]).toEqual([null, 1])
      }
    }))

  it.live("a server's malformed tool_calls fail the call with BadResponse (the run goes on)", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      let n = 0
      server.state.toolCalls = () => (n++ === 0 ? [{ id: "x", function: { arguments: "{}" } }] : undefined)
      const lines = yield* Stream.make({}, {}).pipe(
        Rollout.run(Rollout.make({ envs: [toolEnv], numGenerations: 1, maxTurns: 2, concurrency: 1 })),
        Stream.runCollect,
        Effect.map((items) => records(items).map(CompletionsLog.toLine)),
        Effect.provide(Layer.fresh(OpenAiCompat.layer({ baseUrl: server.baseUrl, model: "tiny", retries: 0 })))
      )
      expect(lines.map((l) => l.error?._tag ?? null)).toEqual(["InferenceError", null])
      expect(lines[0].error).toMatchObject({ reason: "BadResponse" })
    }).pipe(Effect.scoped, Effect.provide(NodeHttpClient.layerNodeHttpOptions({ keepAlive: true }))))
})
