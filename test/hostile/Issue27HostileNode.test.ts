/**
 * Issue 27's hostile pass (2026-12-03): the command line on a Node older than `engines` says
 * (integration layer: it runs the built binary with the system's Node, skipped when that is >= 24).
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"

const BIN = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
const DATASET = path.resolve(import.meta.dirname, "../../examples/frozen_lake.jsonl")
const SYSTEM_NODE = "/usr/bin/node"

const major = (() => {
  const out = spawnSync(SYSTEM_NODE, ["-p", "process.versions.node"], { encoding: "utf8" })
  return out.status === 0 ? Number(out.stdout.trim().split(".")[0]) : undefined
})()

describe("issue 27, hostile, Node (2026-12-03)", () => {
  it.skipIf(major === undefined || major >= 24)(
    "on Node < 24 the command line says which Node it needs, exit 2 (server mode died with undici's stack trace, exit 3)",
    () => {
      const out = spawnSync(SYSTEM_NODE, [
        BIN, "run", "--dataset", DATASET, "--gym-env", "frozen_lake", "--mode", "server",
        "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--output", "/dev/null"
      ], { encoding: "utf8" })
      expect(out.stderr).not.toMatch(/\n\s+at /)
      expect(out.stderr).toMatch(/Node(\.js)? >= ?24/)
      expect(out.status).toBe(2)
    }
  )
})
