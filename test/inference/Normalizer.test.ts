/**
 * Colocate mode's Unicode normalizer (issue 28, item 5): Qwen3's tokenizer.json normalizes to NFC
 * before its BPE, and llama.cpp does not. The token ids against transformers are in LlamaCpp.test.ts
 * (the NFC cases of the recorded vectors); here, what is normalized and what is not.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Normalizer from "../../src/inference/internal/normalizer.js"

describe("tokenizer.json's normalizer, for llama.cpp's tokenizer", () => {
  const added = ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]

  it("the text between added tokens is normalized; the added tokens are kept as written", () => {
    const nfc = Normalizer.make("NFC", added)
    expect(nfc("<|im_start|>user\nCafe\u0301 \u2126 \uf9ea<|im_end|>\n")).toBe("<|im_start|>user\nCaf\u00e9 \u03a9 \u96e2<|im_end|>\n")
    // Hugging Face matches added tokens on the raw text: one that is not in NFC stays as it is.
    const ohm = Normalizer.make("NFC", ["\u2126"])
    expect(ohm("\u2126 and \u2126a\u0301")).toBe("\u2126 and \u2126\u00e1")
    // A combining mark right after an added token does not compose across it.
    expect(nfc("<think>\u0301e\u0301</think>")).toBe("<think>\u0301\u00e9</think>")
  })

  it("text already normalized comes back as it is, and without added tokens the whole text is normalized", () => {
    const nfc = Normalizer.make("NFC", added)
    const plain = "<|im_start|>user\nplain ascii and caf\u00e9<|im_end|>"
    expect(nfc(plain)).toBe(plain)
    expect(Normalizer.make("NFKC", [])("\uff21\u2126")).toBe("A\u03a9")
  })

  it("a token that starts with another is matched whole; regex characters in tokens are literal", () => {
    const nfc = Normalizer.make("NFC", ["<|a|>", "<|a|>x\u0301", "[.*]"])
    expect(nfc("<|a|>x\u0301 e\u0301[.*]e\u0301")).toBe("<|a|>x\u0301 \u00e9[.*]\u00e9")
  })

  it("the added tokens are the GGUF's unknown, control and user-defined ones", () => {
    expect(Normalizer.addedTokens(["a", "<u>", "<c>", "<d>", "<0x00>", "b"], [1, 2, 3, 4, 6, 1])).toEqual(["<u>", "<c>", "<d>"])
    expect(Normalizer.addedTokens(undefined, [3])).toEqual([])
    expect(Normalizer.byPreTokenizer.qwen2).toBe("NFC")
    expect(Normalizer.byPreTokenizer["llama-bpe"]).toBeUndefined()
  })
})
