/** Hostile-user regressions for the inference options' messages. */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "../cli.js"

describe("options of another mode, with --mode swift-rollout", () => {
  const dir = tmp()

  it.live("--tito-check and --model name both modes that take them (colocate takes them too)", () =>
    Effect.gen(function*() {
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
      for (const extra of [["--tito-check"], ["--model", "m.gguf"]]) {
        const result = yield* cli(
          "run", "--dataset", dataset, "--gym-env", "frozen_lake", "--output", path.join(dir, "out.jsonl"),
          "--mode", "swift-rollout", "--base-url", "http://127.0.0.1:1", ...extra
        )
        expect(result.code).toBe(2)
        expect(result.stderr).toBe(`error: ${extra[0]}: only with --mode server or --mode colocate (this run has --mode swift-rollout)`)
      }
    }))
})

describe("--wizard without a terminal (it waited forever for input at end of stdin)", () => {
  const binPath = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
  for (const [name, args] of [["run", ["run", "--wizard"]], ["the top level", ["--wizard"]], ["envs", ["envs", "--wizard"]]] as const) {
    it(`${name}: refused at once (exit 2, the option named), stdin at its end or a pipe`, () => {
      for (const input of ["", "\n\n\n"]) {
        const result = spawnSync(process.execPath, [binPath, ...args], { input, timeout: 30_000, encoding: "utf8" })
        expect(result.signal, `${name}: still waiting after 30 s`).toBeNull()
        expect(result.status).toBe(2)
        expect(result.stderr).toContain("--wizard: asks its questions on a terminal, and stdin is not one")
      }
    })
  }
})
