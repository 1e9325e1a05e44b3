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
  it.scoped("one entry per turn: ids, a loss mask of ones and logprobs for every turn that has them", () =>
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

  it.scoped("a turn without ids or logprobs is null in its place, never an invented list", () =>
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

  it.scoped("a backend without token output leaves the fields out", () =>
    Effect.gen(function*() {
      const plain: Completion = { text: "a", finishReason: "stop" }
      const line = yield* lineOf([plain, plain, plain])
      expect(line).not.toHaveProperty("response_token_ids")
      expect(line).not.toHaveProperty("response_loss_mask")
      expect(line).not.toHaveProperty("rollout_logprobs")
    }))
})
