/**
 * The built-in tool env `kv_store` (issue 30, item 6, second env): a seeded key-value store and
 * instructions to apply in order with get/set/list_keys/commit tools, where the order of the calls
 * matters; the reward needs the expected store. Played by the scripted `kv-store-solver` (and its
 * `epsilon` variant, which applies instructions out of order), in the library and from the command line.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Builtins from "../src/Builtins.js"
import * as EnvCheck from "../src/check/EnvCheck.js"
import * as CompletionsLog from "../src/CompletionsLog.js"
import type * as Env from "../src/Env.js"
import * as KvStore from "../src/envs/KvStore.js"
import * as Inference from "../src/Inference.js"
import { kvStoreReply } from "../src/inference/Scripted.js"
import * as ToolParsers from "../src/inference/ToolParsers.js"
import type * as Message from "../src/Message.js"
import * as Rollout from "../src/Rollout.js"
import * as Scheduler from "../src/Scheduler.js"
import { cli, readLines } from "./cli.js"
import { records } from "./helpers.js"

const solver = (mistake = false): Inference.Service =>
  ToolParsers.wrap(
    { name: "solver", chat: (request) => Effect.succeed({ text: kvStoreReply(request.messages, mistake), finishReason: "stop" }) },
    "hermes"
  )

const runWith = (service: Inference.Service, rows: ReadonlyArray<object>, maxTurns = 8) =>
  Stream.fromIterable(rows).pipe(
    Rollout.run(Rollout.make({ envs: [KvStore.KvStore], numGenerations: 2, maxTurns, seed: 3 })),
    Stream.runCollect,
    Effect.map((items) => records(items).map(CompletionsLog.toLine)),
    Effect.provideService(Inference.Inference, service)
  )

const call = (id: string, name: string, args: string): Message.ToolCall => ({ id, type: "function", function: { name, arguments: args } })

/** A fresh env of `config`, reset: its first conversation and its step. */
const fresh = (config: Env.EnvConfig) =>
  Effect.gen(function*() {
    const env = yield* Result.getOrThrow(KvStore.KvStore.prepare(config))
    const reset = yield* env.reset({ trajectoryId: "t", seed: 0, messages: [], dataDict: {}, envConfig: config })
    const opening = Scheduler.opening(reset)
    const step = (calls: ReadonlyArray<Message.ToolCall>, messages: ReadonlyArray<Message.Message> = opening) =>
      env.step(Scheduler.withReply(messages, "", calls))
    return { env, reset, opening, step }
  })

/** Plays the solver's replies (parsed as the run parses them) through a fresh env to the end. */
const play = (config: Env.EnvConfig, mistake: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const { env, opening } = yield* fresh(config)
    let messages: ReadonlyArray<Message.Message> = opening
    for (let turn = 1; turn <= 30; turn++) {
      const parsed = ToolParsers.parse("hermes", kvStoreReply(messages, mistake), (i) => `c${turn}_${i}`)
      const given = Scheduler.withReply(messages, parsed.content ?? "", parsed.toolCalls.length > 0 ? parsed.toolCalls : undefined)
      const result = yield* env.step(given)
      if (result.done) return { turns: turn, result }
      messages = Scheduler.afterStep(given, result.observation, false, result.toolMessages)
    }
    throw new Error("the solver did not finish in 30 turns")
  }))

describe("kv_store: the task", () => {
  it("is seeded; the expected store is the instructions applied in order; each reads the key the one before wrote", () => {
    const a = KvStore.task(7, 6, 3)
    expect(KvStore.task(7, 6, 3)).toEqual(a)
    expect(KvStore.task(8, 6, 3)).not.toEqual(a)
    expect(Object.keys(a.initial)).toHaveLength(6)
    expect(a.instructions).toHaveLength(3)
    expect(a.expected).toEqual(KvStore.apply(a.initial, a.instructions))
    for (let i = 1; i < a.instructions.length; i++) expect(a.instructions[i].a).toBe(a.instructions[i - 1].dst)
    expect(new Set(a.instructions.map((i) => i.dst)).size).toBe(3)
  })

  const Configs = Schema.Struct({
    seed: Schema.Int,
    keys: Schema.Int.check(Schema.isBetween({ minimum: 3, maximum: 12 })),
    steps: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3 }))
  })

  it.effect.prop(
    "for any config: the order matters (the reverse order leaves another store), and the solver earns 1 where the reverse order earns 0",
    [EnvCheck.config(Configs)],
    ([config]) =>
      Effect.gen(function*() {
        const t = KvStore.task(config.seed, config.keys, config.steps)
        expect(KvStore.task(config.seed, config.keys, config.steps)).toEqual(t)
        if (config.steps >= 2) expect(KvStore.apply(t.initial, [...t.instructions].reverse())).not.toEqual(t.expected)
        const right = yield* play(config, false)
        expect([right.result.reward, right.result.info.correct, right.turns]).toEqual([1, true, config.steps + 2])
        const reversed = yield* play(config, true)
        expect(reversed.result.reward).toBe(config.steps >= 2 ? 0 : 1)
      }),
    { arbitrary: { runs: 60 } }
  )

  it.effect("is deterministic for a seed through EnvCheck.transcript (same replies, same transcript)", () =>
    Effect.gen(function*() {
      const replies = ["hello", "<answer>1</answer>"]
      const first = yield* EnvCheck.transcript(KvStore.KvStore, { seed: 4 }, replies, { seed: 9 })
      expect(yield* EnvCheck.transcript(KvStore.KvStore, { seed: 4 }, replies, { seed: 9 })).toEqual(first)
      expect(first.reset.observation).toBe(KvStore.prompt(KvStore.task(4, 6, 3)))
    }))

  it("refuses configs out of range, naming the field", () => {
    const refused = (config: Env.EnvConfig) => {
      const prepared = KvStore.KvStore.prepare(config)
      return Result.isFailure(prepared) ? prepared.failure.message : "accepted"
    }
    expect(refused({ keys: 2 })).toContain("keys")
    expect(refused({ steps: 9 })).toContain("steps")
    expect(refused({ keys: 3, steps: 4 })).toContain("steps must be at most keys")
    expect(refused({ keys: 3, steps: 3 })).toBe("accepted")
  })
})

describe("kv_store: played", () => {
  it.live("the solver's calls earn reward 1: the reads, one set per instruction in order, commit", () =>
    Effect.gen(function*() {
      const lines = yield* runWith(solver(), [{ env_config: { seed: 11 } }, { env_config: { seed: 12, steps: 2 } }])
      expect(lines.map((l) => [l.reward, l.end_reason, l.rollout_infos.num_turns])).toEqual([
        [1, "done", 5],
        [1, "done", 5],
        [1, "done", 4],
        [1, "done", 4]
      ])
      const expected = KvStore.task(11, 6, 3)
      const line = lines[0]
      expect(line.rollout_infos.step_infos.at(-1)).toEqual({
        tool_calls: 1,
        tool_errors: [],
        ended_by: "commit",
        correct: true,
        mismatches: []
      })
      expect(line.messages[1].content).toBe(KvStore.prompt(expected))
      // the sets, in the instructions' order, with the values the order gives
      const sets = line.messages.flatMap((m) => m.tool_calls ?? []).filter((c) => c.function.name === "set")
      expect(sets.map((c) => JSON.parse(c.function.arguments))).toEqual(
        expected.instructions.map((i) => ({ key: i.dst, value: expected.expected[i.dst] }))
      )
      expect(line.messages.at(-1)?.tool_calls?.map((c) => c.function.name)).toEqual(["commit"])
    }))

  it.live("the wrong order earns 0: the solver's mistake variant applies the last instruction first; info names the keys", () =>
    Effect.gen(function*() {
      const [line] = yield* runWith(solver(true), [{ env_config: { seed: 11 } }])
      const t = KvStore.task(11, 6, 3)
      expect(line.reward).toBe(0)
      const last = line.rollout_infos.step_infos.at(-1) as Record<string, unknown>
      expect(last).toMatchObject({ ended_by: "commit", correct: false })
      // what it committed is the instructions applied in reverse, and the mismatches say where
      const reversed = KvStore.apply(t.initial, [...t.instructions].reverse())
      expect(last.mismatches).toEqual(KvStore.mismatches(new Map(Object.entries(reversed)), t.expected))
      expect((last.mismatches as ReadonlyArray<unknown>).length).toBeGreaterThan(0)
    }))

  it.effect("a write before the read that needed the old value earns 0; the same calls in order earn 1", () =>
    Effect.scoped(Effect.gen(function*() {
      // seed 11: instruction 2 reads the key instruction 1 writes
      const t = KvStore.task(11, 6, 2)
      const [one, two] = t.instructions
      const value = (i: KvStore.Instruction, store: Readonly<Record<string, number>>) => KvStore.apply(store, [i])[i.dst]
      const inOrder = yield* fresh({ seed: 11, steps: 2 })
      const after1 = KvStore.apply(t.initial, [one])
      yield* inOrder.step([call("a", "set", JSON.stringify({ key: one.dst, value: value(one, t.initial) }))])
      const right = yield* inOrder.step([
        call("b", "set", JSON.stringify({ key: two.dst, value: value(two, after1) })),
        call("c", "commit", "{}")
      ])
      expect([right.reward, right.done, right.info.correct]).toEqual([1, true, true])
      // out of order: instruction 2 computed from the store before instruction 1 wrote its key
      const outOfOrder = yield* fresh({ seed: 11, steps: 2 })
      const wrong = yield* outOfOrder.step([
        call("a", "set", JSON.stringify({ key: two.dst, value: value(two, t.initial) })),
        call("b", "set", JSON.stringify({ key: one.dst, value: value(one, t.initial) })),
        call("c", "commit", "{}")
      ])
      expect([wrong.reward, wrong.done, wrong.info.correct]).toEqual([0, true, false])
      expect(wrong.info.mismatches).toEqual([{ key: two.dst, value: value(two, t.initial), expected: t.expected[two.dst] }])
    })))

  it.effect("bad arguments, unknown keys and tools, huge arguments: tool messages naming the problem, counted in the info", () =>
    Effect.scoped(Effect.gen(function*() {
      const { step } = yield* fresh({ seed: 1 })
      const huge = JSON.stringify({ key: "alpha", value: 1, pad: "x".repeat(70_000) })
      const result = yield* step([
        call("a", "get", "{\"key\": \"unicorn\"}"),
        call("b", "get", "{}"),
        call("c", "set", "{\"key\": \"alpha\", \"value\": 1.5}"),
        call("d", "set", "{\"key\": \"Not A Key!\", \"value\": 1}"),
        call("e", "set", `{"key": "alpha", "value": ${KvStore.MAX_VALUE * 10}}`),
        call("f", "delete", "{\"key\": \"alpha\"}"),
        call("g", "get", "{\"key\": "),
        call("h", "set", huge),
        call("i", "list_keys", "")
      ])
      expect(result.done).toBe(false)
      expect(result.info).toEqual({
        tool_calls: 9,
        tool_errors: ["Failed", "InvalidArguments", "InvalidArguments", "InvalidArguments", "InvalidArguments", "UnknownTool", "MalformedArguments", "TooLarge"]
      })
      const contents = (result.toolMessages ?? []).map((m) => m.content)
      expect(contents.slice(0, 8)).toEqual([
        "Error: Failed: no key \"unicorn\"",
        "Error: InvalidArguments: key: is missing",
        expect.stringMatching(/^Error: InvalidArguments: value: .*int/i),
        "Error: InvalidArguments: key: Expected a string matching the RegExp ^[a-z0-9_./-]{1,64}$, got \"Not A Key!\"",
        `Error: InvalidArguments: value: Expected a value between -${KvStore.MAX_VALUE} and ${KvStore.MAX_VALUE}, got ${KvStore.MAX_VALUE * 10}`,
        "Error: UnknownTool: no tool \"delete\"; the tools are list_keys, get, set, commit",
        expect.stringMatching(/^Error: MalformedArguments: the arguments are not JSON/),
        `Error: TooLarge: the arguments are ${huge.length} characters; the limit is 65536`
      ])
      // none of them wrote anything: the keys are the seed's
      expect(JSON.parse(contents[8])).toEqual(Object.keys(KvStore.task(1, 6, 3).initial).sort())
      expect((result.toolMessages ?? []).map((m) => m.tool_call_id)).toEqual(["a", "b", "c", "d", "e", "f", "g", "h", "i"])
    })))

  it.effect("hostile values: 1e400 (Infinity), a numeric string, __proto__ and constructor as keys", () =>
    Effect.scoped(Effect.gen(function*() {
      const { step } = yield* fresh({ seed: 3 })
      const result = yield* step([
        call("a", "set", "{\"key\": \"alpha\", \"value\": 1e400}"),
        call("b", "set", "{\"key\": \"alpha\", \"value\": \"5\"}"),
        call("c", "set", "{\"key\": \"__proto__\", \"value\": 5}"),
        call("d", "get", "{\"key\": \"__proto__\"}"),
        call("e", "get", "{\"key\": \"constructor\"}"),
        call("f", "commit", "{}")
      ])
      expect(result.toolMessages?.map((m) => m.content)).toEqual([
        "Error: InvalidArguments: value: Expected an integer, got Infinity",
        "Error: InvalidArguments: value: Expected number, got \"5\"",
        "ok",
        "5",
        "Error: Failed: no key \"constructor\"",
        "committed"
      ])
      // a key the model added is a mismatch like any other
      expect(result.info.mismatches).toContainEqual({ key: "__proto__", value: 5, expected: null })
    })))

  it.effect("the store holds at most MAX_KEYS keys: a set of a new key past it is refused", () =>
    Effect.scoped(Effect.gen(function*() {
      const { step } = yield* fresh({ seed: 2, keys: 3, steps: 1 })
      const calls = Array.from({ length: KvStore.MAX_KEYS - 2 }, (_, i) => call(`s${i}`, "set", JSON.stringify({ key: `k${i}`, value: i })))
      const result = yield* step(calls)
      const contents = (result.toolMessages ?? []).map((m) => m.content)
      expect(contents.slice(0, KvStore.MAX_KEYS - 3).every((c) => c === "ok")).toBe(true)
      expect(contents.at(-1)).toBe(`Error: Failed: the store is full (${KvStore.MAX_KEYS} keys)`)
    })))

  it.effect("calls after commit in the same reply are refused; a step after done is answered, stays done, rewards nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const { step, opening } = yield* fresh({ seed: 5 })
      const done = yield* step([call("a", "commit", "{}"), call("b", "set", "{\"key\": \"alpha\", \"value\": 1}")])
      expect(done.done).toBe(true)
      expect(done.reward).toBe(0)
      expect(done.info).toMatchObject({ ended_by: "commit", correct: false, tool_errors: ["Failed"] })
      expect(done.toolMessages?.map((m) => m.content)).toEqual([
        "committed",
        "Error: Failed: the store is committed: nothing can be called after commit"
      ])
      const late = yield* step([call("x", "get", "{\"key\": \"alpha\"}")], opening)
      expect(late).toEqual({
        observation: "The episode is over.",
        reward: 0,
        done: true,
        info: { after_done: true },
        toolMessages: [{ role: "tool", content: "Error: the episode is over", tool_call_id: "x", name: "get" }]
      })
    })))

  it.effect("a reply without tool calls ends the episode and the store is judged as it stands", () =>
    Effect.scoped(Effect.gen(function*() {
      const { env, opening } = yield* fresh({ seed: 6 })
      const result = yield* env.step(Scheduler.withReply(opening, "I am done."))
      expect(result).toMatchObject({ reward: 0, done: true, info: { ended_by: "reply", correct: false } })
      expect(result.observation).toBe("Ended without commit: 3 key(s) differ from the expected store.")
    })))

  it("is registered with the built-ins, with its solver", () => {
    expect(Builtins.registry.envs.has("kv_store")).toBe(true)
    expect(Builtins.registry.policies.has("kv-store-solver")).toBe(true)
  })
})

describe("kv_store from the command line", () => {
  it.live("run --env kv_store --policy kv-store-solver: every trajectory rewarded; epsilon=1: none", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-kv-"))
      const dataset = path.join(dir, "kv.jsonl")
      fs.writeFileSync(dataset, [0, 1, 2].map((seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
      const args = (output: string, ...extra: Array<string>) => [
        "run", "--dataset", dataset, "--env", "kv_store", "--policy", "kv-store-solver", "--num-generations", "2",
        "--max-turns", "8", "--seed", "1", "--output", path.join(dir, output), "--json", ...extra
      ]
      const solved = yield* cli(...args("out.jsonl"))
      expect(solved.code).toBe(0)
      // 3 instructions: 1 reply of gets, 3 sets, a commit
      const summary = JSON.parse(solved.stdout)
      expect(summary).toMatchObject({ trajectories: 6, failures: 0, mean_reward: 1, tools: { errors: 0, malformed: 0 } })
      const lines = readLines(path.join(dir, "out.jsonl"))
      expect(lines.every((l) => l.rollout_infos.num_turns === 5)).toBe(true)
      const wrong = yield* cli(...args("wrong.jsonl", "--policy-option", "epsilon=1"))
      expect(JSON.parse(wrong.stdout)).toMatchObject({ trajectories: 6, failures: 0, mean_reward: 0 })
    }))

  it.live("check-env kv_store passes every check, tools included", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* cli("check-env", "kv_store", "--json")
      expect(code).toBe(0)
      const report = JSON.parse(stdout)
      expect(report.ok).toBe(true)
      expect(report.passed).toEqual(EnvCheck.CHECKS)
    }))
})
