/**
 * OpenEnv's runtime validator (`validate_running_environment` in `src/openenv/cli/_validation.py`
 * of meta-pytorch/OpenEnv), its six criteria checked as it checks them, against this project's
 * server: the same requests, the same conditions. (The real validator was also run against
 * `effect-gym openenv serve`: 6 of 6; see the README.) Plus the HTTP simulation endpoints and MCP
 * methods the criteria point at, with the Python server's shapes.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Sudoku } from "../../src/envs/Sudoku.js"
import { call, post, serve, settled } from "./helpers.js"

const isDict = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

describe("OpenEnv's runtime validator, criterion by criterion", () => {
  it.live("6 of 6", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const base = server.url
      const passed: Record<string, boolean> = {}
      // 1. openapi_version_available: GET /openapi.json 200 with a string info.version
      const openapi = yield* call(`${base}/openapi.json`)
      passed.openapi_version_available = openapi.status === 200 && isDict(openapi.json) && isDict(openapi.json.info) &&
        typeof openapi.json.info.version === "string"
      // 2. health_endpoint
      const health = yield* call(`${base}/health`)
      passed.health_endpoint = health.status === 200 && isDict(health.json) && health.json.status === "healthy"
      // 3. metadata_endpoint: string name and description
      const metadata = yield* call(`${base}/metadata`)
      passed.metadata_endpoint = metadata.status === 200 && isDict(metadata.json) && typeof metadata.json.name === "string" &&
        typeof metadata.json.description === "string"
      // 4. schema_endpoint: dict action, observation, state
      const schema = yield* call(`${base}/schema`)
      passed.schema_endpoint = schema.status === 200 && isDict(schema.json) && isDict(schema.json.action) &&
        isDict(schema.json.observation) && isDict(schema.json.state)
      // 5. mcp_endpoint: POST /mcp with {} answers 200 with jsonrpc "2.0"
      const mcp = yield* post(`${base}/mcp`, {})
      passed.mcp_endpoint = mcp.status === 200 && isDict(mcp.json) && mcp.json.jsonrpc === "2.0"
      // 6. mode_endpoint_consistency: /reset in paths -> simulation -> /step and /state too
      const paths = isDict(openapi.json) && isDict(openapi.json.paths) ? openapi.json.paths : {}
      passed.mode_endpoint_consistency = "/reset" in paths ? "/step" in paths && "/state" in paths : !("/step" in paths) && !("/state" in paths)
      expect(passed).toEqual({
        openapi_version_available: true,
        health_endpoint: true,
        metadata_endpoint: true,
        schema_endpoint: true,
        mcp_endpoint: true,
        mode_endpoint_consistency: true
      })
      // the profile the validator reports for a version 1.x: openenv-http/1.x
      expect(openapi.json.info.version.startsWith("1.")).toBe(true)
      // EnvironmentMetadata forbids extra fields: exactly its six
      expect(Object.keys(metadata.json).sort()).toEqual(["author", "description", "documentation_url", "name", "readme_content", "version"])
    }))

  it.live("HTTP simulation: POST /reset, POST /step (a fresh env each), GET /state; 422 with FastAPI's detail", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 2 })
      const reset = yield* post(`${server.url}/reset`, { seed: 3, episode_id: "e" })
      expect(reset.status).toBe(200)
      expect(reset.json).toMatchObject({ reward: 0, done: false })
      expect(typeof reset.json.observation.prompt).toBe("string")
      // no body at all is a reset with no kwargs; unknown kwargs are ignored, as Python does
      expect((yield* call(`${server.url}/reset`, { method: "POST" })).status).toBe(200)
      expect((yield* post(`${server.url}/reset`, { seed: "7", whatever: 1 })).status).toBe(200)
      // the body is a ResetRequest: a seed pydantic cannot read as an integer is FastAPI's 422
      expect((yield* post(`${server.url}/reset`, { seed: "abc", whatever: 1 })).status).toBe(422)
      const step = yield* post(`${server.url}/step`, { action: { message: "[1 1 1]" } })
      expect(step.status).toBe(200)
      expect(step.json).toMatchObject({ done: false })
      const invalid = yield* post(`${server.url}/step`, { action: { text: "x" } })
      expect(invalid.status).toBe(422)
      expect(invalid.json.detail[0]).toMatchObject({ type: "missing", loc: ["body", "action", "message"] })
      expect((yield* post(`${server.url}/step`, "not json")).status).toBe(422)
      const state = yield* call(`${server.url}/state`)
      expect(state.status).toBe(200)
      expect(state.json).toMatchObject({ episode_id: null, step_count: 0 })
      expect(yield* settled(server.sessions)).toBe(0)
    }))

  it.live("MCP: tools/list, tools/call (act), sessions, and the Python server's JSON-RPC errors", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 1 })
      const rpc = (body: unknown) => Effect.map(post(`${server.url}/mcp`, body), (r) => r.json)
      expect(yield* Effect.map(post(`${server.url}/mcp`, "{"), (r) => r.json)).toEqual({
        jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error", data: null }
      })
      expect((yield* rpc({})).error.code).toBe(-32600)
      expect(yield* rpc({ jsonrpc: "2.0", method: "nope", id: 1 })).toEqual({
        jsonrpc: "2.0", id: 1, error: { code: -32601, message: "Method not found: nope", data: null }
      })
      expect((yield* rpc({ jsonrpc: "2.0", method: "tools/list", params: [], id: 2 })).error).toMatchObject({ code: -32602, message: "Params must be an object" })
      const tools = yield* rpc({ jsonrpc: "2.0", method: "tools/list", id: 3 })
      expect(tools.result.tools.map((t: any) => t.name)).toEqual(["act", "restart"])
      // stateless call: a fresh env plays the move
      const stateless = yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: { name: "act", arguments: { message: "[1 1 1]" } }, id: 4 })
      expect(stateless.result).toMatchObject({ is_error: false, structured_content: { done: false } })
      // a session: created (counted against capacity), used, closed
      const created = yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 5 })
      const sessionId = created.result.session_id as string
      expect(typeof sessionId).toBe("string")
      expect(server.sessions.active).toBe(1)
      const full = yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 6 })
      expect(full.error).toMatchObject({ code: -32000, data: { active_sessions: 1, max_sessions: 1 } })
      const restarted = yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: { session_id: sessionId, name: "restart", arguments: { seed: 7 } }, id: 7 })
      expect(restarted.result.structured_content).toMatchObject({ reward: 0, done: false })
      const acted = yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: { session_id: sessionId, name: "act", arguments: { message: "[1 1 1]" } }, id: 8 })
      expect(acted.result.structured_content.done).toBe(false)
      expect((yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: { session_id: sessionId, name: "step" }, id: 9 })).error)
        .toMatchObject({ code: -32602, message: "Tool not found: step" })
      expect(yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: sessionId }, id: 10 })).toEqual({
        jsonrpc: "2.0", id: 10, result: { session_id: sessionId, closed: true }
      })
      expect(server.sessions.active).toBe(0)
      expect((yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: sessionId }, id: 11 })).error)
        .toMatchObject({ code: -32602, message: `Unknown session_id: ${sessionId}` })
    }))
})
