/**
 * Issue 28, item 9: the smaller differences from OpenEnv's Python server (`http_server.py` of
 * meta-pytorch/OpenEnv) that outside checks found, each as a client meets it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Sudoku } from "../../src/envs/Sudoku.js"
import * as Env from "../../src/Env.js"
import { call, post, RawPeer, serve, settled, wsUrl } from "./helpers.js"

const open = (url: string) => Effect.promise(() => RawPeer.open(wsUrl(url)))
const ask = (peer: RawPeer, frame: object | string) =>
  Effect.promise(() => peer.request(typeof frame === "string" ? frame : JSON.stringify(frame))) as Effect.Effect<any>

/** An env that answers a `state` frame: any frame that JSON.parse reads (whitespace is free). */
const Echo = Env.fromClass({
  name: "echo",
  class: class {
    reset() {
      return { observation: "hi", info: {} }
    }
    step() {
      return { observation: "ok", reward: 0, done: false, info: {} }
    }
  }
})

describe("issue 28 #9: openenv serve, the smaller protocol differences", () => {
  it.live("an openenv/session/create frame on /ws answers with the WebSocket session's own id: no second session, none left after the close", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const peer = yield* open(server.url)
      const created = yield* ask(peer, { type: "mcp", data: { jsonrpc: "2.0", method: "openenv/session/create", id: 1 } })
      const id = created.data.result.session_id
      expect(typeof id, JSON.stringify(created)).toBe("string")
      expect(server.sessions.active).toBe(1)
      // asked again: the same id (the connection's)
      expect((yield* ask(peer, { type: "mcp", data: { jsonrpc: "2.0", method: "openenv/session/create", id: 2 } })).data.result)
        .toEqual({ session_id: id })
      // and the Python server's refusal to close it through MCP
      expect((yield* ask(peer, { type: "mcp", data: { jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: id }, id: 3 } })).data)
        .toMatchObject({ id: 3, error: { code: -32600, message: "Cannot close active WebSocket-managed session via MCP method" } })
      peer.close()
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("Sudoku: after an invalid first move the prompt is the whole transcript (the game is still at turn 0), as TextArena's server sends it", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 1 })
      const peer = yield* open(server.url)
      const reset = yield* ask(peer, { type: "reset", data: { seed: 3 } })
      const step = yield* ask(peer, { type: "step", data: { message: "[10 1 1]" } })
      const observation = step.data.observation
      // OpenEnv's TextArena server: prompt = the first message, stripped, while state.turn is 0
      expect(observation.prompt).toBe(observation.messages[0].content.trim())
      expect(observation.prompt.startsWith(reset.data.observation.prompt)).toBe(true)
      expect(observation.prompt).toContain("You attempted an invalid move.")
      peer.close()
    }))

  it.live("--require-reset: state before a reset is an error too, as step is", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2, requireReset: true })
      const peer = yield* open(server.url)
      expect(yield* ask(peer, { type: "state" })).toEqual({
        type: "error",
        data: { code: "EXECUTION_ERROR", message: "no episode: send reset before state" }
      })
      expect((yield* ask(peer, { type: "reset", data: { seed: 1 } })).type).toBe("observation")
      expect((yield* ask(peer, { type: "state" }))).toMatchObject({ type: "state", data: { step_count: 0 } })
      // an MCP session opens without an env (no reset yet), as a /ws session does
      const created = yield* post(`${server.url}/mcp`, { jsonrpc: "2.0", method: "openenv/session/create", id: 1 })
      expect(typeof created.json.result.session_id, JSON.stringify(created.json)).toBe("string")
      peer.close()
    }))

  it.live("HTTP /reset: the body is OpenEnv's ResetRequest (seed \"abc\" is FastAPI's 422; \"12\" and 12.0 are taken, as pydantic takes them)", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const bad = yield* post(`${server.url}/reset`, { seed: "abc" })
      // pydantic's own words (ResetRequest.model_validate_json, pydantic 2.13)
      expect([bad.status, bad.json]).toEqual([422, {
        detail: [{ type: "int_parsing", loc: ["body", "seed"], msg: "Input should be a valid integer, unable to parse string as an integer", input: "abc" }]
      }])
      expect((yield* post(`${server.url}/reset`, { seed: -1, episode_id: 5 })).json).toEqual({
        detail: [
          { type: "greater_than_equal", loc: ["body", "seed"], msg: "Input should be greater than or equal to 0", input: -1, ctx: { ge: 0 } },
          { type: "string_type", loc: ["body", "episode_id"], msg: "Input should be a valid string", input: 5 }
        ]
      })
      expect((yield* post(`${server.url}/reset`, { seed: 1.5 })).json.detail[0].type).toBe("int_from_float")
      expect((yield* post(`${server.url}/reset`, { seed: "12.5" })).json.detail[0].type).toBe("int_parsing")
      // the same board for 12, "12", " 12 ", "1_2" and 12.0, as pydantic reads them all as 12
      const boards = yield* Effect.forEach([12, "12", " 12 ", "1_2", 12.0, "12.00"], (seed) =>
        Effect.map(post(`${server.url}/reset`, { seed, whatever: 1 }), (r) => [r.status, r.json?.observation?.prompt]))
      for (const board of boards) expect(board).toEqual(boards[0])
      expect(boards[0][0]).toBe(200)
      // a /ws reset's data is not a ResetRequest there either: taken as it is
      const peer = yield* open(server.url)
      expect((yield* ask(peer, { type: "reset", data: { seed: "abc" } })).type).toBe("observation")
      peer.close()
    }))

  it.live("hostile: a seed past 2^53 (kept exact as a bigint by the JSON parser) seeds a board, over HTTP and /ws, as Python's int does", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const body = `{"seed": 123456789012345678901234}`
      const http = yield* post(`${server.url}/reset`, body)
      expect(http.status, http.text).toBe(200)
      const peer = yield* open(server.url)
      const ws = yield* ask(peer, `{"type": "reset", "data": ${body}}`)
      expect(ws.type, JSON.stringify(ws)).toBe("observation")
      expect(ws.data.observation.prompt).toBe(http.json.observation.prompt)
      peer.close()
    }))

  it.live("HTTP /mcp: a session_id that is not a string names no session (\"Unknown session_id: 5\"), it does not play on a fresh env", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const rpc = (params: object) =>
        Effect.map(post(`${server.url}/mcp`, { jsonrpc: "2.0", method: "tools/call", params, id: 1 }), (r) => r.json)
      expect((yield* rpc({ session_id: 5, name: "act", arguments: { message: "[1 1 1]" } })).error)
        .toMatchObject({ code: -32602, message: "Unknown session_id: 5" })
      expect((yield* rpc({ session_id: true, name: "act", arguments: { message: "[1 1 1]" } })).error)
        .toMatchObject({ code: -32602, message: "Unknown session_id: True" })
      // falsy values are no session_id, as `if requested_session_id:` reads them: a fresh env
      expect((yield* rpc({ session_id: 0, name: "act", arguments: { message: "[1 1 1]" } })).result).toMatchObject({ is_error: false })
      const close = yield* post(`${server.url}/mcp`, { jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: 7 }, id: 2 })
      expect(close.json.error).toMatchObject({ code: -32602, message: "Unknown session_id: 7" })
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("a 200,000-deep JSON array: a clear 4xx (or error frame) on every route, never a RangeError", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const deep = "[".repeat(200_000) + "]".repeat(200_000)
      // unbalanced, and with a long run of digits (the exact parser's path)
      const texts = [deep, "[".repeat(200_000), `{"seed": 12345678901234567890, "x": ${deep}}`]
      for (const text of texts) {
        for (const route of ["/reset", "/step", "/mcp"]) {
          const answer = yield* post(`${server.url}${route}`, text)
          expect(answer.text, `${route} ${text.slice(0, 30)}`).not.toMatch(/RangeError|call stack/i)
          if (route === "/mcp") {
            expect(answer.json.error.code, route).toBe(-32700)
          } else {
            expect(answer.status, route).toBe(422)
            expect(answer.json.detail[0].type).toBe("json_invalid")
          }
        }
        const peer = yield* open(server.url)
        const frame = yield* ask(peer, text)
        expect(frame, text.slice(0, 30)).toMatchObject({ type: "error", data: { code: "INVALID_JSON" } })
        expect(JSON.stringify(frame)).not.toMatch(/RangeError|call stack/i)
        // the session goes on
        expect((yield* ask(peer, { type: "state" })).type).toBe("state")
        peer.close()
      }
      expect((yield* call(`${server.url}/health`)).status).toBe(200)
    }), 60_000)

  it.live("GET /docs: a page of the routes, as FastAPI serves one there", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const docs = yield* call(`${server.url}/docs`)
      expect(docs.status).toBe(200)
      expect(docs.type).toContain("text/html")
      for (const route of ["/reset", "/step", "/state", "/mcp", "/schema", "/openapi.json"]) expect(docs.text).toContain(route)
    }))

  it.live("maxFrameBytes above ws's own 100 MiB cap: a frame between the two is answered, not closed with 1009", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Echo, maxConcurrentEnvs: 1, maxFrameBytes: 110 * 1024 * 1024 })
      const peer = yield* open(server.url)
      // (a binary frame: answered with an error frame once it has arrived whole, without a text's decoding)
      peer.ws.send(Buffer.alloc(101 * 1024 * 1024))
      const frames = yield* Effect.promise(() => peer.waitFrames(1, 30_000))
      expect([peer.closeCode, frames.map((f) => JSON.parse(f).data.message)]).toEqual([undefined, ["Invalid JSON: binary frames are not supported"]])
      expect((yield* ask(peer, { type: "state" })).type).toBe("state")
      peer.close()
    }), 60_000)
})
