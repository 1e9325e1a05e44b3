/**
 * Rendering with tools: the local renderer and tokenizer against transformers'
 * `apply_chat_template(messages, tools=...)` (text, and ids with `tokenize=True`) for Qwen3 and Llama 3.1, on
 * conversations with tool specs, calls, results, several calls in a turn and several turns. The reference renders
 * were written once by `test/fixtures/chat_template/gen_tool_vectors.py` (the tests need no Python).
 */
import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { HfTokenizer } from "../../src/inference/HfTokenizer.js"
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
