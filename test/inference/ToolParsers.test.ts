/**
 * Tool-call parsers (issue 30, item 2): their results equal vLLM's on the vectors of vLLM's own
 * tests (test/fixtures/tool_parsers/vllm_vectors.json, written by generate_vectors.py from the test
 * files and commits it names), each checked as strictly as vLLM's test checks it; a malformed call
 * is kept as text with a `malformed_tool_call` mark, in the completion and in the log line.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Env from "../../src/Env.js"
import * as Inference from "../../src/Inference.js"
import * as ToolParsers from "../../src/inference/ToolParsers.js"
import type * as Message from "../../src/Message.js"
import * as Rollout from "../../src/Rollout.js"
import * as Summary from "../../src/Summary.js"
import { records } from "../helpers.js"
import { cli, tmp as cliTmp } from "./cli.js"
import * as FakeOpenAi from "./FakeOpenAi.js"
import * as Llama31 from "./llama31.js"
import * as Qwen3 from "./qwen3.js"

interface ExpectedCall {
  readonly name: string
  readonly arguments?: string
  readonly arguments_json?: unknown
  readonly arguments_contains?: ReadonlyArray<string>
  readonly arguments_path?: readonly [ReadonlyArray<string>, unknown]
  readonly arguments_path_2?: readonly [ReadonlyArray<string>, unknown]
}

interface Vector {
  readonly parser: ToolParsers.Name
  readonly source: string
  readonly commit: string
  readonly test: string
  readonly model_output: string
  readonly tools_called: boolean
  readonly calls: ReadonlyArray<ExpectedCall>
  /** What vLLM's non-streaming result's `content` is (absent: the test does not check it). */
  readonly content?: string | null
  /** What the streamed content adds up to ("" when none was streamed). */
  readonly content_streamed?: string
}

const fixture = JSON.parse(
  fs.readFileSync(path.join(import.meta.dirname, "../fixtures/tool_parsers/vllm_vectors.json"), "utf8")
) as { readonly vectors: ReadonlyArray<Vector> }

const at = (value: unknown, keys: ReadonlyArray<string>): unknown =>
  keys.reduce<unknown>((v, k) => (v as Record<string, unknown>)[k], value)

describe("tool parsers on vLLM's vectors", () => {
  it("the fixture names its sources and covers the three parsers", () => {
    const count = (p: string) => fixture.vectors.filter((v) => v.parser === p).length
    expect([count("hermes"), count("llama3_json"), count("mistral")]).toEqual([10, 14, 14])
    for (const v of fixture.vectors) {
      expect(v.source).toMatch(/^tests\/tool_parsers\/test_.*\.py$/)
      expect(v.commit).toMatch(/^[0-9a-f]{40}$/)
    }
  })

  for (const v of fixture.vectors) {
    it(`${v.parser}: ${v.test}`, () => {
      const parsed = ToolParsers.parse(v.parser, v.model_output)
      expect(parsed.toolCalls.length > 0).toBe(v.tools_called)
      expect(parsed.toolCalls.length).toBe(v.calls.length)
      v.calls.forEach((expected, i) => {
        const actual = parsed.toolCalls[i]
        expect(actual.type).toBe("function")
        expect(actual.function.name).toBe(expected.name)
        const args = actual.function.arguments
        if (expected.arguments !== undefined) expect(args).toBe(expected.arguments)
        if (expected.arguments_json !== undefined) expect(JSON.parse(args)).toEqual(expected.arguments_json)
        for (const part of expected.arguments_contains ?? []) expect(args).toContain(part)
        for (const check of [expected.arguments_path, expected.arguments_path_2]) {
          if (check !== undefined) expect(at(JSON.parse(args), check[0])).toEqual(check[1])
        }
      })
      if ("content" in v) expect(parsed.content).toBe(v.content)
      if (v.content_streamed !== undefined) expect(parsed.content ?? "").toBe(v.content_streamed)
      // vLLM keeps text it could not parse as the content; so do we, and mark it
      if (!v.tools_called && "content" in v) expect(parsed.content).toBe(v.model_output)
    })
  }
})

describe("malformed tool calls", () => {
  it("text with a call marker that does not parse is kept whole and marked, for each parser", () => {
    const cases: ReadonlyArray<readonly [ToolParsers.Name, string]> = [
      ["hermes", "I will call it. <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}\n</tool_call>"],
      ["llama3_json", "{\"name\": \"add\", \"parameters\": {\"a\": 1}"],
      ["mistral", "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1}}"],
      ["mistral", "[TOOL_CALLS]no arguments here"]
    ]
    for (const [parser, text] of cases) {
      const parsed = ToolParsers.parse(parser, text)
      expect(parsed.toolCalls).toEqual([])
      expect(parsed.content).toBe(text)
      expect(parsed.malformed).toBeTypeOf("string")
    }
    // plain text is not marked
    expect(ToolParsers.parse("llama3_json", "a set {1, 2}").malformed).toBeUndefined()
    expect(ToolParsers.parse("hermes", "no calls").malformed).toBeUndefined()
  })

  it("a call's numbers are re-written as Python's json.dumps writes what json.loads read (4.0 stays 4.0: it was 4)", () => {
    const args = "{\"a\":4.0,\"b\":1e-5,\"c\":12345678901234567890,\"d\":[2.50,-0.0,3]}"
    // python3 -c 'import json; print(json.dumps(json.loads(ARGS), ensure_ascii=False))' (Python 3.11)
    const python = "{\"a\": 4.0, \"b\": 1e-05, \"c\": 12345678901234567890, \"d\": [2.5, -0.0, 3]}"
    const texts: ReadonlyArray<readonly [ToolParsers.Name, string]> = [
      ["hermes", `<tool_call>\n{"name": "f", "arguments": ${args}}\n</tool_call>`],
      ["llama3_json", `{"name": "f", "parameters": ${args}}`],
      ["mistral", `[TOOL_CALLS] [{"name": "f", "arguments": ${args}}]`]
    ]
    for (const [parser, text] of texts) {
      const parsed = ToolParsers.parse(parser, text)
      expect(parsed.toolCalls.map((c) => c.function.arguments), parser).toEqual([python])
    }
  })

  it("pythonJson writes JSON as Python's json.dumps does", () => {
    expect(ToolParsers.pythonJson({ a: [1, 2.5, { b: null }], c: "é\"", d: {} , e: [] })).toBe(
      "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"é\\\"\", \"d\": {}, \"e\": []}"
    )
  })

  it("defaultFor picks the parser from the template", () => {
    expect(ToolParsers.defaultFor(undefined)).toBe("hermes")
    expect(ToolParsers.defaultFor("{{- '<tool_call>\\n' }}")).toBe("hermes")
    expect(ToolParsers.defaultFor("[TOOL_CALLS]")).toBe("mistral")
    expect(ToolParsers.defaultFor("{{- \"<|python_tag|>\" }}")).toBe("llama3_json")
  })
})

const call = (id: string, name: string, args: string): Message.ToolCall => ({ id, type: "function", function: { name, arguments: args } })

describe("ToolParsers.wrap in a run", () => {
  it.live("parses calls out of text replies for requests with tools; a malformed one is marked in the log line", () =>
    Effect.gen(function*() {
      const stepped: Array<Message.Message> = []
      const env = Env.make({
        name: "echo_tools",
        create: () => ({
          reset: () => ({
            observation: "go",
            info: {},
            tools: [{ name: "add", description: "adds", parameters: { type: "object" } }]
          }),
          step: (messages: ReadonlyArray<Message.Message>) => {
            const reply = messages.at(-1)!
            stepped.push(reply)
            return {
              observation: reply.tool_calls === undefined ? "no call" : "",
              reward: 0,
              done: false,
              info: {},
              toolMessages: reply.tool_calls?.map((c) => ({ role: "tool" as const, content: "3", tool_call_id: c.id }))
            }
          }
        })
      })
      const texts = [
        "Let me add.<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1</tool_call>",
        "3"
      ]
      const base: Inference.Service = {
        name: "text",
        chat: (request) => Effect.succeed({ text: texts[request.turn - 1], finishReason: "stop" })
      }
      const items = yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [env], numGenerations: 1, maxTurns: 3 })),
        Stream.runCollect,
        Effect.provideService(Inference.Inference, ToolParsers.wrap(base, "hermes"))
      )
      const line = CompletionsLog.toLine(records(items)[0])
      const summary = new Summary.Accumulator()
      for (const item of items) summary.add(item)
      expect(summary.summary(1).tools).toEqual({ calls: 1, errors: 0, malformed: 1 })
      expect(Summary.format(summary.summary(1))).toContain("tool calls     1 (0 answered with an error, 1 malformed kept as text)")
      expect(stepped[0]).toEqual({
        role: "assistant",
        content: "Let me add.",
        tool_calls: [call("call_r0-g0_1_0", "add", "{\"a\": 1, \"b\": 2}")]
      })
      expect(stepped[1]).toEqual({ role: "assistant", content: texts[1] })
      expect(line.finish_reasons).toEqual(["tool_calls", "stop", "stop"])
      expect(line.malformed_tool_call).toEqual([
        null,
        "<tool_call> 1 is not a JSON object with a name: {\"name\": \"add\", \"arguments\": {\"a\": 1",
        null
      ])
    }))

  it.effect("requests without tools pass through untouched", () =>
    Effect.gen(function*() {
      const text = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>"
      const wrapped = ToolParsers.wrap({ name: "t", chat: () => Effect.succeed({ text, finishReason: "stop" }) }, "hermes")
      const completion = yield* wrapped.chat({ messages: [], sampling: {}, trajectoryId: "x", turn: 1, seed: 0 })
      expect(completion).toEqual({ text, finishReason: "stop" })
    }))
})

// Issue 30: `--tool-parser` defaults to the parser the model's chat template writes calls for, and the run says which.
describe("the tool parser chosen from the chat template", () => {
  it("Qwen3's template is hermes, Llama 3.1's llama3_json, a [TOOL_CALLS] template mistral; none known: hermes", () => {
    expect(ToolParsers.chooseFor(Qwen3.tokenizer.template!.source)).toEqual({
      name: "hermes",
      chosenBy: "the chat template (it writes <tool_call>)"
    })
    expect(ToolParsers.chooseFor(fs.readFileSync(Llama31.TEMPLATE, "utf8")).name).toBe("llama3_json")
    expect(ToolParsers.chooseFor("{%- if message.tool_calls %}{{- '[TOOL_CALLS][' }}{%- endif %}").name).toBe("mistral")
    expect(ToolParsers.chooseFor("{{ messages[0].content }}")).toEqual({
      name: "hermes",
      chosenBy: "the default (the chat template shows none of the known call formats)"
    })
    expect(ToolParsers.chooseFor(undefined).chosenBy).toBe("the default (no chat template known here)")
  })

  it.live("server mode with a Llama 3.1 tokenizer: llama3_json reads the calls, in the summary and the run record; --tool-parser wins", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      // A Llama 3.1 model: a JSON call with "parameters", then the answer after the tool's result.
      server.state.reply = (body) => {
        const messages = body.messages as Array<{ role: string; content: string }>
        if (messages.at(-1)?.role === "tool") return "<answer>0</answer>"
        const item = /\d+ x ([a-z]+)/.exec(messages.find((m) => m.role === "user")?.content ?? "")?.[1] ?? "widget"
        return `{"name": "lookup", "parameters": {"item": "${item}"}}`
      }
      const dir = cliTmp()
      const dataset = path.join(dir, "calc.jsonl")
      fs.writeFileSync(dataset, JSON.stringify({ env_config: { seed: 1 } }) + "\n")
      const args = (output: string, ...extra: Array<string>) => [
        "run", "--dataset", dataset, "--env", "calculator", "--mode", "server", "--base-url", server.baseUrl,
        "--model", "tiny", "--tokenizer", Llama31.LLAMA31_TOKENIZER, "--token-path", "off", "--num-generations", "2",
        "--max-turns", "3", "--output", path.join(dir, output), "--json", ...extra
      ]
      const chosen = yield* cli(...args("chosen.jsonl"))
      expect(chosen.code).toBe(0)
      const summary = JSON.parse(chosen.stdout)
      expect(summary.tool_parser).toEqual({
        name: "llama3_json",
        chosen_by: "the chat template (Llama 3.x: <|python_tag|>, Environment: ipython)"
      })
      expect(summary.tools).toEqual({ calls: 2, errors: 0, malformed: 0 })
      const record = JSON.parse(fs.readFileSync(path.join(dir, "chosen.jsonl.run.json"), "utf8"))
      expect(record.tool_parser).toEqual({ name: "llama3_json", chosen_by: summary.tool_parser.chosen_by })
      const text = yield* cli(...args("text.jsonl").filter((a) => a !== "--json"))
      expect(text.stdout).toContain("tool parser    llama3_json, from the chat template (Llama 3.x: <|python_tag|>, Environment: ipython)")
      // the option wins: hermes finds no call in Llama's JSON
      const given = yield* cli(...args("given.jsonl", "--tool-parser", "hermes"))
      expect(JSON.parse(given.stdout)).toMatchObject({ tool_parser: { name: "hermes", chosen_by: "--tool-parser" } })
      expect(JSON.parse(given.stdout).tools).toBeUndefined()
      expect(JSON.parse(fs.readFileSync(path.join(dir, "given.jsonl.run.json"), "utf8")).tool_parser)
        .toEqual({ name: "hermes", chosen_by: "--tool-parser" })
    }).pipe(Effect.scoped))

  it.live("a run whose env offers no tools says nothing of a parser; the record still names it", () =>
    Effect.gen(function*() {
      const dir = cliTmp()
      const dataset = path.join(dir, "lake.jsonl")
      fs.writeFileSync(dataset, JSON.stringify({ env_config: { seed: 1 } }) + "\n")
      const run = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "frozen-lake-solver", "--num-generations", "1",
        "--output", path.join(dir, "out.jsonl"), "--json"
      )
      expect(run.code).toBe(0)
      expect(JSON.parse(run.stdout).tool_parser).toBeUndefined()
      expect(JSON.parse(fs.readFileSync(path.join(dir, "out.jsonl.run.json"), "utf8")).tool_parser)
        .toEqual({ name: "hermes", chosen_by: "the default (no chat template known here)" })
    }))
})
