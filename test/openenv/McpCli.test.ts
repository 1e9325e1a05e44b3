/**
 * OpenEnv MCP tools end to end from the command line (issue 30, item 4): the built
 * `effect-gym openenv serve` on loopback serves an env with tools (the built-in `calculator`, or the
 * plugin env `mcp_probe`), and `effect-gym run --scheduler openenv` plays it with rows that set
 * `env_config.mcp_tools`: the server's tools are the model's tools, each call a `tools/call` on the
 * trajectory's session. The log has the calls, their results and the rewards; the shared limit
 * holds for the calls (counted in the server's process); a hostile script and a server killed
 * mid-call end in messages and typed errors, never a hang.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { bin, launchScoped, readLines, tmp } from "../cli.js"

const root = path.resolve(import.meta.dirname, "../..")
const plugin = path.join(root, "test/fixtures/plugins/mcp_tools.mjs")

/** A dataset of `count` rows pointing at `url`, with MCP tools on. */
const dataset = (dir: string, url: string, count: number) => {
  const file = path.join(dir, "rows.jsonl")
  const row = JSON.stringify({ messages: [{ role: "user", content: "Play" }], env_config: { base_url: url, mcp_tools: true } })
  fs.writeFileSync(file, `${Array.from({ length: count }, () => row).join("\n")}\n`)
  return file
}

const run = (dir: string, rows: string, plan: string, extra: ReadonlyArray<string> = []) =>
  Effect.promise(() =>
    bin([
      "run", "--dataset", rows, "--scheduler", "openenv", "--plugin", plugin, "--policy", "mcp-script",
      "--policy-option", `plan=${plan}`, "--max-turns", "5", "--output", path.join(dir, "out.jsonl"), ...extra
    ], dir)
  )

/** The most `+` not yet closed by a `-` at once: calls in flight in the server's tools. */
const maxInFlight = (marks: string) => {
  let now = 0
  let most = 0
  for (const c of marks) {
    now += c === "+" ? 1 : -1
    most = Math.max(most, now)
  }
  return most
}


/** `openenv serve` of the probe env in a new folder, its tools' marks logged to `marks` (the calls in flight). */
const probeServer = (maxSessions: number) =>
  Effect.gen(function*() {
    const dir = tmp("effect-gym-mcp-")
    const marks = path.join(dir, "marks.txt")
    const server = yield* launchScoped(
      ["openenv", "serve", "--env", "mcp_probe", "--plugin", plugin, "--port", "0", "--max-sessions", `${maxSessions}`],
      { EFFECT_GYM_ENV_LOG: marks }
    )
    return { dir, marks, server }
  })
describe("effect-gym run --scheduler openenv with env_config.mcp_tools against effect-gym openenv serve", () => {
  it.live("the calculator over MCP: lookups written as <tool_call> text are tools/call on the session; every trajectory earns 1", () =>
    Effect.gen(function*() {
      const dir = tmp("effect-gym-mcp-")
      const server = yield* launchScoped(["openenv", "serve", "--env", "calculator", "--port", "0", "--max-sessions", "2"])
      const out = yield* run(dir, dataset(dir, server.url, 3), "calculator", ["--num-generations", "2", "--max-concurrent-envs", "2"])
      expect(out.stderr).toBe("")
      expect(out.code).toBe(0)
      expect(out.stdout).toContain("tool calls     18 (0 answered with an error")
      const lines = readLines(path.join(dir, "out.jsonl"))
      expect(lines.map((l) => [l.reward, l.end_reason])).toEqual(Array.from({ length: 6 }, () => [1, "done"]))
      // the first reply looks up the order's items (the server's calculator checks the total and the lookups)
      const line = lines[0]
      const order = [...String(JSON.parse(line.messages[0].content).prompt).matchAll(/\d+ x ([a-z]+)/g)].map((m) => m[1])
      expect(line.messages[1].tool_calls!.map((c) => JSON.parse(c.function.arguments).item)).toEqual(order)
      const tools = line.messages.filter((m) => m.role === "tool")
      expect(tools.length).toBe(3)
      const calls = line.messages[1].tool_calls!
      expect(tools.map((m) => m.tool_call_id)).toEqual(calls.map((c) => c.id))
      expect(tools.every((m) => m.name === "lookup" && /^\d+$/.test(m.content))).toBe(true)
      expect(line.rollout_infos.step_infos[0]).toMatchObject({ tool_calls: 3, tool_errors: [], openenv_reward: 0 })
      expect(line.rollout_infos.step_infos[1]).toMatchObject({ openenv_reward: 1 })
    }), 60_000)

  it.live("the shared limit: 24 trajectories, --max-concurrent-envs 3, the server's tools never run more than 3 calls at once", () =>
    Effect.gen(function*() {
      const { dir, marks, server } = yield* probeServer(8)
      const out = yield* run(dir, dataset(dir, server.url, 8), "slow", ["--num-generations", "3", "--max-concurrent-envs", "3"])
      expect(out.code).toBe(0)
      const lines = readLines(path.join(dir, "out.jsonl"))
      expect(lines.map((l) => l.error ?? null)).toEqual(Array.from({ length: 24 }, () => null))
      // two turns of two calls (0.25 a call, as the server's step answers each), then "done" (0.5)
      expect(lines.every((l) => JSON.stringify(l.rollout_infos.step_rewards) === "[0.5,0.5,0.5]")).toBe(true)
      const text = fs.readFileSync(marks, "utf8")
      expect(text.length).toBe(24 * 4 * 2)
      expect(maxInFlight(text)).toBe(3)
    }), 60_000)

  it.live("a hostile script: unknown tool, malformed JSON, not an object, 70,000 characters: Error tool messages, the good call still runs", () =>
    Effect.gen(function*() {
      const { dir, marks, server } = yield* probeServer(2)
      const out = yield* run(dir, dataset(dir, server.url, 1), "hostile", ["--num-generations", "1"])
      expect(out.code).toBe(0)
      expect(out.stdout).toContain("tool calls     5 (4 answered with an error")
      const [line] = readLines(path.join(dir, "out.jsonl"))
      expect(line.messages.filter((m) => m.role === "tool").map((m) => m.content.replace(/:[^:]*$/, ""))).toEqual([
        "Error: UnknownTool",
        "Error: MalformedArguments: the arguments are not JSON",
        "Error: MalformedArguments",
        "Error: TooLarge",
        "slept 1"
      ])
      // only the good call reached the server's tool
      expect(fs.readFileSync(marks, "utf8")).toBe("+-")
      expect(line.reward).toBe(0.75)
    }), 60_000)

  it.live("the server killed mid-call: the trajectory ends with a typed error naming the call, the run exits", () =>
    Effect.gen(function*() {
      const { dir, marks, server } = yield* probeServer(2)
      // the server dies while the hang call waits (the probe's hang never answers; tool_timeout_s is 30)
      const killer = setInterval(() => {
        if (fs.existsSync(marks) && fs.readFileSync(marks, "utf8") === "h") server.child.kill("SIGKILL")
      }, 20)
      const start = Date.now()
      const out = yield* run(dir, dataset(dir, server.url, 1), "hang", ["--num-generations", "1"])
      clearInterval(killer)
      expect(Date.now() - start).toBeLessThan(20_000)
      const [line] = readLines(path.join(dir, "out.jsonl"))
      expect(line.error?.message).toMatch(/tool hang \(call h\): Failed: openenv ws:\/\/127\.0\.0\.1:\d+\/ws: ConnectionLost: .*\(the session is closed\)/)
      expect(out.stdout).toContain("failures       1")
    }), 60_000)
})
