/** Hostile-user regressions for `effect-gym view` (found by attacking the command line). */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
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

describe("effect-gym run --view, hostile input", () => {
  const dir = Logs.tmp()

  it.live("a --view-port in use stops the run before its log is opened: an earlier log under --output is kept, and the error names --view-port", () =>
    Effect.gen(function*() {
      const blocker = net.createServer()
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => blocker.listen(0, "127.0.0.1", () => resolve((blocker.address() as net.AddressInfo).port))))
      try {
        const dataset = path.join(dir, "rows.jsonl")
        fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
        const output = path.join(dir, "earlier.jsonl")
        fs.writeFileSync(output, "an earlier run's log\n")
        const result = yield* cli(
          "run", "--dataset", dataset, "--gym-env", "frozen_lake", "--num-generations", "2", "--output", output,
          "--overwrite", "--view", "--view-port", String(port)
        )
        expect(result.code).toBe(2)
        expect(result.stderr).toMatch(new RegExp(`^error: --view-port: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`))
        expect(fs.readFileSync(output, "utf8")).toBe("an earlier run's log\n")
      } finally {
        blocker.close()
      }
    }))
})
