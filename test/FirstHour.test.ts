/**
 * Issue 29 (the first hour): the obvious mistakes fail fast, with one error that says what to do.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "./cli.js"

describe("fail fast on the obvious (issue 29, item 5)", () => {
  it.effect("rows that name no env, and no --gym-env: one error naming the option and the line, exit 2, nothing written", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, "\n" + Array.from({ length: 128 }, (_, i) => `{"env_config":{"seed":${i}}}\n`).join(""))
      const output = path.join(dir, "out.jsonl")
      const run = yield* cli("run", "--dataset", dataset, "--output", output)
      expect(run.code).toBe(2)
      expect(run.stderr.split("\n")).toHaveLength(1)
      expect(run.stderr).toContain("--gym-env")
      expect(run.stderr).toContain(`${dataset}:2 has no env_config.name`)
      expect(fs.existsSync(output)).toBe(false)
    }))

  it.effect("rows that name their env run without --gym-env; a bad first line is left to the run (a bad row, exit 1)", () =>
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
      // with --gym-env, rows without a name are its
      const plain = path.join(dir, "plain.jsonl")
      fs.writeFileSync(plain, `{"env_config":{"seed":1}}\n`)
      const given = yield* cli("run", "--dataset", plain, "--gym-env", "frozen_lake", "--output", path.join(dir, "c.jsonl"), "--num-generations", "2")
      expect(given.code).toBe(0)
    }))
})
