import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Result, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import { Game } from "../../src/envs/FrozenLake.js"
import { frozenLakeSolver, parseGrid, planMove, random } from "../../src/inference/Scripted.js"
import * as Message from "../../src/Message.js"

const make = (definition: typeof random, options: Record<string, unknown> = {}) =>
  Effect.flatMap(Scope.make(), (scope) => Scope.provide(definition.make(options), scope))

/** Length of the shortest safe path from S to G (a BFS written independently of the solver). */
const distance = (grid: ReadonlyArray<string>): number => {
  const n = grid.length
  const start = grid.join("").indexOf("S")
  const dist = new Map([[start, 0]])
  const queue = [start]
  while (queue.length > 0) {
    const cell = queue.shift()!
    const [r, c] = [Math.floor(cell / n), cell % n]
    if (grid[r][c] === "G") return dist.get(cell)!
    for (const [nr, nc] of [[r + 1, c], [r - 1, c], [r, c + 1], [r, c - 1]]) {
      if (nr < 0 || nr >= n || nc < 0 || nc >= n || grid[nr][nc] === "H" || dist.has(nr * n + nc)) continue
      dist.set(nr * n + nc, dist.get(cell)! + 1)
      queue.push(nr * n + nc)
    }
  }
  return -1
}

describe("Scripted policies", () => {
  it.effect.prop(
    "frozen-lake-solver reaches the goal of every map, in the shortest number of moves",
    [
      Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 8 })),
      Schema.Finite.check(Schema.isBetween({ minimum: 0.3, maximum: 1 })),
      Schema.Int
    ],
    ([size, p, seed]) =>
      Effect.gen(function*() {
        const solver = yield* make(frozenLakeSolver)
        const game = new Game({ size, p, seed })
        const reset = Result.getOrThrow(game.reset(0))
        const shortest = distance(game.grid)
        const messages: Array<Message.Message> = [Message.user(reset.observation)]
        for (let turn = 1; turn <= size * size; turn++) {
          const reply = yield* solver.chat({ messages, sampling: {}, trajectoryId: "t", turn, seed: turn })
          messages.push(Message.assistant(reply.text))
          const out = game.step(messages)
          expect(out.info.status).not.toBe("hole")
          if (out.done) {
            expect(out.info.status).toBe("goal")
            expect(turn).toBe(shortest)
            return
          }
          messages.push(Message.user(out.observation))
        }
        expect.fail("the solver did not reach the goal")
      })
  )

  it("parses the last grid of an observation and plans around holes", () => {
    const text = "You moved up.\nF F F F\nF F F F\n\nS H G F\nP F F F\nOutput your next move."
    const grid = parseGrid(text)
    expect(grid).toEqual(["SHGF", "PFFF"])
    expect(planMove(grid!)).toBe("right")
    expect(planMove(["PH", "HG"])).toBeUndefined()
    expect(parseGrid("no grid here")).toBeUndefined()
  })

  it.effect("random and epsilon moves depend only on the call's seed", () =>
    Effect.gen(function*() {
      const policy = yield* make(random)
      const noisy = yield* make(frozenLakeSolver, { epsilon: "0.5" })
      const ask = (seed: number) => ({ messages: [Message.user("F P G")], sampling: {}, trajectoryId: "t", turn: 1, seed })
      for (let seed = 0; seed < 50; seed++) {
        expect(yield* policy.chat(ask(seed))).toEqual(yield* policy.chat(ask(seed)))
        expect(yield* noisy.chat(ask(seed))).toEqual(yield* noisy.chat(ask(seed)))
      }
      const moves = new Set<string>()
      for (let seed = 0; seed < 200; seed++) moves.add((yield* policy.chat(ask(seed))).text)
      expect(moves.size).toBe(4)
    }))

  it.effect("latency_ms delays each answer by that long on the Clock (a TestClock drives it)", () =>
    Effect.gen(function*() {
      const ask = { messages: [Message.user("F P G")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }
      const slow = yield* make(random, { latency_ms: "30" })
      const fiber = yield* Effect.forkChild(slow.chat(ask))
      yield* TestClock.adjust("29 millis")
      expect(fiber.pollUnsafe() === undefined).toBe(true)
      yield* TestClock.adjust("1 millis")
      const answer = yield* Fiber.join(fiber)
      expect(answer).toEqual(yield* (yield* make(random)).chat(ask))
    }))

  it.live("an interrupted latency wait leaves no timer behind", () =>
    Effect.gen(function*() {
      const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length
      const ask = { messages: [Message.user("F P G")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }
      const stuck = yield* make(random, { latency_ms: "600000" })
      const fiber = yield* Effect.forkChild(stuck.chat(ask))
      yield* Effect.sleep("5 millis")
      // (counted around the interruption only: a timer of something else in the process may end
      // during the sleep above, which made a count taken before it flaky under load)
      const during = timers()
      yield* Fiber.interrupt(fiber)
      expect(during - timers()).toBe(1)
    }))

  it.live("under the live clock, each call waits its latency, and no timer is left", () =>
    Effect.gen(function*() {
      const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length
      const before = timers()
      const slow = yield* make(random, { latency_ms: "40" })
      const started = performance.now()
      const fibers = yield* Effect.forEach(Array.from({ length: 300 }, (_, i) => i), (i) =>
        Effect.forkChild(Effect.map(
          slow.chat({ messages: [Message.user("F P G")], sampling: {}, trajectoryId: `t${i}`, turn: 1, seed: i }),
          () => performance.now() - started
        ), { startImmediately: true }))
      // (the Clock's sleep: a Node.js timer per call; the shared timer written here before was
      // about 1 ms late, see src/inference/internal/latency.ts)
      expect(timers() - before).toBeGreaterThan(0)
      const waited = yield* Fiber.joinAll(fibers)
      // a Node.js timer may fire up to a millisecond early against performance.now()
      for (const ms of waited) expect(ms).toBeGreaterThanOrEqual(39)
      // none of the timers is left (a timer of something else may have ended meanwhile)
      yield* Effect.yieldNow
      expect(timers()).toBeLessThanOrEqual(before)
    }))

  it.effect("bad options are typed errors naming the option", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(make(frozenLakeSolver, { epsilon: "2" }))
      expect(error.message).toBe("--policy-option epsilon: must be a probability in [0, 1] (policy frozen-lake-solver)")
      const unknown = yield* Effect.flip(make(random, { temperature: "1" }))
      expect(unknown.path).toBe("temperature")
    }))
})
