/**
 * Hostile pass over the trajectory loop's fast path (Trajectory's `Machine.turns`): envs whose
 * answers fail in every way (a synchronous throw, a defect, a typed failure, an invalid result), a
 * hung step among completed ones, a trajectory that never ends and answers at once, and the stream
 * API's bounds (`Stream.take`) with completed answers. Each failing case gives the same lines
 * whether the answers are completed Effects or go through the runtime.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as CompletionsLog from "../src/CompletionsLog.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import * as Rollout from "../src/Rollout.js"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "./cli.js"
import { Counters, readyEnv, records, rows, runConfig, withoutTimings } from "./helpers.js"

const ROOT = path.resolve(import.meta.dirname, "..")

type Fault = "throw" | "die" | "fail" | "invalid" | "throw_reset" | "die_reset" | "none"

/**
 * An env of 5 turns whose step `at` (and reset, for the `_reset` faults) goes wrong by `fault`;
 * `ready`: its answers are completed Effects (the fast path), else they go through the runtime.
 */
const faulty = (ready: boolean, counters: Counters): Env.Definition =>
  Env.define({
    name: "faulty",
    make: (config) =>
      Effect.acquireRelease(Effect.sync(() => ++counters.created), () => Effect.sync(() => void counters.closed++)).pipe(
        Effect.map((): Env.Env => {
          const fault = config.fault as Fault
          const at = Number(config.at ?? 1)
          const answer = <A>(f: () => Effect.Effect<A, Env.EnvError>): Effect.Effect<A, Env.EnvError> =>
            ready ? f() : Effect.suspend(f)
          let turn = 0
          return {
            reset: () =>
              answer(() => {
                if (fault === "throw_reset") throw new Error("reset threw")
                if (fault === "die_reset") return Effect.die(new Error("reset died"))
                return Effect.succeed({ observation: "start", info: { at } })
              }),
            step: () =>
              answer((): Effect.Effect<Env.StepResult, Env.EnvError> => {
                turn++
                if (turn === at) {
                  switch (fault) {
                    case "throw":
                      throw new Error(`step ${turn} threw`)
                    case "die":
                      return Effect.die(new Error(`step ${turn} died`))
                    case "fail":
                      return Effect.fail(new Env.EnvError({ env: "faulty", phase: "step", detail: `step ${turn} failed` }))
                    case "invalid":
                      return Effect.succeed({ observation: "bad", reward: Number.NaN, done: false, info: {} })
                  }
                }
                return Effect.succeed({ observation: `turn ${turn}`, reward: turn, done: turn >= 5, info: { turn } })
              })
          }
        })
      )
  })

const policy = Inference.layerFunction("ready", (request) => Effect.succeed({ text: `move ${request.turn}`, finishReason: "stop" as const }))

const faults: ReadonlyArray<Fault> = ["throw", "die", "fail", "invalid", "throw_reset", "die_reset", "none"]

const linesOf = (ready: boolean, counters: Counters, concurrency: number) =>
  Effect.gen(function*() {
    const config = yield* runConfig({ envs: [faulty(ready, counters)], defaultEnv: "faulty", numGenerations: 2, concurrency, maxTurns: 8 })
    const input = faults.flatMap((fault) => [1, 3, 5].map((at) => ({ env_config: { fault, at } })))
    const items = yield* Rollout.runAll(config, rows(input))
    return records(items).map((r) => JSON.stringify(withoutTimings(CompletionsLog.toLine(r)))).sort()
  }).pipe(Effect.scoped, Effect.provide(policy))

describe("the fast path, hostile", () => {
  it.live("an env's step that throws, dies, fails or answers wrongly, a reset that throws or dies: the same lines either way, every env closed", () =>
    Effect.gen(function*() {
      for (const concurrency of [1, 7]) {
        const fast = new Counters()
        const slow = new Counters()
        const a = yield* linesOf(true, fast, concurrency)
        const b = yield* linesOf(false, slow, concurrency)
        expect(a).toEqual(b)
        expect(a.length).toBe(faults.length * 3 * 2)
        // the faults are there (not all done): throws and defects named as such
        expect(a.filter((l) => l.includes("\"end_reason\":\"error\"")).length).toBe((faults.length - 1) * 3 * 2)
        expect(a.some((l) => l.includes("step 3 threw"))).toBe(true)
        expect(a.some((l) => l.includes("reset died"))).toBe(true)
        expect(fast.closed).toBe(fast.created)
        expect(slow.closed).toBe(slow.created)
      }
    }))

  it.live("a trajectory that never ends and answers at once is stopped by the trajectory timeout; a hung step among completed ones by the step timeout", () =>
    Effect.gen(function*() {
      const endless = Env.define({
        name: "endless",
        make: (config) =>
          Effect.sync((): Env.Env => {
            let turn = 0
            const hangAt = Number(config.hang_at ?? 0)
            return {
              reset: () => Effect.succeed({ observation: "start", info: {} }),
              step: () => ++turn === hangAt ? Effect.never : Effect.succeed({ observation: `t${turn}`, reward: 0, done: false, info: {} })
            }
          })
      })
      const base = yield* runConfig({ envs: [endless], defaultEnv: "endless", numGenerations: 2, concurrency: 4, maxTurns: 100_000_000 })
      const config: Rollout.Config = { ...base, timeouts: { trajectory: "300 millis", step: "300 millis", close: "1 second" } }
      const started = Date.now()
      const items = yield* Rollout.runAll(config, rows([{ env_config: {} }, { env_config: { hang_at: 100 } }])).pipe(
        Effect.provide(policy),
        Effect.timeout("20 seconds")
      )
      const all = records(items)
      expect(all.length).toBe(4)
      const endlessRecords = all.filter((r) => r.row.index === 0)
      const hung = all.filter((r) => r.row.index === 1)
      for (const r of endlessRecords) {
        expect(r.result.endReason).toBe("error")
        expect(r.error?._tag).toBe("Timeout")
        expect(r.error?.message).toContain("trajectory")
        expect(r.result.numTurns).toBeGreaterThan(64)
      }
      for (const r of hung) {
        expect(r.error?._tag).toBe("Timeout")
        expect(r.error?.message).toContain("step")
        expect(r.result.numTurns).toBe(100)
      }
      expect(Date.now() - started).toBeLessThan(15_000)
    }))

  it.live("Stream.take(n) over a run whose every answer is completed starts a bounded number of groups (stream and events)", () =>
    Effect.gen(function*() {
      for (const events of [false, true]) {
        const counters = new Counters()
        const ready = readyEnv(counters, 3)
        const base = yield* runConfig({ envs: [ready], defaultEnv: "ready", numGenerations: 4, concurrency: 8 })
        const config: Rollout.Config = { ...base, bufferSize: 2 }
        const all = rows(Array.from({ length: 100_000 }, () => ({ env_config: {} })))
        const groups = events
          ? Rollout.streamEvents(config, all).pipe(Stream.filter((e) => e._tag === "Group"))
          : Rollout.stream(config, all)
        const taken = yield* Stream.runCollect(Stream.take(groups, 5)).pipe(Effect.provide(policy))
        expect(taken.length).toBe(5)
        // n + bufferSize groups, and those the workers had in flight (concurrency 8 / 4 generations = 2)
        expect(counters.created).toBeLessThanOrEqual((5 + 2 + 2 + 1) * 4)
        expect(counters.closed).toBe(counters.created)
      }
    }))
})

describe("the fast path, hostile: the same seed gives the same log every way", () => {
  it.live("fast path, --isolate-envs, --env-workers 1, a plugin env answering with Effect.promise, concurrency 1 and 64: the same lines (timings and env name aside)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(
        dataset,
        Array.from({ length: 30 }, (_, i) => JSON.stringify({ env_config: { seed: i * 7, size: 3 + (i % 4) } })).join("\n") + "\n"
      )
      const plugin = path.join(dir, "promised.ts")
      fs.writeFileSync(
        plugin,
        `import { Effect, Result } from "effect"
import { Env, FrozenLake, Plugin } from "effect-gym"
const later = <A, E>(effect: Effect.Effect<A, E>) => Effect.flatMap(effect, (a) => Effect.promise(() => new Promise<A>((r) => setImmediate(() => r(a)))))
const base = FrozenLake.definition("frozen_lake_promised")
const promised: Env.Definition = {
  ...base,
  prepare: (config) => Result.map(base.prepare(config), (create) => Effect.map(create, (env): Env.Env => ({
    reset: (request) => later(env.reset(request)),
    step: (messages) => later(env.step(messages))
  })))
}
export default Plugin.make({ envs: [promised] })
`
      )
      const common = ["run", "--dataset", dataset, "--policy", "random", "--num-generations", "3", "--max-turns", "12", "--seed", "11", "--json"]
      const variants: ReadonlyArray<ReadonlyArray<string>> = [
        ["--env", "frozen_lake"],
        ["--env", "frozen_lake", "--concurrency", "1"],
        ["--env", "frozen_lake", "--isolate-envs"],
        ["--env", "frozen_lake", "--isolate-envs", "--env-workers", "1", "--concurrency", "64"],
        ["--env", "frozen_lake_promised", "--plugin", plugin],
        ["--env", "frozen_lake_promised", "--plugin", plugin, "--concurrency", "1"]
      ]
      const logs: Array<ReadonlyArray<string>> = []
      for (const [i, variant] of variants.entries()) {
        const output = path.join(dir, `out${i}.jsonl`)
        const { code, stderr } = yield* cli(...common, "--output", output, ...variant)
        expect(code, `${variant.join(" ")}: ${stderr}`).toBe(0)
        logs.push(
          fs.readFileSync(output, "utf8").trimEnd().split("\n").map((line) => {
            const { env: _env, ...rest } = withoutTimings(JSON.parse(line) as { env: string; timings: unknown })
            return JSON.stringify(rest)
          }).sort()
        )
      }
      expect(logs[0].length).toBe(90)
      for (let i = 1; i < logs.length; i++) expect(logs[i], variants[i].join(" ")).toEqual(logs[0])
      fs.rmSync(dir, { recursive: true, force: true })
    }), 120_000)
})

describe("the fast path, hostile: kill -9 with large groups written per chunk, then --resume", () => {
  it("lines of ~100 KB, answers completed and through the runtime mixed: every group exactly once, as an uninterrupted run wrote it", async () => {
    const dir = tmp()
    try {
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 160 }, (_, i) => JSON.stringify({ env_config: { seed: i } })).join("\n") + "\n")
      // (JavaScript: each of the six runs would otherwise load tsx, seconds of CPU that are not the point here)
      const plugin = path.join(dir, "big.mjs")
      fs.writeFileSync(
        plugin,
        `import { Effect } from "effect"
import { Env, Plugin } from "effect-gym"
const big = Env.define({
  name: "bigline",
  make: (config) => Effect.sync(() => {
    let turn = 0
    const seed = Number(config.seed ?? 0)
    return {
      reset: () => Effect.succeed({ observation: "start", info: { seed } }),
      step: () => {
        turn++
        const out = { observation: "t" + turn, reward: (seed * 7 + turn) % 3, done: turn >= 4, info: { pad: String(seed).repeat(8_000 + seed * 13), s: "\\u2028\\ud800" } }
        return turn % 3 === 0 ? Effect.promise(() => new Promise((r) => setImmediate(() => r(out)))) : Effect.succeed(out)
      }
    }
  })
})
export default Plugin.make({ envs: [big] })
`
      )
      const args = (output: string) => [
        path.join(ROOT, "bin/effect-gym.js"), "run", "--dataset", dataset, "--plugin", plugin, "--env", "bigline",
        "--policy", "random", "--num-generations", "4", "--seed", "3", "--output", output, "--resume"
      ]
      const run = (output: string) => {
        const child = spawn(process.execPath, args(output), { stdio: "ignore" })
        const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
          child.on("exit", (code, signal) => resolve({ code, signal })))
        return { child, exited }
      }
      const size = (file: string) => (fs.existsSync(file) ? fs.statSync(file).size : 0)
      const full = path.join(dir, "full.jsonl")
      expect((await run(full).exited).code).toBe(0)
      const cut = path.join(dir, "cut.jsonl")
      let seed = 7
      const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff
      let killed = 0
      for (let kill = 0; kill < 4; kill++) {
        const before = size(cut)
        const proc = run(cut)
        // once it writes (past its start), a random moment later
        for (let i = 0; i < 400 && size(cut) <= before; i++) await new Promise((r) => setTimeout(r, 25))
        await new Promise((r) => setTimeout(r, Math.floor(rand() * 300)))
        proc.child.kill("SIGKILL")
        const { code, signal } = await proc.exited
        // (a run that finished before the kill is fine too)
        expect(signal === "SIGKILL" || code === 0).toBe(true)
        if (signal === "SIGKILL") killed++
      }
      // the kills landed mid-run (not all after the end)
      expect(killed).toBeGreaterThan(0)
      expect((await run(cut).exited).code).toBe(0)
      const lines = (file: string) =>
        fs.readFileSync(file, "utf8").trimEnd().split("\n").map((line) => JSON.stringify(withoutTimings(JSON.parse(line) as { timings: unknown })))
      const a = lines(full)
      const b = lines(cut)
      expect(a.length).toBe(640)
      expect(new Set(b).size).toBe(b.length)
      expect(b.sort()).toEqual(a.sort())
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
