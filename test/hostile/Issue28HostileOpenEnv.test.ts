/**
 * Issue 28's hostile pass (after the merge), item 10: the per-server client limit is keyed by the
 * normalized server; names of one server that still got two limits.
 */
import { describe, expect, it } from "@effect/vitest"
import { serverKey } from "../../src/openenv/OpenEnvPool.js"

describe("issue 28 item 10, hostile: one server, one key", () => {
  it("a name's final dot, and the unspecified addresses (which reach the loopback), are the same server", () => {
    const loopback = serverKey("ws://127.0.0.1:8000/ws")
    for (const url of ["ws://localhost.:8000/ws", "ws://0.0.0.0:8000/ws", "ws://[::]:8000/ws", "http://LOCALHOST.:8000/ws/"]) {
      expect(serverKey(url), url).toBe(loopback)
    }
    expect(serverKey("ws://envs.example.:9000/ws")).toBe(serverKey("ws://ENVS.example:9000/ws"))
    // still two: another port, another path, another host
    expect(serverKey("ws://0.0.0.0:8001/ws")).not.toBe(loopback)
    expect(serverKey("ws://localhost:8000/other")).not.toBe(loopback)
    expect(serverKey("ws://envs.example:9000/ws")).not.toBe(serverKey("ws://envs.example.org:9000/ws"))
  })
})
