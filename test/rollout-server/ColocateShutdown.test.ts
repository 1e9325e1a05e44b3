/**
 * Graceful shutdown in colocate mode (issue 13): `serve --mode colocate` (node-llama-cpp loaded in
 * the process, with its signal-exit handlers) drains on SIGTERM and on SIGINT and exits 0, as the
 * other modes do, with a trajectory in flight answered before it exits.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import * as LlamaCpp from "../../src/inference/LlamaCpp.js"
import { tmp } from "../inference/cli.js"
import { writeTinyLlama } from "../inference/gguf.js"
import { launch } from "../cli.js"

const support = await Effect.runPromise(LlamaCpp.probe)
const modelPath = writeTinyLlama(path.join(tmp(), "tiny.gguf"))

describe.skipIf(!support.available)("serve --mode colocate: graceful shutdown", () => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`${signal} with a trajectory in flight: it is answered, the server exits 0`, { timeout: 120_000 }, async () => {
      const server = await launch([
        "serve", "--mode", "colocate", "--model", modelPath, "--env", "frozen_lake", "--port", "0", "--max-turns", "3",
        "--max-tokens", "16", "--shutdown-grace", "60"
      ])
      try {
        // one request first: the model is loaded (node-llama-cpp and its signal handlers are in the process)
        const first = await fetch(`${server.url}/v1/rollouts`, { method: "POST", body: JSON.stringify({ requests: [{ env_config: { seed: 1 } }] }) })
        expect(first.status).toBe(200)
        const inFlight = fetch(`${server.url}/v1/rollouts`, {
          method: "POST",
          body: JSON.stringify({ requests: [{ env_config: { seed: 2 } }, { env_config: { seed: 3 } }] })
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as Array<{ end_reason: string }> }))
        await new Promise((done) => setTimeout(done, 100))
        server.child.kill(signal)
        expect(await server.exit, server.stderr()).toEqual([0, null])
        const answered = await inFlight
        expect(answered.status).toBe(200)
        expect(answered.body.map((t) => t.end_reason).every((reason) => reason !== "cancelled")).toBe(true)
        expect(server.stderr()).toContain("rollout server: stopped")
      } finally {
        if (server.child.exitCode === null) server.child.kill("SIGKILL")
      }
    })
  }
})
