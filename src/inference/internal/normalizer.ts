/**
 * The Unicode normalizer of a Hugging Face `tokenizer.json` (`{"type": "NFC"}` for Qwen2 and Qwen3),
 * for colocate mode: a GGUF does not record it and llama.cpp does not apply it, so without it a
 * prompt with `"Cafe\u0301"` or `"\u2126"` tokenizes otherwise than a Hugging Face trainer's.
 *
 * Hugging Face first splits out the added tokens (`<|im_start|>`, `<think>`: matched on the raw
 * text) and normalizes only the text between them; so does {@link make}.
 */

/** The normalizer types of `tokenizer.json` that are one Unicode normalization form. */
export type Form = "NFC" | "NFD" | "NFKC" | "NFKD"

/** Whether a value is one of the {@link Form}s. */
export const isForm = (value: unknown): value is Form =>
  value === "NFC" || value === "NFD" || value === "NFKC" || value === "NFKD"

/**
 * tokenizer.json's normalizer by the GGUF's `tokenizer.ggml.pre` (llama.cpp's name for the
 * pre-tokenizer, written by its converter from the Hugging Face tokenizer): `qwen2` is Qwen2's,
 * Qwen2.5's and Qwen3's, whose tokenizer.json normalizes to NFC. Another file gets none, as before.
 */
export const byPreTokenizer: Readonly<Record<string, Form>> = { qwen2: "NFC" }

/** llama.cpp's token types that it splits out of the text as added tokens: unknown, control, user-defined. */
const ADDED_TYPES: ReadonlySet<number> = new Set([2, 3, 4])

/** The added tokens' texts, from the GGUF's `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type`. */
export const addedTokens = (tokens: unknown, types: unknown): Array<string> => {
  if (!Array.isArray(tokens) || !Array.isArray(types)) return []
  const added: Array<string> = []
  for (let i = 0; i < types.length && i < tokens.length; i++) {
    const text = tokens[i]
    if (ADDED_TYPES.has(types[i]) && typeof text === "string" && text !== "") added.push(text)
  }
  return added
}

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/**
 * Text normalized as Hugging Face normalizes it before its BPE: the added tokens as written, the
 * text between them in `form`.
 */
export const make = (form: Form, added: ReadonlyArray<string>): (text: string) => string => {
  if (added.length === 0) return (text) => text.normalize(form)
  // Longest first, so that a token that starts with another is matched whole.
  const split = new RegExp(`(${[...new Set(added)].sort((a, b) => b.length - a.length).map(escape).join("|")})`, "u")
  return (text) => {
    // Text that is already normalized is normalized between the added tokens too.
    if (text.normalize(form) === text) return text
    // With one capturing group, split keeps the separators at the odd indexes.
    return text.split(split).map((piece, i) => (i % 2 === 0 ? piece.normalize(form) : piece)).join("")
  }
}
