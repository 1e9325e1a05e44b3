/** Hostile-user regressions for server mode's start (found by attacking it with flaky servers). */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"

/** An OpenAI-compatible server that drops the first `drops` connections asking for /v1/models. */
const flaky = (drops: number) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ url: string; server: http.Server; models: () => number }>((resolve) => {
        let models = 0
        const server = http.createServer((req, res) => {
          if (req.url === "/v1/models") {
            models++
            if (models <= drops) return void req.socket.destroy()
            res.setHeader("content-type", "application/json")
            return void res.end(JSON.stringify({ object: "list", data: [{ id: "m", object: "model" }] }))
          }
          res.statusCode = 404
          res.end("{}")
        })
        server.listen(0, "127.0.0.1", () =>
          resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, server, models: () => models }))
      })
    ),
    ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
  )

describe("server mode at start, hostile servers", () => {
  it.live("one dropped connection on GET /v1/models is asked again, not taken as a server that is down", () =>
    Effect.gen(function*() {
      const server = yield* flaky(1)
      yield* OpenAiCompat.make({ baseUrl: server.url, model: "m", tokenPath: "off", retries: 0 }).pipe(
        Effect.provide(NodeHttpClient.layerUndici)
      )
      expect(server.models()).toBe(2)
      // a server that never answers is still one clear error
      const dead = yield* flaky(100)
      const error = yield* Effect.flip(
        OpenAiCompat.make({ baseUrl: dead.url, model: "m", tokenPath: "off", retries: 0 }).pipe(Effect.provide(NodeHttpClient.layerUndici))
      )
      expect(error.reason).toBe("Unavailable")
      expect(error.detail).toContain("cannot reach the inference server")
      expect(dead.models()).toBe(3)
    }))
})
