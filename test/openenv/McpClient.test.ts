/**
 * The client side of OpenEnv's MCP tools (issue 30, item 4): with `env_config.mcp_tools`, the
 * `openenv` env lists the server's tools (`tools/list` on the session, a `{"type":"mcp"}` frame on
 * its `/ws` connection) as the model's tools, and answers each tool call with a `tools/call` on the
 * same session, under the run's one limit per server. Played against this project's server on
 * loopback (an env with tools of its own), and against a raw WebSocket peer for what a server may
 * get wrong (JSON-RPC errors, `isError`, a reply with another id, a connection closed mid-call).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { WebSocketServer } from "ws"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Env from "../../src/Env.js"
import { Sudoku } from "../../src/envs/Sudoku.js"
import * as Inference from "../../src/Inference.js"
import type * as Message from "../../src/Message.js"
import * as OpenEnvScheduler from "../../src/openenv/OpenEnvScheduler.js"
import * as Rollout from "../../src/Rollout.js"
import * as Tool from "../../src/Tool.js"
import { records, rows, runConfig } from "../helpers.js"
import { serve, settled } from "./helpers.js"

/** What the served env's tools saw: calls at once (the most), and every call. */
const seen = { inFlight: 0, maxInFlight: 0, calls: 0 }

/**
 * `toolbox`: tools `add`, `slow` (counts the calls in flight), `hang` (never answers), `finish`
 * (ends the episode with reward 1). Each tool step is rewarded 0.25; a text reply ends it with 0.5.
 */
const Toolbox: Env.Definition = Env.define({
  name: "toolbox",
  make: () =>
    Effect.sync((): Env.Env => {
      let finished = false
      const kit = Tool.toolkit([
        Tool.make({
          name: "add",
          description: "a + b",
          parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
          run: ({ a, b }) => Effect.succeed(a + b)
        }),
        Tool.make({
          name: "slow",
          description: "Sleeps ms milliseconds",
          parameters: Schema.Struct({ ms: Schema.Number }),
          run: ({ ms }) =>
            Effect.gen(function*() {
              seen.calls++
              seen.inFlight++
              seen.maxInFlight = Math.max(seen.maxInFlight, seen.inFlight)
              yield* Effect.sleep(ms)
              seen.inFlight--
              return `slept ${ms}`
            })
        }),
        Tool.make({ name: "hang", description: "Never answers", parameters: Schema.Struct({}), run: () => Effect.never }),
        Tool.make({
          name: "finish",
          description: "Ends the task",
          parameters: Schema.Struct({}),
          run: () => Effect.sync(() => (finished = true, "finished"))
        })
      ], { timeout: "20 seconds" })
      return {
        reset: () => Effect.sync(() => ({ observation: "Use the tools.", info: {}, tools: kit.specs })),
        step: (messages) => {
          const reply = messages.at(-1)
          if (reply?.tool_calls === undefined) return Effect.succeed({ observation: "bye", reward: 0.5, done: true, info: {} })
          return Effect.map(kit.handle(reply), (handled): Env.StepResult => ({
            observation: "",
            reward: finished ? 1 : 0.25,
            done: finished,
            info: {},
            toolMessages: handled.messages
          }))
        }
      }
    })
})

const call = (id: string, name: string, args: unknown): Message.ToolCall => ({
  id,
  type: "function",
  function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) }
})

/** A policy that answers turn N (1-based) with `script(N)`'s calls (none: the text "done"); it records the tools it was offered. */
const scripted = (script: (turn: number) => ReadonlyArray<Message.ToolCall>, offered: Array<ReadonlyArray<string>> = []) =>
  Inference.layerFunction("script", (request) =>
    Effect.sync(() => {
      offered.push((request.tools ?? []).map((t) => t.name))
      const calls = script(request.turn)
      return calls.length === 0
        ? { text: "done", finishReason: "stop" as const }
        : { text: "", finishReason: "tool_calls" as const, toolCalls: calls }
    }))

const runRows = (
  dataset: ReadonlyArray<object>,
  options: Record<string, unknown> = {},
  run: { readonly numGenerations?: number; readonly scheduler?: OpenEnvScheduler.Options } = {}
) =>
  Effect.gen(function*() {
    const config = yield* runConfig({
      scheduler: OpenEnvScheduler.make(run.scheduler),
      schedulerOptions: options,
      numGenerations: run.numGenerations ?? 1,
      maxTurns: 6,
      concurrency: 64,
      seed: 1
    })
    return records(yield* Rollout.runAll(config, rows(dataset)))
  })

describe("openenv env: the server's MCP tools are the model's tools", () => {
  it.live("tools/list gives the tools (act and restart hidden); each call is a tools/call, answered by its tool message, rewarded", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 2 })
      const offered: Array<ReadonlyArray<string>> = []
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted((turn) =>
          turn === 1
            ? [call("c1", "add", { a: 2, b: 3 }), call("c2", "add", { a: 4, b: 5 })]
            : turn === 2
            ? [call("c3", "finish", {})]
            : [], offered))
      )
      expect(record.error).toBeUndefined()
      expect(offered[0]).toEqual(["add", "slow", "hang", "finish"])
      const line = CompletionsLog.toLine(record)
      const tools = line.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.name, m.content])
      // (the step that ends the episode is not followed by its messages, as for every env)
      expect(tools).toEqual([["c1", "add", "5"], ["c2", "add", "9"]])
      // one server step per call: 0.25 each for the adds, 1 for finish (which ends the episode)
      expect(line.rollout_infos.step_rewards).toEqual([0.5, 1])
      expect(line.end_reason).toBe("done")
      expect(line.rollout_infos.step_infos).toMatchObject([
        { tool_calls: 2, tool_errors: [], openenv_reward: 0.5 },
        { tool_calls: 1, tool_errors: [], openenv_reward: 1 }
      ])
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("without mcp_tools nothing changes: no tools/list, no tools offered (a text env)", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 1 })
      const offered: Array<ReadonlyArray<string>> = []
      const [record] = yield* runRows([{ env_config: { base_url: server.url } }]).pipe(
        Effect.provide(scripted(() => [], offered))
      )
      expect(offered).toEqual([[]])
      expect(CompletionsLog.toLine(record).reward).toBe(0.5)
    }))

  it.live("a text env served by openenv serve lists only act and restart: no tools are offered, its text path is unchanged", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 1 })
      const offered: Array<ReadonlyArray<string>> = []
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted(() => [], offered))
      )
      expect(record.error).toBeUndefined()
      expect(offered[0]).toEqual([])
    }))

  it.live("the shared limit holds for tool calls: 24 trajectories, limit 3, the server's tools never run more than 3 calls at once", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 3 })
      seen.inFlight = 0
      seen.maxInFlight = 0
      seen.calls = 0
      const dataset = Array.from({ length: 8 }, () => ({ env_config: { base_url: server.url, mcp_tools: true } }))
      const all = yield* runRows(dataset, { max_concurrent_envs: 3 }, { numGenerations: 3 }).pipe(
        Effect.provide(scripted((turn) =>
          turn <= 2 ? [call(`a${turn}`, "slow", { ms: 15 }), call(`b${turn}`, "slow", { ms: 15 })] : []
        ))
      )
      expect(all.filter((r) => r.error !== undefined).map((r) => r.error!.message)).toEqual([])
      expect(seen.calls).toBe(24 * 4)
      expect(seen.maxInFlight).toBe(3)
      expect(server.sessions.maxSeen).toBe(3)
      expect(yield* settled(server.sessions)).toBe(0)
    }))
})

describe("openenv env: bad tool calls", () => {
  it.live("unknown, hidden, malformed, not an object, too deep, too large: each answered by an Error tool message, not sent; the episode goes on", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 1 })
      const deep = "[".repeat(2000) + "]".repeat(2000)
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted((turn) =>
          turn === 1
            ? [
              call("u", "nope", {}),
              call("h", "act", { message: "x" }),
              call("m", "add", "{\"a\": 1,"),
              call("o", "add", "[1, 2]"),
              call("d", "add", `{"a": ${deep}}`),
              call("l", "add", JSON.stringify({ a: 1, b: 2, pad: "x".repeat(70_000) })),
              call("s", "add", { a: "one", b: 2 }),
              call("k", "add", { a: 1, b: 2 })
            ]
            : turn === 2
            ? [call("f", "finish", "")]
            : []
        ))
      )
      expect(record.error).toBeUndefined()
      const line = CompletionsLog.toLine(record)
      const answers = line.messages.filter((m) => m.role === "tool").map((m) => `${m.tool_call_id} ${m.content.slice(0, 120)}`)
      expect(answers).toEqual([
        "u Error: UnknownTool: no tool \"nope\"; the tools are add, slow, hang, finish",
        "h Error: UnknownTool: no tool \"act\"; the tools are add, slow, hang, finish",
        expect.stringMatching(/^m Error: MalformedArguments: the arguments are not JSON/),
        "o Error: MalformedArguments: the arguments must be a JSON object, got [1,2]",
        "d Error: MalformedArguments: the arguments nest deeper than 1000 levels",
        expect.stringMatching(/^l Error: TooLarge: the arguments are 700\d\d characters; the limit is 65536/),
        // sent: the server's own toolkit refuses it, in its tool message
        expect.stringMatching(/^s Error: InvalidArguments: a: /),
        "k 3"
      ])
      expect(line.rollout_infos.step_infos[0]).toMatchObject({
        tool_calls: 8,
        tool_errors: ["UnknownTool", "UnknownTool", "MalformedArguments", "MalformedArguments", "MalformedArguments", "TooLarge"]
      })
      // only the two calls sent were steps of the server (0.25 each); finish's is 1
      expect(line.rollout_infos.step_rewards).toEqual([0.5, 1])
    }))

  it.live("onBadCall fail: the first bad call ends the trajectory with an EnvError whose cause is the ToolError", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 1 })
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true } }], {}, {
        scheduler: { onBadCall: "fail" }
      }).pipe(Effect.provide(scripted(() => [call("u", "nope", {})])))
      expect(record.error?.message).toContain("tool nope (call u): UnknownTool")
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("a tool that hangs: tool_timeout_s ends the trajectory with a typed error (the session is closed), the run goes on", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 2, callTimeout: "1 second" })
      const start = Date.now()
      const all = yield* runRows(
        [{ env_config: { base_url: server.url, mcp_tools: true } }, { env_config: { base_url: server.url, mcp_tools: true } }],
        { tool_timeout_s: 0.3 }
      ).pipe(Effect.provide(scripted((turn) => turn === 1 ? [call("x", "add", { a: 1, b: 1 })] : [call("h", "hang", {})])))
      expect(Date.now() - start).toBeLessThan(5000)
      for (const record of all) {
        expect(record.error?.message).toContain("tool hang (call h): Timeout: no answer within 300ms (the session is closed)")
      }
      expect(yield* settled(server.sessions, 5000)).toBe(0)
    }))

  it.live("calls after done are answered here, not sent", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 1 })
      seen.calls = 0
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted(() => [call("f", "finish", {}), call("s", "slow", { ms: 1 })]))
      )
      const line = CompletionsLog.toLine(record)
      expect(line.rollout_infos.step_infos).toMatchObject([{ tool_calls: 2, tool_errors: ["Failed"], openenv_reward: 1 }])
      expect(seen.calls).toBe(0)
      expect([line.reward, line.end_reason]).toEqual([1, "done"])
    }))
})

/**
 * A raw OpenEnv server on loopback: answers `reset`, and each MCP request with `answer(request)`
 * (a JSON-RPC response without its id; "close" to drop the connection, "silent", or other text: the
 * `result`'s JSON text as it is).
 */
const rawServer = (
  answer: (rpc: { readonly method: string; readonly params: any }, text: string) => object | string,
  step?: (data: any) => string
) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ readonly url: string; readonly server: WebSocketServer }>((resolve) => {
        const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
        server.on("connection", (ws) => {
          ws.on("message", (data) => {
            const frame = JSON.parse(String(data))
            if (frame.type === "reset") {
              ws.send(JSON.stringify({ type: "observation", data: { observation: { prompt: frame.data?.mode ?? "go" }, reward: 0, done: false } }))
            } else if (frame.type === "close") {
              ws.close()
            } else if (frame.type === "mcp") {
              const out = answer(frame.data, String(data))
              if (out === "close") ws.terminate()
              else if (typeof out === "string" && out !== "silent") {
                ws.send(`{"type":"mcp","data":{"jsonrpc":"2.0","id":${frame.data.id},"result":${out}}}`)
              } else if (typeof out !== "string") {
                ws.send(JSON.stringify({ type: "mcp", data: { jsonrpc: "2.0", id: frame.data.id, ...out } }))
              }
            } else if (step !== undefined) {
              ws.send(step(frame.data))
            } else {
              ws.send(JSON.stringify({ type: "observation", data: { observation: { prompt: "bye" }, reward: 0.5, done: true } }))
            }
          })
        })
        server.on("listening", () => resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server }))
      })
    ),
    ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
  )

const TOOLS = { result: { tools: [{ name: "echo", description: null, input_schema: { type: "object", properties: {} } }, { name: "echo" }] } }

describe("openenv env: what a server may answer", () => {
  it.live("JSON-RPC errors and isError results are Error tool messages; a snake_case input_schema is read", () =>
    Effect.gen(function*() {
      const { url } = yield* rawServer((rpc) => {
        if (rpc.method === "tools/list") return TOOLS
        const mode = rpc.params.arguments.mode
        if (mode === "rpc") return { error: { code: -32603, message: "Unknown tool: 'echo'", data: null } }
        if (mode === "params") return { error: { code: -32602, message: "Tool not found: echo", data: null } }
        if (mode === "isError") return { result: { content: [{ type: "text", text: "it broke" }], is_error: true } }
        if (mode === "camel") return { result: { content: [{ type: "text", text: "no" }], isError: true } }
        if (mode === "raw") return { result: "plain" }
        return { result: { content: [{ type: "text", text: "a" }, { type: "image", data: "xx" }], is_error: false } }
      })
      const offered: Array<ReadonlyArray<string>> = []
      const [record] = yield* runRows([{ env_config: { base_url: url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted((turn) =>
          turn === 1
            ? ["rpc", "params", "isError", "camel", "raw", "ok"].map((mode) => call(mode, "echo", { mode }))
            : [], offered))
      )
      expect(record.error).toBeUndefined()
      expect(offered[0]).toEqual(["echo"])
      const line = CompletionsLog.toLine(record)
      expect(line.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual([
        "Error: Failed: Unknown tool: 'echo' (JSON-RPC error -32603)",
        "Error: UnknownTool: Tool not found: echo (JSON-RPC error -32602)",
        "Error: Failed: it broke",
        "Error: Failed: no",
        "plain",
        "a\n{\"type\":\"image\",\"data\":\"xx\"}"
      ])
      // no step result from this server: no reward from the calls
      expect(line.rollout_infos.step_rewards).toEqual([0, 0.5])
    }))

  it.live("odd results: null, no content, 2 MB of text, a part nested 100,000 deep, a big integer in the arguments: tool messages, no crash", () =>
    Effect.gen(function*() {
      const deep = "[".repeat(100_000) + "1" + "]".repeat(100_000)
      const sent: Array<string> = []
      const { url } = yield* rawServer((rpc, text) => {
        if (rpc.method === "tools/list") return TOOLS
        const mode = rpc.params.arguments.mode
        sent.push(text)
        if (mode === "null") return { result: null }
        if (mode === "empty") return { result: { content: [], structured_content: { n: 1 } } }
        if (mode === "big") return { result: { content: [{ type: "text", text: "y".repeat(2_000_000) }] } }
        return `{"content":[{"type":"deep","value":${deep}}]}`
      })
      const [record] = yield* runRows([{ env_config: { base_url: url, mcp_tools: true } }]).pipe(
        Effect.provide(scripted((turn) =>
          turn === 1
            ? [
              ...["null", "empty", "big", "deep"].map((mode) => call(mode, "echo", { mode })),
              call("n", "echo", "{\"mode\": \"null\", \"id\": 123456789012345678901234567890}")
            ]
            : []
        ))
      )
      expect(record.error).toBeUndefined()
      const contents = CompletionsLog.toLine(record).messages.filter((m) => m.role === "tool").map((m) => m.content)
      expect(contents.slice(0, 2)).toEqual(["null", "{\"n\":1}"])
      expect(contents[2].length).toBe(2_000_000)
      expect(contents[3]).toBe("(an object nested deeper than 1000 levels)")
      // the model's long integer reaches the server as it wrote it
      expect(sent.at(-1)).toContain("\"arguments\":{\"mode\":\"null\",\"id\":123456789012345678901234567890}")
    }))

  it.live("a server killed mid-call, a reply with another id, no answer: typed errors, never a hang", () =>
    Effect.gen(function*() {
      const { url } = yield* rawServer((rpc) => {
        if (rpc.method === "tools/list") return TOOLS
        const mode = rpc.params.arguments.mode
        if (mode === "close") return "close"
        if (mode === "silent") return "silent"
        return { id: 999, result: "late" }
      })
      const all = yield* runRows(
        ["close", "wrongid", "silent"].map((mode) => ({ env_config: { base_url: url, mcp_tools: true, reset_kwargs: { mode } } })),
        { tool_timeout_s: 0.5 }
      ).pipe(
        Effect.provide(Inference.layerFunction("script", (request) =>
          Effect.succeed({
            text: "",
            finishReason: "tool_calls" as const,
            toolCalls: [call("c", "echo", { mode: JSON.parse(request.messages.find((m) => m.role === "user")!.content).prompt })]
          })))
      )
      const messages = all.map((r) => r.error?.message ?? "no error")
      expect(messages[0]).toMatch(/tool echo \(call c\): Failed: .*ConnectionLost.*\(the session is closed\)/)
      expect(messages[1]).toMatch(/tool echo \(call c\): Failed: .*MalformedFrame: expected mcp \(a JSON-RPC response with id 2\).*\(the session is closed\)/)
      expect(messages[2]).toContain("tool echo (call c): Timeout: no answer within 500ms (the session is closed)")
    }))

  it.live("mcp_tools against a server that has no MCP: the reset fails, naming env_config.mcp_tools", () =>
    Effect.gen(function*() {
      const { url } = yield* rawServer(() => ({ error: { code: -32603, message: "Environment does not support MCP", data: null } }))
      const [record] = yield* runRows([{ env_config: { base_url: url, mcp_tools: true } }]).pipe(Effect.provide(scripted(() => [])))
      expect(record.error?.message).toContain(
        "env_config.mcp_tools: tools/list: Environment does not support MCP (JSON-RPC error -32603)"
      )
      const bad = yield* rawServer(() => ({ result: { tools: [{ name: 7 }] } }))
      const [other] = yield* runRows([{ env_config: { base_url: bad.url, mcp_tools: true } }]).pipe(Effect.provide(scripted(() => [])))
      expect(other.error?.message).toContain("tools/list: tools[0].name is not a non-empty string")
      const wrong = yield* runRows([{ env_config: { base_url: url, mcp_tools: "yes" } }]).pipe(Effect.provide(scripted(() => [])))
      expect(wrong[0].error?.message).toContain("env_config.mcp_tools")
    }))
})

/**
 * The step frames of OpenEnv's `MCPToolClient` as the Python echo env answered them
 * (test/fixtures/openenv/echo-ws-errors.txt: openenv-core 0.2.3, fastmcp 4.0.10): each recorded
 * request's data and its reply frame.
 */
const recorded = (): Array<{ readonly data: unknown; readonly reply: string }> => {
  const lines = fs.readFileSync(path.resolve(import.meta.dirname, "../fixtures/openenv/echo-ws-errors.txt"), "utf8").split("\n")
  const out: Array<{ data: unknown; reply: string }> = []
  for (let i = 0; i + 1 < lines.length; i++) {
    if (!lines[i].startsWith(">> {") || !lines[i + 1].startsWith("<< ")) continue
    const frame = JSON.parse(lines[i].slice(3))
    if (frame.type === "step" && frame.data?.type !== undefined) out.push({ data: frame.data, reply: lines[i + 1].slice(3) })
  }
  return out
}

describe("openenv env: mcp_via step, the step actions of OpenEnv's MCPToolClient", () => {
  it.live("list_tools and call_tool steps, answered with the Python echo env's recorded frames; its error_type names the reason", () =>
    Effect.gen(function*() {
      const frames = recorded()
      expect(frames.length).toBe(4)
      const seenSteps: Array<string> = []
      const { url } = yield* rawServer(() => "silent", (data) => {
        seenSteps.push(JSON.stringify(data))
        const match = frames.find((f) => JSON.stringify(f.data) === JSON.stringify(data))
        if (match !== undefined) return match.reply
        if (data.type === "call_tool") {
          const error = data.arguments.message === "slow"
            ? { error_type: "timeout", message: "Tool 'echo_message' timed out after 30 seconds" }
            : { error_type: "invalid_args", message: "missing message" }
          return JSON.stringify({ type: "observation", data: { observation: { tool_name: data.tool_name, result: null, error }, reward: 0.5, done: false } })
        }
        return JSON.stringify({ type: "error", data: { message: "Invalid message", code: "VALIDATION_ERROR", errors: [] } })
      })
      const offered: Array<ReadonlyArray<string>> = []
      const [record] = yield* runRows([{ env_config: { base_url: url, mcp_tools: true, mcp_via: "step" } }]).pipe(
        Effect.provide(scripted((turn) =>
          turn === 1
            ? [
              call("a", "echo_message", { message: "hello" }),
              call("b", "echo_with_length", { message: "Test" }),
              call("c", "echo_message", {}),
              call("d", "echo_message", { message: "slow" })
            ]
            : [], offered))
      )
      expect(offered[0]).toEqual(["echo_message", "echo_with_length"])
      expect(seenSteps[0]).toBe("{\"type\":\"list_tools\"}")
      expect(seenSteps[1]).toBe("{\"type\":\"call_tool\",\"tool_name\":\"echo_message\",\"arguments\":{\"message\":\"hello\"}}")
      const line = CompletionsLog.toLine(record)
      expect(line.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual([
        "hello",
        "{\"message\":\"Test\",\"length\":4}",
        "Error: InvalidArguments: missing message (invalid_args)",
        "Error: Timeout: Tool 'echo_message' timed out after 30 seconds (timeout)"
      ])
      // the step's own reward counts (null in the recorded frames, 0.5 in the two made here)
      expect(line.rollout_infos.step_infos[0]).toMatchObject({ tool_calls: 4, openenv_reward: 1 })
      // then the text reply: a text step (here refused by the server: a typed error)
      expect(record.error?.message).toContain("ValidationError")
    }))

  it.live("against openenv serve (which takes no call_tool action), mcp_via step fails the reset with the server's validation error", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Toolbox, maxConcurrentEnvs: 1 })
      const [record] = yield* runRows([{ env_config: { base_url: server.url, mcp_tools: true, mcp_via: "step" } }]).pipe(
        Effect.provide(scripted(() => []))
      )
      expect(record.error?.message).toMatch(/reset failed: openenv .*: ValidationError/)
    }))
})
