/**
 * The trajectory loop's fast path (Trajectory's `Machine.turns`): turns whose model and env answer
 * with completed Effects run in a plain loop instead of through the fiber runtime. It must change
 * nothing but the speed: the same completions as when every answer goes through the runtime, an
 * interruption and a signal still land in the middle of a run whose every step answers at once,
 * and every env is closed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Effect, Exit, Fiber, Layer, Result, Schema } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import { FrozenLake } from "../src/envs/FrozenLake.js"
import * as Inference from "../src/Inference.js"
import { random } from "../src/inference/Scripted.js"
import { isReady } from "../src/internal/ready.js"
import { mixSeed } from "../src/internal/seed.js"
import * as Rollout from "../src/Rollout.js"
import { Counters, readyEnv, records, rows, runConfig, withoutTimings } from "./helpers.js"

const ROOT = path.resolve(import.meta.dirname, "..")

/** Whether the answer numbered `n` of a trajectory goes through the runtime (1 in `every`, by `seed`). */
const deferred = (seed: number, id: string, n: number, every: number): boolean =>
  every > 0 && (mixSeed(seed ^ id.length * 7919, n * 31 + id.charCodeAt(id.length - 1)) % every) === 0

/** An answer that is not a completed Effect: the loop has to go through the runtime for it. */
const slow = <A, E>(effect: Effect.Effect<A, E>, yieldFirst: boolean): Effect.Effect<A, E> =>
  yieldFirst ? Effect.andThen(Effect.yieldNow, effect) : Effect.suspend(() => effect)

/**
 * FrozenLake (named `frozen_lake`, as the built-in) whose reset and steps are deferred through the
 * runtime by `deferred(seed, id, n, every)`; `every` 0: none (FrozenLake's own completed answers).
 */
const lake = (seed: number, every: number): Env.Definition => ({
  name: "frozen_lake",
  description: "FrozenLake with answers deferred through the runtime",
  prepare: (config) =>
    Result.map(FrozenLake.prepare(config), (create) =>
      Effect.map(create, (env): Env.Env => {
        let n = 0
        const id = JSON.stringify(config)
        return {
          reset: (request) => deferred(seed, id, n++, every) ? slow(env.reset(request), n % 2 === 0) : env.reset(request),
          step: (messages) => deferred(seed, id, n++, every) ? slow(env.step(messages), n % 2 === 0) : env.step(messages)
        }
      }))
})

/** The random policy, its replies deferred through the runtime the same way. */
const policy = (seed: number, every: number) =>
  Layer.effect(
    Inference.Inference,
    Effect.map(Effect.orDie(random.make({})), (service): Inference.Service => ({
      ...service,
      chat: (request) =>
        deferred(seed, request.trajectoryId, request.turn, every)
          ? slow(service.chat(request), request.turn % 2 === 0)
          : service.chat(request)
    }))
  )

const lines = (seed: number, every: number, runSeed: number, concurrency: number, n: number) =>
  Effect.gen(function*() {
    const config = yield* runConfig({
      envs: [lake(seed, every)],
      defaultEnv: "frozen_lake",
      numGenerations: 3,
      concurrency,
      seed: runSeed
    })
    const items = yield* Rollout.runAll(config, rows(Array.from({ length: n }, (_, i) => ({ env_config: { seed: i, size: 4 + (i % 3) } }))))
    return records(items)
      .map((r) => JSON.stringify(withoutTimings(CompletionsLog.toLine(r))))
      .sort()
  }).pipe(Effect.scoped, Effect.provide(policy(seed, every)))

describe("the trajectory loop's fast path", () => {
  it("Effect.succeed gives a completed Effect (what the fast path takes; an Effect upgrade that changes it turns the fast path off)", () => {
    expect(isReady(Effect.succeed(1))).toBe(true)
    expect(isReady(Effect.sync(() => 1))).toBe(false)
    expect(isReady(Effect.fail("no"))).toBe(false)
    expect(isReady(Exit.succeed(2))).toBe(true)
  })

  it.live("gives the same completions whichever answers go through the runtime (seeded property)", () =>
    Effect.gen(function*() {
      const nat = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 2 ** 31 - 1 }))
      const between = (minimum: number, maximum: number) => Schema.Int.check(Schema.isBetween({ minimum, maximum }))
      const cases = yield* Arbitrary.sampleEffect(
        Arbitrary.schema(Schema.Struct({ seed: nat, every: between(1, 4), runSeed: nat, concurrency: between(1, 9) })),
        { count: 12, seed: 20261202 }
      )
      for (const c of cases) {
        const fast = yield* lines(c.seed, 0, c.runSeed, c.concurrency, 12)
        const mixed = yield* lines(c.seed, c.every, c.runSeed, c.concurrency, 12)
        // every answer through the runtime
        const slowest = yield* lines(c.seed, 1, c.runSeed, c.concurrency, 12)
        expect(mixed).toEqual(fast)
        expect(slowest).toEqual(fast)
      }
    }))

  it.live("an interruption lands in the middle of a run whose every answer is completed, and every env is closed", () =>
    Effect.gen(function*() {
      const counters = new Counters()
      const ready = readyEnv(counters, 50, (turn) => `turn ${turn}`)
      const config = yield* runConfig({ envs: [ready], defaultEnv: "ready", numGenerations: 8, concurrency: 64, maxTurns: 50 })
      // 80,000 trajectories of 50 turns: minutes of work, all of it answered at once
      const all = rows(Array.from({ length: 10_000 }, () => ({ env_config: {} })))
      let timerFired = false
      setTimeout(() => void (timerFired = true), 1)
      const fiber = yield* Effect.forkChild(Effect.provide(Rollout.runAll(config, all), policy(0, 0)))
      // once the run has started (on a loaded machine it may take longer than a fixed wait: CI saw
      // none created after 150 ms), a little more of it
      yield* Effect.sleep("10 millis").pipe(Effect.repeat({ until: () => counters.created > 0 }), Effect.timeout("30 seconds"))
      yield* Effect.sleep("150 millis")
      // the sleeps above ended: timers run while the run does
      expect(timerFired).toBe(true)
      yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      expect(Exit.hasInterrupts(exit)).toBe(true)
      // stopped in the middle: the run had started, and was far from its 80,000 trajectories
      expect(counters.created).toBeGreaterThan(0)
      expect(counters.created).toBeLessThan(80_000)
      expect(counters.closed).toBe(counters.created)
    }))

  it("SIGINT stops a run of the built binary whose every answer is completed (killed if it hangs)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-fast-path-"))
    try {
      const dataset = path.join(dir, "rows.jsonl")
      const output = path.join(dir, "out.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 50_000 }, (_, i) => `{"env_config":{"seed":${i}}}`).join("\n") + "\n")
      const child = spawn(
        process.execPath,
        [path.join(ROOT, "bin/effect-gym.js"), "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random",
          "--num-generations", "8", "--output", output],
        { stdio: "ignore" }
      )
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child.on("exit", (code, signal) => resolve({ code, signal })))
      const guard = setTimeout(() => child.kill("SIGKILL"), 30_000)
      try {
        // the run is under way once groups are written
        for (let i = 0; i < 600 && !(fs.existsSync(output) && fs.statSync(output).size > 0); i++) {
          await new Promise((r) => setTimeout(r, 50))
        }
        child.kill("SIGINT")
        const { code, signal } = await exited
        expect(signal, "killed by the test's guard: SIGINT was not handled").toBeNull()
        expect(code).toBe(130)
        // every line written is whole, and the run stopped in the middle of its 400,000 trajectories
        const text = fs.readFileSync(output, "utf8")
        expect(text.endsWith("\n")).toBe(true)
        const lines = text.trimEnd().split("\n")
        for (const line of lines) JSON.parse(line)
        expect(lines.length).toBeLessThan(400_000)
      } finally {
        clearTimeout(guard)
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})
