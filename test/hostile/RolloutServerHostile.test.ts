/** Hostile-user regressions for the rollout server's /v1/rollouts (found by attacking it over HTTP). */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Stream } from "effect"
import * as RolloutClient from "../../src/rollout-server/RolloutClient.js"
import { start } from "../rollout-server/helpers.js"

describe("POST /v1/rollouts, hostile input", () => {
  it.scopedLive("a batch with no rows is an empty NDJSON stream to a client that asked for one", () =>
    Effect.gen(function*() {
      const server = yield* start()
      for (const batch of [{ requests: [] }]) {
        const response = yield* Effect.promise(() =>
          fetch(`${server.url}/v1/rollouts`, {
            method: "POST",
            headers: { "content-type": "application/json", accept: "application/x-ndjson" },
            body: JSON.stringify(batch)
          })
        )
        expect(response.status).toBe(200)
        expect(response.headers.get("content-type")).toContain("application/x-ndjson")
        expect(response.headers.get("x-effect-gym-trajectories")).toBe("0")
        expect(yield* Effect.promise(() => response.text())).toBe("")
        const rollouts = yield* RolloutClient.make({ baseUrl: server.url }).pipe(Effect.provide(NodeHttpClient.layer))
        expect(Chunk.toReadonlyArray(yield* Stream.runCollect(rollouts.stream(batch)))).toEqual([])
        expect(yield* rollouts.run(batch)).toEqual([])
      }
    }))
})
