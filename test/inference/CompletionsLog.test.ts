import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import type { Completion } from "../../src/Inference.js"
import * as Inference from "../../src/Inference.js"
import * as Rollout from "../../src/Rollout.js"
import { countingEnv, Counters, records, rows, runConfig } from "../helpers.js"

/** Runs one 3-turn trajectory whose turns answer with `completions[turn - 1]`, and encodes its log line. */
const lineOf = (completions: ReadonlyArray<Completion>) =>
  Effect.gen(function*() {
    const config = yield* runConfig({ envs: [countingEnv(new Counters())], defaultEnv: "counting", numGenerations: 1 })
    const items = yield* Rollout.runAll(config, rows([{ env_config: { length: 3 } }])).pipe(
      Effect.provide(Inference.layerFunction("turns", (request) => Effect.succeed(completions[request.turn - 1])))
    )
    const [record] = records(items)
    const line = JSON.parse(CompletionsLog.encodeLine(record))
    // every line still decodes with the published schema
    Schema.decodeUnknownSync(CompletionsLog.CompletionLine)(line)
    return line
  })

describe("completions.jsonl token fields", () => {
  it.effect("one entry per turn: ids, a loss mask of ones and logprobs for every turn that has them", () =>
    Effect.gen(function*() {
      const line = yield* lineOf([
        { text: "a", finishReason: "stop", tokenIds: [5, 6], logprobs: [-0.5, -0.25] },
        { text: "b", finishReason: "length", tokenIds: [7], logprobs: [-1] },
        { text: "c", finishReason: "stop", tokenIds: [8, 9, 10], logprobs: [-0.1, -0.2, -0.3] }
      ])
      expect(line.response_token_ids).toEqual([[5, 6], [7], [8, 9, 10]])
      expect(line.response_loss_mask).toEqual([[1, 1], [1], [1, 1, 1]])
      expect(line.rollout_logprobs).toEqual([[-0.5, -0.25], [-1], [-0.1, -0.2, -0.3]])
      expect(line.finish_reasons).toEqual(["stop", "length", "stop"])
    }))

  it.effect("a turn without ids or logprobs is null in its place, never an invented list", () =>
    Effect.gen(function*() {
      const line = yield* lineOf([
        { text: "a", finishReason: "stop", tokenIds: [5, 6], logprobs: [-0.5, -0.25] },
        { text: "b", finishReason: "stop" },
        { text: "c", finishReason: "stop", tokenIds: [8] }
      ])
      expect(line.response_token_ids).toEqual([[5, 6], null, [8]])
      expect(line.response_loss_mask).toEqual([[1, 1], null, [1]])
      expect(line.rollout_logprobs).toEqual([[-0.5, -0.25], null, null])
    }))

  it.effect("a backend without token output leaves the fields out", () =>
    Effect.gen(function*() {
      const plain: Completion = { text: "a", finishReason: "stop" }
      const line = yield* lineOf([plain, plain, plain])
      expect(line).not.toHaveProperty("response_token_ids")
      expect(line).not.toHaveProperty("response_loss_mask")
      expect(line).not.toHaveProperty("rollout_logprobs")
    }))
})

describe("completions.jsonl token sequence (token in, token out)", () => {
  const turn = (prompt: Array<number>, reused: number, ids: Array<number>, logprobs?: Array<number>): Completion => ({
    text: "x",
    finishReason: "stop",
    tokenIds: ids,
    ...(logprobs === undefined ? {} : { logprobs }),
    prompt: { tokenIds: prompt, reused }
  })

  it.effect("prompt_token_ids, then sampled and inserted tokens in order; loss mask 1 exactly on sampled; logprobs null elsewhere", () =>
    Effect.gen(function*() {
      const line = yield* lineOf([
        turn([1, 2, 3], 0, [10, 11], [-0.1, -0.2]),
        turn([1, 2, 3, 10, 11, 4, 5], 5, [12], [-0.3]),
        turn([1, 2, 3, 10, 11, 4, 5, 12, 6], 8, [13, 14])
      ])
      expect(line.prompt_token_ids).toEqual([1, 2, 3])
      expect(line.token_ids).toEqual([10, 11, 4, 5, 12, 6, 13, 14])
      expect(line.loss_mask).toEqual([1, 1, 0, 0, 1, 0, 1, 1])
      expect(line.logprobs).toEqual([-0.1, -0.2, null, null, -0.3, null, null, null])
      expect(line).not.toHaveProperty("token_ids_unavailable")
      // the per-turn fields stay
      expect(line.response_token_ids).toEqual([[10, 11], [12], [13, 14]])
    }))

  it.effect("a turn whose prompt does not continue the sequence: token_ids null, and why", () =>
    Effect.gen(function*() {
      const line = yield* lineOf([
        turn([1, 2, 3], 0, [10]),
        { ...turn([7, 8], 0, [11]), prompt: { tokenIds: [7, 8], reused: 0, restarted: "the conversation was rewritten" } },
        turn([7, 8, 11, 9], 3, [12])
      ])
      expect(line.token_ids).toBeNull()
      expect(line.token_ids_unavailable).toBe(
        "turn 2: the prompt does not continue the previous turns' tokens (the conversation was rewritten)"
      )
      expect(line).not.toHaveProperty("prompt_token_ids")
    }))

  it.effect("a chat-only backend says why it has no sequence", () =>
    Effect.gen(function*() {
      const chat: Completion = { text: "a", finishReason: "stop", tokenIds: [5], tokensUnavailable: "server mode on the chat path: no tokenizer" }
      const line = yield* lineOf([chat, chat, chat])
      expect(line.token_ids).toBeNull()
      expect(line.token_ids_unavailable).toBe("server mode on the chat path: no tokenizer")
      expect(line.response_token_ids).toEqual([[5], [5], [5]])
    }))
})

describe("num_turns counts the model's completed turns", () => {
  it.effect("a trajectory whose first model call fails reports 0 turns; one failing on turn 3 reports 2", () =>
    Effect.gen(function*() {
      const failOn = (bad: number) =>
        Effect.gen(function*() {
          const config = yield* runConfig({ envs: [countingEnv(new Counters())], defaultEnv: "counting", numGenerations: 1 })
          const items = yield* Rollout.runAll(config, rows([{ env_config: { length: 5 } }])).pipe(
            Effect.provide(Inference.layerFunction("turns", (request) =>
              request.turn === bad
                ? Effect.fail(new Inference.InferenceError({ reason: "Transport", backend: "test", detail: "down" }))
                : Effect.succeed({ text: "a", finishReason: "stop" })))
          )
          const line = JSON.parse(CompletionsLog.encodeLine(records(items)[0]))
          return [line.rollout_infos.num_turns, line.finish_reasons.length, line.end_reason]
        })
      expect(yield* failOn(1)).toEqual([0, 0, "error"])
      expect(yield* failOn(3)).toEqual([2, 2, "error"])
    }))
})
