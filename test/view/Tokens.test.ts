import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as LlamaCpp from "../../src/inference/LlamaCpp.js"
import * as Tokens from "../../src/view/Tokens.js"
import { cli } from "../cli.js"
import { writeTinyLlama } from "../inference/gguf.js"
import * as Logs from "./logs.js"

const support = await Effect.runPromise(LlamaCpp.probe)
const unavailable = support.available ? undefined : support.reason

const read = (file: string): Array<Record<string, unknown>> => fs.readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l))

describe("the token view", () => {
  const dir = Logs.tmp()
  const dir0 = dir

  it.live("without a tokenizer: ids, loss masks and logprobs per turn, no made-up text, and it says how to get text", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.tokens(dir)
      for (const line of read(file)) {
        const view = Tokens.view(line, undefined)!
        expect(view.tokenizer).toBeNull()
        expect(view.note).toContain("--model FILE.gguf")
        const replies = (line.messages as Array<{ role: string; content: string }>).filter((m) => m.role === "assistant")
        expect(view.turns.length).toBe(replies.length)
        view.turns.forEach((turn, i) => {
          // the fake server's ids are the reply's UTF-8 bytes, its i-th logprob -(i+1)/100
          expect(turn.tokens!.map((t) => t.id)).toEqual([...new TextEncoder().encode(replies[i].content)])
          expect(turn.tokens!.every((t) => t.text === null && t.mask === 1)).toBe(true)
          expect(turn.tokens!.map((t) => t.logprob)).toEqual(turn.tokens!.map((_, k) => -(k + 1) / 100))
          expect(turn.matches).toBeNull()
          expect(turn.problems).toEqual([])
        })
      }
      expect(Tokens.view({ messages: [] }, undefined)).toBeNull()
      const broken = Tokens.view({ messages: [], response_token_ids: [[1, 2], null], response_loss_mask: [[1]], rollout_logprobs: [null, null] }, undefined)!
      expect(broken.turns[0].problems).toEqual(["response_loss_mask[0] does not have one entry per token"])
      expect(broken.turns[1].tokens).toBeNull()
    }))

  it.live("with the run's Hugging Face tokenizer (--tokenizer DIR): each token's text, every turn decodes to its message; the token path's sequence with its loss mask", () =>
    Effect.gen(function*() {
      const { file, tokenizer: dir } = yield* Logs.qwen3Tokens(dir0)
      const tokenizer = yield* Tokens.fromHf(dir)
      let turns = 0
      let sequences = 0
      for (const line of read(file)) {
        const view = Tokens.view(line, tokenizer)!
        for (const turn of view.turns) {
          turns++
          expect(turn.problems).toEqual([])
          expect(turn.matches, JSON.stringify([turn.decoded, turn.message])).toBe("exact")
          expect(turn.tokens!.map((t) => t.text).join("")).toContain(turn.message!)
        }
        const sequence = view.sequence
        if (sequence !== null && !("unavailable" in sequence)) {
          sequences++
          expect(sequence.problems).toEqual([])
          expect(sequence.prompt.length).toBe((line.prompt_token_ids as Array<number>).length)
          // the trained tokens are the sampled ones: every turn's ids, in order
          const trained = sequence.tokens.filter((t) => t.mask === 1).map((t) => t.id)
          expect(trained).toEqual((line.response_token_ids as Array<Array<number>>).flat())
          // the template and observation tokens between turns are not trained
          const turnsOf = (line.rollout_infos as { num_turns: number }).num_turns
          expect(sequence.tokens.some((t) => t.mask === 0)).toBe(turnsOf > 1)
          expect(sequence.tokens.filter((t) => t.mask === 1).every((t) => t.logprob !== null)).toBe(true)
        }
      }
      expect(turns).toBeGreaterThan(0)
      expect(sequences).toBeGreaterThan(0)
      const missing = yield* Effect.flip(Tokens.fromHf(path.join(dir0, "nowhere")))
      expect(missing.message).toMatch(/^--tokenizer .*nowhere: /)
    }))

  it.live.skipIf(unavailable !== undefined)("with the run's GGUF: each token's text, and every turn decodes to its message; another model's ids do not", () =>
    Effect.gen(function*() {
      const model = writeTinyLlama(path.join(dir, "tiny.gguf"))
      const dataset = path.join(dir, "two.jsonl")
      fs.writeFileSync(dataset, "{\"env_config\":{\"seed\":0}}\n{\"env_config\":{\"seed\":1}}\n")
      const output = path.join(dir, "colocate.jsonl")
      const run = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "colocate", "--model", model, "--context-size", "2048",
        "--inference-concurrency", "1", "--threads", "1", "--max-tokens", "8", "--num-generations", "2", "--max-turns", "2", "--output", output
      )
      expect(run.code).toBe(0)
      const tokenizer = yield* Tokens.fromGguf(model)
      expect(tokenizer.name).toBe("tiny.gguf (the GGUF model's own vocabulary)")
      let turns = 0
      for (const line of read(output)) {
        const view = Tokens.view(line, tokenizer)!
        for (const turn of view.turns) {
          turns++
          expect(turn.matches).toBe("exact")
          expect(turn.decoded).toBe(turn.message)
          expect(turn.tokens!.every((t) => typeof t.text === "string" && t.mask === 1 && typeof t.logprob === "number")).toBe(true)
        }
      }
      expect(turns).toBeGreaterThan(0)
      // The fake server's ids are bytes, not this vocabulary's ids: the check says the text differs.
      const { file } = yield* Logs.tokens(dir)
      const other = Tokens.view(read(file)[0], tokenizer)!
      expect(other.turns.every((t) => t.matches === "differs")).toBe(true)
      const missing = yield* Effect.flip(Tokens.fromGguf(path.join(dir, "missing.gguf")))
      expect(missing.message).toBe(`--model ${path.join(dir, "missing.gguf")}: no such file`)
    }).pipe(Effect.scoped))
})
