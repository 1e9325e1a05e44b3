import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { bin, cli, tmp as makeTmp } from "../cli.js"

const root = path.resolve(import.meta.dirname, "../..")
const plugin = path.join(root, "test/fixtures/plugins/broken_envs.mjs")


const tmp = () => makeTmp("effect-gym-check-")

describe("effect-gym check-env (in-process, full argv)", () => {
  it.live("a built-in env passes: exit 0 and a readable report", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* cli(
        "check-env", "frozen_lake", "--seeds", "2", "--runs", "2", "--max-steps", "12",
        "--action", "<action>up</action>", "--action", "<action>down</action>", "--action", "<action>left</action>",
        "--action", "<action>right</action>"
      )
      expect(code).toBe(0)
      const lines = stdout.split("\n")
      expect(lines[0]).toBe("frozen_lake: passed (2 env_configs × 2 runs, up to 12 steps, timeout 10s, seed 0)")
      expect(lines.slice(1, 12).every((line) => /^ {2}ok {4}\S/.test(line))).toBe(true)
      expect(stdout).toMatch(/envs created and closed/)
    }))

  it.live("a broken env from a plugin: exit 1, the failing check and its message", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* cli("check-env", "nan_counter", "--plugin", plugin, "--seeds", "1", "--runs", "2")
      expect(code).toBe(1)
      expect(stdout.split("\n")[0]).toBe("nan_counter: FAILED, 1 of 12 checks (1 env_config × 2 runs, up to 16 steps, timeout 10s, seed 0)")
      expect(stdout).toContain("  FAIL  reward           rewards are finite numbers")
      expect(stdout).toContain("  reward: step 1 returned reward NaN (number NaN): a reward must be a finite number\n    env_config #0  {\"seed\":0}")

      const json = yield* cli("check-env", "nan_counter", "--plugin", plugin, "--seeds", "1", "--runs", "2", "--json")
      expect(json.code).toBe(1)
      const report = JSON.parse(json.stdout)
      expect(report.ok).toBe(false)
      expect(report.failures.map((f: { check: string }) => f.check)).toEqual(["reward"])
      expect(report.failures[0].config).toEqual({ seed: 0 })

      const sound = yield* cli("check-env", "counter", "--plugin", plugin, "--seeds", "2", "--json")
      expect(sound.code).toBe(0)
      expect(JSON.parse(sound.stdout).passed.length).toBe(11)
    }))

  it.live("--timeout: a hung step is reported and the command still ends", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* cli("check-env", "stuck_counter", "--plugin", plugin, "--seeds", "1", "--runs", "1", "--timeout", "0.1")
      expect(code).toBe(1)
      expect(stdout).toContain("  timeout: step 1 did not answer within 100ms; it was interrupted")
    }))

  it.live("--configs FILE: env_configs (or dataset rows) one per line", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "configs.jsonl")
      fs.writeFileSync(file, "{\"seed\":4,\"size\":5}\n\n{\"env_config\":{\"name\":\"frozen_lake\",\"seed\":12345678901234567890}}\r\n")
      const { code, stdout } = yield* cli("check-env", "frozen_lake", "--configs", file, "--runs", "2", "--json")
      expect(code).toBe(0)
      const report = JSON.parse(stdout.replace(/12345678901234567890/, "\"12345678901234567890\""))
      expect(report.configs).toEqual([{ seed: 4, size: 5 }, { name: "frozen_lake", seed: "12345678901234567890" }])
      expect(report.ok).toBe(true)
    }))

  it.live("--configs FILE with bad lines: each reported as file:line: field, exit 2", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "bad.jsonl")
      fs.writeFileSync(file, [
        "{\"seed\":1}",
        "{oops",
        "[1,2]",
        "{\"size\":99999}",
        "{\"env_config\":{\"name\":\"sudoku\"}}",
        "{\"p\":\"x\"}"
      ].join("\n"))
      const { code, stderr, stdout } = yield* cli("check-env", "frozen_lake", "--configs", file)
      expect(code).toBe(2)
      expect(stdout).toBe("")
      expect(stderr).toContain(`bad env_config: ${file}:2: malformed JSON`)
      expect(stderr).toContain(`bad env_config: ${file}:3: expected a JSON object, got an array`)
      expect(stderr).toContain(`bad env_config: ${file}:4: env_config.size: must be between 2 and 256, got 99999`)
      expect(stderr).toContain(`bad env_config: ${file}:5: env_config.name: names env "sudoku", but the check is of "frozen_lake"`)
      expect(stderr).toContain(`bad env_config: ${file}:6: env_config.p: expected a number`)
      expect(stderr).toContain(`error: --configs ${file}: 5 bad line(s)`)
    }))

  it.live("bad invocations exit 2 with a clear message", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const empty = path.join(dir, "empty.jsonl")
      fs.writeFileSync(empty, "\n")
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["ghost"], "unknown env \"ghost\"; registered: calculator, frozen_lake"],
        [["frozen_lake", "--runs", "0"], "--runs: must be a whole number >= 1, got 0"],
        [["frozen_lake", "--seeds", "0"], "--seeds: must be a whole number >= 1, got 0"],
        [["frozen_lake", "--max-steps", "0"], "--max-steps: must be a whole number >= 1, got 0"],
        [["frozen_lake", "--timeout", "0"], "--timeout: must be > 0 seconds, got 0"],
        [["frozen_lake", "--timeout", "soon"], "--timeout: \"soon\" is not a number"],
        [["frozen_lake", "--seeds", "2", "--configs", empty], "--configs: give --configs FILE or --seeds N, not both"],
        [["frozen_lake", "--configs", empty], `--configs ${empty}: no env_config in the file`],
        [["frozen_lake", "--configs", path.join(dir, "missing.jsonl")], `--configs ${path.join(dir, "missing.jsonl")}: no such file`],
        [["nan_counter", "--plugin", path.join(dir, "nope.mjs")], "file not found"]
      ]
      for (const [args, message] of cases) {
        const { code, stderr } = yield* cli("check-env", ...args)
        expect(code, args.join(" ")).toBe(2)
        expect(stderr, args.join(" ")).toContain(message)
      }
    }))
})

describe("effect-gym check-env (the built binary)", () => {
  const run = (...args: Array<string>) => bin(["check-env", ...args], root)

  it("exit codes: 1 for a broken env, 2 for an unknown one (0 is checked in-process)", async () => {
    const broken = await run("nan_counter", "--plugin", plugin, "--seeds", "1", "--runs", "2")
    expect(broken.code).toBe(1)
    expect(broken.stdout).toMatch(/^nan_counter: FAILED/)
    expect((await run("ghost")).code).toBe(2)
  })
})
