/**
 * Issue 28, item 11: SIGTERM ends `openenv serve` within its close timeout (5 s) when a WebSocket
 * client never answers the close handshake (the WebSocket library waited its own 30 s), through
 * the built binary as users stop it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { launchScoped } from "../cli.js"
import { deafClient } from "./helpers.js"

describe("issue 28 #11: openenv serve, SIGTERM with a client that never closes", () => {
  it.live("exits 0 within about 5 s, not ws's 30 s", () =>
    Effect.gen(function*() {
      const server = yield* launchScoped(["openenv", "serve", "--env", "sudoku", "--port", "0", "--in-process-envs"])
      const socket = yield* Effect.promise(() => deafClient(server.url))
      // the session is open (counted) before the signal
      yield* Effect.promise(async () => {
        for (let i = 0; i < 100; i++) {
          const sessions = await fetch(`${server.url}/sessions`).then((r) => r.json() as Promise<{ active_sessions: number }>)
          if (sessions.active_sessions === 1) return
          await new Promise((r) => setTimeout(r, 50))
        }
      })
      const started = Date.now()
      server.child.kill("SIGTERM")
      const exit = yield* Effect.promise(() => server.exit)
      const took = Date.now() - started
      socket.destroy()
      expect(exit).toEqual([0, null])
      expect(took, server.stderr()).toBeLessThan(9000)
    }).pipe(Effect.scoped), 60_000)
})
