/**
 * `openenv serve` exposes an env's own tools over MCP (issue 30, item 4, third bullet): after a
 * reset, `tools/list` has them beside `act` and `restart` (their JSON Schema as `inputSchema`), and
 * `tools/call` of one is an assistant tool call stepped through the env, answered with its tool
 * message. Played here on the built-in calculator, in a session, to its reward.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Calculator from "../../src/envs/Calculator.js"
import { Sudoku } from "../../src/envs/Sudoku.js"
import { serve, settled } from "./helpers.js"

interface RpcAnswer {
  readonly result?: {
    readonly tools?: ReadonlyArray<{ readonly name: string; readonly inputSchema: unknown }>
    readonly content?: ReadonlyArray<{ readonly text: string }>
    readonly structured_content?: { readonly reward: number | null; readonly done: boolean }
    readonly session_id?: string
  }
  readonly error?: { readonly code: number; readonly message: string }
}

const rpcAt = (url: string) => {
  let id = 0
  return (method: string, params: Record<string, unknown> = {}) =>
    Effect.promise(async () => {
      const response = await fetch(`${url}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", method, params, id: ++id })
      })
      return (await response.json()) as RpcAnswer
    })
}

describe("openenv serve: an env's tools over MCP", () => {
  it.live("calculator: its tools are listed after a reset and called through the env, to a rewarded answer", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Calculator.Calculator, maxConcurrentEnvs: 2 })
      const rpc = rpcAt(server.url)
      const session = (yield* rpc("openenv/session/create")).result!.session_id!
      const restarted = yield* rpc("tools/call", { session_id: session, name: "restart", arguments: { seed: 9 } })
      expect(restarted.result?.structured_content).toMatchObject({ done: false })
      const listed = yield* rpc("tools/list", { session_id: session })
      expect(listed.result?.tools?.map((t) => t.name)).toEqual(["act", "restart", "lookup", "calculate"])
      expect(listed.result?.tools?.[2].inputSchema).toMatchObject({ type: "object", required: ["item"] })
      // the episode's order comes from its reset: seed 9 as the env's seed
      const order = Calculator.task(9, 3).order
      let total = 0
      for (const line of order) {
        const price = yield* rpc("tools/call", { session_id: session, name: "lookup", arguments: { item: line.item } })
        expect(price.result?.content?.[0].text).toBe(String(line.price))
        expect(price.result?.structured_content).toMatchObject({ reward: 0, done: false })
        const product = yield* rpc("tools/call", {
          session_id: session,
          name: "calculate",
          arguments: { op: "multiply", a: line.quantity, b: line.price }
        })
        total += Number(product.result?.content?.[0].text)
      }
      // a bad call is answered by the tool, not an RPC error
      const bad = yield* rpc("tools/call", { session_id: session, name: "calculate", arguments: { op: "modulo", a: 1, b: 2 } })
      expect(bad.result?.content?.[0].text).toMatch(/^Error: InvalidArguments: op: /)
      const answered = yield* rpc("tools/call", { session_id: session, name: "act", arguments: { message: `<answer>${total}</answer>` } })
      expect(answered.result?.structured_content).toMatchObject({ reward: 1, done: true })
      expect((yield* rpc("tools/call", { session_id: session, name: "nope" })).error).toMatchObject({
        code: -32602,
        message: "Tool not found: nope"
      })
      yield* rpc("openenv/session/close", { session_id: session })
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("a text env lists only act and restart, as before", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 1 })
      const listed = yield* rpcAt(server.url)("tools/list")
      expect(listed.result?.tools?.map((t) => t.name)).toEqual(["act", "restart"])
    }))
})
