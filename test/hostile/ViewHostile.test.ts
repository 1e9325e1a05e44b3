/** Hostile-user regressions for `effect-gym view` (found by attacking the command line). */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli } from "../cli.js"
import * as Logs from "../view/logs.js"

describe("effect-gym view, hostile input", () => {
  const dir = Logs.tmp()

  it.live("--html refuses a path that is the same file as a log under another name (symlink, hard link)", () =>
    Effect.gen(function*() {
      const log = path.join(dir, "precious.jsonl")
      fs.writeFileSync(log, "")
      const symlink = path.join(dir, "alias.jsonl")
      fs.symlinkSync(log, symlink)
      const hardlink = path.join(dir, "hard.jsonl")
      fs.linkSync(log, hardlink)
      for (const out of [symlink, hardlink]) {
        const result = yield* cli("view", log, "--html", out)
        expect(result.code).toBe(2)
        expect(result.stderr).toBe(`error: --html: ${out} is a log given to view: it would be overwritten`)
        expect(fs.readFileSync(log, "utf8")).toBe("")
      }
    }))
})
