/**
 * Scripted policies: in-process `Inference` services with no model, for tests, demos and
 * benchmarks. Both are deterministic for a seed: each call's randomness comes from the call's own
 * seed (derived from the run seed, row, generation and turn), never from shared state.
 *
 * - `random`: a uniformly random move, `<action>dir</action>`.
 * - `frozen-lake-solver`: reads the grid in the last user message, plans a shortest path to the
 *   goal around the holes, and answers its first move; `epsilon` mixes in random moves.
 * - `calculator-solver`: solves the `calculator` env with its tools, writing its calls as a Hermes /
 *   Qwen model does (`<tool_call>{json}</tool_call>` in the text: the run's `--tool-parser` reads
 *   them): lookups, then products, then a running sum, then the answer.
 * - `kv-store-solver`: solves the `kv_store` env the same way: reads the keys its instructions read,
 *   writes one instruction's key per turn, in order, then commits; `epsilon` is the chance, each
 *   turn, of applying the last pending instruction instead of the first (an ordering mistake).
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { Completion, Service } from "../Inference.js"
import { mixSeed, Rng } from "../internal/seed.js"
import { sleepOf } from "./internal/latency.js"
import * as Message from "../Message.js"
import * as Policy from "../Policy.js"

const MOVES = ["up", "down", "left", "right"] as const
type Move = typeof MOVES[number]

const answers: Record<Move, Completion> = {
  up: { text: "<action>up</action>", finishReason: "stop" },
  down: { text: "<action>down</action>", finishReason: "stop" },
  left: { text: "<action>left</action>", finishReason: "stop" },
  right: { text: "<action>right</action>", finishReason: "stop" }
}

const NumberInput = Schema.Union([Schema.Number, Schema.NumberFromString])

const Probability = NumberInput.check(
  Schema.makeFilter((p) => (p >= 0 && p <= 1) || "must be a probability in [0, 1]")
)

const Latency = NumberInput.check(
  Schema.makeFilter((ms) => (Number.isFinite(ms) && ms >= 0) || "must be a number of milliseconds >= 0")
)

/**
 * An optional fixed delay per call, to stand in for a remote model in benchmarks and tests. It
 * follows the `Clock` in use when the policy is made (a `TestClock` drives it without waiting);
 * under the live clock, each call's wait is a Node.js timer of its own (`internal/latency.ts`).
 */
const withLatency = (latencyMs: number, service: Service): Effect.Effect<Service> => {
  if (latencyMs <= 0) return Effect.succeed(service)
  return Effect.map(sleepOf(latencyMs), (wait) => ({
    name: `${service.name}, latency ${latencyMs}ms`,
    chat: (request) => Effect.andThen(wait, service.chat(request))
  }))
}

/**
 * @since 0.1.0
 * @category policies
 */
export const random: Policy.Definition = Policy.define({
  name: "random",
  description: "Seeded uniformly random FrozenLake moves (<action>dir</action>); option latency_ms",
  options: Schema.Struct({ latency_ms: Latency.pipe(Schema.withDecodingDefaultType(Effect.succeed(0))) }),
  make: (options) =>
    withLatency(options.latency_ms, {
      name: "policy random",
      chat: (request) => Effect.succeed(answers[MOVES[mixSeed(request.seed, 1) & 3]])
    })
})

/**
 * The last FrozenLake grid in a text: a block of lines of single cells (`S F H G P *`) separated by
 * spaces. Returns the rows as strings without spaces.
 *
 * @since 0.1.0
 * @category solver
 */
export const parseGrid = (text: string): Array<string> | undefined => {
  const lines = text.split("\n")
  let best: Array<string> | undefined
  let current: Array<string> = []
  const flush = () => {
    if (current.length > 0 && current.every((row) => row.length === current[0].length)) best = current
    current = []
  }
  for (const line of lines) {
    if (line.length > 0 && /^[SFHGP*](?: [SFHGP*])*$/.test(line)) current.push(line.replace(/ /g, ""))
    else flush()
  }
  flush()
  return best
}

const DELTAS: Record<Move, readonly [number, number]> = { up: [-1, 0], down: [1, 0], left: [0, -1], right: [0, 1] }

/**
 * The first move of a shortest safe path from the player (`P`) to the goal (`G`), or `undefined`
 * when there is none (no player, or no path around the holes).
 *
 * @since 0.1.0
 * @category solver
 */
export const planMove = (grid: ReadonlyArray<string>): Move | undefined => {
  const rows = grid.length
  const cols = grid[0]?.length ?? 0
  let start = -1
  for (let r = 0; r < rows && start < 0; r++) {
    const c = grid[r].indexOf("P")
    if (c >= 0) start = r * cols + c
  }
  if (start < 0) return undefined
  const first = new Int8Array(rows * cols).fill(-1)
  const seen = new Uint8Array(rows * cols)
  seen[start] = 1
  const queue: Array<number> = [start]
  for (let head = 0; head < queue.length; head++) {
    const cell = queue[head]
    const r = (cell / cols) | 0
    const c = cell % cols
    for (let m = 0; m < 4; m++) {
      const [dr, dc] = DELTAS[MOVES[m]]
      const nr = r + dr
      const nc = c + dc
      if (nr < 0 || nr >= rows || nc < 0 || nc >= cols) continue
      const next = nr * cols + nc
      if (seen[next] === 1) continue
      const ch = grid[nr][nc]
      if (ch === "H") continue
      seen[next] = 1
      first[next] = cell === start ? m : first[cell]
      if (ch === "G") return MOVES[first[next]]
      queue.push(next)
    }
  }
  return undefined
}

/** The options of a solver that errs on purpose: `epsilon` (the rate of its mistakes), `latency_ms`. */
const EpsilonOptions = Schema.Struct({
  epsilon: Probability.pipe(Schema.withDecodingDefaultType(Effect.succeed(0))),
  latency_ms: Latency.pipe(Schema.withDecodingDefaultType(Effect.succeed(0)))
})

/** Such a solver's backend name (`policy NAME`, with its epsilon when it errs). */
const epsilonName = (name: string, epsilon: number): string =>
  epsilon > 0 ? `policy ${name}, epsilon ${epsilon}` : `policy ${name}`

/**
 * @since 0.1.0
 * @category policies
 */
export const frozenLakeSolver: Policy.Definition = Policy.define({
  name: "frozen-lake-solver",
  description: "Plans a shortest safe path on the FrozenLake grid it is shown; options epsilon (random-move rate), latency_ms",
  options: EpsilonOptions,
  make: (options) =>
    withLatency(options.latency_ms, {
      name: epsilonName("frozen-lake-solver", options.epsilon),
      chat: (request) =>
        Effect.sync(() => {
          const rng = new Rng(request.seed)
          if (options.epsilon > 0 && rng.next() < options.epsilon) return answers[MOVES[rng.int(4)]]
          const observation = Message.lastOf(request.messages, "user") ?? ""
          const grid = parseGrid(observation)
          const move = grid === undefined ? undefined : planMove(grid)
          return answers[move ?? MOVES[rng.int(4)]]
        })
    })
})

/** The calls of a tool env's tools (`calculator`, `kv_store`) made so far in a conversation, with their results. */
const toolResults = (messages: ReadonlyArray<Message.Message>) => {
  const results = new Map<string, string>()
  for (const m of messages) if (m.role === "tool" && m.tool_call_id !== undefined) results.set(m.tool_call_id, m.content)
  const done: Array<{ readonly name: string; readonly args: Record<string, unknown>; readonly result: string }> = []
  for (const m of messages) {
    for (const call of m.tool_calls ?? []) {
      const result = results.get(call.id)
      if (result === undefined || result.startsWith("Error")) continue
      try {
        done.push({ name: call.function.name, args: JSON.parse(call.function.arguments), result })
      } catch {
        // a call the solver did not write
      }
    }
  }
  return done
}

const toolCallText = (name: string, args: Record<string, unknown>): string =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`

/**
 * The next reply of the calculator solver: what is missing first (lookups, products, the running sum),
 * then the answer.
 *
 * @since 0.3.0
 * @category solver
 */
export const calculatorReply = (messages: ReadonlyArray<Message.Message>): string => {
  const first = messages.find((m) => m.role === "user")?.content ?? ""
  const order = [...first.matchAll(/(\d+) x ([a-z]+)/g)].map((m) => ({ quantity: Number(m[1]), item: m[2] }))
  const done = toolResults(messages)
  const prices = new Map<string, number>()
  for (const d of done) if (d.name === "lookup") prices.set(String(d.args.item), Number(d.result))
  const missing = order.filter((line) => !prices.has(line.item))
  if (missing.length > 0) return missing.map((line) => toolCallText("lookup", { item: line.item })).join("\n")
  const computed = (op: string, a: number, b: number) =>
    done.find((d) => d.name === "calculate" && d.args.op === op && d.args.a === a && d.args.b === b)?.result
  const products = order.map((line) => ({ a: line.quantity, b: prices.get(line.item)!, result: computed("multiply", line.quantity, prices.get(line.item)!) }))
  const pending = products.filter((p) => p.result === undefined)
  if (pending.length > 0) return pending.map((p) => toolCallText("calculate", { op: "multiply", a: p.a, b: p.b })).join("\n")
  let sum = Number(products[0]?.result ?? 0)
  for (const p of products.slice(1)) {
    const next = computed("add", sum, Number(p.result))
    if (next === undefined) return toolCallText("calculate", { op: "add", a: sum, b: Number(p.result) })
    sum = Number(next)
  }
  return `<answer>${sum}</answer>`
}

/**
 * @since 0.3.0
 * @category policies
 */
export const calculatorSolver: Policy.Definition = Policy.define({
  name: "calculator-solver",
  description: "Solves the calculator env with its tools, calls written as <tool_call> text (hermes); option latency_ms",
  options: Schema.Struct({ latency_ms: Latency.pipe(Schema.withDecodingDefaultType(Effect.succeed(0))) }),
  make: (options) =>
    withLatency(options.latency_ms, {
      name: "policy calculator-solver",
      chat: (request) => Effect.sync((): Completion => ({ text: calculatorReply(request.messages), finishReason: "stop" }))
    })
})

const INSTRUCTION = /^\d+\. set (\S+) to (\S+)(?: ([+-]) (\S+))?$/gm

/**
 * The next reply of the kv_store solver: a `get` of every key its pending instructions read that it
 * does not know yet, then one `set` per turn, the first pending instruction's (the last pending one's
 * when `mistake`), then `commit`. What it knows is what its own successful calls read and wrote.
 *
 * @since 0.3.0
 * @category solver
 */
export const kvStoreReply = (messages: ReadonlyArray<Message.Message>, mistake = false): string => {
  const first = messages.find((m) => m.role === "user")?.content ?? ""
  const instructions = [...first.matchAll(INSTRUCTION)].map((m) => ({ dst: m[1], a: m[2], op: m[3], b: m[4] }))
  const known = new Map<string, number>()
  const written = new Set<string>()
  for (const d of toolResults(messages)) {
    const key = String(d.args.key)
    if (d.name === "get") known.set(key, Number(d.result))
    if (d.name === "set") {
      known.set(key, Number(d.args.value))
      written.add(key)
    }
  }
  const pending = instructions.filter((i) => !written.has(i.dst))
  const next = mistake ? pending.at(-1) : pending[0]
  if (next === undefined) return toolCallText("commit", {})
  const unknown = [...new Set(pending.flatMap((i) => i.b === undefined ? [i.a] : [i.a, i.b]))].filter((k) => !known.has(k))
  if (unknown.length > 0) return unknown.map((key) => toolCallText("get", { key })).join("\n")
  const a = known.get(next.a)!
  const b = next.b === undefined ? 0 : known.get(next.b)!
  return toolCallText("set", { key: next.dst, value: next.op === "+" ? a + b : next.op === "-" ? a - b : a })
}

/**
 * @since 0.3.0
 * @category policies
 */
export const kvStoreSolver: Policy.Definition = Policy.define({
  name: "kv-store-solver",
  description: "Solves the kv_store env with its tools, calls written as <tool_call> text (hermes); options epsilon (ordering-mistake rate per turn), latency_ms",
  options: EpsilonOptions,
  make: (options) =>
    withLatency(options.latency_ms, {
      name: epsilonName("kv-store-solver", options.epsilon),
      chat: (request) =>
        Effect.sync((): Completion => {
          const mistake = options.epsilon > 0 && new Rng(request.seed).next() < options.epsilon
          return { text: kvStoreReply(request.messages, mistake), finishReason: "stop" }
        })
    })
})
