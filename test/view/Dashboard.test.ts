import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import type { DashboardSnapshot } from "../../src/view/Protocol.js"
import { request, start } from "../rollout-server/helpers.js"

const bearer = { authorization: "Bearer s3cret" }
const basic = (user: string, password: string) => ({ authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}` })

/** The first `snapshot` event of the dashboard's stream (sent once a second) that `until` accepts. */
const snapshot = (url: string, headers: Record<string, string>, until: (s: DashboardSnapshot) => boolean) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const response = await fetch(`${url}/dashboard/events`, { headers, signal: controller.signal })
    const reader = response.body!.getReader()
    let text = ""
    for (;;) {
      const { value } = await reader.read()
      text += new TextDecoder().decode(value)
      for (let m = /event: snapshot\ndata: (.*)\n\n/.exec(text); m !== null; m = /event: snapshot\ndata: (.*)\n\n/.exec(text)) {
        text = text.slice(m.index + m[0].length)
        const s = JSON.parse(m[1]) as DashboardSnapshot
        if (until(s)) {
          controller.abort()
          return s
        }
      }
    }
  })

describe("effect-gym serve: /dashboard", () => {
  it.live("sits behind the server's key: a bearer token, or (for a browser) the key as the Basic password; the API stays bearer-only", () =>
    Effect.gen(function*() {
      const server = yield* start({ apiKey: Redacted.make("s3cret") })
      const anonymous = yield* request(`${server.url}/dashboard`)
      expect(anonymous.status).toBe(401)
      // a browser asks for a user name and password when it sees this
      expect(anonymous.headers.get("www-authenticate")).toBe("Basic realm=\"effect-gym dashboard\", charset=\"UTF-8\"")
      expect((yield* request(`${server.url}/dashboard`, { headers: basic("me", "wrong") })).status).toBe(401)
      expect((yield* request(`${server.url}/dashboard/events`, { headers: basic("me", "wrong") })).status).toBe(401)
      const page = yield* request(`${server.url}/dashboard`, { headers: basic("anyone", "s3cret") })
      expect(page.status).toBe(200)
      expect(page.text).toContain("\"mode\":\"dashboard\"")
      expect((yield* request(`${server.url}/dashboard`, { headers: bearer })).status).toBe(200)
      // the rollout API does not take Basic
      const api = yield* request(`${server.url}/v1/rollouts`, { method: "POST", body: { requests: [{ env_config: { seed: 1 } }] }, headers: basic("me", "s3cret") })
      expect(api.status).toBe(401)
      expect(api.headers.get("www-authenticate")).toBe("Bearer")
    }))

  it.live("counts what the server did and lists failed trajectories with their request's uuid", () =>
    Effect.gen(function*() {
      const server = yield* start({ apiKey: Redacted.make("s3cret") })
      const reply = yield* request(`${server.url}/v1/rollouts`, {
        method: "POST",
        headers: bearer,
        body: { requests: [{ env_config: { name: "counting", fail: "step" }, num_generations: 2, uuid: "bad-row" }, { env_config: { seed: 2 }, num_generations: 2 }] }
      })
      expect(reply.status).toBe(200)
      const s = yield* snapshot(server.url, bearer, (s) => s.completed === 4)
      expect(s).toMatchObject({ completed: 4, admitted: 4, failed: 2, trajectoriesInFlight: 0, requestsInFlight: 0, draining: false })
      expect(s.recentFailures.map((f) => [f.uuid, f.tag, f.env])).toEqual([["bad-row", "EnvError", "counting"], ["bad-row", "EnvError", "counting"]])
      expect(s.recentFailures[0].message).toContain("injected step failure")
    }))
})
