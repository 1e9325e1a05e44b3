/**
 * The Python client (clients/python/effect_gym.py, standard library only) against a live server, run
 * by the machine's python3 (skipped where there is none): the NDJSON stream as a generator, the
 * TRL-style rollout_func's token fields (no re-tokenization: the server's own sequences), errors.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile, spawnSync } from "node:child_process"
import * as path from "node:path"
import { promisify } from "node:util"
import * as SwiftRollout from "../../src/inference/SwiftRollout.js"
import * as FakeSwift from "../rollout-server/FakeSwift.js"
import { type Api, request, resultsOf, start, withoutTimings } from "../rollout-server/helpers.js"
import { lookup, tokenPath } from "../rollout-server/toolServer.js"

const python = spawnSync("python3", ["--version"]).status === 0
const driver = path.resolve(import.meta.dirname, "../fixtures/python/drive_client.py")
const toolsDriver = path.resolve(import.meta.dirname, "../fixtures/python/drive_tools.py")
const run = promisify(execFile)
const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: false })

type Line = Record<string, unknown> & { row: number; generation: number }
const comparable = (line: Record<string, unknown>) => {
  // (uuid: each row gets its own; policy_versions: the driver sets a version at its end)
  const { policy_versions: _versions, uuid: _uuid, ...rest } = withoutTimings(line as { timings?: unknown }) as Record<string, unknown>
  return rest
}

describe.skipIf(!python)("clients/python/effect_gym.py", () => {
  it.live("streams results, and its rollout_func gives the server's own token sequences to TRL", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* SwiftRollout.make({ baseUrl: fake.url, retries: 0 }).pipe(Effect.provide(httpClient), Effect.orDie)
      const server = yield* start({ policy: swift.service, control: swift.control })
      const plain = yield* start()
      const { stdout } = yield* Effect.promise(() => run("python3", [driver, server.url, plain.url], { timeout: 120_000 }))
      const out = JSON.parse(stdout) as Record<string, any>
      expect(out.health).toMatchObject({ status: "ok" })

      // the stream: every result of the batch, as /v1/rollouts gives them for the same batch and seed
      const batch = { requests: [{ env_config: { seed: 3, size: 5 }, num_generations: 2 }, { env_config: { seed: 4 } }], seed: 5 }
      const expected = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: batch }))
      const streamed = (out.streamed as Array<Line>).sort((a, b) => a.row - b.row || a.generation - b.generation)
      expect(streamed.map(comparable)).toEqual(expected.map((line) => comparable(line as unknown as Record<string, unknown>)))

      // rollout_func: one row per prompt (TRL repeats prompts per generation), the token fields as they are
      const rows = (seeds: ReadonlyArray<number>, seed: number) =>
        request(`${server.url}/v1/rollouts`, { body: { requests: seeds.map((s) => ({ env_config: { seed: s } })), seed } }).pipe(
          Effect.map(resultsOf)
        )
      for (const [key, seeds, seed] of [["rollout_func", [3, 3, 4], 5], ["rollout_func_second_call", [3], 6]] as const) {
        const lines = yield* rows(seeds, seed)
        const got = out[key]
        expect(got.prompt_ids).toEqual(lines.map((l) => l.prompt_token_ids))
        expect(got.completion_ids).toEqual(lines.map((l) => l.token_ids))
        expect(got.env_mask).toEqual(lines.map((l) => l.loss_mask))
        expect(got.logprobs).toEqual(lines.map((l) => l.logprobs!.map((x) => x ?? 0)))
        expect(got.env_reward).toEqual(lines.map((l) => l.rollout_infos.total_reward))
        expect(got.num_turns).toEqual(lines.map((l) => l.rollout_infos.num_turns))
        for (const [i, ids] of (got.completion_ids as Array<Array<number>>).entries()) {
          expect(got.env_mask[i].length).toBe(ids.length)
          // the model's tokens are exactly the turns' sampled tokens
          expect(ids.filter((_, j) => got.env_mask[i][j] === 1)).toEqual(lines[i].response_token_ids!.flat())
        }
      }

      // Issue 28, item 4: TRL counts a completion as truncated when its last id is not the trainer
      // tokenizer's eos or pad (trl/trainer/grpo_trainer.py, `is_truncated`): finished episodes were
      // read as clipped. Each completion now ends as TRL reads it, and `truncated` says why.
      const truncationRows = [{ env_config: { seed: 3 } }, { env_config: { seed: 4 }, max_turns: 1 }, { env_config: { seed: 6 } }]
      const served = (seed: number, rowsOf: ReadonlyArray<Record<string, unknown>>, sampling?: Record<string, unknown>) =>
        request(`${server.url}/v1/rollouts`, { body: { requests: rowsOf, seed, ...(sampling === undefined ? {} : { sampling }) } })
          .pipe(Effect.map(resultsOf))
      const why = (l: Api.RolloutResult) =>
        l.finish_reasons.at(-1) === "length" ? "length" : l.end_reason === "max_turns" ? "max_turns" : null
      const check = (got: Record<string, any>, lines: ReadonlyArray<Api.RolloutResult>, ends: ReadonlyArray<number> | undefined) => {
        expect(got.truncated).toEqual(lines.map(why))
        lines.forEach((l, i) => {
          const ids = l.token_ids!
          const ended = ends !== undefined && ends.includes(ids.at(-1)!)
          const added = ends === undefined ? [] : why(l) === null && !ended ? [ends[0]] : why(l) !== null && ended ? [10] : []
          expect(got.completion_ids[i], `row ${i}`).toEqual([...ids, ...added])
          expect(got.env_mask[i]).toEqual([...l.loss_mask!, ...added.map(() => 0)])
          expect(got.logprobs[i]).toEqual([...l.logprobs!.map((x) => x ?? 0), ...added.map(() => 0)])
        })
      }
      const plainLines = yield* served(8, truncationRows)
      expect(plainLines.map(why)).toContain("max_turns")
      expect(plainLines.map(why)).toContain(null)
      check(out.truncation_plain, plainLines, undefined)
      check(out.truncation_eos_unused, yield* served(9, truncationRows), [999999, 999998])
      expect(out.truncation_eos_unused.completion_ids.some((ids: Array<number>) => ids.at(-1) === 999999)).toBe(true)
      const cut = yield* served(8, truncationRows.slice(0, 1), { max_tokens: 2 })
      expect(cut.map(why)).toEqual(["length"])
      check(out.truncation_length, cut, [999999])
      check(out.truncation_eos_last, plainLines, [plainLines[1].token_ids!.at(-1)!])
      expect(out.truncation_eos_last.completion_ids[1].at(-1)).toBe(10)

      expect(out.bad_batch).toMatchObject({ status: 400 })
      expect(out.bad_batch.message).toContain("requests[0].env_config.size")
      expect(out.no_tokens.message).toContain("has no token sequence")
      expect(out.failed.message).toContain("1 of 1 trajectories failed")
      expect(out.failed.error.failed[0].error._tag).toBe("EnvError")
      expect(out.version).toEqual({ version: 3, previous: 0 })
      expect(out.versioned).toEqual([3])
    }).pipe(Effect.scoped))
})

describe.skipIf(!python)("clients/python/effect_gym.py with tools", () => {
  it.live("rows offer tools; results, tool_calls(result) and rollout_func carry the calls, their answers and the masked token sequence", () =>
    Effect.gen(function*() {
      const { server } = yield* tokenPath
      const { stdout } = yield* Effect.promise(() =>
        run("python3", [toolsDriver, server.url, JSON.stringify([lookup])], { timeout: 120_000 })
      )
      const out = JSON.parse(stdout) as Record<string, any>
      const [line] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ tools: [lookup] }], seed: 1 } }))
      expect(out.streamed.map(comparable)).toEqual([comparable(line as unknown as Record<string, unknown>)])
      const call = line.messages[1].tool_calls![0]
      const calls = [{ turn: 1, id: call.id, name: "lookup", arguments: "{\"key\": \"a\"}", result: "value-of-a" }]
      expect(out.tool_calls).toEqual([calls])
      // rollout_func: the tools offered on its rows; the calls for the reward functions; the token
      // fields are the server's sequence, the tool's answer masked out (env_mask 0)
      const got = out.rollout_func
      expect(got.tool_calls).toEqual([calls])
      expect(got.completion_ids).toEqual([line.token_ids])
      expect(got.env_mask).toEqual([line.loss_mask])
      expect(got.env_mask[0].filter((m: number) => m === 0).length).toBeGreaterThan(0)
      expect(got.env_reward).toEqual([1])
      // a bad tool: the server's 400, naming it, as the client's error
      expect(out.refused).toMatchObject({ status: 400, path: "requests[0].tools[0].function.description" })
      expect(out.refused.message).toContain("requests[0].tools[0].function.description")
    }))
})
