/**
 * `openenv serve` behaves as the Python server by default (issue 13), the stricter variants behind
 * options: a step or state before any reset plays on a fresh env, reset kwargs are not
 * type-checked (`seed: "abc"`), a quiet session is not reaped; `requireReset`, `strictReset` and
 * `idleTimeout` turn each stricter. And the frame limit: a text frame over `maxFrameBytes` bytes
 * (UTF-8 bytes, not characters) closes the connection with 1009.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { Sudoku } from "../../src/envs/Sudoku.js"
import { RawPeer, serve, wsUrl } from "./helpers.js"

const open = (url: string) => Effect.promise(() => RawPeer.open(wsUrl(url)))
const ask = (peer: RawPeer, frame: object) => Effect.promise(() => peer.request(JSON.stringify(frame))) as Effect.Effect<any>

describe("openenv serve: Python defaults, stricter behind options", () => {
  it.live("default: step and state before reset play on a fresh env; seed \"abc\" is accepted; a quiet session stays", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const peer = yield* open(server.url)
      const state = yield* ask(peer, { type: "state" })
      expect(state).toMatchObject({ type: "state", data: { episode_id: null, step_count: 0 } })
      const step = yield* ask(peer, { type: "step", data: { message: "[1 1 1]" } })
      expect(step.type, JSON.stringify(step)).toBe("observation")
      const reset = yield* ask(peer, { type: "reset", data: { seed: "abc" } })
      expect(reset.type, JSON.stringify(reset)).toBe("observation")
      // no idle reaping by default: after a quiet while the session still answers
      yield* Effect.sleep("1500 millis")
      expect(peer.closeCode).toBeUndefined()
      expect((yield* ask(peer, { type: "state" })).type).toBe("state")
      peer.close()
    }))

  it.live("--require-reset, --strict-reset, --idle-timeout: each stricter", () =>
    Effect.gen(function*() {
      const server = yield* serve({
        env: Sudoku,
        maxConcurrentEnvs: 2,
        requireReset: true,
        strictReset: true,
        idleTimeout: Duration.millis(600)
      })
      const peer = yield* open(server.url)
      expect(yield* ask(peer, { type: "step", data: { message: "[1 1 1]" } })).toEqual({
        type: "error",
        data: { code: "EXECUTION_ERROR", message: "no episode: send reset before step" }
      })
      const bad = yield* ask(peer, { type: "reset", data: { seed: "abc" } })
      expect(bad).toMatchObject({ type: "error", data: { code: "VALIDATION_ERROR" } })
      expect(JSON.stringify(bad)).toContain("seed")
      expect((yield* ask(peer, { type: "reset", data: { seed: 3 } })).type).toBe("observation")
      // quiet for longer than the idle timeout: reaped with SESSION_ERROR
      const reaped = yield* Effect.promise(() => peer.waitClose(5000))
      expect(reaped).toBeDefined()
      expect(peer.frames.map((f) => JSON.parse(f)).at(-1)).toMatchObject({ type: "error", data: { code: "SESSION_ERROR" } })
    }))

  it.live("--max-frame-bytes: a frame over the limit in UTF-8 bytes closes with 1009; one under it is answered", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2, maxFrameBytes: 1000 })
      const fine = yield* open(server.url)
      expect((yield* ask(fine, { type: "step", data: { message: "x".repeat(900) } })).type).toBe("observation")
      // 400 characters, 1200 bytes
      const big = yield* open(server.url)
      big.ws.send(JSON.stringify({ type: "step", data: { message: "€".repeat(400) } }))
      expect(yield* Effect.promise(() => big.waitClose(5000))).toBe(1009)
      expect((yield* ask(fine, { type: "state" })).type).toBe("state")
      fine.close()
    }))
})
