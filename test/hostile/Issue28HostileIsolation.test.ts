/**
 * Issue 28's hostile pass (after the merge), items 15 with 8/18: envs in worker threads. A result
 * nested a few thousand levels deep crossed from the worker (its serializer had the stack) but not
 * into the main thread (its deserializer overflowed: a `messageerror`), and the batch it travelled
 * in was lost: every other call answered in the same turn of the worker waited for --env-timeout
 * and failed (60 innocent trajectories of 600, 60 s), and serve answered a JSON batch with a closed
 * connection and an NDJSON stream with lines missing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, launchScoped, readLines, tmp } from "../cli.js"
import { request } from "../rollout-server/helpers.js"

const plugin = path.resolve(import.meta.dirname, "../fixtures/plugins/deep_results.mjs")

describe("issue 28 items 15 and 8, hostile: a deep result from an isolated env fails its trajectory alone", () => {
  it.live("run --isolate-envs: the deep rows fail at once; no other trajectory waits or fails", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const rows = Array.from({ length: 40 }, (_, i) =>
        JSON.stringify({
          env_config: i === 10 ? { where: "step", depth: 5000 } : i === 20 ? { where: "reset", depth: 5000 } : {}
        }))
      fs.writeFileSync(path.join(dir, "rows.jsonl"), rows.join("\n") + "\n")
      const output = path.join(dir, "out.jsonl")
      const started = Date.now()
      const { code, stderr } = yield* cli(
        "run", "--plugin", plugin, "--env", "deep_results", "--dataset", path.join(dir, "rows.jsonl"), "--num-generations",
        "2", "--output", output, "--isolate-envs", "--env-workers", "1", "--env-timeout", "20"
      )
      const elapsed = Date.now() - started
      const lines = readLines(output)
      expect(lines.length, stderr).toBe(80)
      const failed = lines.filter((l) => l.error !== null).map((l) => l.row)
      expect(failed.sort((a, b) => a - b), stderr).toEqual([10, 10, 20, 20])
      for (const line of lines.filter((l) => l.error !== null)) expect(line.error?.message).toContain("1000 levels")
      expect(elapsed, "no call waited for --env-timeout").toBeLessThan(15_000)
      // (exit 1: some trajectories failed)
      expect(code).toBe(1)
    }), 60_000)

  it.live("serve (isolated by default): JSON and NDJSON answer every trajectory, the deep one failed", () =>
    Effect.gen(function*() {
      const server = yield* launchScoped([
        "serve", "--port", "0", "--plugin", plugin, "--env", "deep_results", "--env-workers", "1", "--env-timeout", "20"
      ])
      const body = {
        requests: [{ env_config: {}, num_generations: 2 }, { env_config: { where: "step", depth: 5000 }, num_generations: 2 }]
      }
      for (const accept of ["application/json", "application/x-ndjson"]) {
        const reply = yield* request(`${server.url}/v1/rollouts`, { headers: { accept }, body })
        expect(reply.status, accept).toBe(200)
        const lines = (accept === "application/json"
          ? JSON.parse(reply.text)
          : reply.text.trim().split("\n").map((l) => JSON.parse(l))) as Array<{ row: number; error: unknown }>
        expect(lines.length, `${accept}: ${reply.text.slice(0, 300)}`).toBe(4)
        expect(lines.filter((l) => l.error !== null).map((l) => l.row), accept).toEqual([1, 1])
      }
    }).pipe(Effect.scoped), 60_000)
})
