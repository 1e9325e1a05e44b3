/**
 * Template fidelity: the local renderer and tokenizer against Hugging Face transformers'
 * `apply_chat_template` with Qwen3's own template, and against Python jinja2 for the string methods
 * `@huggingface/jinja` gets wrong. The reference renders are vectors written once by
 * `test/fixtures/chat_template/generate_vectors.py` under CPython (the tests need no Python).
 */
import { Template } from "@huggingface/jinja"
import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as ChatTemplate from "../../src/inference/ChatTemplate.js"
import type { Message } from "../../src/Message.js"
import * as Qwen3 from "./qwen3.js"

interface Vectors {
  readonly generated_by: string
  readonly cases: ReadonlyArray<{
    readonly name: string
    readonly messages: ReadonlyArray<Message>
    readonly add_generation_prompt: boolean
    readonly kwargs: Record<string, unknown>
    readonly text: string
    readonly ids: ReadonlyArray<number>
  }>
  readonly strips: ReadonlyArray<{
    readonly template: string
    readonly x: string
    readonly messages: ReadonlyArray<Message>
    readonly text: string
  }>
  readonly contexts: ReadonlyArray<{
    readonly name: string
    readonly template: string
    readonly messages: ReadonlyArray<Message>
    readonly kwargs: Record<string, unknown>
    readonly text: string
  }>
}

const vectors = JSON.parse(
  fs.readFileSync(path.join(import.meta.dirname, "../fixtures/chat_template/qwen3_vectors.json"), "utf8")
) as Vectors

const template = Qwen3.tokenizer.template!

describe(`chat templates match transformers (${vectors.generated_by})`, () => {
  it("Qwen3's template: every reference render, text and token ids", () => {
    expect(vectors.cases.length).toBeGreaterThanOrEqual(8)
    for (const c of vectors.cases) {
      const text = Result.getOrThrow(template.render(c.messages, { addGenerationPrompt: c.add_generation_prompt, kwargs: c.kwargs }))
      expect(text, c.name).toBe(c.text)
      expect(Qwen3.tokenizer.encode(text), c.name).toEqual(c.ids)
    }
  })

  it("@huggingface/jinja alone gets the reasoning cases wrong (its lstrip/rstrip/strip ignore their argument)", () => {
    const raw = new Template(template.source)
    const wrong = vectors.cases.filter((c) =>
      raw.render({ messages: c.messages, add_generation_prompt: c.add_generation_prompt, ...c.kwargs }) !== c.text
    )
    expect(wrong.map((c) => c.name)).toContain("multi-turn with reasoning in the last reply")
  })

  it("strip, lstrip and rstrip with and without arguments match Python's jinja2", () => {
    expect(vectors.strips.length).toBeGreaterThan(20)
    for (const s of vectors.strips) {
      const made = Result.getOrThrow(ChatTemplate.make(s.template))
      const text = Result.getOrThrow(made.render(s.messages, { addGenerationPrompt: false, kwargs: { x: s.x } }))
      expect(text, `${s.template} with ${JSON.stringify(s.x)}`).toBe(s.text)
    }
  })

  // Issue 28: `tools` and `documents` were undefined (so `tools is not none` held) and True was written `true`.
  it("the render context is transformers': tools and documents are None unless given, booleans are Python's", () => {
    expect(vectors.contexts.map((c) => c.name)).toEqual([
      "tools and documents are None",
      "tools given as a kwarg",
      "Python's booleans"
    ])
    for (const c of vectors.contexts) {
      const made = Result.getOrThrow(ChatTemplate.make(c.template))
      const text = Result.getOrThrow(made.render(c.messages, { addGenerationPrompt: false, kwargs: c.kwargs }))
      expect(text, c.name).toBe(c.text)
    }
    // Only during a render: the library itself still writes true.
    expect(new Template("{{ flag }}").render({ flag: true })).toBe("true")
  })

  it("~ is otherwise the library's: numbers and strings joined, an undefined side an error", () => {
    const made = Result.getOrThrow(ChatTemplate.make("{{ 'a' ~ 2 ~ 'b' ~ (1 == 1) }}"))
    expect(Result.getOrThrow(made.render([], { addGenerationPrompt: false }))).toBe("a2bTrue")
    const missing = Result.getOrThrow(ChatTemplate.make("{{ 'a' ~ missing }}")).render([], { addGenerationPrompt: false })
    expect(Result.isFailure(missing) && missing.failure.detail).toContain("the chat template failed")
  })

  it("enable_thinking false changes Qwen3's generation prompt (an empty think block)", () => {
    const messages: Array<Message> = [{ role: "user", content: "Solve the sudoku." }]
    const on = Result.getOrThrow(template.render(messages, { addGenerationPrompt: true }))
    const off = Result.getOrThrow(template.render(messages, { addGenerationPrompt: true, kwargs: { enable_thinking: false } }))
    expect(on.endsWith("<|im_start|>assistant\n")).toBe(true)
    expect(off).toBe(`${on}<think>\n\n</think>\n\n`)
  })

  it("a template that does not parse, or fails while rendering, is a typed error with the template's message", () => {
    const bad = ChatTemplate.make("{% for m in messages %}")
    expect(Result.isFailure(bad) && bad.failure.detail).toContain("does not parse")
    const raising = Result.getOrThrow(ChatTemplate.make("{{ raise_exception('no system role') }}"))
    const failed = raising.render([], { addGenerationPrompt: true })
    expect(Result.isFailure(failed) && failed.failure.detail).toContain("no system role")
  })

  it("pyStrip is Python's str.strip: whitespace by str.isspace, or exactly the characters given", () => {
    expect(ChatTemplate.pyStrip("\x1c\x85 a \u3000", undefined, "both")).toBe("a")
    expect(ChatTemplate.pyStrip("\n\n a \n", "\n", "both")).toBe(" a ")
    expect(ChatTemplate.pyStrip("xxaxx", "x", "left")).toBe("axx")
    expect(ChatTemplate.pyStrip("😀a😀", "😀", "right")).toBe("😀a")
    expect(ChatTemplate.pyStrip("", null, "both")).toBe("")
  })
})
