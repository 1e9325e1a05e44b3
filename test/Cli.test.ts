import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { CompletionLine } from "../src/CompletionsLog.js"
import { bin, cli, readLines, tmp as makeTmp } from "./cli.js"
import * as RunnerCommand from "../src/cli/RunnerCommand.js"
import { withoutTimings } from "./helpers.js"

const root = path.resolve(import.meta.dirname, "..")
const fixture = (name: string) => path.join(root, "test/fixtures/plugins", name)


const tmp = () => makeTmp("effect-gym-cli-")

describe("CLI (in-process, full argv)", () => {
  it.live("dataset frozen-lake writes the example dataset byte for byte", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "fl.jsonl")
      const { code } = yield* cli("dataset", "frozen-lake", "--rows", "128", "--output", file)
      expect(code).toBe(0)
      expect(fs.readFileSync(file, "utf8")).toBe(fs.readFileSync(path.join(root, "examples/frozen_lake.jsonl"), "utf8"))
      const printed = yield* cli("dataset", "frozen-lake", "--rows", "2", "--size", "5")
      expect(printed.stdout.split("\n").map((l) => JSON.parse(l).env_config)).toEqual([{ seed: 0, size: 5 }, { seed: 1, size: 5 }])
    }))

  it.live("run: the default job's options, with rewards and weights, writes one valid line per trajectory", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      const output = path.join(dir, "completions.jsonl")
      fs.writeFileSync(dataset, fs.readFileSync(path.join(root, "examples/frozen_lake.jsonl"), "utf8").split("\n").slice(0, 10).join("\n"))
      const { code, stdout } = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "frozen-lake-solver",
        "--policy-option", "epsilon=0.3", "--num-generations", "4", "--max-turns", "10", "--output", output,
        "--reward-funcs", "format", "--reward-weights", "0.2", "1.0", "--seed", "7", "--json"
      )
      expect(code).toBe(0)
      const summary = JSON.parse(stdout)
      expect(summary.trajectories).toBe(40)
      expect(summary.failures).toBe(0)
      const lines = readLines(output)
      expect(lines.length).toBe(40)
      for (const line of lines) {
        expect(Object.keys(line.rewards!)).toEqual(["format", "gym_reward"])
        expect(line.reward).toBeCloseTo(0.2 * line.rewards!.format + line.rewards!.gym_reward)
        expect(line.rollout_infos.num_turns).toBe(line.rollout_infos.step_rewards!.length)
        expect(line.timings.turns.length).toBe(line.rollout_infos.num_turns)
      }
      // the same seeded run again gives the same lines (timings aside)
      const again = path.join(dir, "again.jsonl")
      yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "frozen-lake-solver",
        "--policy-option", "epsilon=0.3", "--num-generations", "4", "--output", again,
        "--reward-funcs", "format", "--reward-weights", "0.2", "1.0", "--seed", "7", "--concurrency", "3"
      )
      const strip = (ls: ReadonlyArray<typeof CompletionLine.Type>) =>
        ls.map((line) => JSON.stringify(withoutTimings(line))).sort()
      expect(strip(readLines(again))).toEqual(strip(lines))
    }))

  it.live("bad rows are reported with file:line: field, the rest runs, exit code 1", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "bad.jsonl")
      const output = path.join(dir, "out.jsonl")
      fs.writeFileSync(dataset, ["{\"env_config\":{\"seed\":1}}", "{oops", "{\"env_config\":{\"name\":\"ghost\"}}", "{\"env_config\":{\"p\":\"x\"}}"].join("\n"))
      const { code, stderr, stdout } = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--num-generations", "2", "--output", output)
      expect(code).toBe(1)
      expect(stderr).toContain(`${dataset}:2: malformed JSON`)
      expect(stderr).toContain(`${dataset}:3: env_config.name: unknown env "ghost"; registered: calculator, frozen_lake`)
      expect(stderr).toContain(`${dataset}:4: env_config.p: expected a number`)
      expect(stdout).toContain("bad rows       3")
      expect(readLines(output).length).toBe(2)
    }))

  it.live("configuration errors are clear and exit with code 2", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      // (a row that names its env: one that names none, without --env, is refused before these checks)
      fs.writeFileSync(dataset, `{"env_config":{"name":"frozen_lake"}}\n`)
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["--reward-funcs", "format", "--reward-weights", "1"], "--reward-weights: 1 weight(s) given for 2 reward column(s)"],
        [["--reward-funcs", "nope"], "unknown reward function \"nope\"; registered: format"],
        [["--env", "nope"], "unknown env \"nope\"; registered: calculator, frozen_lake"],
        [["--scheduler", "nope"], "unknown scheduler \"nope\"; registered: gym_scheduler"],
        [["--policy", "nope"], "unknown policy \"nope\"; registered: calculator-solver, frozen-lake-solver, kv-store-solver, random"],
        [["--concurrency", "0"], "--concurrency: must be a whole number >= 1, got 0"],
        [["--policy", "frozen-lake-solver", "--policy-option", "epsilon=7"], "--policy-option epsilon: must be a probability"],
        [["--plugin", fixture("syntax_error.ts")], `plugin ${fixture("syntax_error.ts")}: failed to load`],
        [["--plugin", fixture("no_export.ts")], "has no plugin export"],
        [["--plugin", fixture("bad_shape.ts")], "envs[0] (half_an_env) has no prepare function"],
        [["--plugin", fixture("throws.mjs")], "plugin exploded at import"],
        [["--plugin", path.join(dir, "missing.ts")], "file not found"]
      ]
      for (const [extra, message] of cases) {
        const { code, stderr } = yield* cli("run", "--dataset", dataset, "--output", path.join(dir, "o.jsonl"), ...extra)
        expect(code, extra.join(" ")).toBe(2)
        expect(stderr, extra.join(" ")).toContain(message)
      }
      const missing = yield* cli("run", "--dataset", path.join(dir, "nope.jsonl"), "--env", "frozen_lake")
      expect(missing.code).toBe(2)
      expect(missing.stderr).toContain(`--dataset ${path.join(dir, "nope.jsonl")}: no such file`)
    }))

  it.live("plugins: the shipped FrozenLake plugin and a JavaScript plugin register envs, schedulers, rewards", () =>
    Effect.gen(function*() {
      const listed = yield* cli("envs", "--plugin", path.join(root, "examples/frozen_lake_plugin.ts"), "--plugin", fixture("js_plugin.mjs"), "--json")
      expect(listed.code).toBe(0)
      const registry = JSON.parse(listed.stdout)
      // built-ins first, then each plugin's entries in order
      const names = (kind: string) => registry[kind].map((e: { name: string }) => e.name)
      expect(names("envs")[0]).toBe("frozen_lake")
      expect(names("envs").slice(-2)).toEqual(["slippery_frozen_lake", "countdown"])
      expect(names("schedulers")[0]).toBe("gym_scheduler")
      expect(names("schedulers").slice(-1)).toEqual(["frozen_lake_hints"])
      expect(names("reward_functions")).toEqual(["format", "short_path", "always_half"])

      const dir = tmp()
      const dataset = path.join(dir, "mixed.jsonl")
      const output = path.join(dir, "out.jsonl")
      fs.writeFileSync(dataset, [
        "{\"env_config\":{\"seed\":3}}",
        "{\"env_config\":{\"name\":\"countdown\",\"n\":2}}",
        "{\"env_config\":{\"name\":\"frozen_lake\",\"seed\":4}}"
      ].join("\n"))
      const { code } = yield* cli(
        "run", "--dataset", dataset, "--plugin", path.join(root, "examples/frozen_lake_plugin.ts"), "--plugin", fixture("js_plugin.mjs"),
        "--env", "slippery_frozen_lake", "--scheduler", "frozen_lake_hints", "--policy", "frozen-lake-solver",
        "--reward-funcs", "short_path", "always_half", "--num-generations", "2", "--output", output
      )
      expect(code).toBe(0)
      const lines = readLines(output)
      expect(lines.map((l) => l.env).sort()).toEqual(["countdown", "countdown", "frozen_lake", "frozen_lake", "slippery_frozen_lake", "slippery_frozen_lake"])
      const countdown = lines.find((l) => l.env === "countdown")!
      expect(countdown.rollout_infos.step_rewards).toEqual([0, 1])
      expect(countdown.rewards).toEqual({ short_path: 0.5, always_half: 0.5, gym_reward: 1 })
      const slippery = lines.find((l) => l.env === "slippery_frozen_lake" && l.messages.length > 3)
      if (slippery !== undefined) expect(slippery.messages[3].content).toContain("(Hint: the goal is")
    }))
})

describe("CLI (the built binary, as a user runs it)", () => {
  it("npx effect-gym run ... exits 0, prints a summary, and keeps piped output clean", async () => {
    const dir = tmp()
    const output = path.join(dir, "c.jsonl")
    const { code, stderr, stdout } = await bin([
      "run", "--dataset", path.join(root, "examples/frozen_lake.jsonl"),
      "--env", "frozen_lake", "--policy", "frozen-lake-solver", "--num-generations", "2", "--output", output
    ], dir)
    expect(code).toBe(0)
    expect(stdout).toMatch(/trajectories +256 \(128 groups\)/)
    expect(stdout).toMatch(/positive reward +100\.0%/)
    expect(stderr).toBe("")
    expect(fs.readFileSync(output, "utf8").trim().split("\n").length).toBe(256)
  })

  it("exit codes: 1 for a run with failures, 2 for a bad invocation", async () => {
    const dir = tmp()
    const dataset = path.join(dir, "d.jsonl")
    fs.writeFileSync(dataset, "{\"env_config\":{\"seed\":1}}\nnot json\n")
    expect((await bin(["run", "--dataset", dataset, "--env", "frozen_lake"], dir)).code).toBe(1)
    expect((await bin(["run", "--dataset", dataset, "--env", "nope"], dir)).code).toBe(2)
    expect((await bin(["run", "--no-such-flag"], dir)).code).toBe(2)
  })
})

describe("runner: the run's options are refused by name (the list of them is kept by hand)", () => {
  it.effect("every option `run --help` lists and `runner --help` does not is refused on a runner, naming it", () =>
    Effect.gen(function*() {
      const flags = (text: string) => new Set(text.match(/--[a-z][a-z0-9-]*/g) ?? [])
      const run = yield* cli("run", "--help")
      const runner = yield* cli("runner", "--help")
      const runnerFlags = flags(runner.stdout + runner.stderr)
      const runOnly = [...flags(run.stdout + run.stderr)].filter((flag) => !runnerFlags.has(flag))
      expect(runOnly).toContain("--dataset")
      for (const flag of runOnly) {
        const refused = RunnerCommand.refusedOption(["node", "effect-gym", "runner", "--cluster", "postgres://x@h/d", flag])
        expect(refused?.option, `${flag} is not refused by name on a runner`).toBe(flag)
      }
    }))
})

describe("npx effect-gym in a clone (issue 29, item 1)", () => {
  it("runs the clone's own command, linked by prepare, without building: dist/ is left as it is", async () => {
    const { execFileSync } = await import("node:child_process")
    const scripts = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).scripts
    // npm ci runs prepare: it builds only when the inputs changed, then links the command
    expect(scripts.prepare).toBe("node scripts/build-if-changed.mjs && node scripts/link-bin.mjs")
    execFileSync(process.execPath, [path.join(root, "scripts/link-bin.mjs")])
    expect(fs.readlinkSync(path.join(root, "node_modules/.bin/effect-gym"))).toBe("../../bin/effect-gym.js")
    const stamp = path.join(root, "dist/.inputs.sha256")
    const before = { dist: fs.statSync(path.join(root, "dist")).ino, stamp: fs.statSync(stamp).mtimeMs }
    // (npx as a user types it; offline, so that a command it did not find could not be fetched)
    const out = execFileSync("npx", ["effect-gym", "--help"], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, npm_config_offline: "true" },
      timeout: 60_000
    })
    expect(out).toContain("Multi-turn LLM rollouts")
    expect({ dist: fs.statSync(path.join(root, "dist")).ino, stamp: fs.statSync(stamp).mtimeMs }).toEqual(before)
  }, 90_000)
})

describe("the README's library example (issue 29, item 2)", () => {
  it("runs as it is written: one line of rewards per group", async () => {
    const { execFileSync } = await import("node:child_process")
    const block = /```ts\n([\s\S]*?)```/.exec(fs.readFileSync(path.join(root, "README.md"), "utf8"))![1]
    expect(block.split("\n").filter((line) => line.trim() !== "").length).toBeLessThanOrEqual(12)
    // (in the package root, where "effect-gym" resolves as in examples/)
    const file = path.join(root, `.readme-example-${process.pid}.ts`)
    fs.writeFileSync(file, block)
    try {
      const out = execFileSync(process.execPath, ["--import", "tsx", file], { cwd: root, encoding: "utf8", timeout: 60_000 })
      const groups = out.trim().split("\n").filter((line) => /INFO .*\[ [01], [01], [01], [01] \]/.test(line))
      // (Stream.range is inclusive: rows 0 to 3)
      expect(groups).toHaveLength(4)
    } finally {
      fs.rmSync(file, { force: true })
    }
  }, 90_000)
})

describe("a piped dataset's first row is checked as a file's is (issue 29, item 5)", () => {
  const run = (input: string, ...args: Array<string>) => {
    const dir = makeTmp()
    const output = path.join(dir, "out.jsonl")
    const out = spawnSync(process.execPath, [path.join(root, "bin/effect-gym.js"), "run", "--dataset", "/dev/stdin", "--output", output, ...args], {
      input,
      encoding: "utf8",
      timeout: 60_000
    })
    return { ...out, output }
  }

  it("rows that name no env, no --env: one error, exit 2 (it was one bad row per line and exit 1)", () => {
    const out = run(Array.from({ length: 64 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
    expect(out.status, out.stderr).toBe(2)
    expect(out.stderr.trim().split("\n")).toEqual([
      "error: --env: not given, and the dataset's rows name no env (/dev/stdin:1 has no env_config.name): pass --env NAME (`effect-gym envs` lists them), or set env_config.name in each row"
    ])
    expect(out.stdout).toBe("")
  })

  it("an OpenEnv server that is not there: refused naming its URL, exit 2 (it retried each row)", async () => {
    const { freePort } = await import("./openenv/helpers.js")
    const base = `http://127.0.0.1:${await freePort()}`
    const out = run(`{"messages":[{"role":"user","content":"Play"}],"env_config":{"name":"openenv","base_url":"${base}"}}\n`.repeat(16), "--scheduler", "openenv", "--policy", "random")
    expect(out.status, out.stderr).toBe(2)
    expect(out.stderr).toContain(`env_config.base_url ${base}: no OpenEnv server answers there (ECONNREFUSED)`)
  })

  it("--dataset - reads standard input (it said \"no such file\")", () => {
    const dir = makeTmp()
    const output = path.join(dir, "out.jsonl")
    const out = spawnSync(process.execPath, [path.join(root, "bin/effect-gym.js"), "run", "--dataset", "-", "--env", "frozen_lake", "--num-generations", "2", "--output", output], {
      input: `{"env_config":{"seed":1}}\n`,
      encoding: "utf8",
      timeout: 60_000
    })
    expect(out.status, out.stderr).toBe(0)
    expect(fs.readFileSync(output, "utf8").trim().split("\n")).toHaveLength(2)
  })

  it("good rows run as before", () => {
    const out = run(`{"env_config":{"seed":1}}\n{"env_config":{"seed":2}}\n`, "--env", "frozen_lake", "--num-generations", "2")
    expect(out.status, out.stderr).toBe(0)
    expect(fs.readFileSync(out.output, "utf8").trim().split("\n")).toHaveLength(4)
  })
})
