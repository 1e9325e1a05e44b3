/**
 * `kv_store`: a built-in multi-step tool env with seeded, checkable answers, where the order of the
 * calls matters. Each episode is a small key-value store of integers and a list of instructions
 * (`set echo to bravo + delta`, then `set alpha to echo`, ...) to apply in order, each to the values
 * the earlier ones left. The model reads values with `get` (only the tools know them), writes with
 * `set`, may `list_keys`, and ends the episode with `commit` (or with a reply without tool calls, its
 * final answer). The reward is 1 when the store then equals the expected one, key for key, else 0.
 *
 * Every instruction after the first reads the key the one before it wrote, so applying them out of
 * order (a write before the read that needed the old value, a read before the write it needed)
 * leaves a different store: {@link task} draws its instructions until applying them in reverse order
 * gives a different store, and until each one changes the key it writes. The store, the instructions
 * and the expected store come from the row's seed (`env_config.seed`, else the run's row seed).
 *
 * @since 0.3.0
 */
import { Effect, Schema } from "effect"
import * as Env from "../Env.js"
import { mixSeed, Rng } from "../internal/seed.js"
import type * as Message from "../Message.js"
import * as Tool from "../Tool.js"
import { afterDone, answerCalls } from "./internal/toolEnv.js"

/**
 * The keys a store may hold at reset.
 *
 * @since 0.3.0
 * @category models
 */
export const KEYS = [
  "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"
] as const

/**
 * The most keys a store may hold (the model may add keys of its own, up to this).
 *
 * @since 0.3.0
 * @category constants
 */
export const MAX_KEYS = 64

/**
 * The largest value, in magnitude, that `set` takes.
 *
 * @since 0.3.0
 * @category constants
 */
export const MAX_VALUE = 1_000_000_000

/**
 * One instruction: `dst` becomes `a` (a copy), `a + b` or `a - b`, read when the instruction is applied.
 *
 * @since 0.3.0
 * @category models
 */
export interface Instruction {
  readonly dst: string
  readonly op: "copy" | "add" | "subtract"
  readonly a: string
  readonly b?: string | undefined
}

/**
 * @since 0.3.0
 * @category models
 */
export interface Task {
  readonly initial: Readonly<Record<string, number>>
  readonly instructions: ReadonlyArray<Instruction>
  /** The store after the instructions, applied in order: the only store that earns the reward. */
  readonly expected: Readonly<Record<string, number>>
}

/**
 * The store after applying instructions to it, in the order given.
 *
 * @since 0.3.0
 * @category constructors
 */
export const apply = (
  store: Readonly<Record<string, number>>,
  instructions: ReadonlyArray<Instruction>
): Record<string, number> => {
  const out = { ...store }
  for (const i of instructions) {
    const a = out[i.a] ?? 0
    const b = i.b === undefined ? 0 : out[i.b] ?? 0
    out[i.dst] = i.op === "copy" ? a : i.op === "add" ? a + b : a - b
  }
  return out
}

const sameStore = (x: Readonly<Record<string, number>>, y: Readonly<Record<string, number>>): boolean => {
  const keys = Object.keys(x)
  return keys.length === Object.keys(y).length && keys.every((k) => Object.hasOwn(y, k) && y[k] === x[k])
}

const OPS = ["copy", "add", "subtract"] as const

/** One draw of a task; `undefined` when an instruction would leave its key as it was. */
const draw = (rng: Rng, keys: number, steps: number): Task | undefined => {
  const pool: Array<string> = [...KEYS]
  const names: Array<string> = []
  for (let i = 0; i < keys; i++) names.push(pool.splice(rng.int(pool.length), 1)[0])
  const initial: Record<string, number> = {}
  for (const name of names) initial[name] = 1 + rng.int(99)
  const state = { ...initial }
  const instructions: Array<Instruction> = []
  const written = new Set<string>()
  const pick = (exclude: ReadonlyArray<string>) => {
    const choices = names.filter((n) => !exclude.includes(n))
    return choices[rng.int(choices.length)]
  }
  for (let s = 0; s < steps; s++) {
    const previous = instructions.at(-1)?.dst
    // each key is written once, so a key's final value is its last instruction's
    const dst = pick([...written])
    const op = OPS[rng.int(OPS.length)]
    const a = previous ?? pick([dst])
    const instruction: Instruction = op === "copy" ? { dst, op, a } : { dst, op, a, b: pick([dst, a]) }
    const next = apply(state, [instruction])
    if (next[dst] === state[dst]) return undefined
    state[dst] = next[dst]
    written.add(dst)
    instructions.push(instruction)
  }
  return { initial, instructions, expected: state }
}

/**
 * The episode of a seed: `keys` keys of values 1..99, and `steps` instructions, each writing a
 * different key and each after the first reading the key the one before wrote.
 *
 * @since 0.3.0
 * @category constructors
 */
export const task = (seed: number, keys: number, steps: number): Task => {
  const rng = new Rng(mixSeed(seed, 0x4b56))
  for (;;) {
    const drawn = draw(rng, keys, steps)
    if (drawn === undefined) continue
    // one instruction's order cannot matter; with more, the reverse order must leave another store
    if (steps < 2 || !sameStore(apply(drawn.initial, [...drawn.instructions].reverse()), drawn.expected)) return drawn
  }
}

/**
 * An instruction as the prompt writes it (and the scripted solver reads it).
 *
 * @since 0.3.0
 * @category rendering
 */
export const describeInstruction = (i: Instruction): string =>
  `set ${i.dst} to ${i.a}${i.op === "add" ? ` + ${i.b}` : i.op === "subtract" ? ` - ${i.b}` : ""}`

/**
 * @since 0.3.0
 * @category constants
 */
export const SYSTEM_PROMPT = "You edit a key-value store of integers with four tools: list_keys() lists its keys, " +
  "get(key) reads a value, set(key, value) writes one, commit() saves the store and ends the task. " +
  "Only the tools know the values. A reply without tool calls also ends the task."

/**
 * The first observation of an episode.
 *
 * @since 0.3.0
 * @category rendering
 */
export const prompt = (t: Task): string =>
  `The store holds ${Object.keys(t.initial).length} keys. Apply these instructions in order, each to the ` +
  "values the earlier ones left:\n" +
  t.instructions.map((i, n) => `${n + 1}. ${describeInstruction(i)}`).join("\n") +
  "\nThen call commit. The task ends at commit or at a reply without tool calls; the store is checked then."

const Config = Schema.Struct({
  seed: Schema.optionalKey(Schema.Int),
  keys: Schema.optionalKey(
    Schema.Int.check(Schema.makeFilter((n) => (n >= 3 && n <= KEYS.length) || `must be 3 to ${KEYS.length}`))
  ),
  steps: Schema.optionalKey(Schema.Int.check(Schema.makeFilter((n) => (n >= 1 && n <= 8) || "must be 1 to 8")))
}).check(Schema.makeFilter((c) => (c.steps ?? 3) <= (c.keys ?? 6) || "steps must be at most keys (each step writes its own key)"))

// Checks that JSON Schema has (the bounds) are written into the tools' specs, so the model sees them.
const Key = Schema.String.check(Schema.isPattern(/^[a-z0-9_./-]{1,64}$/))
  .annotate({ description: "a key: 1 to 64 characters of a-z, 0-9, _ . / - (e.g. alpha)" })

const Value = Schema.Int.check(Schema.isBetween({ minimum: -MAX_VALUE, maximum: MAX_VALUE })).annotate({ description: "an integer" })

/**
 * The live store of an episode.
 *
 * @since 0.3.0
 * @category models
 */
export interface Store {
  values: Map<string, number>
  committed: boolean
}

const open = (store: Store) => store.committed ? Effect.fail("the store is committed: nothing can be called after commit") : Effect.void

/**
 * The episode's tools over its store: `list_keys`, `get`, `set` and `commit` (after which every call
 * is refused).
 *
 * @since 0.3.0
 * @category constructors
 */
export const tools = (store: Store): Tool.Toolkit =>
  Tool.toolkit([
    Tool.make({
      name: "list_keys",
      description: "The store's keys, sorted",
      parameters: Schema.Struct({}),
      run: () => Effect.as(open(store), [...store.values.keys()].sort())
    }),
    Tool.make({
      name: "get",
      description: "A key's value",
      parameters: Schema.Struct({ key: Key }),
      run: ({ key }) =>
        Effect.flatMap(open(store), () => {
          const value = store.values.get(key)
          return value === undefined ? Effect.fail(`no key ${JSON.stringify(key)}`) : Effect.succeed(value)
        })
    }),
    Tool.make({
      name: "set",
      description: "Writes a value under a key (a new key is added)",
      parameters: Schema.Struct({ key: Key, value: Value }),
      run: ({ key, value }) =>
        Effect.flatMap(open(store), () => {
          if (!store.values.has(key) && store.values.size >= MAX_KEYS) return Effect.fail(`the store is full (${MAX_KEYS} keys)`)
          store.values.set(key, value)
          return Effect.succeed("ok")
        })
    }),
    Tool.make({
      name: "commit",
      description: "Saves the store and ends the task",
      parameters: Schema.Struct({}),
      run: () =>
        Effect.flatMap(open(store), () => {
          store.committed = true
          return Effect.succeed("committed")
        })
    })
  ])

/**
 * Where a store differs from the expected one: each key whose value is not the expected one (`null`
 * for a key that should not be there, or is missing).
 *
 * @since 0.3.0
 * @category constructors
 */
export const mismatches = (
  values: ReadonlyMap<string, number>,
  expected: Readonly<Record<string, number>>
): Array<{ readonly key: string; readonly value: number | null; readonly expected: number | null }> => {
  const keys = [...new Set([...Object.keys(expected), ...values.keys()])].sort()
  return keys.flatMap((key) => {
    const value = values.get(key) ?? null
    const want = Object.hasOwn(expected, key) ? expected[key] : null
    return value === want ? [] : [{ key, value, expected: want }]
  })
}

/**
 * @since 0.3.0
 * @category definitions
 */
export const KvStore: Env.Definition = Env.define({
  name: "kv_store",
  description: "A key-value store to edit by instructions, in order, with get/set/list_keys/commit tools; reward 1 for the expected store",
  config: Config,
  make: (config) =>
    Effect.sync((): Env.Env => {
      let current: Task | undefined
      let ended = false
      const store: Store = { values: new Map(), committed: false }
      let toolkit: Tool.Toolkit | undefined
      return {
        reset: (request) =>
          Effect.sync(() => {
            current = task(config.seed ?? request.seed, config.keys ?? 6, config.steps ?? 3)
            ended = false
            store.values = new Map(Object.entries(current.initial))
            store.committed = false
            toolkit = tools(store)
            return {
              observation: prompt(current),
              systemPrompt: SYSTEM_PROMPT,
              info: { keys: Object.keys(current.initial).length, steps: current.instructions.length },
              tools: toolkit.specs
            }
          }),
        step: (messages: ReadonlyArray<Message.Message>) => {
          const episode = current
          const kit = toolkit
          if (episode === undefined || kit === undefined) {
            return Effect.fail(new Env.EnvError({ env: "kv_store", phase: "step", detail: "step before reset" }))
          }
          const reply = messages.at(-1)
          if (ended) return Effect.succeed(afterDone(reply))
          // The episode ends at commit, or at a reply without tool calls (its final answer, as tool
          // agents end): either way the store is judged as it stands.
          const finish = (result: Env.StepResult, endedBy: "commit" | "reply"): Env.StepResult => {
            ended = true
            const wrong = mismatches(store.values, episode.expected)
            return {
              ...result,
              observation: `${endedBy === "commit" ? "Committed" : "Ended without commit"}: ${
                wrong.length === 0 ? "the store is right." : `${wrong.length} key(s) differ from the expected store.`
              }`,
              reward: wrong.length === 0 ? 1 : 0,
              done: true,
              info: { ...result.info, ended_by: endedBy, correct: wrong.length === 0, mismatches: wrong }
            }
          }
          if (reply?.tool_calls === undefined || reply.tool_calls.length === 0) {
            return Effect.succeed(finish({ observation: "", reward: 0, done: true, info: { tool_calls: 0 } }, "reply"))
          }
          return Effect.map(answerCalls(kit, reply), (result) => store.committed ? finish(result, "commit") : result)
        }
      }
    })
})
