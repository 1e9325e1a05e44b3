/** Hostile-user regressions: --strict-openai and a top_k asked for on the command line or in a request. */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import { cli, tmp } from "../cli.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import { request, start } from "../rollout-server/helpers.js"

const infer = (requestConfig: Record<string, unknown>) => ({
  infer_requests: [{ messages: [{ role: "user", content: "x" }], data_dict: { env_config: { seed: 3 } }, uuid: "u1" }],
  request_config: requestConfig
})

describe("--strict-openai, hostile input", () => {
  const dir = tmp()

  it.live("run: --top-k or --chat-template-kwargs with --strict-openai is an option error, not a silent drop", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["--top-k", "3"], "error: --top-k: not part of the OpenAI API: --strict-openai never sends it"],
        [["--chat-template-kwargs", "{\"enable_thinking\": false}"], "error: --chat-template-kwargs: not part of the OpenAI API: --strict-openai never sends it"]
      ]
      for (const [extra, message] of cases) {
        const result = yield* cli(
          "run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "out.jsonl"),
          "--mode", "server", "--base-url", server.baseUrl, "--model", "m", "--strict-openai", ...extra
        )
        expect(result.stderr).toBe(message)
        expect(result.code).toBe(2)
      }
      expect(server.state.requests.length).toBe(0)
      // -1 asks for no limit: nothing to send, nothing to refuse
      const ok = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "out.jsonl"), "--num-generations", "1",
        "--mode", "server", "--base-url", server.baseUrl, "--model", "m", "--strict-openai", "--top-k", "-1"
      )
      expect(ok.code).toBe(0)
    }))

  it.live("serve: /infer/ and /v1/rollouts refuse a request's top_k with a 400 naming it (it was dropped, answered 200)", () =>
    Effect.gen(function*() {
      const backend = yield* FakeOpenAi.make
      const strict = yield* OpenAiCompat.make({ baseUrl: backend.baseUrl, model: "m", strict: true, tokenPath: "off" })
      const server = yield* start({ policy: strict })
      const refused = yield* request(`${server.url}/infer/`, { body: infer({ top_k: 5 }) })
      expect(refused.status).toBe(400)
      expect(refused.text).toContain("request_config.top_k")
      const batch = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { seed: 3 }, sampling: { top_k: 5 } }] } })
      expect(batch.status).toBe(400)
      expect(batch.text).toContain("requests[0].sampling.top_k")
      expect(backend.state.requests.length).toBe(0)
      // the trainer's default (-1, no limit) passes
      const ok = yield* request(`${server.url}/infer/`, { body: infer({ top_k: -1, min_p: 0 }) })
      expect(ok.status).toBe(200)
      for (const r of backend.state.requests) expect(r.body).not.toHaveProperty("top_k")
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))
})
