/**
 * Scripted policies: in-process `Inference` services with no model, for tests, demos and
 * benchmarks. Both are deterministic for a seed: each call's randomness comes from the call's own
 * seed (derived from the run seed, row, generation and turn), never from shared state.
 *
 * - `random`: a uniformly random move, `<action>dir</action>`.
 * - `frozen-lake-solver`: reads the grid in the last user message, plans a shortest path to the
 *   goal around the holes, and answers its first move; `epsilon` mixes in random moves.
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
 * under the live clock, calls ending in the same millisecond share a timer (`internal/latency.ts`).
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

/**
 * @since 0.1.0
 * @category policies
 */
export const frozenLakeSolver: Policy.Definition = Policy.define({
  name: "frozen-lake-solver",
  description: "Plans a shortest safe path on the FrozenLake grid it is shown; options epsilon (random-move rate), latency_ms",
  options: Schema.Struct({
    epsilon: Probability.pipe(Schema.withDecodingDefaultType(Effect.succeed(0))),
    latency_ms: Latency.pipe(Schema.withDecodingDefaultType(Effect.succeed(0)))
  }),
  make: (options) =>
    withLatency(options.latency_ms, {
      name: options.epsilon > 0 ? `policy frozen-lake-solver, epsilon ${options.epsilon}` : "policy frozen-lake-solver",
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
