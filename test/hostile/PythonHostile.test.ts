/** Hostile-user regressions for clients/python/effect_gym.py against a live server (skipped without python3). */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile, spawnSync } from "node:child_process"
import * as path from "node:path"
import { promisify } from "node:util"
import { start } from "../rollout-server/helpers.js"

const python = spawnSync("python3", ["--version"]).status === 0
const client = path.resolve(import.meta.dirname, "../../clients/python")
const run = promisify(execFile)

const script = `
import json, sys
sys.path.insert(0, ${JSON.stringify(client)})
from effect_gym import Client, EffectGymError, make_rollout_func
c = Client(sys.argv[1])
out = {}
out["empty_stream"] = list(c.rollouts([]))
out["empty_func"] = make_rollout_func(c)([])
try:
    list(c.rollouts([{"env_config": {"seed": 1, "size": 1}}]))
except EffectGymError as e:
    out["bad"] = str(e)
print(json.dumps(out))
`

describe.skipIf(!python)("clients/python/effect_gym.py, hostile input", () => {
  it.live("an empty batch gives no results (the server answers [] as JSON, not NDJSON); an error names its field once", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const { stdout } = yield* Effect.promise(() => run("python3", ["-c", script, server.url], { timeout: 60_000 }))
      const out = JSON.parse(stdout) as Record<string, any>
      expect(out.empty_stream).toEqual([])
      expect(out.empty_func).toEqual({
        prompt_ids: [], completion_ids: [], logprobs: [], env_mask: [], env_reward: [], num_turns: [], policy_version: [], truncated: [], tool_calls: []
      })
      expect(out.bad).toMatch(/^HTTP 400: requests\[0\]\.env_config\.size: must be/)
      expect(out.bad.split("requests[0].env_config.size").length).toBe(2)
    }).pipe(Effect.scoped))
})
