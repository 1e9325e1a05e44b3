/**
 * Issue 29 (the first hour): the obvious mistakes fail fast, with one error that says what to do.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { Sudoku } from "../src/envs/Sudoku.js"
import { cli, tmp } from "./cli.js"
import { freePort, serve } from "./openenv/helpers.js"

describe("fail fast on the obvious (issue 29, item 5)", () => {
  it.effect("rows that name no env, and no --env: one error naming the option and the line, exit 2, nothing written", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, "\n" + Array.from({ length: 128 }, (_, i) => `{"env_config":{"seed":${i}}}\n`).join(""))
      const output = path.join(dir, "out.jsonl")
      const run = yield* cli("run", "--dataset", dataset, "--output", output)
      expect(run.code).toBe(2)
      expect(run.stderr.split("\n")).toHaveLength(1)
      expect(run.stderr).toContain("--env")
      expect(run.stderr).toContain(`${dataset}:2 has no env_config.name`)
      expect(fs.existsSync(output)).toBe(false)
    }))

  it.effect("rows that name their env run without --env; a bad first line is left to the run (a bad row, exit 1)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const named = path.join(dir, "named.jsonl")
      fs.writeFileSync(named, `{"env_config":{"name":"frozen_lake","seed":1}}\n`)
      const ok = yield* cli("run", "--dataset", named, "--output", path.join(dir, "a.jsonl"), "--num-generations", "2")
      expect(ok.code).toBe(0)
      const bad = path.join(dir, "bad.jsonl")
      fs.writeFileSync(bad, `not json\n{"env_config":{"name":"frozen_lake","seed":1}}\n`)
      const run = yield* cli("run", "--dataset", bad, "--output", path.join(dir, "b.jsonl"), "--num-generations", "2")
      expect(run.code).toBe(1)
      expect(run.stderr).toContain("bad row")
      // with --env, rows without a name are its
      const plain = path.join(dir, "plain.jsonl")
      fs.writeFileSync(plain, `{"env_config":{"seed":1}}\n`)
      const given = yield* cli("run", "--dataset", plain, "--env", "frozen_lake", "--output", path.join(dir, "c.jsonl"), "--num-generations", "2")
      expect(given.code).toBe(0)
    }))
})

describe("an OpenEnv server that is not there (issue 29, item 5)", () => {
  it.live("the first row's server refuses connections: the run is refused in seconds naming the URL, exit 2, nothing written", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const port = yield* Effect.promise(() => freePort())
      const base = `http://127.0.0.1:${port}`
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"messages":[{"role":"user","content":"Play"}],"env_config":{"name":"openenv","base_url":"${base}"}}\n`.repeat(64))
      const output = path.join(dir, "out.jsonl")
      const started = Date.now()
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", output, "--policy", "random")
      expect(run.code).toBe(2)
      expect(run.stderr).toContain(`env_config.base_url ${base}: no OpenEnv server answers there (ECONNREFUSED)`)
      expect(run.stderr).toContain(`${dataset}:1`)
      expect(Date.now() - started).toBeLessThan(30_000)
      expect(fs.existsSync(output)).toBe(false)
    }))

  it.live("with the server up, the run goes on (a real openenv server on loopback)", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku, maxConcurrentEnvs: 4 })
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"messages":[{"role":"user","content":"Play"}],"env_config":{"name":"openenv","base_url":"${server.url}"}}\n`)
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", path.join(dir, "out.jsonl"), "--num-generations", "2", "--max-turns", "2")
      expect(run.stderr, run.stderr).not.toContain("no OpenEnv server answers")
      expect(run.stdout, run.stderr).toContain("trajectories")
      expect([0, 1], run.stdout + run.stderr).toContain(run.code)
      expect(fs.readFileSync(path.join(dir, "out.jsonl"), "utf8").trim().split("\n")).toHaveLength(2)
    }).pipe(Effect.scoped))
})
