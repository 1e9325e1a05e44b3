/**
 * The command line's help (issue 29, item 3): every option says what it is, its default and
 * whether it repeats; long lists come in groups; plain text off a terminal; a mistyped command
 * gets a "did you mean".
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { renamedOptions, withoutNoColor } from "../src/cli/argv.js"
import { closest, formatHelp } from "../src/cli/help.js"
import { cli } from "./cli.js"

const COMMANDS: ReadonlyArray<ReadonlyArray<string>> = [
  ["run"], ["runner"], ["dataset", "frozen-lake"], ["envs"], ["check-env"], ["openenv", "serve"], ["serve"], ["view"]
]

/** The option rows of a help text: `--name ...  description`, with their description. */
const optionRows = (text: string): Array<{ readonly flag: string; readonly description: string }> => {
  const lines = text.split("\n")
  const rows: Array<{ flag: string; description: string }> = []
  for (let i = 0; i < lines.length; i++) {
    const match = /^ {2}(--?[a-z][a-z0-9-]*)(?:, -\w)?(?: (\S+))?(?: {2,}(.*))?$/.exec(lines[i])
    if (match === null) continue
    // a long left column puts the description on the next line
    const description = match[3] ?? (/^ {10,}(\S.*)$/.exec(lines[i + 1] ?? "")?.[1] ?? "")
    rows.push({ flag: match[1], description })
  }
  return rows
}

describe("help", () => {
  it.effect("every option of every command has a description; defaults and repeatable options are said", () =>
    Effect.gen(function*() {
      for (const command of COMMANDS) {
        const help = yield* cli(...command, "--help")
        expect(help.code).toBe(0)
        const rows = optionRows(help.stdout)
        expect(rows.length, command.join(" ")).toBeGreaterThan(2)
        for (const row of rows) expect(row.description.trim(), `${command.join(" ")} ${row.flag}`).not.toBe("")
        // a repeatable option is never called required
        for (const row of rows.filter((r) => r.description.includes("(repeatable)"))) {
          expect(row.description, `${command.join(" ")} ${row.flag}`).not.toContain("(required)")
        }
      }
      const run = optionRows((yield* cli("run", "--help")).stdout)
      const said = (flag: string) => run.find((row) => row.flag === flag)?.description
      expect(said("--seed")).toContain("(default 0)")
      expect(said("--num-generations")).toContain("(default 8)")
      expect(said("--max-turns")).toContain("(default 10)")
      expect(said("--concurrency")).toContain("(default 64)")
      expect(said("--output")).toContain("(default completions.jsonl)")
      expect(said("--plugin")).toContain("(repeatable)")
      expect(said("--dataset")).toContain("(required)")
    }))

  it.effect("run --help comes in groups, each option once; the usage line is short", () =>
    Effect.gen(function*() {
      const text = (yield* cli("run", "--help")).stdout
      const headings = text.split("\n").filter((line) => /^[A-Z][A-Z ]+$/.test(line))
      expect(headings).toEqual([
        "DESCRIPTION", "USAGE", "DATASET AND ENV OPTIONS", "GENERATION OPTIONS", "INFERENCE OPTIONS",
        "OUTPUT AND RESUME OPTIONS", "LIMITS AND TIMEOUTS OPTIONS", "OTHER OPTIONS", "GLOBAL FLAGS"
      ])
      const flags = optionRows(text).map((row) => row.flag)
      expect(new Set(flags).size).toBe(flags.length)
      expect(flags).toContain("--dataset")
      const usage = text.split("\n")[text.split("\n").indexOf("USAGE") + 1]
      expect(usage.length).toBeLessThan(80)
    }))

  it.effect("help off a terminal has no colour codes; colour is only for a terminal", () =>
    Effect.gen(function*() {
      for (const command of COMMANDS) expect((yield* cli(...command, "--help")).stdout).not.toContain("\x1b")
      const doc = {
        description: "d",
        usage: "x [flags]",
        flags: [{ name: "a", aliases: [], type: "string", description: Option.some("an option"), required: false }],
        annotations: undefined as never
      }
      expect(formatHelp(doc, true)).toContain("\x1b[")
      expect(formatHelp(doc, false)).not.toContain("\x1b")
      expect(formatHelp(doc, false)).toContain("  -a string  an option")
      // a description from a plugin cannot write escapes to the terminal
      const hostile = { ...doc, description: "evil\x1b]0;title\x07 text" }
      expect(formatHelp(hostile, false)).not.toMatch(/[\x07\x1b]/)
    }))

  it("--no-color is taken off the arguments (not after --)", () => {
    expect(withoutNoColor(["run", "--no-color", "--help"])).toEqual({ args: ["run", "--help"], noColor: true })
    expect(withoutNoColor(["run", "--", "--no-color"])).toEqual({ args: ["run", "--", "--no-color"], noColor: false })
  })

  it.effect("--no-color is accepted by every command", () =>
    Effect.gen(function*() {
      const help = yield* cli("envs", "--no-color", "--help")
      expect(help.code).toBe(0)
      expect(help.stdout).toContain("List the registered envs")
    }))

  it.effect("a mistyped command gets a did-you-mean; a word far from any gets none", () =>
    Effect.gen(function*() {
      const rnu = yield* cli("rnu")
      expect(rnu.code).toBe(2)
      expect(rnu.stderr).toContain("Did you mean 'run'?")
      const lake = yield* cli("dataset", "frozen-lak", "--rows", "1")
      expect(lake.code).toBe(2)
      expect(lake.stderr).toContain("Did you mean 'frozen-lake'?")
      const far = yield* cli("zzzzzz")
      expect(far.code).toBe(2)
      expect(far.stderr).not.toContain("Did you mean")
      expect(closest("chek-env", ["check-env", "envs"])).toBe("check-env")
      expect(closest("sevre", ["serve", "view"])).toBe("serve")
      expect(closest("x".repeat(1000), ["run"])).toBeUndefined()
    }))
})

describe("one vocabulary (issue 29, item 4)", () => {
  it.effect("--env on run and serve (as on openenv serve); --gym-env still works, with a warning", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-vocabulary-"))
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
      const now = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "a.jsonl"), "--num-generations", "2")
      expect([now.code, now.stderr]).toEqual([0, ""])
      const old = yield* cli("run", "--dataset", dataset, "--gym-env", "frozen_lake", "--output", path.join(dir, "b.jsonl"), "--num-generations", "2")
      expect(old.code).toBe(0)
      expect(old.stderr).toBe("warning: --gym-env is an old name: use --env (--gym-env will be removed in a later release)")
      expect(fs.readFileSync(path.join(dir, "b.jsonl"), "utf8").split("\n").length).toBe(3)
      for (const command of [["run"], ["serve"]]) {
        expect((yield* cli(...command, "--help")).stdout, command.join(" ")).toMatch(/--env, --gym-env /)
      }
    }))

  it("the model server's key is --model-api-key-env everywhere; a server's own key is --api-key-env; the server's cap is --max-sessions", () => {
    expect(renamedOptions(["run", "--api-key-env", "K"])).toEqual([
      "warning: --api-key-env is an old name: use --model-api-key-env (--api-key-env will be removed in a later release)"
    ])
    // serve's --api-key-env is its own key: not renamed
    expect(renamedOptions(["serve", "--api-key-env", "K"])).toEqual([])
    expect(renamedOptions(["serve", "--inference-api-key-env=K"])).toHaveLength(1)
    expect(renamedOptions(["--log-level", "debug", "openenv", "serve", "--max-concurrent-envs", "2"])).toEqual([
      "warning: --max-concurrent-envs is an old name: use --max-sessions (--max-concurrent-envs will be removed in a later release)"
    ])
    // run's --max-concurrent-envs is the client limit: not renamed; after `--` nothing is an option
    expect(renamedOptions(["run", "--max-concurrent-envs", "2", "--", "--gym-env"])).toEqual([])
  })

  it.effect("the help of each says the new names", () =>
    Effect.gen(function*() {
      expect((yield* cli("run", "--help")).stdout).toMatch(/--model-api-key-env, --api-key-env /)
      const serve = (yield* cli("serve", "--help")).stdout
      expect(serve).toMatch(/--model-api-key-env, --inference-api-key-env /)
      expect(serve).toMatch(/^ {2}--api-key-env /m)
      expect((yield* cli("openenv", "serve", "--help")).stdout).toMatch(/--max-sessions, --max-concurrent-envs /)
    }))
})
