/**
 * The built-in tool env `calculator` (issue 30, item 6, first env): seeded orders whose prices only
 * the `lookup` tool knows; the reward needs the right total and every item looked up. Played by the
 * scripted `calculator-solver`, which writes its calls as <tool_call> text that the run's tool
 * parser reads, in the library and from the command line.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Builtins from "../src/Builtins.js"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Calculator from "../src/envs/Calculator.js"
import * as Inference from "../src/Inference.js"
import { calculatorReply } from "../src/inference/Scripted.js"
import * as ToolParsers from "../src/inference/ToolParsers.js"
import type * as Message from "../src/Message.js"
import * as Rollout from "../src/Rollout.js"
import * as Summary from "../src/Summary.js"
import { cli, readLines } from "./cli.js"
import { records } from "./helpers.js"

const solver: Inference.Service = ToolParsers.wrap(
  { name: "solver", chat: (request) => Effect.succeed({ text: calculatorReply(request.messages), finishReason: "stop" }) },
  "hermes"
)

const runWith = (service: Inference.Service, rows: ReadonlyArray<object>, maxTurns = 8) =>
  Stream.fromIterable(rows).pipe(
    Rollout.run(Rollout.make({ envs: [Calculator.Calculator], numGenerations: 2, maxTurns, seed: 3 })),
    Stream.runCollect,
    Effect.map((items) => records(items).map(CompletionsLog.toLine)),
    Effect.provideService(Inference.Inference, service)
  )

describe("calculator: the summary's tool errors", () => {
  it.effect("every call answered with an error is counted, the last turn's too (its answer is not in the conversation)", () =>
    Effect.gen(function*() {
      // a model that calls a tool the env does not have, every turn
      const wrong: Inference.Service = {
        name: "wrong",
        chat: (request) =>
          Effect.succeed({
            text: "",
            finishReason: "tool_calls",
            toolCalls: [{ id: `c${request.turn}`, type: "function", function: { name: "nope", arguments: "{}" } }]
          })
      }
      const items = yield* Stream.fromIterable([{ env_config: { seed: 1 } }, { env_config: { seed: 2 } }]).pipe(
        Rollout.run(Rollout.make({ envs: [Calculator.Calculator], numGenerations: 2, maxTurns: 3, seed: 3 })),
        Stream.runCollect,
        Effect.provideService(Inference.Inference, wrong)
      )
      const accumulator = new Summary.Accumulator()
      for (const item of items) accumulator.add(item)
      // 4 trajectories x 3 turns, each call answered "Error: ...", of which the conversation keeps 2 per trajectory
      expect(accumulator.summary(1000).tools).toEqual({ calls: 12, errors: 12, malformed: 0 })
      const kept = records(items).flatMap((r) => r.result.messages).filter((m) => m.role === "tool" && m.content.startsWith("Error:"))
      expect(kept.length).toBe(8)
    }))
})

describe("calculator: the task", () => {
  it("is seeded: the same seed gives the same order, prices and total; the total is the order's", () => {
    const a = Calculator.task(7, 3)
    expect(Calculator.task(7, 3)).toEqual(a)
    expect(Calculator.task(8, 3)).not.toEqual(a)
    expect(a.order.length).toBe(3)
    expect(new Set(a.order.map((l) => l.item)).size).toBe(3)
    expect(a.total).toBe(a.order.reduce((s, l) => s + l.quantity * a.prices[l.item], 0))
    for (const line of a.order) {
      expect(line.quantity).toBeGreaterThanOrEqual(2)
      expect(line.price).toBeGreaterThanOrEqual(101)
    }
  })
})

describe("calculator: played", () => {
  it.live("the solver's tool calls earn reward 1: lookups, products, running sum, answer", () =>
    Effect.gen(function*() {
      const lines = yield* runWith(solver, [{ env_config: { seed: 11 } }, { env_config: { seed: 12, items: 2 } }])
      expect(lines.map((l) => [l.reward, l.end_reason, l.rollout_infos.num_turns])).toEqual([
        [1, "done", 5],
        [1, "done", 5],
        [1, "done", 4],
        [1, "done", 4]
      ])
      const line = lines[0]
      const expected = Calculator.task(11, 3)
      expect(line.rollout_infos.step_infos.at(-1)).toEqual({
        answer: expected.total,
        expected: expected.total,
        correct: true,
        looked_up_all: true
      })
      // the first reply looks up every item; each is answered by a tool message with its price
      const [system, user, first, ...rest] = line.messages
      expect(system.role).toBe("system")
      expect(user.content).toBe(Calculator.prompt(expected.order))
      expect(first.tool_calls?.map((c) => JSON.parse(c.function.arguments).item)).toEqual(expected.order.map((l) => l.item))
      expect(rest.slice(0, 3).map((m) => [m.role, m.content])).toEqual(expected.order.map((l) => ["tool", String(l.price)]))
      expect(line.messages.at(-1)).toEqual({ role: "assistant", content: `<answer>${expected.total}</answer>` })
    }))

  it.live("the right total without looking the prices up earns 0; a wrong total earns 0", () =>
    Effect.gen(function*() {
      const cheat: Inference.Service = {
        name: "cheat",
        chat: (request) => {
          const order = request.messages[1].content
          const seed = order.includes(Calculator.prompt(Calculator.task(21, 3).order).slice(0, 20)) ? 21 : -1
          return Effect.succeed({ text: `<answer>${Calculator.task(seed, 3).total}</answer>`, finishReason: "stop" })
        }
      }
      const [line] = yield* runWith(cheat, [{ env_config: { seed: 21 } }])
      expect(line.rollout_infos.step_infos[0]).toMatchObject({ correct: true, looked_up_all: false })
      expect(line.reward).toBe(0)
      const wrong: Inference.Service = { name: "wrong", chat: () => Effect.succeed({ text: "<answer>1</answer>", finishReason: "stop" }) }
      const [other] = yield* runWith(wrong, [{ env_config: { seed: 21 } }])
      expect([other.reward, other.rollout_infos.step_infos[0].correct]).toEqual([0, false])
    }))

  it.live("bad calls are answered by tool messages saying what is wrong, and counted in the step info", () =>
    Effect.gen(function*() {
      const calls: ReadonlyArray<Message.ToolCall> = [
        { id: "a", type: "function", function: { name: "lookup", arguments: "{\"item\": \"unicorn\"}" } },
        { id: "b", type: "function", function: { name: "calculate", arguments: "{\"op\": \"divide\", \"a\": 1, \"b\": 0}" } },
        { id: "c", type: "function", function: { name: "calculate", arguments: "{\"op\": \"modulo\", \"a\": 1, \"b\": 2}" } },
        { id: "d", type: "function", function: { name: "shell", arguments: "{}" } }
      ]
      const bad: Inference.Service = {
        name: "bad",
        chat: (request) =>
          Effect.succeed(
            request.turn === 1 ? { text: "", finishReason: "tool_calls", toolCalls: calls } : { text: "no idea", finishReason: "stop" }
          )
      }
      const [line] = yield* runWith(bad, [{ env_config: { seed: 1 } }], 2)
      expect(line.rollout_infos.step_infos[0]).toEqual({
        tool_calls: 4,
        tool_errors: ["Failed", "Failed", "InvalidArguments", "UnknownTool"]
      })
      expect(line.messages.slice(3, 7).map((m) => m.content)).toEqual([
        "Error: Failed: unknown item \"unicorn\"",
        "Error: Failed: division by zero",
        expect.stringMatching(/^Error: InvalidArguments: op: /),
        "Error: UnknownTool: no tool \"shell\"; the tools are lookup, calculate"
      ])
      expect(line.messages.at(-1)?.content).toBe("no idea")
      expect(line.end_reason).toBe("max_turns")
    }))

  it.effect("a step after done (a text reply or tool calls) is answered, stays done and rewards nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const create = Calculator.Calculator.prepare({ seed: 5 })
      if (create._tag !== "Success") throw new Error("config refused")
      const env = yield* create.success
      const reset = yield* env.reset({ trajectoryId: "t", seed: 0, messages: [], dataDict: {}, envConfig: {} })
      const user: Message.Message = { role: "user", content: reset.observation }
      const done = yield* env.step([user, { role: "assistant", content: "<answer>1</answer>" }])
      expect(done.done).toBe(true)
      const late = yield* env.step([user, {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "x", type: "function", function: { name: "lookup", arguments: "{\"item\": \"widget\"}" } }]
      }])
      expect(late).toEqual({
        observation: "The episode is over.",
        reward: 0,
        done: true,
        info: { after_done: true },
        toolMessages: [{ role: "tool", content: "Error: the episode is over", tool_call_id: "x", name: "lookup" }]
      })
    })))

  it("is registered with the built-ins, with its solver", () => {
    expect(Builtins.registry.envs.has("calculator")).toBe(true)
    expect(Builtins.registry.policies.has("calculator-solver")).toBe(true)
  })
})

describe("calculator from the command line", () => {
  it.live("npm run start:tools: the package's script plays examples/calculator.jsonl, every trajectory rewarded", () =>
    Effect.gen(function*() {
      const root = path.resolve(import.meta.dirname, "..")
      const script = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).scripts["start:tools"] as string
      const argv = script.replace(/^node bin\/effect-gym\.js /, "").split(" ")
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-calc-"))
      const at = (flag: string, value: string) => argv.map((a, i) => (argv[i - 1] === flag ? value : a))
      const args = at("--output", path.join(dir, "out.jsonl")).map((a) => a === "examples/calculator.jsonl" ? path.join(root, a) : a)
      const { code, stdout } = yield* cli(...args, "--json")
      expect(code).toBe(0)
      expect(JSON.parse(stdout)).toMatchObject({ trajectories: 128, mean_reward: 1, failures: 0 })
    }))

  it.live("run --env calculator --policy calculator-solver: every trajectory rewarded; --tool-parser none: none", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-calc-"))
      const dataset = path.join(dir, "calc.jsonl")
      fs.writeFileSync(dataset, [0, 1, 2].map((seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
      const args = (output: string, ...extra: Array<string>) => [
        "run", "--dataset", dataset, "--env", "calculator", "--policy", "calculator-solver", "--num-generations", "2",
        "--max-turns", "8", "--seed", "1", "--output", path.join(dir, output), "--json", ...extra
      ]
      const parsed = yield* cli(...args("out.jsonl"))
      expect(parsed.code).toBe(0)
      // 3 items: 3 lookups, 3 products, 2 sums per trajectory
      expect(JSON.parse(parsed.stdout)).toMatchObject({
        trajectories: 6,
        failures: 0,
        mean_reward: 1,
        tools: { calls: 6 * 8, errors: 0, malformed: 0 }
      })
      const text = yield* cli(...args("text.jsonl").filter((a) => a !== "--json"))
      expect(text.stdout).toContain("tool calls     48 (0 answered with an error, 0 malformed kept as text)")
      const lines = readLines(path.join(dir, "out.jsonl"))
      expect(lines.every((l) => l.messages[2].tool_calls !== undefined)).toBe(true)
      const raw = yield* cli(...args("raw.jsonl", "--tool-parser", "none"))
      expect(JSON.parse(raw.stdout)).toMatchObject({ trajectories: 6, mean_reward: 0 })
      expect(JSON.parse(raw.stdout).tools).toBeUndefined()
      const rawLines = readLines(path.join(dir, "raw.jsonl"))
      expect(rawLines.every((l) => l.messages.every((m) => m.tool_calls === undefined))).toBe(true)
    }))
})
