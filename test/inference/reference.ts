/**
 * An independent evaluation of the tiny test models: a GGUF reader and a plain llama forward pass in
 * TypeScript (float64 arithmetic, no llama.cpp), so colocate mode's logprobs can be checked against
 * the weights themselves rather than against llama.cpp run another way.
 *
 * It covers what `gguf.ts` writes: the `llama` architecture with F32 tensors, RMS norms, rotary
 * position embeddings in ggml's "normal" mode (adjacent pairs, base 10000), causal multi-head
 * attention without grouped heads, a SwiGLU feed-forward and an output layer (tied to the token
 * embeddings when the file has none). The one llama.cpp detail it copies on purpose is the KV cache's
 * type: keys and values are stored as F16, so they are rounded to F16 here too.
 */
import * as fs from "node:fs"
import * as os from "node:os"

type Metadata = ReadonlyMap<string, unknown>

interface Gguf {
  readonly metadata: Metadata
  readonly tensors: ReadonlyMap<string, Float32Array>
}

/** Reads a GGUF v3 file of F32 tensors. */
export const readGguf = (file: string): Gguf => {
  const buffer = fs.readFileSync(file)
  let at = 0
  const u32 = () => (at += 4, buffer.readUInt32LE(at - 4))
  const u64 = () => (at += 8, Number(buffer.readBigUInt64LE(at - 8)))
  const string = () => {
    const length = u64()
    at += length
    return buffer.toString("utf8", at - length, at)
  }
  const value = (type: number): unknown => {
    switch (type) {
      case 4:
        return u32()
      case 5:
        return (at += 4, buffer.readInt32LE(at - 4))
      case 6:
        return (at += 4, buffer.readFloatLE(at - 4))
      case 7:
        return (at += 1, buffer[at - 1] !== 0)
      case 8:
        return string()
      case 9: {
        const itemType = u32()
        const length = u64()
        return Array.from({ length }, () => value(itemType))
      }
      default:
        throw new Error(`GGUF value type ${type} is not read here`)
    }
  }
  if (buffer.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${file}: not a GGUF file`)
  at = 4
  if (u32() !== 3) throw new Error(`${file}: not GGUF v3`)
  const tensorCount = u64()
  const metadataCount = u64()
  const metadata = new Map<string, unknown>()
  for (let i = 0; i < metadataCount; i++) {
    const key = string()
    metadata.set(key, value(u32()))
  }
  const infos = Array.from({ length: tensorCount }, () => {
    const name = string()
    const dims = Array.from({ length: u32() }, () => u64())
    const type = u32()
    if (type !== 0) throw new Error(`${file}: tensor ${name} is not F32`)
    return { name, size: dims.reduce((a, b) => a * b, 1), offset: u64() }
  })
  const alignment = (metadata.get("general.alignment") as number | undefined) ?? 32
  const data = Math.ceil(at / alignment) * alignment
  const tensors = new Map<string, Float32Array>()
  for (const info of infos) {
    const start = data + info.offset
    const copy = new Float32Array(info.size)
    // (a byte copy where this machine is little-endian, as GGUF is: the same floats, without a call per value)
    if (os.endianness() === "LE") new Uint8Array(copy.buffer).set(buffer.subarray(start, start + 4 * info.size))
    else for (let i = 0; i < info.size; i++) copy[i] = buffer.readFloatLE(start + 4 * i)
    tensors.set(info.name, copy)
  }
  return { metadata, tensors }
}

/** `out[r] = W[r] · x` for a ggml matrix of `rows` rows of `x.length` values. */
const matVec = (w: Float32Array, x: ArrayLike<number>, rows: number): Float64Array => {
  const n = x.length
  const out = new Float64Array(rows)
  for (let r = 0; r < rows; r++) {
    let sum = 0
    const base = r * n
    for (let i = 0; i < n; i++) sum += w[base + i] * x[i]
    out[r] = sum
  }
  return out
}

const rmsNorm = (x: Float64Array, weight: Float32Array, eps: number): Float64Array => {
  let squares = 0
  for (const v of x) squares += v * v
  const scale = 1 / Math.sqrt(squares / x.length + eps)
  return x.map((v, i) => v * scale * weight[i])
}

/** ggml's rope, "normal" mode: each head's adjacent pairs turned by `pos * base^(-2i/dims)`. */
const rope = (x: Float64Array, pos: number, heads: number, headDim: number, base: number) => {
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < headDim; i += 2) {
      const theta = pos * Math.pow(base, -i / headDim)
      const cos = Math.cos(theta)
      const sin = Math.sin(theta)
      const a = x[h * headDim + i]
      const b = x[h * headDim + i + 1]
      x[h * headDim + i] = a * cos - b * sin
      x[h * headDim + i + 1] = a * sin + b * cos
    }
  }
}

const f16 = (x: Float64Array) => x.map((v) => Math.f16round(v))

/** The model of a GGUF file written by `gguf.ts`. */
export interface Reference {
  readonly vocab: number
  /**
   * The log-probabilities of the next token after each position of `tokens` from `from` on (one row
   * per position; the positions before `from` are evaluated for the attention cache only).
   */
  readonly logprobs: (tokens: ReadonlyArray<number>, from?: number) => Array<Float64Array>
}

export const load = (file: string): Reference => {
  const { metadata, tensors } = readGguf(file)
  const meta = (key: string) => {
    const value = metadata.get(`llama.${key}`)
    if (typeof value !== "number") throw new Error(`${file}: no llama.${key}`)
    return value
  }
  const tensor = (name: string) => {
    const t = tensors.get(name)
    if (t === undefined) throw new Error(`${file}: no tensor ${name}`)
    return t
  }
  const embd = meta("embedding_length")
  const layers = meta("block_count")
  const ff = meta("feed_forward_length")
  const heads = meta("attention.head_count")
  if (meta("attention.head_count_kv") !== heads) throw new Error("grouped-query attention is not evaluated here")
  const eps = meta("attention.layer_norm_rms_epsilon")
  const base = (metadata.get("llama.rope.freq_base") as number | undefined) ?? 10000
  const headDim = embd / heads
  const tokenEmbd = tensor("token_embd.weight")
  const vocab = tokenEmbd.length / embd
  const output = tensors.get("output.weight") ?? tokenEmbd
  const outputNorm = tensor("output_norm.weight")

  const logprobs = (tokens: ReadonlyArray<number>, from = 0): Array<Float64Array> => {
    const keys: Array<Array<Float64Array>> = Array.from({ length: layers }, () => [])
    const values: Array<Array<Float64Array>> = Array.from({ length: layers }, () => [])
    const finals: Array<Float64Array> = []
    tokens.forEach((token, pos) => {
      let x = Float64Array.from(tokenEmbd.subarray(token * embd, (token + 1) * embd))
      for (let l = 0; l < layers; l++) {
        const w = (name: string) => tensor(`blk.${l}.${name}.weight`)
        const h = rmsNorm(x, w("attn_norm"), eps)
        const q = matVec(w("attn_q"), h, embd)
        const k = matVec(w("attn_k"), h, embd)
        rope(q, pos, heads, headDim, base)
        rope(k, pos, heads, headDim, base)
        keys[l].push(f16(k))
        values[l].push(f16(matVec(w("attn_v"), h, embd)))
        const attended = new Float64Array(embd)
        for (let head = 0; head < heads; head++) {
          const offset = head * headDim
          const scores = keys[l].map((key) => {
            let dot = 0
            for (let i = 0; i < headDim; i++) dot += q[offset + i] * key[offset + i]
            return dot / Math.sqrt(headDim)
          })
          const max = Math.max(...scores)
          const weights = scores.map((s) => Math.exp(s - max))
          const total = weights.reduce((a, b) => a + b, 0)
          values[l].forEach((value, j) => {
            for (let i = 0; i < headDim; i++) attended[offset + i] += (weights[j] / total) * value[offset + i]
          })
        }
        const attention = matVec(w("attn_output"), attended, embd)
        x = x.map((v, i) => v + attention[i])
        const n = rmsNorm(x, w("ffn_norm"), eps)
        const gate = matVec(w("ffn_gate"), n, ff)
        const up = matVec(w("ffn_up"), n, ff)
        const act = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i])
        const down = matVec(w("ffn_down"), act, embd)
        x = x.map((v, i) => v + down[i])
      }
      if (pos >= from) finals.push(rmsNorm(x, outputNorm, eps))
    })
    // The output layer for every position at once: each of its rows (as many as the vocabulary, 152k
    // for the Qwen3-vocabulary model) read once, not once per position; each logit the same sum.
    const rows = finals.map(() => new Float64Array(vocab))
    for (let r = 0; r < vocab; r++) {
      const base = r * embd
      for (let p = 0; p < finals.length; p++) {
        const x = finals[p]
        let sum = 0
        for (let i = 0; i < embd; i++) sum += output[base + i] * x[i]
        rows[p][r] = sum
      }
    }
    for (const logits of rows) {
      let max = -Infinity
      for (const v of logits) if (v > max) max = v
      let total = 0
      for (const v of logits) total += Math.exp(v - max)
      const logTotal = max + Math.log(total)
      // (in place: a row is as long as the vocabulary)
      for (let i = 0; i < logits.length; i++) logits[i] -= logTotal
    }
    return rows
  }
  return { vocab, logprobs }
}
