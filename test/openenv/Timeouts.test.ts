/**
 * Issue 28, item 11: the servers' timeouts are what they say.
 *
 * - `bodyTimeout` counts from the end of the headers (Node's own `requestTimeout` counts from the
 *   request's start, so a body sent right after its headers had `headerTimeout + bodyTimeout`).
 * - SIGTERM ends `openenv serve` within its close timeout (5 s) when a WebSocket client never
 *   answers the close handshake (ws waited its own 30 s).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as net from "node:net"
import { Sudoku } from "../../src/envs/Sudoku.js"
import { serve } from "./helpers.js"

/** Sends a request's headers at once, then its body a byte every 200 ms; the reply and when the socket closed. */
const dribble = (port: number) =>
  Effect.promise(() =>
    new Promise<{ readonly reply: string; readonly afterHeaders: number }>((resolve) => {
      let reply = ""
      let sent = 0
      const socket = net.connect(port, "127.0.0.1", () => {
        socket.write("POST /reset HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n")
        sent = Date.now()
        const timer = setInterval(() => socket.write(" "), 200)
        socket.on("close", () => {
          clearInterval(timer)
          resolve({ reply, afterHeaders: Date.now() - sent })
        })
      })
      socket.on("data", (chunk) => void (reply += String(chunk)))
      socket.on("error", () => undefined)
      // a server that never cuts it: the test fails below instead of hanging
      setTimeout(() => socket.destroy(), 20_000)
    })
  )

describe("issue 28 #11: timeouts as they are documented", () => {
  it.live("a slow body gets 408 at bodyTimeout after its headers, not at headerTimeout + bodyTimeout", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 1, headerTimeout: "6 seconds", bodyTimeout: "1 second" })
      const { afterHeaders, reply } = yield* dribble(server.port)
      expect(reply.split("\r\n")[0]).toBe("HTTP/1.1 408 Request Timeout")
      expect(afterHeaders).toBeGreaterThanOrEqual(900)
      // Node's requestTimeout alone cut it at 7 s (checked each second)
      expect(afterHeaders).toBeLessThan(3000)
      // a request whose body comes in time is answered
      const ok = yield* Effect.promise(() => fetch(`${server.url}/reset`, { method: "POST", body: "{}" }))
      expect(ok.status).toBe(200)
    }), 30_000)
})
