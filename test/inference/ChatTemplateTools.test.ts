/**
 * Rendering with tools: the local renderer and tokenizer against transformers'
 * `apply_chat_template(messages, tools=...)` (text, and ids with `tokenize=True`) for Qwen3 and Llama 3.1, on
 * conversations with tool specs, calls, results, several calls in a turn and several turns. The reference renders
 * were written once by `test/fixtures/chat_template/gen_tool_vectors.py` (the tests need no Python).
 */
import { Template } from "@huggingface/jinja"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { ChatRequest, Completion } from "../../src/Inference.js"
import { tokenState } from "../../src/Inference.js"
import * as ChatTemplate from "../../src/inference/ChatTemplate.js"
import type { HfTokenizer } from "../../src/inference/HfTokenizer.js"
import * as PromptTokens from "../../src/inference/PromptTokens.js"
import type { Message } from "../../src/Message.js"
import type * as Tool from "../../src/Tool.js"
import * as Llama31 from "./llama31.js"
import * as Qwen3 from "./qwen3.js"

interface Case {
  readonly name: string
  readonly tools: ReadonlyArray<{ readonly type: "function"; readonly function: Tool.Spec }>
  readonly messages: ReadonlyArray<Message>
  readonly add_generation_prompt: boolean
  readonly kwargs: Record<string, unknown>
  readonly text?: string
  readonly ids?: ReadonlyArray<number>
  readonly error?: string
}

const vectors = JSON.parse(
  fs.readFileSync(path.join(import.meta.dirname, "../fixtures/chat_template/tool_vectors.json"), "utf8")
) as {
  readonly generated_by: string
  readonly qwen3: { readonly cases: ReadonlyArray<Case> }
  readonly llama3_1: { readonly cases: ReadonlyArray<Case> }
}

const render = (tokenizer: HfTokenizer, c: Case) =>
  tokenizer.template!.render(c.messages, {
    addGenerationPrompt: c.add_generation_prompt,
    kwargs: c.kwargs,
    tools: c.tools.map((t) => t.function)
  })

const matches = (tokenizer: HfTokenizer, cases: ReadonlyArray<Case>) => {
  let rendered = 0
  for (const c of cases) {
    const text = render(tokenizer, c)
    if (c.error !== undefined) {
      expect(Result.isFailure(text) && text.failure.detail, c.name).toContain(c.error)
      continue
    }
    expect(Result.getOrThrow(text), c.name).toBe(c.text)
    expect(tokenizer.encode(Result.getOrThrow(text)), c.name).toEqual(c.ids)
    rendered++
  }
  return rendered
}

const uses = (cases: ReadonlyArray<Case>) => ({
  calls: cases.filter((c) => c.messages.some((m) => (m.tool_calls?.length ?? 0) > 0)).length,
  results: cases.filter((c) => c.messages.some((m) => m.role === "tool")).length,
  parallel: cases.filter((c) => c.messages.some((m) => (m.tool_calls?.length ?? 0) > 1)).length
})

describe(`rendering with tools matches transformers (${vectors.generated_by})`, () => {
  it("Qwen3: every conversation, text and token ids", () => {
    expect(matches(Qwen3.tokenizer, vectors.qwen3.cases)).toBeGreaterThanOrEqual(20)
    expect(uses(vectors.qwen3.cases)).toMatchObject({ parallel: 2 })
    expect(uses(vectors.qwen3.cases).calls).toBeGreaterThanOrEqual(18)
  })

  it("Llama 3.1: every conversation, text and token ids; two calls in a turn fail as the template says", () => {
    expect(matches(Llama31.tokenizer, vectors.llama3_1.cases)).toBeGreaterThanOrEqual(20)
    expect(vectors.llama3_1.cases.filter((c) => c.error !== undefined).map((c) => c.error)).toEqual([
      "This model only supports single tool-calls at once!",
      "This model only supports single tool-calls at once!"
    ])
  })
})

describe("numbers as Python has them", () => {
  it("pyFloatRepr is Python's repr of a float (the values Python 3.11 printed)", () => {
    const values = [4.0, 0.1, 1e16, 1e-5, -0.0, 1.5e300, 0.0001, 123456789.0, 9999999999999998.0, 1e15, 2.5e-7, 5e-324, 1.7976931348623157e308, 1 / 3]
    expect(values.map(ChatTemplate.pyFloatRepr)).toEqual([
      "4.0", "0.1", "1e+16", "1e-05", "-0.0", "1.5e+300", "0.0001", "123456789.0", "9999999999999998.0", "1000000000000000.0",
      "2.5e-07", "5e-324", "1.7976931348623157e+308", "0.3333333333333333"
    ])
  })

  it("a float argument is a float for the template (`{{ }}`, `tojson`), and comparisons and arithmetic still work", () => {
    const made = Result.getOrThrow(ChatTemplate.make(
      "{% for m in messages %}{% for c in m.tool_calls %}{% set a = c.function.arguments %}" +
        "{{ a.x }} {{ a.x + 1 }} {{ a.n is integer }} {{ a.n }} {{ a | tojson }} {{ a.x > 3 }} {{ a.x == 4 }}{% endfor %}{% endfor %}"
    ))
    const message: Message = {
      role: "assistant",
      content: "",
      tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "{\"x\": 4.0, \"n\": 3, \"big\": 12345678901234567890}" } }]
    }
    expect(Result.getOrThrow(made.render([message], { addGenerationPrompt: false }))).toBe(
      "4.0 5.0 True 3 {\"x\": 4.0, \"n\": 3, \"big\": 12345678901234567890} True True"
    )
    // only during a render: the library's own conversion is untouched
    expect(new Template("{{ x }}").render({ x: 4 })).toBe("4")
  })
})

// Attacks on the tool rendering (issue 30, "attack it before you resolve").
describe("rendering with tools: bad input", () => {
  const specs: ReadonlyArray<Tool.Spec> = [{ name: "lookup", description: "d", parameters: { type: "object", properties: {} } }]
  const call = (id: string, args: string): Message => ({
    role: "assistant",
    content: "",
    tool_calls: [{ id, type: "function", function: { name: "lookup", arguments: args } }]
  })

  it.effect("Llama 3.1, two calls in one turn: the token path still continues (the reply is its sampled tokens); a re-render fails with the template's message", () =>
    Effect.gen(function*() {
      const tokenizer = Llama31.tokenizer
      const renderer = PromptTokens.local({ name: "llama", backend: "test", template: tokenizer.template!, encode: tokenizer.encode, isSpecial: tokenizer.isSpecial })
      const opening: Array<Message> = [{ role: "user", content: "two prices" }]
      const first: ChatRequest = { messages: opening, sampling: {}, trajectoryId: "t", turn: 1, seed: 1, tools: specs }
      const p1 = yield* PromptTokens.prompt(renderer, first, undefined)
      const sampled = tokenizer.encode('{"name": "lookup", "parameters": {}}; {"name": "lookup", "parameters": {}}<|eot_id|>')
      const reply: Message = {
        role: "assistant",
        content: "",
        tool_calls: [call("a", "{}").tool_calls![0], call("b", "{}").tool_calls![0]]
      }
      const completion: Completion = { text: "", finishReason: "tool_calls", tokenIds: sampled, prompt: p1 }
      const previous = tokenState(completion, [...opening, reply])!
      const results: Array<Message> = [
        { role: "tool", content: "1", tool_call_id: "a", name: "lookup" },
        { role: "tool", content: "2", tool_call_id: "b", name: "lookup" }
      ]
      const p2 = yield* PromptTokens.prompt(renderer, { ...first, turn: 2, messages: [...opening, reply, ...results], previous }, undefined)
      expect(p2.reused).toBe(previous.tokenIds.length)
      expect(tokenizer.decode(p2.tokenIds.slice(p2.reused))).toBe(
        '<|start_header_id|>ipython<|end_header_id|>\n\n"1"<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"2"<|eot_id|>' +
          "<|start_header_id|>assistant<|end_header_id|>\n\n"
      )
      const rerendered = yield* Effect.flip(renderer.tokenize([...opening, reply, ...results], { addGenerationPrompt: false, tools: specs }))
      expect(rerendered.detail).toContain("This model only supports single tool-calls at once!")
    }))

  it("arguments that are not an object, not JSON, deeply nested or huge: rendered or a typed error, never a throw", () => {
    const template = Qwen3.tokenizer.template!
    const render = (args: string) => template.render([{ role: "user", content: "q" }, call("a", args)], { addGenerationPrompt: false, tools: specs })
    expect(Result.getOrThrow(render("[1, 2]"))).toContain('"arguments": [1, 2]}')
    expect(Result.getOrThrow(render("{\"item\": "))).toContain('"arguments": {"item": }')
    const deep = "[".repeat(100_000) + "]".repeat(100_000)
    const nested = render(deep)
    expect(Result.isSuccess(nested) || nested.failure._tag === "ChatTemplateError").toBe(true)
    const huge = JSON.stringify({ item: "x".repeat(1_000_000) })
    expect(Result.getOrThrow(render(huge)).length).toBeGreaterThan(1_000_000)
  })

  it("an empty tool_calls list is left out, so Llama 3.1 renders the message as text; tools: [] is no tools", () => {
    const template = Llama31.tokenizer.template!
    const empty: Message = { role: "assistant", content: "plain", tool_calls: [] }
    const text = Result.getOrThrow(template.render([{ role: "user", content: "q" }, empty], { addGenerationPrompt: false }))
    expect(text.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\nplain<|eot_id|>")).toBe(true)
    expect(ChatTemplate.templateMessage(empty)).toEqual({ role: "assistant", content: "plain" })
    const none = Result.getOrThrow(template.render([{ role: "user", content: "q" }], { addGenerationPrompt: true, tools: [] }))
    expect(none).not.toContain("Environment: ipython")
  })

  // (No clock is read: the test's time limit is what fails a rendering gone quadratic.)
  it("a thousand tools render, each once and in order", () => {
    const many = Array.from({ length: 1000 }, (_, i) => ({ ...specs[0], name: `tool_${i}` }))
    const text = Result.getOrThrow(Qwen3.tokenizer.template!.render([{ role: "user", content: "q" }], { addGenerationPrompt: true, tools: many }))
    const named = [...text.matchAll(/"name": "(tool_\d+)"/g)].map((m) => m[1])
    expect(named).toEqual(many.map((t) => t.name))
  }, 30_000)
})
