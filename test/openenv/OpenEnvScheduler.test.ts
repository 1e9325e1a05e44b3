/**
 * The `openenv` scheduler in real `Rollout` runs against this project's server on loopback: one
 * shared limit per server, typed failures, a server killed mid-trajectory.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as Env from "../../src/Env.js"
import { FrozenLake } from "../../src/envs/FrozenLake.js"
import * as Sudoku from "../../src/envs/Sudoku.js"
import * as Inference from "../../src/Inference.js"
import * as OpenEnvPool from "../../src/openenv/OpenEnvPool.js"
import * as OpenEnvScheduler from "../../src/openenv/OpenEnvScheduler.js"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Rollout from "../../src/Rollout.js"
import type * as Scheduler from "../../src/Scheduler.js"
import { randomPolicy, records, rows, runConfig } from "../helpers.js"
import { freePort, serve, settled } from "./helpers.js"

const root = path.resolve(import.meta.dirname, "../..")

const config = (
  definition: Scheduler.Definition,
  options: Record<string, unknown>,
  run: { readonly numGenerations?: number; readonly concurrency?: number; readonly maxTurns?: number } = {}
) =>
  runConfig({
    scheduler: definition,
    schedulerOptions: options,
    numGenerations: run.numGenerations ?? 4,
    maxTurns: run.maxTurns ?? 5,
    concurrency: run.concurrency ?? 100,
    seed: 1
  })

describe("openenv scheduler: default hooks", () => {
  it("parseAction: code fences stripped, JSON objects as they are, other JSON and text as {message}", () => {
    expect(OpenEnvScheduler.parseAction("```json\n{\"message\": \"[1 2 3]\", \"x\": 1}\n```")).toEqual({ message: "[1 2 3]", x: 1 })
    expect(OpenEnvScheduler.parseAction("  {\"tool\": \"echo\"} ")).toEqual({ tool: "echo" })
    expect(OpenEnvScheduler.parseAction("42")).toEqual({ message: "42" })
    expect(OpenEnvScheduler.parseAction("[1, 2]")).toEqual({ message: "[1,2]" })
    expect(OpenEnvScheduler.parseAction("\"quoted\"")).toEqual({ message: "quoted" })
    expect(OpenEnvScheduler.parseAction("```\nplain words\n```")).toEqual({ message: "plain words" })
    expect(OpenEnvScheduler.parseAction("I play [1 2 3]")).toEqual({ message: "I play [1 2 3]" })
    expect(OpenEnvScheduler.formatObservation({ observation: { a: [1] }, reward: null, done: false })).toBe("{\"a\":[1]}")
  })

  it.effect("run options and row env_config are checked, with the field named", () =>
    Effect.gen(function*() {
      const bad = yield* Effect.flip(OpenEnvScheduler.openenv.make({ options: { max_concurrent_envs: "0" } }))
      expect(bad.message).toContain("--scheduler-option max_concurrent_envs: must be a whole number >= 1")
      const unknown = yield* Effect.flip(OpenEnvScheduler.openenv.make({ options: { max_concurent_envs: "2" } }))
      expect(unknown.message).toContain("max_concurent_envs")
      // from Rollout.make, named as its options spell it (one check, the scheduler's)
      const library = yield* Effect.flip(Stream.runCollect(Rollout.run(Rollout.make({
        envs: [FrozenLake], scheduler: OpenEnvScheduler.openenv, schedulerOptions: { max_concurrent_envs: "0" }
      }))([{ env_config: {} }])))
      expect(library.message).toContain("schedulerOptions.max_concurrent_envs: must be a whole number >= 1")
      expect(library.message).not.toContain("--scheduler-option")
      const run = yield* config(OpenEnvScheduler.openenv, { max_concurrent_envs: "2" }, { numGenerations: 1 })
      const items = yield* Rollout.runAll(run, rows([{ env_config: {} }, { env_config: { base_url: "ftp://nowhere" } }]))
      const [missing, wrongUrl] = records(items)
      expect(missing.error?.message).toContain("env_config.base_url")
      expect(wrongUrl.error?.message).toContain("is not an http(s):// or ws(s):// URL")
    }).pipe(Effect.provide(randomPolicy())))
})

describe("openenv scheduler: one limit per server, shared by the whole run", () => {
  it.live("100 concurrent trajectories with a limit of 8: the server never sees more than 8 sessions", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake, maxConcurrentEnvs: 8 })
      const dataset = Array.from({ length: 25 }, (_, i) => ({ env_config: { base_url: server.url, reset_kwargs: { size: 4 + (i % 3) } } }))
      const run = yield* config(OpenEnvScheduler.openenv, { max_concurrent_envs: 8 }, { concurrency: 100 })
      const all = records(yield* Rollout.runAll(run, rows(dataset)))
      expect(all.length).toBe(100)
      expect(all.filter((r) => r.error !== undefined).map((r) => r.error!.message)).toEqual([])
      expect(server.sessions).toMatchObject({ maxSeen: 8, rejected: 0, accepted: 100 })
      expect(yield* settled(server.sessions)).toBe(0)
      // every generation of a row played the same map (the reset seed is the row's seed)
      for (let row = 0; row < 25; row++) {
        const firsts = new Set(all.filter((r) => r.result.row === row).map((r) => r.result.messages[0].content))
        expect(firsts.size).toBe(1)
      }
      expect(all.every((r) => r.result.numTurns >= 1 && r.result.resetInfo !== undefined)).toBe(true)
    }).pipe(Effect.provide(randomPolicy({ latency_ms: 2 }))))

  it.live("the server counts: a client limit above the server's gets typed CapacityReached, unless it retries", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake, maxConcurrentEnvs: 2 })
      const dataset = Array.from({ length: 8 }, () => ({ env_config: { base_url: server.url } }))
      const greedy = yield* config(OpenEnvScheduler.openenv, { max_concurrent_envs: 16 })
      const failed = records(yield* Rollout.runAll(greedy, rows(dataset))).filter((r) => r.error !== undefined)
      expect(failed.length).toBeGreaterThan(0)
      expect(failed[0].error!.message).toContain("CapacityReached: Server at capacity: 2/2 sessions active")
      expect(server.sessions.maxSeen).toBe(2)
      expect(yield* settled(server.sessions)).toBe(0)

      const patient = yield* config(OpenEnvScheduler.openenv, {
        max_concurrent_envs: 16,
        capacity_retries: 100,
        capacity_backoff_ms: 5
      })
      const rejectedBefore = server.sessions.rejected
      const retried = records(yield* Rollout.runAll(patient, rows(dataset)))
      expect(retried.filter((r) => r.error !== undefined).map((r) => r.error!.message)).toEqual([])
      expect(server.sessions.rejected).toBeGreaterThan(rejectedBefore)
      expect(server.sessions.maxSeen).toBe(2)
      expect(yield* settled(server.sessions)).toBe(0)
    }).pipe(Effect.provide(randomPolicy({ latency_ms: 5 }))))
})

/** Starts `effect-gym openenv serve` in a child process (from the sources) and waits until it listens. */
const spawnServer = (port: number) =>
  Effect.acquireRelease(
    Effect.callback<ChildProcess, Error>((resume) => {
      const child = spawn(process.execPath, [
        "--import",
        "tsx",
        path.join(root, "src/cli/bin.ts"),
        "openenv",
        "serve",
        "--env",
        "sudoku",
        "--port",
        String(port),
        "--max-concurrent-envs",
        "2"
      ], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
      let out = ""
      child.stdout!.on("data", (chunk) => {
        out += String(chunk)
        if (out.includes("OpenEnv server:")) resume(Effect.succeed(child))
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`server exited early (${code}): ${out}`))))
    }),
    (child) => Effect.sync(() => void (child.exitCode === null && child.kill("SIGKILL")))
  )

describe("openenv scheduler: a server killed mid-trajectory", () => {
  it.live("gives a typed ConnectionLost, releases the session and its permit, and the run goes on", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const child = yield* spawnServer(port)
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
      const killer = Inference.layerFunction("killer", (request) =>
        request.turn === 2
          ? Effect.promise(() => {
            child.kill("SIGKILL")
            return exited
          }).pipe(Effect.as({ text: "[1 1 1]", finishReason: "stop" as const }))
          : Effect.succeed({ text: "[9 9 9]", finishReason: "stop" as const }))
      const run = yield* config(OpenEnvScheduler.openenv, { max_concurrent_envs: 1 }, { numGenerations: 1, maxTurns: 10 })
      const base = `http://127.0.0.1:${port}`
      const [killed] = records(yield* Effect.provide(Rollout.runAll(run, rows([{ env_config: { base_url: base } }])), killer))
      expect(killed.result.endReason).toBe("error")
      expect(killed.result.numTurns).toBe(2)
      expect(killed.error?._tag).toBe("EnvError")
      expect(killed.error?.message).toMatch(/step failed: openenv ws:\/\/127\.0\.0\.1:\d+\/ws: ConnectionLost/)

      // The same run (the same limit of 1) against a new server on that port: had the dead
      // session kept its permit, these trajectories would wait forever.
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 1, port })
      const after = records(
        yield* Rollout.runAll(run, rows([{ env_config: { base_url: base } }, { env_config: { base_url: base } }])).pipe(
          Effect.provide(Inference.layerFunction("fixed", () => Effect.succeed({ text: "[1 1 1]", finishReason: "stop" as const }))),
          Effect.timeoutOrElse({
            duration: "10 seconds",
            orElse: () => Effect.fail(new Error("a permit leaked: the run is stuck"))
          })
        )
      )
      expect(after.map((r) => r.error?.message)).toEqual([undefined, undefined])
      expect(server.sessions.maxSeen).toBe(1)
      expect(yield* settled(server.sessions)).toBe(0)
    }))
})

describe("openenv scheduler: connecting is retried, failures are fields in the log", () => {
  it.live("a server that comes up late, or restarts between trajectories: connect_retries with backoff", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const run = yield* config(OpenEnvScheduler.openenv, { max_concurrent_envs: "2", connect_backoff_ms: "100" }, { numGenerations: 4 })
      // nothing listens yet: the server starts 600 ms into the run
      const late = yield* Effect.forkChild(Effect.provide(Rollout.runAll(run, rows([{ env_config: { base_url: base } }])), randomPolicy()))
      yield* Effect.sleep("600 millis")
      const first = yield* Effect.scoped(Effect.gen(function*() {
        yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 2, port })
        return records(yield* Fiber.join(late))
      }))
      expect(first.map((r) => r.error?.message)).toEqual([undefined, undefined, undefined, undefined])
      // the server is gone (restarting): without retries a trajectory fails at once with ConnectFailed
      const none = yield* config(OpenEnvScheduler.openenv, { connect_retries: "0" }, { numGenerations: 1 })
      const [refused] = records(yield* Effect.provide(Rollout.runAll(none, rows([{ env_config: { base_url: base } }])), randomPolicy()))
      expect(refused.error).toMatchObject({ _tag: "EnvError", phase: "reset", details: { reason: "ConnectFailed" } })
      // with them (the default), the restarted server serves every trajectory
      const restarted = yield* Effect.forkChild(Effect.provide(Rollout.runAll(run, rows([{ env_config: { base_url: base } }])), randomPolicy()))
      yield* Effect.sleep("500 millis")
      const second = yield* Effect.scoped(Effect.gen(function*() {
        yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 2, port })
        return records(yield* Fiber.join(restarted))
      }))
      expect(second.every((r) => r.error === undefined)).toBe(true)
    }))

  it.live("CAPACITY_REACHED from another client: code, active_sessions and max_sessions are fields of the logged error", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 1 })
      // another client holds the only slot
      const ws = yield* Effect.promise(() =>
        new Promise<import("ws").WebSocket>((resolve) => {
          void import("ws").then(({ WebSocket }) => {
            const socket = new WebSocket(`${server.url.replace("http", "ws")}/ws`)
            socket.on("open", () => resolve(socket))
          })
        })
      )
      const run = yield* config(OpenEnvScheduler.openenv, {}, { numGenerations: 1 })
      const [full] = records(yield* Effect.provide(Rollout.runAll(run, rows([{ env_config: { base_url: server.url } }])), randomPolicy()))
      const logged = CompletionsLog.toLine(full)
      expect(logged.error).toMatchObject({
        _tag: "EnvError",
        phase: "reset",
        details: { reason: "CapacityReached", code: "CAPACITY_REACHED", active_sessions: 1, max_sessions: 1 }
      })
      ws.close()
    }))
})

describe("openenv scheduler: its own sessions dropped after a reply timeout", () => {
  /**
   * Steps slowly when `slow_ms` is set, and cannot be cut meanwhile (a stuck env: the server holds
   * the session's slot until the step ends, after its client has gone); done after one step.
   */
  class Slow {
    constructor(readonly config: { readonly slow_ms?: number }) {}
    reset() {
      return { observation: "go", info: {} }
    }
    step() {
      return Effect.uninterruptible(
        Effect.as(Effect.sleep(this.config.slow_ms ?? 0), { observation: "ok", reward: 1, done: true, info: {} })
      )
    }
  }
  const SlowEnv = Env.fromClass({ name: "slow", description: "steps slowly on demand", class: Slow })

  it.live("the server still holds them: CAPACITY_REACHED is retried by default (no capacity_retries), no trajectory fails with it", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: SlowEnv, maxConcurrentEnvs: 2 })
      // two trajectories whose step outlasts the client's reply timeout, then six quick ones: the
      // server holds the two dropped sessions until their steps end
      const dataset = [
        ...Array.from({ length: 2 }, () => ({ env_config: { base_url: server.url, reset_kwargs: { slow_ms: 1500 } } })),
        ...Array.from({ length: 6 }, () => ({ env_config: { base_url: server.url } }))
      ]
      const run = yield* config(
        OpenEnvScheduler.openenv,
        { max_concurrent_envs: 2, reply_timeout_s: 0.3, capacity_backoff_ms: 50 },
        { numGenerations: 1 }
      )
      const out = records(yield* Rollout.runAll(run, rows(dataset)))
      const errors = out.filter((r) => r.error !== undefined).map((r) => r.error!.message)
      expect(errors.length, errors.join("\n")).toBe(2)
      for (const message of errors) expect(message).toContain("ReplyTimeout")
      expect(errors.join("\n")).not.toContain("CapacityReached")
      expect(server.sessions.rejected, "the server did refuse sessions meanwhile").toBeGreaterThan(0)
      expect(yield* settled(server.sessions)).toBe(0)
    }).pipe(Effect.provide(randomPolicy({ latency_ms: 5 }))))
})

describe("the openenv env as a service-requiring env (Env.Definition<OpenEnvPool>)", () => {
  it.live("a gym run of the openenv env: the pool Layer's per-server limit holds, permits all come back", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake, maxConcurrentEnvs: 8 })
      const rollout = Rollout.make({ envs: [OpenEnvScheduler.env()], numGenerations: 4, concurrency: 32, maxTurns: 4 })
      const dataset = Array.from({ length: 6 }, () => ({ env_config: { base_url: server.url } }))
      const items = yield* Stream.fromIterable(dataset).pipe(
        Rollout.run(rollout),
        Stream.runCollect,
        Effect.provide(OpenEnvPool.layer({ maxConcurrentEnvs: 3 }))
      )
      const all = items.filter(Rollout.isGroup).flatMap((g) => g.records)
      expect(all.length).toBe(24)
      expect(all.filter((r) => r.error !== undefined).map((r) => r.error!.message)).toEqual([])
      expect(server.sessions).toMatchObject({ maxSeen: 3, rejected: 0, accepted: 24 })
      expect(yield* settled(server.sessions)).toBe(0)
    }).pipe(Effect.provide(randomPolicy({ latency_ms: 2 }))))
})
