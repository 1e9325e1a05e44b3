/**
 * Issue 28, items 8 and 18, as users meet them (the built binary, envs in worker threads): one env
 * that blocks its thread, or one close that hangs, must not end the other sessions or trajectories
 * of its worker. `--env-workers 1` puts every env on the same worker.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { WebSocket } from "ws"
import { cli, launchScoped, tmp } from "../cli.js"

const root = path.resolve(import.meta.dirname, "../..")
const blocking = path.join(root, "test/fixtures/plugins/blocking_envs.mjs")
const faults = path.join(root, "test/fixtures/plugins/faults.mjs")

/** A /ws session driven frame by frame: each `ask` sends one frame and waits for its reply. */
const session = (url: string) =>
  Effect.promise(() =>
    new Promise<{ readonly ask: (frame: object) => Promise<any>; readonly closed: () => number | undefined }>((resolve, reject) => {
      const ws = new WebSocket(`${url.replace(/^http/, "ws")}/ws`)
      const waiting: Array<(frame: any) => void> = []
      let code: number | undefined
      ws.on("message", (data) => waiting.shift()?.(JSON.parse(String(data))))
      ws.on("close", (c) => {
        code = c
        for (const w of waiting.splice(0)) w({ closed: c })
      })
      ws.on("open", () =>
        resolve({
          ask: (frame) =>
            new Promise((answer) => {
              waiting.push(answer)
              ws.send(JSON.stringify(frame))
            }),
          closed: () => code
        }))
      ws.on("error", reject)
    })
  )

describe("issue 28 #8: openenv serve, one env blocks its worker thread", () => {
  it.live("the blocked session ends with SESSION_ERROR; a session on the same worker, its step queued behind, goes on", () =>
    Effect.gen(function*() {
      const server = yield* launchScoped([
        "openenv", "serve", "--env", "blocking", "--plugin", blocking, "--port", "0", "--env-workers", "1",
        "--env-timeout", "2", "--env-config", "{\"length\": 100}"
      ])
      const innocent = yield* session(server.url)
      const blocker = yield* session(server.url)
      expect((yield* Effect.promise(() => innocent.ask({ type: "reset", data: { seed: 1 } }))).type).toBe("observation")
      expect(yield* Effect.promise(() => innocent.ask({ type: "step", data: { message: "one" } }))).toMatchObject({
        data: { observation: { info: { turn: 1 } } }
      })
      expect((yield* Effect.promise(() => blocker.ask({ type: "reset", data: {} }))).type).toBe("observation")
      const blocked = yield* Effect.forkChild(Effect.promise(() => blocker.ask({ type: "step", data: { message: "block" } })))
      yield* Effect.sleep("200 millis")
      // sent while the worker is blocked: answered once this env has been moved to a new worker
      const second = yield* Effect.promise(() => innocent.ask({ type: "step", data: { message: "two" } }))
      expect(second, JSON.stringify(second)).toMatchObject({
        type: "observation",
        data: { observation: { prompt: "heard two (4 messages)", info: { turn: 2 } }, done: false }
      })
      expect(yield* Fiber.join(blocked)).toEqual({
        type: "error",
        data: { code: "SESSION_ERROR", message: "step did not answer within 2s: the session is closed" }
      })
      // and it keeps going
      expect(yield* Effect.promise(() => innocent.ask({ type: "step", data: { message: "three" } }))).toMatchObject({
        data: { observation: { info: { turn: 3 } } }
      })
      expect(innocent.closed()).toBeUndefined()
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exit)).toEqual([0, null])
    }).pipe(Effect.scoped), 60_000)
})

describe("issue 28 #18: run --isolate-envs, one close hangs", () => {
  it.live("that trajectory gets its Timeout (close); the other trajectories of its worker end well and are closed", () =>
    Effect.gen(function*() {
      const dir = tmp("effect-gym-neighbours-")
      const dataset = path.join(dir, "rows.jsonl")
      const output = path.join(dir, "out.jsonl")
      const envLog = path.join(dir, "envs.log")
      fs.writeFileSync(
        dataset,
        [{ fault: "hang_close" }, {}, {}, {}, {}].map((env_config) => JSON.stringify({ messages: [], env_config })).join("\n") + "\n"
      )
      process.env.EFFECT_GYM_ENV_LOG = envLog
      const { code, stderr } = yield* cli(
        "run", "--dataset", dataset, "--plugin", faults, "--env", "faulty", "--num-generations", "1",
        "--output", output, "--isolate-envs", "--env-workers", "1", "--json"
      ).pipe(Effect.ensuring(Effect.sync(() => delete process.env.EFFECT_GYM_ENV_LOG)))
      const lines = fs.readFileSync(output, "utf8").trim().split("\n").map((line) => JSON.parse(line)).sort((a, b) => a.row - b.row)
      expect(lines.map((l) => l.error === null ? l.end_reason : `${l.error._tag} ${l.error.phase} ${l.error.details?.reason}`), stderr)
        .toEqual(["EnvError close Timeout", "done", "done", "done", "done"])
      expect(code).toBe(1)
      const log = fs.readFileSync(envLog, "utf8").trim().split("\n")
      // 5 created, the 4 that did not hang closed
      expect([log.filter((l) => l === "create").length, log.filter((l) => l === "close").length]).toEqual([5, 4])
    }), 60_000)
})
