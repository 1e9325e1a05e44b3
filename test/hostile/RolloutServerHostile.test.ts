/** Hostile-user regressions for the rollout server's /v1/rollouts (found by attacking it over HTTP). */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as http from "node:http"
import * as RolloutClient from "../../src/rollout-server/RolloutClient.js"
import { start } from "../rollout-server/helpers.js"

describe("POST /v1/rollouts, hostile input", () => {
  it.live("a batch with no rows is an empty NDJSON stream to a client that asked for one", () =>
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
        const rollouts = yield* RolloutClient.make({ baseUrl: server.url }).pipe(Effect.provide(NodeHttpClient.layerNodeHttp))
        expect(yield* Stream.runCollect(rollouts.stream(batch))).toEqual([])
        expect(yield* rollouts.run(batch)).toEqual([])
      }
    }))
})

describe("the rollout server and web pages of other sites", () => {
  it.live("a cross-site POST (text/plain, no preflight) or a rebound Host is refused with a 403; trainers' clients and the dashboard pass", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const port = new URL(server.url).port
      const post = (path: string, headers: Record<string, string>, body: string) =>
        Effect.promise(() => fetch(`${server.url}${path}`, { method: "POST", headers, body }).then(async (r) => ({ status: r.status, text: await r.text() })))
      // a page on another site: simple request, the browser sends its Origin
      const csrf = yield* post("/v1/policy-version", { "content-type": "text/plain", origin: "https://evil.example" }, "{\"version\": 42}")
      expect(csrf.status).toBe(403)
      expect(csrf.text).toContain("\"type\":\"forbidden_origin\"")
      const version = yield* Effect.promise(() => fetch(`${server.url}/v1/policy-version`).then((r) => r.json() as Promise<{ version: number }>))
      expect(version.version).toBe(0)
      const rollouts = yield* post("/v1/rollouts", { "content-type": "text/plain", origin: "null" }, "{\"requests\": [{\"env_config\": {\"seed\": 1}}]}")
      expect(rollouts.status).toBe(403)
      // DNS rebinding: the page's own origin, but a Host that is not this machine
      const rebound = yield* Effect.promise(() =>
        new Promise<number>((resolve, reject) => {
          const req = http.request({ host: "127.0.0.1", port, path: "/info", headers: { host: `evil.example:${port}` } }, (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          })
          req.on("error", reject)
          req.end()
        })
      )
      expect(rebound).toBe(403)
      // a trainer's client (no Origin) and the dashboard's own page (its own origin) pass
      expect((yield* post("/v1/policy-version", { "content-type": "application/json" }, "{\"version\": 3}")).status).toBe(200)
      const own = yield* Effect.promise(() => fetch(`${server.url}/dashboard`, { headers: { origin: `http://127.0.0.1:${port}` } }))
      expect(own.status).toBe(200)
    }))
})
