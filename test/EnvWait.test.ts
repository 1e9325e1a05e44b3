/**
 * `env_ms` is the time inside the env's calls; waiting to be scheduled is `wait_ms`, apart (issue
 * 29). A do-nothing async env showed a median env_ms of 17.7 ms at concurrency 64 against 0.013 ms
 * at concurrency 1: its answers, ready at once, waited behind the other trajectories' work. And a
 * trajectory waiting for its OpenEnv server's permit counted that wait as its env's reset.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as FrozenLake from "../src/envs/FrozenLake.js"
import * as OpenEnvScheduler from "../src/openenv/OpenEnvScheduler.js"
import * as Rollout from "../src/Rollout.js"
import { cli, readLines, tmp } from "./cli.js"
import { records, rows, runConfig, solverPolicy } from "./helpers.js"
import { serve } from "./openenv/helpers.js"

const plugins = {
  async_noop: path.resolve(import.meta.dirname, "fixtures/plugins/async_noop.mjs"),
  effect_noop: path.resolve(import.meta.dirname, "fixtures/plugins/effect_noop.mjs")
}

const median = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]

/** Every turn's env_ms and wait_ms (0 when absent) of a run of a do-nothing env at `concurrency`. */
const run = (concurrency: number, env: keyof typeof plugins = "async_noop") =>
  Effect.gen(function*() {
    const dir = tmp()
    const dataset = path.join(dir, "rows.jsonl")
    fs.writeFileSync(dataset, `${JSON.stringify({ messages: [{ role: "user", content: "x" }], env_config: {} })}\n`.repeat(64))
    const output = path.join(dir, "out.jsonl")
    const result = yield* cli(
      "run", "--dataset", dataset, "--env", env, "--plugin", plugins[env], "--num-generations", "8",
      "--concurrency", `${concurrency}`, "--output", output, "--json"
    )
    expect(result.code, result.stderr).toBe(0)
    const turns = readLines(output).flatMap((line) => (line as CompletionsLog.CompletionLine).timings.turns)
    expect(turns.length).toBe(64 * 8 * 5)
    return { env: turns.map((t) => t.env_ms), wait: turns.map((t) => t.wait_ms ?? 0) }
  })

describe("env_ms: the time inside the env, waiting apart", () => {
  it.live("a do-nothing async env at concurrency 64: env_ms as at concurrency 1, the waiting in wait_ms", () =>
    Effect.gen(function*() {
      const one = yield* run(1)
      const many = yield* run(64)
      console.log(
        `median env_ms ${median(one.env)} ms at concurrency 1, ${median(many.env)} ms at 64 (wait_ms ${median(many.wait)} ms)`
      )
      // the env's own time does not grow with the trajectories around it (microseconds either way)
      expect(median(many.env)).toBeLessThan(median(one.env) * 5 + 0.02)
      // the waiting is there, reported apart
      expect(median(many.wait)).toBeGreaterThan(median(many.env))
    }), 60_000)

  it.live("a do-nothing Effect-native env (Effect.promise answers) at concurrency 64: the same", () =>
    Effect.gen(function*() {
      const one = yield* run(1, "effect_noop")
      const many = yield* run(64, "effect_noop")
      console.log(
        `median env_ms ${median(one.env)} ms at concurrency 1, ${median(many.env)} ms at 64 (wait_ms ${median(many.wait)} ms)`
      )
      expect(median(many.env)).toBeLessThan(median(one.env) * 5 + 0.02)
      expect(median(many.wait)).toBeGreaterThan(median(many.env))
    }), 60_000)

  it.live("a trajectory waiting for its OpenEnv server's permit: that wait is reset_wait_ms, not the env's reset", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake.FrozenLake, maxConcurrentEnvs: 8 })
      // one session at a time from this run, eight trajectories at once: seven wait for each permit
      const scheduler = OpenEnvScheduler.openenv
      const config = yield* runConfig({ scheduler, schedulerOptions: { max_concurrent_envs: 1 }, numGenerations: 8, maxTurns: 20, concurrency: 8 })
      const all = records(yield* Effect.provide(Rollout.runAll(config, rows([{ env_config: { base_url: server.url } }])), solverPolicy()))
      expect(all.every((r) => r.error === undefined)).toBe(true)
      const waits = all.map((r) => r.result.timings.resetWaitMs ?? 0)
      const resets = all.map((r) => r.result.timings.resetMs)
      // the last to get the permit waited for the seven trajectories before it, each a whole game
      expect(Math.max(...waits)).toBeGreaterThan(Math.max(...resets))
      expect(waits.filter((w) => w > 0).length).toBeGreaterThanOrEqual(7)
      // the log says it, and the total still adds up every part
      for (const r of all) {
        const line = JSON.parse(CompletionsLog.encodeLine(r)) as CompletionsLog.CompletionLine
        const t = r.result.timings
        const parts = t.resetMs + (t.resetWaitMs ?? 0) + t.turns.reduce((n, x) => n + x.modelMs + x.envMs + (x.waitMs ?? 0), 0)
        expect(t.totalMs).toBeCloseTo(parts, 6)
        if ((t.resetWaitMs ?? 0) >= 0.001) expect(line.timings.reset_wait_ms).toBeGreaterThan(0)
      }
    }), 60_000)

  it.effect("hostile Promises from an env: a thenable whose then throws, one that answers twice, a rejection: typed failures, one answer each", () =>
    Effect.gen(function*() {
      const thenable = (kind: string) => ({
        then(resolve: (value: unknown) => void, reject: (error: unknown) => void) {
          if (kind === "throws") throw new Error("then exploded")
          if (kind === "twice") {
            resolve({ observation: "a", reward: 1, done: true, info: {} })
            resolve({ observation: "b", reward: 5, done: true, info: {} })
            reject(new Error("and rejected"))
          }
        }
      })
      const env = Env.make({
        name: "hostile_promises",
        create: (config) => ({
          reset: () => Promise.resolve({ observation: "go", info: {} }),
          step: () => config.kind === "rejects" ? Promise.reject(new Error("no")) : (thenable(String(config.kind)) as never)
        })
      })
      const config = yield* runConfig({ envs: [env], defaultEnv: "hostile_promises", numGenerations: 1, maxTurns: 3 })
      const all = records(yield* Effect.provide(
        Rollout.runAll(config, rows(["throws", "twice", "rejects"].map((kind) => ({ env_config: { kind } })))),
        solverPolicy()
      ))
      expect(all.map((r) => r.error?._tag ?? null)).toEqual(["EnvError", null, "EnvError"])
      expect(all.map((r) => r.error?.message ?? null)).toEqual([
        "env hostile_promises: step failed: then exploded",
        null,
        "env hostile_promises: step failed: no"
      ])
      // the first answer counts, once
      expect([all[1].result.totalReward, all[1].result.numTurns]).toEqual([1, 1])
    }))
})
