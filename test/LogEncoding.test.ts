/**
 * The log line's text (CompletionsLog.encodeLine: `toLine`'s object literal, stringified) is the
 * text of an independent description of the line (below: the list of its fields, in order, as the
 * log wrote it before, each assigned to an object, stringified whole), byte for byte: over records
 * generated with awkward values (keys of every kind in infos, run keys in rollout_infos, -0, NaN
 * advantages, unicode and escapes in messages, bigints, undefined fields, typed errors).
 */
import { NodeFileSystem } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Cause, Effect, FileSystem, Fiber, Schema, Semaphore } from "effect"
import { PlatformError, SystemError } from "effect/PlatformError"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import * as Json from "../src/internal/Json.js"
import * as Rollout from "../src/Rollout.js"
import { UnexpectedError } from "../src/Scheduler.js"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "./cli.js"
import { oneTurnRecord, randomPolicy, records, rows, runConfig } from "./helpers.js"

const round = (ms: number): number => Math.round(ms * 1000) / 1000

/** The independent description of a line (see the top of this file): its fields, in order. */
const lineFields = (record: Rollout.TrajectoryRecord): Array<readonly [string, unknown]> => {
  const result = record.result
  // A failed trajectory has no reward: every reward field is `null`, so that a trainer that reads
  // one without looking at `error` gets no number to learn from (a partial sum, or 0, was written).
  const failed = record.error !== undefined
  const fields: Array<readonly [string, unknown]> = [
    ["row", result.row],
    ["generation", result.generation],
    ["id", result.id],
    ["env", result.env ?? null],
    ["env_config", record.row.envConfig],
    ["messages", result.messages],
    ["rewards", failed ? null : record.rewards ?? null],
    ["reward", failed ? null : record.reward ?? null],
    ["advantage", failed ? null : record.advantage ?? null],
    ["rollout_infos", {
      ...result.rolloutInfos,
      total_reward: failed ? null : result.totalReward,
      step_rewards: failed ? null : result.stepRewards,
      num_turns: result.numTurns,
      reset_info: result.resetInfo ?? null,
      step_infos: result.stepInfos
    }],
    ["end_reason", result.endReason],
    ["error", record.error === undefined ? null : CompletionsLog.errorToJson(record.error)],
    ["finish_reasons", result.turns.map((t) => t.finishReason)]
  ]
  if (record.attempts !== undefined && record.attempts > 1) {
    fields.push(["attempts", record.attempts], ["attempt_errors", (record.attemptErrors ?? []).map(CompletionsLog.errorToJson)])
  }
  // Token fields keep one entry per turn, so turn i is always entry i; a turn whose backend gave no
  // ids (or no logprobs) is `null` there, never a made-up list. A field no turn has is left out.
  const turns = result.turns
  if (turns.some((t) => t.tokenIds !== undefined)) {
    fields.push(
      ["response_token_ids", turns.map((t) => t.tokenIds ?? null)],
      ["response_loss_mask", turns.map((t) => t.tokenIds === undefined ? null : t.tokenIds.map(() => 1))]
    )
  }
  if (turns.some((t) => t.logprobs !== undefined)) fields.push(["rollout_logprobs", turns.map((t) => t.logprobs ?? null)])
  if (turns.some((t) => t.policyVersion !== undefined)) {
    fields.push(["policy_versions", turns.map((t) => t.policyVersion ?? null)])
  }
  if (turns.some((t) => t.malformedToolCall !== undefined)) {
    fields.push(["malformed_tool_call", turns.map((t) => t.malformedToolCall ?? null)])
  }
  const tokens = result.tokens
  if (tokens !== undefined) {
    if (tokens._tag === "Sequence") {
      fields.push(
        ["prompt_token_ids", tokens.sequence.promptTokenIds],
        ["token_ids", tokens.sequence.tokenIds],
        ["loss_mask", tokens.sequence.lossMask],
        ["logprobs", tokens.sequence.logprobs]
      )
    } else {
      fields.push(["token_ids", null], ["token_ids_unavailable", tokens.reason])
    }
  }
  if (record.runner !== undefined) fields.push(["runner", record.runner])
  const resetWaitMs = round(result.timings.resetWaitMs ?? 0)
  fields.push(["timings", {
    total_ms: round(result.timings.totalMs),
    reset_ms: round(result.timings.resetMs),
    // (written only when there was waiting: the lines of runs without any stay as they were)
    ...(resetWaitMs > 0 ? { reset_wait_ms: resetWaitMs } : {}),
    turns: result.timings.turns.map((t) => {
      const waitMs = round(t.waitMs ?? 0)
      return waitMs > 0
        ? { model_ms: round(t.modelMs), env_ms: round(t.envMs), wait_ms: waitMs }
        : { model_ms: round(t.modelMs), env_ms: round(t.envMs) }
    })
  }])
  return fields
}

const general = (record: Rollout.TrajectoryRecord): string => {
  const line: Record<string, unknown> = {}
  for (const [key, value] of lineFields(record)) line[key] = value
  return Json.stringify(line)
}

type Arb<A> = Arbitrary.Arbitrary<A>
const integer = (minimum: number, maximum: number): Arb<number> =>
  Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum, maximum })))
const nat = (maximum = Number.MAX_SAFE_INTEGER): Arb<number> => integer(0, maximum)
const text = (maxLength: number): Arb<string> => Arbitrary.schema(Schema.String.check(Schema.isMaxLength(maxLength)))
/** One of the given values (any values: NaN, -0 and undefined too). */
const constantFrom = <const A extends ReadonlyArray<unknown>>(...values: A): Arb<A[number]> =>
  integer(0, values.length - 1).pipe(Arbitrary.map((i) => values[i]))
/** One of the arbitraries, in proportion to its weight. */
const oneof = <A>(...choices: ReadonlyArray<readonly [weight: number, Arb<A>]>): Arb<A> => {
  const total = choices.reduce((sum, [weight]) => sum + weight, 0)
  return integer(0, total - 1).pipe(Arbitrary.flatMap((n) => {
    for (const [weight, arbitrary] of choices) {
      if (n < weight) return arbitrary
      n -= weight
    }
    return choices[choices.length - 1][1]
  }))
}
const option = <A>(arb: Arb<A>): Arb<A | undefined> => oneof([1, Arbitrary.Constant(undefined)], [5, arb])
/** An object of up to `maxKeys` keys (own properties, `__proto__` included). */
const dictionary = <A>(key: Arb<string>, value: Arb<A>, maxKeys: number): Arb<Record<string, A>> =>
  Arbitrary.array(Arbitrary.all([key, value]), { maxLength: maxKeys }).pipe(Arbitrary.map((entries) => {
    const out: Record<string, A> = {}
    for (const [k, v] of entries) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true })
    return out
  }))

/** Mostly `undefined` (so that most records take the direct path), sometimes a value. */
const rarely = <A>(arb: Arb<A>) => oneof<A | undefined>([29, Arbitrary.Constant(undefined)], [1, arb])
const key = oneof<string | undefined>(
  [1, constantFrom("a", "b", "0", "12", "gym_done", "__proto__x", "é", "toString", "\n\"k")],
  [1, text(4)],
  [1, rarely(constantFrom("total_reward", "step_infos"))]
).pipe(Arbitrary.map((k) => k ?? "z"))
const finite = Arbitrary.schema(Schema.Finite)
/** A finite double mostly; NaN and the infinities (which JSON writes as null) sometimes. */
const double = oneof([99, finite], [1, constantFrom(Number.NaN, Infinity, -Infinity)])
const leaf = oneof<unknown>(
  [40, text(8)],
  [10, constantFrom("a\nb\"c\\", "\u2028", "\ud800", "😀")],
  [40, double],
  [20, Arbitrary.schema(Schema.Int)],
  [10, Arbitrary.Constant(-0)],
  [10, Arbitrary.schema(Schema.Boolean)],
  [10, Arbitrary.Constant(null)],
  // what JSON cannot write as such: a bigint (written by the general path), undefined (left out, or null in an array)
  [3, Arbitrary.Constant(undefined)],
  [3, Arbitrary.schema(Schema.BigInt.check(Schema.isBetweenBigInt({ minimum: -(2n ** 70n), maximum: 2n ** 70n })))]
)
/** JSON-like values nested up to `depth` levels, leaves most of the time. */
const jsonAt = (depth: number): Arb<unknown> =>
  depth === 0
    ? leaf
    : oneof<unknown>([2, leaf], [1, Arbitrary.array(jsonAt(depth - 1), { maxLength: 3 })], [1, dictionary(key, jsonAt(depth - 1), 3)])
const json = jsonAt(3)
const info = dictionary(key, json, 4)
const message = Arbitrary.all({ role: constantFrom("system", "user", "assistant"), content: text(20) })
const ms = oneof([1, Arbitrary.schema(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1e6 })))], [1, Arbitrary.Constant(0.0004999)], [1, Arbitrary.Constant(1e-7)])
const turn = Arbitrary.all({
  finishReason: constantFrom("stop", "length"),
  tokenIds: rarely(Arbitrary.array(nat(), { maxLength: 2 })),
  logprobs: Arbitrary.Constant(undefined),
  policyVersion: rarely(nat())
})

const record = Arbitrary.all({
  row: nat(),
  generation: nat(),
  env: option(text(5)),
  envConfig: info,
  messages: Arbitrary.array(message, { maxLength: 4 }),
  rewards: option(dictionary(key, double, 4)),
  reward: option(oneof([1, double], [1, Arbitrary.Constant(-0)])),
  advantage: option(oneof([1, double], [1, Arbitrary.Constant(Number.NaN)])),
  rolloutInfos: info,
  totalReward: double,
  stepRewards: Arbitrary.array(double, { maxLength: 3 }),
  numTurns: nat(20),
  resetInfo: option(info),
  stepInfos: Arbitrary.array(info, { maxLength: 3 }),
  endReason: constantFrom("done", "max_turns", "error"),
  error: option(text(6)),
  turns: Arbitrary.array(turn, { maxLength: 3 }),
  attempts: rarely(integer(1, 3)),
  timings: Arbitrary.all({ totalMs: ms, resetMs: ms, turns: Arbitrary.array(Arbitrary.all({ modelMs: ms, envMs: ms }), { maxLength: 3 }) })
}).pipe(Arbitrary.map((r): Rollout.TrajectoryRecord => {
  const error = r.error === undefined ? undefined : new UnexpectedError({ phase: "model", detail: r.error })
  return {
    row: { index: r.row, envConfig: r.envConfig, messages: [], dataDict: {} } as unknown as Rollout.TrajectoryRecord["row"],
    rewards: r.rewards,
    reward: r.reward,
    advantage: r.advantage,
    error,
    ...(r.attempts === undefined ? {} : { attempts: r.attempts, attemptErrors: [] }),
    result: {
      id: `r${r.row}-g${r.generation}`,
      row: r.row,
      generation: r.generation,
      env: r.env,
      messages: r.messages,
      totalReward: r.totalReward,
      stepRewards: r.stepRewards,
      numTurns: r.numTurns,
      resetInfo: r.resetInfo,
      stepInfos: r.stepInfos,
      rolloutInfos: r.rolloutInfos,
      endReason: r.endReason,
      error,
      turns: r.turns,
      tokens: undefined,
      timings: r.timings
    }
  } as Rollout.TrajectoryRecord
}))

describe("log encoding: the line's text is the independent description's, stringified whole", () => {
  it.effect("for generated records (property)", () =>
    Effect.gen(function*() {
      let written = 0
      const result = yield* Arbitrary.checkEffect(record, (r) => {
        let expected: string | undefined
        try {
          expected = general(r)
        } catch {
          expected = undefined
        }
        let actual: string | undefined
        try {
          actual = CompletionsLog.encodeLine(r)
        } catch {
          actual = undefined
        }
        if (actual !== undefined) written++
        return actual === expected
      }, { runs: 3000 })
      expect(result._tag, Arbitrary.formatCheckFailure(result)).toBe("Passed")
      // most generated records have a line (not only the ones JSON cannot hold)
      expect(written).toBeGreaterThan(900)
    }))

  it.effect("for the lines of a FrozenLake run", () =>
    Effect.gen(function*() {
      const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: 4 })
      const items = yield* Rollout.runAll(config, rows(Array.from({ length: 16 }, (_, i) => ({ env_config: { seed: i } }))))
      const all = records(items)
      expect(all.length).toBe(64)
      for (const r of all) expect(CompletionsLog.encodeLine(r)).toBe(general(r))
    }).pipe(Effect.provide(randomPolicy())))
})

/** The general text, or the message it throws with. */
const generalOrThrow = (r: Rollout.TrajectoryRecord): string => {
  try {
    return general(r)
  } catch (error) {
    return `throws ${String(error)}`
  }
}
const encodedOrThrow = (r: Rollout.TrajectoryRecord): string => {
  try {
    return CompletionsLog.encodeLine(r)
  } catch (error) {
    return `throws ${String(error)}`
  }
}

/** A plain record of one turn with `over` in its result (hand-built, as a user of `encodeLine` may). */
const plain = (over: Record<string, unknown>): Rollout.TrajectoryRecord => oneTurnRecord({}, over)

const hidden = <A extends object>(value: A, toJSON: (key: string) => unknown): A =>
  Object.defineProperty(value, "toJSON", { value: toJSON, enumerable: false })

let deep: unknown = 1
for (let i = 0; i < 5000; i++) deep = { d: deep }

describe("log encoding: hostile values (hostile pass)", () => {
  const cases: Record<string, Record<string, unknown>> = {
    // these wrote invalid JSON or other text on the direct path (fixed: such values take toLine's)
    "rollout_infos with a non-enumerable toJSON giving a string": { rolloutInfos: hidden({ a: 1 }, () => "x") },
    "rollout_infos with a non-enumerable toJSON giving another object": { rolloutInfos: hidden({ a: 1 }, () => ({ b: 2 })) },
    "rollout_infos an array": { rolloutInfos: [1, 2] },
    "reset_info whose toJSON reads its key": { resetInfo: hidden({ a: 1 }, (key) => key) },
    "messages whose toJSON reads its key": { messages: hidden([{ role: "user", content: "x" }], (key) => `k=${key}`) },
    "step_infos whose toJSON reads its key": { stepInfos: hidden([{}], (key) => key) },
    // these were fine; kept as checks
    "symbol keys": { rolloutInfos: { [Symbol("s")]: 1, a: 2 } },
    "an enumerable getter": { rolloutInfos: Object.defineProperty({}, "g", { get: () => 5, enumerable: true }) },
    "a throwing getter": { stepInfos: [Object.defineProperty({}, "g", { get: () => { throw new Error("no") }, enumerable: true })] },
    "__proto__, numeric-like keys": { rolloutInfos: JSON.parse(`{"__proto__":{"x":1},"10":2,"b":3,"0":1,"-1":4,"01":5}`) },
    "sparse arrays, undefined and functions in arrays and objects": {
      stepInfos: [{ a: [1, , 3], u: undefined, f: () => 1, g: [undefined, () => 1] }]
    },
    "a Date and a class instance": { stepInfos: [{ d: new Date(0), m: new Map([[1, 2]]), c: new (class C { x = 1 })() }] },
    "nesting 40 deep and 5000 deep": { resetInfo: { d: JSON.parse("[".repeat(40) + "]".repeat(40)) }, stepInfos: [{ deep }] },
    "strings JSON escapes": {
      messages: [{ role: "user", content: "\ud800\udfff\u2028\u2029\u0000\u001f\u007f\"\\" + "é".repeat(200_000) }],
      stepInfos: [{ "\ud800": "\udc00x", "\u2028": 1 }]
    },
    "NaN, Infinity, -0 in infos": { stepInfos: [{ n: Number.NaN, i: Infinity, z: -0, a: [Number.NaN, -0] }] },
    "a bigint": { stepInfos: [{ n: 2n ** 80n, a: [-(2n ** 64n)] }], rolloutInfos: { big: 1n } }
  }
  for (const [name, over] of Object.entries(cases)) {
    it(name, () => {
      const r = plain(over)
      expect(encodedOrThrow(r)).toBe(generalOrThrow(r))
    })
  }

  it("every line the writer writes for a hand-built hostile record is JSON", () => {
    for (const over of Object.values(cases)) {
      const text = CompletionsLog.groupText({ _tag: "Group", records: [plain(over)] } as unknown as Rollout.Group)
      for (const line of text.trimEnd().split("\n")) expect(() => Json.parse(line)).not.toThrow()
    }
  })

  it.effect("through a plugin env's infos and the model's text: toLine's text, every line JSON", () =>
    Effect.gen(function*() {
      const infos: ReadonlyArray<() => Record<string, unknown>> = [
        () => ({ n: Number.NaN, z: -0, i: -Infinity }),
        () => ({ s: "\ud800 \u2028 \u0001", long: "x".repeat(100_000) }),
        () => ({ u: undefined, f: () => 1, a: [1, , undefined] }),
        () => ({ d: new Date(0), c: new (class K { y = 2 })() }),
        () => JSON.parse(`{"__proto__":{"p":1},"2":1,"1":0,"a":1}`),
        () => ({ [Symbol("x")]: 1, ok: true }),
        () => hidden({ a: 1 }, (key) => `key ${key}`),
        () => ({ big: 12345678901234567890n }),
        () => ({ deep }),
        () => Object.defineProperty({}, "g", { get: () => "got", enumerable: true })
      ]
      const hostile = Env.define({
        name: "hostile",
        make: () =>
          Effect.sync((): Env.Env => {
            let turn = 0
            return {
              reset: () => Effect.succeed({ observation: "start \ud800", info: infos[6]() }),
              step: () => {
                turn++
                const info = infos[turn % infos.length]()
                // completed answers and ones through the runtime, alternately
                const out = { observation: `o\u2028${turn}`, reward: 0, done: turn >= 12, info }
                return turn % 2 === 0 ? Effect.succeed(out) : Effect.promise(() => Promise.resolve(out))
              }
            }
          })
      })
      const config = yield* runConfig({ envs: [hostile], defaultEnv: "hostile", numGenerations: 2, maxTurns: 12 })
      const items = yield* Rollout.runAll(config, rows([{ env_config: {} }, { env_config: { k: "\u2029" } }])).pipe(
        Effect.provide(Inference.layerFunction("hostile", (request) =>
          Effect.succeed({ text: `\ud83d ${request.turn} \u0000 "\\`, finishReason: "stop" as const })))
      )
      const all = records(items)
      expect(all.length).toBe(4)
      for (const r of all) expect(encodedOrThrow(r)).toBe(generalOrThrow(r))
      for (const item of items) {
        if (item._tag !== "Group") continue
        for (const line of CompletionsLog.groupText(item).trimEnd().split("\n")) expect(() => Json.parse(line)).not.toThrow()
      }
    }))
})

describe("the writer, hostile: a write cut half way (a full disk) leaves the log on its last whole line", () => {
  /** A file that keeps its bytes in memory; the `failAt`-th write (1-based) writes half its bytes and fails. */
  const fakeFile = (failAt: number) => {
    let bytes = new Uint8Array(0)
    let writes = 0
    const append = (more: Uint8Array) => {
      const next = new Uint8Array(bytes.length + more.length)
      next.set(bytes)
      next.set(more, bytes.length)
      bytes = next
    }
    const noSpace = () =>
      new PlatformError(new SystemError({ _tag: "Unknown", module: "FileSystem", method: "writeAll", description: "ENOSPC: no space left on device" }))
    const file = {
      [FileSystem.FileTypeId]: FileSystem.FileTypeId,
      stat: Effect.sync(() => ({ size: BigInt(bytes.length) })),
      sync: Effect.void,
      truncate: (length?: number) => Effect.sync(() => void (bytes = bytes.slice(0, Number(length ?? 0)))),
      writeAll: (buffer: Uint8Array) =>
        Effect.suspend(() => {
          if (++writes !== failAt) return Effect.sync(() => append(buffer))
          append(buffer.slice(0, Math.floor(buffer.length / 2)))
          return Effect.fail(noSpace())
        })
    } as unknown as FileSystem.File
    const layer = FileSystem.layerNoop({ open: () => Effect.succeed(file) })
    return { layer, text: () => new TextDecoder().decode(bytes) }
  }
  const group = (id: string) =>
    ({ _tag: "Group", records: [plain({ id: `${id}-0` }), plain({ id: `${id}-1` })] }) as unknown as Rollout.Group

  it.effect("for each way of writing: write, writeText (a cluster coordinator's)", () =>
    Effect.gen(function*() {
      for (const how of ["write", "writeText"] as const) {
        const fake = fakeFile(2)
        const exit = yield* Effect.scoped(Effect.gen(function*() {
          const writer = yield* CompletionsLog.open("log.jsonl")
          for (const id of ["a", "b"]) {
            const g = group(id)
            if (how === "write") yield* writer.write([g])
            else yield* writer.writeText(CompletionsLog.groupText(g))
          }
        })).pipe(Effect.provide(fake.layer), Effect.exit)
        expect(exit._tag, how).toBe("Failure")
        // the first group whole, nothing of the second
        expect(fake.text(), how).toBe(CompletionsLog.groupText(group("a")))
      }
    }))
})

describe("the writer, hostile: an error that cannot be written itself", () => {
  const cyclic: Record<string, unknown> = { a: 1 }
  cyclic.self = cyclic
  const throwing = { toJSON: () => { throw new Error("toJSON threw") } }
  for (const [name, details] of [["a cycle", { cyclic }], ["a throwing toJSON", { throwing }]] as const) {
    it(`an EnvError whose details hold ${name}: its line is written with an EncodeError (it stopped the run with an internal error)`, () => {
      const error = new Env.EnvError({ env: "e", phase: "step", detail: "no", details })
      const record = { ...plain({ endReason: "error" }), error }
      const retried = { ...record, attempts: 2, attemptErrors: [error] } as Rollout.TrajectoryRecord
      for (const r of [record, retried]) {
        const text = CompletionsLog.groupText({ _tag: "Group", records: [r] } as unknown as Rollout.Group)
        const line = Json.parse(text.trimEnd()) as { error: { _tag: string; message: string }; attempt_errors?: Array<{ detail: string }> }
        expect(line.error._tag).toBe("EncodeError")
        if (r === retried) expect(line.attempt_errors?.[0].detail).toContain("EnvError")
      }
    })
  }

  it.live("through a CLI run whose plugin env fails its steps so: every line written, no internal error", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const plugin = path.join(dir, "p.ts")
      fs.writeFileSync(
        plugin,
        `import { Effect } from "effect"
import { Env, Plugin } from "effect-gym"
const cyc: Record<string, unknown> = { a: 1 }
cyc.self = cyc
const bad = Env.define({
  name: "bad_details",
  make: () => Effect.succeed<Env.Env>({
    reset: () => Effect.succeed({ observation: "start", info: {} }),
    step: () => Effect.fail(new Env.EnvError({ env: "bad_details", phase: "step", detail: "no", details: { cyc } }))
  })
})
export default Plugin.make({ envs: [bad] })
`
      )
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{}}\n{"env_config":{}}\n`)
      const output = path.join(dir, "out.jsonl")
      const { stderr } = yield* cli(
        "run", "--dataset", dataset, "--plugin", plugin, "--env", "bad_details", "--policy", "random", "--num-generations", "2",
        "--output", output, "--json"
      )
      expect(stderr).not.toContain("internal error")
      const lines = fs.readFileSync(output, "utf8").trimEnd().split("\n").map((l) => Json.parse(l) as { error: { _tag: string } })
      expect(lines.length).toBe(4)
      for (const line of lines) expect(line.error._tag).toBe("EncodeError")
      fs.rmSync(dir, { recursive: true, force: true })
    }))
})

describe("the writer's kept buffer: every write's bytes, whatever came before or beside it", () => {
  const texts = [
    "small line\n",
    `${"x".repeat(30_000)}\n`, // grows the kept buffer (64 KB holds 21,845 code units)
    "ascii again, shorter than the last\n",
    "é ü 雪 🎲 and a lone surrogate \ud800 end\n",
    `${"y".repeat(6_000_000)}\n`, // beyond what is kept: its own bytes
    "after the big one\n"
  ]
  it.effect("one after another, to a real file: byte for byte what TextEncoder makes", () =>
    Effect.gen(function*() {
      const file = path.join(tmp("kept-buffer"), "log.jsonl")
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open(file)
        for (const text of [...texts, ...texts]) yield* writer.writeText(text)
      }))
      const expected = new TextEncoder().encode([...texts, ...texts].join(""))
      expect(Buffer.compare(fs.readFileSync(file), Buffer.from(expected))).toBe(0)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("writeJsonLines (lines given without newlines): byte for byte the lines joined with newlines, a newline at every buffer edge", () =>
    Effect.gen(function*() {
      // 200,000 ASCII code units grow the first buffer (64 KB) to exactly their bytes, so that
      // their newline finds it full; 21,845 code units are the most encoded at once in 64 KB;
      // others straddle what is kept, and one is beyond it
      const lines = [
        "x".repeat(200_000),
        "x".repeat(65_536),
        "a",
        "y".repeat(21_845),
        "z".repeat(21_844),
        "é 雪 🎲 \ud800 end",
        "",
        "w".repeat(6_000_000),
        "v".repeat(65_535),
        "last"
      ]
      for (const split of [1, 2, lines.length]) {
        const file = path.join(tmp("json-lines"), "log.jsonl")
        yield* Effect.scoped(Effect.gen(function*() {
          const writer = yield* CompletionsLog.open(file)
          for (let i = 0; i < lines.length; i += split) yield* writer.writeJsonLines(lines.slice(i, i + split))
        }))
        const expected = new TextEncoder().encode(lines.map((line) => `${line}\n`).join(""))
        expect(Buffer.compare(fs.readFileSync(file), Buffer.from(expected)), `${split} a write`).toBe(0)
      }
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("40 writes at once from as many fibers: each text whole, none mixed with another", () =>
    Effect.gen(function*() {
      const file = path.join(tmp("kept-buffer"), "log.jsonl")
      const many = Array.from({ length: 40 }, (_, i) => `${String(i).padStart(2, "0")}:${String.fromCharCode(97 + (i % 26)).repeat(5_000 + i * 1_000)}\n`)
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open(file)
        yield* Effect.forEach(many, (text) => writer.writeText(text), { concurrency: "unbounded", discard: true })
      }))
      const lines = fs.readFileSync(file, "utf8").split("\n").slice(0, -1).map((line) => `${line}\n`)
      expect([...lines].sort()).toEqual([...many].sort())
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})


describe("the writer's kept buffer, hostile: interruptions, concurrency, full disks", () => {
  /**
   * A file as Node's: it writes at a position it counts itself (advanced when a write completes),
   * one write at a time, and reads a write's bytes only when the OS gets to it (a timer here),
   * whether or not the fiber that asked was interrupted meanwhile. `failAt`: those writes (1-based)
   * write half their bytes and fail (a full disk). `truncate` past the end fills with zeros.
   */
  const nodeLikeFile = (...failAt: Array<number>) => {
    let bytes = new Uint8Array(0)
    let position = 0
    let writes = 0
    const semaphore = Semaphore.makeUnsafe(1)
    const put = (more: Uint8Array, at: number) => {
      if (at + more.length > bytes.length) {
        const next = new Uint8Array(at + more.length)
        next.set(bytes)
        bytes = next
      }
      bytes.set(more, at)
    }
    const file = {
      [FileSystem.FileTypeId]: FileSystem.FileTypeId,
      stat: Effect.sync(() => ({ size: BigInt(bytes.length) })),
      sync: Effect.void,
      truncate: (length?: number) =>
        semaphore.withPermits(1)(Effect.sync(() => {
          const len = Number(length ?? 0)
          const next = new Uint8Array(len)
          next.set(bytes.subarray(0, Math.min(len, bytes.length)))
          bytes = next
          position = Math.min(position, len)
        })),
      writeAll: (buffer: Uint8Array) =>
        semaphore.withPermits(1)(Effect.suspend(() => {
          const at = position
          const failing = failAt.includes(++writes)
          return Effect.callback<number, PlatformError>((resume) => {
            // no canceller: an interrupted write goes on, as the OS's
            setTimeout(() => {
              if (failing) {
                put(buffer.slice(0, Math.floor(buffer.length / 2)), at)
                resume(Effect.fail(new PlatformError(new SystemError({ _tag: "Unknown", module: "FileSystem", method: "writeAll", description: "ENOSPC" }))))
              } else {
                put(buffer.slice(), at)
                resume(Effect.succeed(buffer.length))
              }
            }, 5)
          }).pipe(Effect.map((n) => void (position += n)))
        }))
    } as unknown as FileSystem.File
    const layer = FileSystem.layerNoop({ open: () => Effect.succeed(file) })
    return { layer, bytes: () => bytes, text: () => new TextDecoder().decode(bytes) }
  }
  /** The log's lines, each with its newline; the text after the last newline (a torn line) too, when there is one. */
  const linesOf = (text: string) => text.split(/(?<=\n)/)

  /** "first", then `big` interrupted after `yields` yields, then "after" and "more", to the log at `file`. */
  const interruptedWrite = (file: string, big: string, yields: number) =>
    Effect.scoped(Effect.gen(function*() {
      const writer = yield* CompletionsLog.open(file)
      yield* writer.writeText("first\n")
      const fiber = yield* Effect.forkChild(writer.writeText(big))
      for (let i = 0; i < yields; i++) yield* Effect.yieldNow
      yield* Fiber.interrupt(fiber)
      yield* writer.writeText("after\n")
      yield* writer.writeText("more\n")
    }))

  it.effect("a write interrupted while the file writes it, then more writes: nothing overwritten, no torn line", () =>
    Effect.gen(function*() {
      const big = `${"b".repeat(200_000)}\n`
      for (const yields of [0, 1, 2, 5]) {
        const fake = nodeLikeFile()
        yield* interruptedWrite("log.jsonl", big, yields).pipe(Effect.provide(fake.layer))
        // (the interrupted write put its bytes at the old position later: "first\nafter\nmore\nbbb…"
        // or "first\nbbb…" whose line the next writes cut into)
        const lines = linesOf(fake.text())
        expect(lines.filter((l) => l !== big), `${yields} yields`).toEqual(["first\n", "after\n", "more\n"])
        expect(lines.indexOf("after\n") === 1 || lines.indexOf("after\n") === 2, `${yields} yields`).toBe(true)
      }
    }))

  it.effect("the same to a real file", () =>
    Effect.gen(function*() {
      const big = `${"b".repeat(4_000_000)}\n`
      for (const yields of [0, 1, 3]) {
        const file = path.join(tmp("kept-buffer"), "log.jsonl")
        yield* interruptedWrite(file, big, yields)
        const lines = linesOf(fs.readFileSync(file, "utf8"))
        expect(lines.filter((l) => l !== big), `${yields} yields`).toEqual(["first\n", "after\n", "more\n"])
      }
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  for (const [name, failAt, interrupting] of [
    ["every third interrupted", [], true],
    ["the 6th and 9th writes failing half way", [6, 9], false],
    ["both", [6, 9], true]
  ] as const) {
    it.effect(`40 fibers writing at once, ${name}: each text written whole or not at all as its fiber was told, no zeros`, () =>
      Effect.gen(function*() {
        const fake = nodeLikeFile(...failAt)
        // (longest first: a write that overwrote an interrupted one's bytes hid them when longer)
        const many = Array.from({ length: 40 }, (_, i) => `${String(i).padStart(2, "0")}:${"é🎲x".repeat(30_000 - i * 700)}\n`)
        const outcomes = yield* Effect.scoped(Effect.gen(function*() {
          const writer = yield* CompletionsLog.open("log.jsonl")
          const fibers = yield* Effect.forEach(many, (text) => Effect.forkChild(writer.writeText(text)))
          // (interrupted a few milliseconds apart: some while the file writes them, some waiting)
          for (let i = 0; interrupting && i < fibers.length; i += 3) {
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, i % 2 === 0 ? 7 : 2)))
            yield* Fiber.interrupt(fibers[i])
          }
          const exits = yield* Effect.forEach(fibers, (fiber) => Fiber.await(fiber))
          yield* writer.writeText("last\n")
          return exits
        })).pipe(Effect.provide(fake.layer))
        expect(fake.bytes().includes(0)).toBe(false)
        const lines = linesOf(fake.text())
        expect(lines.at(-1)).toBe("last\n")
        expect(new Set(lines).size).toBe(lines.length)
        expect(outcomes.filter((exit) => exit._tag === "Failure" && !Cause.hasInterruptsOnly(exit.cause)).length).toBe(failAt.length)
        outcomes.forEach((exit, i) => {
          if (exit._tag === "Success") expect(lines, `text ${i} written`).toContain(many[i])
          else if (!Cause.hasInterruptsOnly(exit.cause)) expect(lines, `text ${i} failed`).not.toContain(many[i])
        })
        for (const line of lines.slice(0, -1)) expect(many).toContain(line)
      }))
  }

  it.effect("a write failing half way after the buffer grew (and after a write beyond what is kept): cut back to the last whole line, then written on", () =>
    Effect.gen(function*() {
      const texts = ["small\n", `${"x".repeat(30_000)}\n`, `${"y".repeat(6_000_000)}\n`, `${"z".repeat(40_000)}🎲\n`, "tail\n"]
      for (let failAt = 2; failAt <= 5; failAt++) {
        const fake = nodeLikeFile(failAt)
        const failed: Array<number> = []
        yield* Effect.scoped(Effect.gen(function*() {
          const writer = yield* CompletionsLog.open("log.jsonl")
          for (let i = 0; i < texts.length; i++) {
            const exit = yield* Effect.exit(writer.writeText(texts[i]))
            if (exit._tag === "Failure") failed.push(i)
          }
          yield* writer.writeText("after\n")
        })).pipe(Effect.provide(fake.layer))
        expect(failed, `failAt ${failAt}`).toEqual([failAt - 1])
        const expected = [...texts.filter((_, i) => i !== failAt - 1), "after\n"].join("")
        expect(Buffer.compare(Buffer.from(fake.bytes()), Buffer.from(new TextEncoder().encode(expected))), `failAt ${failAt}`).toBe(0)
      }
    }))

  it.effect("groups whose text straddles the first buffer's end with astral characters, in one write: what TextEncoder makes", () =>
    Effect.gen(function*() {
      const file = path.join(tmp("kept-buffer"), "log.jsonl")
      const groups = Array.from({ length: 12 }, (_, i) =>
        ({
          _tag: "Group",
          records: [plain({ id: `g${i}`, messages: [{ role: "user", content: `${"a".repeat(5_000 + i * 333)}🎲${"ü".repeat(i * 91)}\u2028😀` }] })]
        }) as unknown as Rollout.Group
      )
      const rowFailure = { _tag: "RowFailure", error: new Error("bad") } as unknown as Rollout.Item
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open(file)
        yield* writer.write([])
        yield* writer.write([rowFailure])
        yield* writer.writeText("")
        yield* writer.write(groups)
        yield* writer.write([rowFailure, ...groups.slice(0, 3), rowFailure])
        yield* writer.write(groups.slice(3))
      }))
      const expected = [...groups, ...groups].map((g) => CompletionsLog.groupText(g)).join("")
      expect(Buffer.compare(fs.readFileSync(file), Buffer.from(new TextEncoder().encode(expected)))).toBe(0)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("texts past what the buffer holds, with astral, CJK and lone surrogates where a piece ends: what TextEncoder makes, and a buffer about the size of the bytes (an ASCII text took 3 bytes per character up front)", () =>
    Effect.gen(function*() {
      const written: Array<Uint8Array> = []
      let largest = 0
      const file = {
        [FileSystem.FileTypeId]: FileSystem.FileTypeId,
        stat: Effect.sync(() => ({ size: 0n })),
        sync: Effect.void,
        truncate: () => Effect.void,
        writeAll: (bytes: Uint8Array) =>
          Effect.sync(() => {
            written.push(bytes.slice())
            largest = Math.max(largest, bytes.buffer.byteLength)
          })
      } as unknown as FileSystem.File
      const layer = FileSystem.layerNoop({ open: () => Effect.succeed(file) })
      const texts: Array<string> = []
      for (const k of [65_535, 65_536, 65_537, 65_534, 131_071, 200_000]) {
        texts.push(`${"a".repeat(k)}🎲${"雪".repeat(30_000)}\ud800|\udc00${"b".repeat(1000)}😀\n`)
        texts.push(`${"雪".repeat(k)}🎲\ud83c\n`)
      }
      texts.push(`${"c".repeat(20_000_000)}\n`)
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open("log.jsonl")
        for (const text of texts) {
          largest = 0
          yield* writer.writeText(text)
          const bytes = new TextEncoder().encode(text)
          expect(Buffer.compare(Buffer.from(written.at(-1)!), Buffer.from(bytes)), `${text.length} code units`).toBe(0)
          if (text.length > 1_000_000) expect(largest).toBeLessThan(bytes.length * 1.1)
        }
      })).pipe(Effect.provide(layer))
    }))

  it.effect("items whose iteration throws half way: the write dies, the next writes are whole", () =>
    Effect.gen(function*() {
      const file = path.join(tmp("kept-buffer"), "log.jsonl")
      const group = { _tag: "Group", records: [plain({ id: "ok" })] } as unknown as Rollout.Group
      function* throwing() {
        yield group
        throw new Error("iteration threw")
      }
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open(file)
        const exit = yield* Effect.exit(writer.write(throwing()))
        expect(exit._tag).toBe("Failure")
        yield* writer.write([group])
        yield* writer.write([group])
      }))
      const line = CompletionsLog.groupText(group)
      expect(fs.readFileSync(file, "utf8")).toBe(line + line)
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
