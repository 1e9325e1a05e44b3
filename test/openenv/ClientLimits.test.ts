/**
 * Issue 28, item 10: the OpenEnv client's limits and retries.
 *
 * - The per-server limit was keyed by the URL as written: rows naming `localhost:P` and
 *   `127.0.0.1:P` got two limits, and a server sized for one met twice as many sessions (8 ×
 *   `CapacityReached` in the report).
 * - Connection failures were retried 5 times (about 7.75 s); a Python server's restart under load
 *   took 22-31 s. The budget is now a time (`connectRetryBudget`, 60 s by default).
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Result } from "effect"
import * as Socket from "effect/socket/Socket"
import { TestClock } from "effect/testing"
import * as Env from "../../src/Env.js"
import * as OpenEnvPool from "../../src/openenv/OpenEnvPool.js"
import * as OpenEnvScheduler from "../../src/openenv/OpenEnvScheduler.js"
import { type WebSocket, WebSocketServer } from "ws"
import { freePort, OpenEnvClient, provideSockets, serve } from "./helpers.js"

/** An env whose step takes a while, so sessions overlap. */
const Slow = Env.fromClass({
  name: "slow",
  class: class {
    reset() {
      return { observation: "hi", info: {} }
    }
    async step() {
      await new Promise((r) => setTimeout(r, 150))
      return { observation: "ok", reward: 0, done: false, info: {} }
    }
  }
})

describe("issue 28 #10: one limit per server, whatever its URL says", () => {
  it("serverKey: the loopback's names are one server; case, default ports and trailing slashes do not matter", () => {
    const key = OpenEnvPool.serverKey
    expect(key("ws://localhost:8000/ws")).toBe(key("ws://127.0.0.1:8000/ws"))
    expect(key("ws://LOCALHOST:8000/ws/")).toBe(key("ws://[::1]:8000/ws"))
    expect(key("ws://app.localhost:8000/ws")).toBe(key("ws://127.0.0.1:8000/ws"))
    expect(key("ws://127.1:8000/ws")).toBe(key("ws://127.0.0.1:8000/ws"))
    expect(key("ws://Example.com/ws")).toBe(key("ws://example.com:80/ws"))
    expect(key("wss://example.com/ws")).toBe(key("wss://example.com:443/ws"))
    expect(key("ws://127.0.0.1:8000/ws")).not.toBe(key("ws://127.0.0.1:8001/ws"))
    expect(key("ws://example.com/ws")).not.toBe(key("wss://example.com/ws"))
    expect(key("ws://example.com/a/ws")).not.toBe(key("ws://example.com/b/ws"))
  })

  it.live("rows naming localhost:P and 127.0.0.1:P share the server's limit: no CapacityReached on a server sized for it", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Slow, maxConcurrentEnvs: 2 })
      const port = server.port
      const pool = yield* OpenEnvPool.make({ maxConcurrentEnvs: 2 })
      const definition = OpenEnvScheduler.env()
      const trajectory = (host: string) =>
        Effect.scoped(Effect.gen(function*() {
          const create = definition.prepare({ base_url: `http://${host}:${port}` })
          if (Result.isFailure(create)) return yield* Effect.die(create.failure)
          const env = yield* Effect.provideService(create.success, OpenEnvPool.OpenEnvPool, pool)
          yield* env.reset({ trajectoryId: "t", seed: 1, messages: [], dataDict: {}, envConfig: {} })
          yield* env.step([{ role: "assistant", content: "x" }])
          return "done"
        }))
      const hosts = ["localhost", "127.0.0.1", "localhost", "127.0.0.1", "localhost", "127.0.0.1"]
      const results = yield* Effect.forEach(hosts, (host) => Effect.result(trajectory(host)), { concurrency: "unbounded" })
      expect(results.map((r) => (Result.isSuccess(r) ? r.success : r.failure.message))).toEqual(hosts.map(() => "done"))
      expect(server.sessions.rejected).toBe(0)
      expect(server.sessions.maxSeen).toBe(2)
    }).pipe(Effect.scoped), 30_000)
})

describe("issue 28 #10: connection retries ride out a server's restart", () => {
  it.effect("by default a connection refused for 30 s (clock time) is retried until the server is up, then the session opens", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const pool = yield* OpenEnvPool.make()
      const url = `ws://127.0.0.1:${port}/ws`
      const opening = yield* Effect.forkChild(
        OpenEnvClient.connectAndReset(base, {}, { ...pool.client, ...pool.retryFor(url) }).pipe(
          Effect.provideService(Socket.WebSocketConstructor, pool.webSocketConstructor),
          Effect.scoped
        )
      )
      /** Moves the clock on by `seconds`, a second at a time, with real time for the sockets between. */
      const pass = (seconds: number) =>
        Effect.forEach(Array.from({ length: seconds }), () =>
          Effect.andThen(TestClock.adjust(Duration.seconds(1)), Effect.promise(() => new Promise((r) => setTimeout(r, 15)))), { discard: true })
      yield* pass(30)
      // still trying (5 retries, the old default, were spent after about 7.75 s)
      expect(opening.pollUnsafe()).toBeUndefined()
      // the server comes back (a plain WebSocket server: nothing of it runs on the test's clock)
      yield* Effect.acquireRelease(
        Effect.promise(() =>
          new Promise<WebSocketServer>((resolve) => {
            const wss: WebSocketServer = new WebSocketServer({ host: "127.0.0.1", port }, () => resolve(wss))
            wss.on("connection", (ws: WebSocket) =>
              ws.on("message", () => ws.send(JSON.stringify({ type: "observation", data: { observation: { prompt: "hi" }, reward: 0, done: false } }))))
          })
        ),
        (wss) => Effect.promise(() => new Promise<void>((resolve) => {
          for (const client of wss.clients) client.terminate()
          wss.close(() => resolve())
        }))
      )
      for (let i = 0; i < 20 && opening.pollUnsafe() === undefined; i++) yield* pass(1)
      const exit = opening.pollUnsafe()
      expect(exit !== undefined && Exit.isSuccess(exit), String(exit)).toBe(true)
    }).pipe(Effect.scoped, provideSockets), 30_000)

  it.effect("past the budget it gives up with the connection's error", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const pool = yield* OpenEnvPool.make({ connectRetryBudget: "20 seconds" })
      const opening = yield* Effect.forkChild(
        OpenEnvClient.connectAndReset(`http://127.0.0.1:${port}`, {}, { ...pool.client, ...pool.retryFor(`ws://127.0.0.1:${port}/ws`) }).pipe(
          Effect.provideService(Socket.WebSocketConstructor, pool.webSocketConstructor),
          Effect.scoped
        )
      )
      for (let i = 0; i < 40 && opening.pollUnsafe() === undefined; i++) {
        yield* TestClock.adjust(Duration.seconds(1))
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 15)))
      }
      const exit = yield* Fiber.await(opening)
      expect(Exit.isFailure(exit)).toBe(true)
      expect(String(exit)).toContain("ConnectFailed")
    }).pipe(Effect.scoped, provideSockets), 30_000)
})
