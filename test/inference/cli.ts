/** Runs the CLI in-process with a full argv (as `test/Cli.test.ts` does) and reads completion logs. */
import { NodeContext } from "@effect/platform-node"
import { Console, Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { main } from "../../src/cli/Cli.js"
import { CompletionLine } from "../../src/CompletionsLog.js"

export const cli = (...args: Array<string>) =>
  Effect.gen(function*() {
    const out: Array<string> = []
    const err: Array<string> = []
    const console: Console.Console = {
      ...globalThis.console,
      [Console.TypeId]: Console.TypeId,
      unsafe: globalThis.console,
      log: (...xs: ReadonlyArray<unknown>) => Effect.sync(() => void out.push(xs.join(" "))),
      error: (...xs: ReadonlyArray<unknown>) => Effect.sync(() => void err.push(xs.join(" ")))
    } as unknown as Console.Console
    const code = yield* main(["node", "effect-gym", ...args]).pipe(Effect.withConsole(console))
    return { code, stdout: out.join("\n"), stderr: err.join("\n") }
  }).pipe(Effect.provide(NodeContext.layer))

export const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-inference-"))

export const readLines = (file: string) =>
  fs.readFileSync(file, "utf8").trim().split("\n").map((line) => Schema.decodeUnknownSync(CompletionLine)(JSON.parse(line)))

/** A FrozenLake dataset of `rows` rows (seeds 0..rows-1). */
export const frozenLakeDataset = (dir: string, rows: number, size = 4) => {
  const file = path.join(dir, "frozen_lake.jsonl")
  const lines = Array.from({ length: rows }, (_, seed) => JSON.stringify({ env_config: { seed, size } }))
  fs.writeFileSync(file, lines.join("\n") + "\n")
  return file
}
