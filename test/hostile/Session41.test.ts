/**
 * Session 41's hostile pass over the session's fixes: messages that contradict the value given.
 * Both fail on main at b5dd5bd.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import * as RunSpec from "../../src/RunSpec.js"
import { start } from "../rollout-server/helpers.js"

describe("session 41, hostile: limits and their messages", () => {
  it.live("the rollout server's num_generations / max_turns past 2^53 say the limit, not 'expected a whole number >= 1' (1e16 is a whole number >= 1)", () =>
    Effect.gen(function*() {
      const server = yield* start({ policy: "random" })
      for (const [field, value, limit] of [["num_generations", 1e16, "4096"], ["max_turns", 2 ** 53, "10000"]] as const) {
        const response = yield* Effect.promise(() =>
          fetch(`${server.url}/v1/rollouts`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ requests: [{ env_config: { seed: 3 }, [field]: value }] })
          }).then(async (r) => ({ status: r.status, text: (await r.text()).slice(0, 400) }))
        )
        expect(response.status, field).toBe(400)
        // it reads: 'requests[0].num_generations: expected a whole number >= 1, got 10000000000000000'
        expect(response.text, field).toContain(`at most ${limit}`)
      }
    }))

  it("a timeout of \"1e9 seconds\" (the cap as the message writes it) is not refused with 'must be ... of at most 1e9 seconds'", () => {
    for (const step of ["1e9 seconds", "1e3 seconds"]) {
      const result = RunSpec.decode({ timeouts: { step } }, "fields")
      // either taken, or refused with a message that does not say the value is over the cap it equals
      const message = Result.isFailure(result) ? result.failure.message : ""
      expect(message, step).not.toMatch(/at most 1e9 seconds .*got "1e[39] seconds"/)
    }
  })
})
