/**
 * The freezes of issue 13, against both servers as users start them (the built binary, envs in
 * worker threads by default): an env that blocks its thread in reset or step. While it blocks,
 * `/health` answers within 1 s (a fetch with a 1 s deadline, so a frozen server fails the test
 * quickly instead of hanging it); the blocked trajectory or session ends with a typed error after
 * `--env-timeout`; SIGTERM drains and exits 0 while an env blocks.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { WebSocket } from "ws"
import { launchScoped } from "../cli.js"
import { linesOf } from "../rollout-server/helpers.js"

const root = path.resolve(import.meta.dirname, "../..")
const plugin = path.join(root, "test/fixtures/plugins/blocking_envs.mjs")

/** Starts the binary; resolves with the URL it prints; killed with the scope. */
const launch = launchScoped

/** GET /health with a 1 s deadline: the status, or "timeout" when the server does not answer in time. */
const healthWithin1s = (url: string) =>
  Effect.promise(() =>
    fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status, () => "timeout" as const)
  )

/** Polls /health (each with its 1 s deadline) while `busy()` holds: every answer, in order. */
const healthWhile = (url: string, busy: () => boolean, atLeast = 3) =>
  Effect.gen(function*() {
    const answers: Array<number | "timeout"> = []
    while (busy() || answers.length < atLeast) {
      answers.push(yield* healthWithin1s(url))
      yield* Effect.sleep("100 millis")
      if (answers.length > 200) break
    }
    return answers
  })

describe("effect-gym serve: an env that blocks its thread", () => {
  it.live("/health answers within 1 s during the freeze; the trajectory fails with a typed Timeout; the server goes on", () =>
    Effect.gen(function*() {
      const server = yield* launch([
        "serve", "--port", "0", "--plugin", plugin, "--env", "blocking", "--env-timeout", "2", "--env-workers", "1",
        "--policy", "random", "--max-turns", "3"
      ])
      let done = false
      const rollout = yield* Effect.forkChild(Effect.promise(() =>
        fetch(`${server.url}/v1/rollouts`, {
          method: "POST",
          body: JSON.stringify({ requests: [{ env_config: { block: "reset" } }] }),
          signal: AbortSignal.timeout(30_000)
        }).then((r) => r.text()).finally(() => (done = true))
      ))
      const answers = yield* healthWhile(server.url, () => !done)
      expect(answers.every((a) => a === 200), JSON.stringify(answers)).toBe(true)
      const [result] = JSON.parse(yield* Effect.flatten(Fiber.await(rollout))) as Array<any>
      expect(result.end_reason).toBe("error")
      expect(result.error).toMatchObject({ _tag: "EnvError", env: "blocking", phase: "reset", details: { reason: "Timeout", timeout_ms: 2000 } })
      // the worker was replaced: the next trajectory runs
      const next = JSON.parse(yield* Effect.promise(() =>
        fetch(`${server.url}/v1/rollouts`, { method: "POST", body: JSON.stringify({ requests: [{ env_config: {} }] }) }).then((r) => r.text())
      )) as Array<any>
      expect(next[0].end_reason).not.toBe("error")
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exit)).toEqual([0, null])
    }).pipe(Effect.scoped))

  it.live("SIGTERM while an env blocks: the server drains and exits 0", () =>
    Effect.gen(function*() {
      const server = yield* launch([
        "serve", "--port", "0", "--plugin", plugin, "--env", "blocking", "--env-timeout", "600", "--policy", "random",
        "--shutdown-grace", "0.2"
      ])
      const streamed = yield* Effect.forkChild(Effect.promise(() =>
        fetch(`${server.url}/v1/rollouts`, {
          method: "POST",
          headers: { accept: "application/x-ndjson" },
          body: JSON.stringify({ requests: [{ env_config: { block: "reset" } }] })
        }).then((r) => r.text(), (e) => String(e))
      ))
      yield* Effect.sleep("1500 millis")
      expect(yield* healthWithin1s(server.url)).toBe(200)
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exit)).toEqual([0, null])
      expect(linesOf(yield* Effect.flatten(Fiber.await(streamed)))).toEqual([{
        server_error: { type: "shutting_down", message: expect.stringContaining("were cut after the grace period") }
      }])
    }).pipe(Effect.scoped))
})

describe("effect-gym openenv serve: an env that blocks its thread", () => {
  /** Opens /ws, sends one frame, resolves with the reply frames and the close code. */
  const exchange = (url: string, frames: ReadonlyArray<object>) =>
    Effect.promise(() =>
      new Promise<{ frames: Array<any>; code: number | undefined }>((resolve) => {
        const ws = new WebSocket(`${url.replace(/^http/, "ws")}/ws`)
        const got: Array<any> = []
        ws.on("open", () => {
          for (const frame of frames) ws.send(JSON.stringify(frame))
        })
        ws.on("message", (data) => {
          got.push(JSON.parse(String(data)))
          if (got.length === frames.length) ws.close(1000)
        })
        ws.on("close", (code) => resolve({ frames: got, code }))
        ws.on("error", () => resolve({ frames: got, code: undefined }))
      })
    )

  it.live("one reset frame that blocks: /health answers within 1 s; the session ends with SESSION_ERROR; new sessions work", () =>
    Effect.gen(function*() {
      const server = yield* launch([
        "openenv", "serve", "--env", "blocking", "--plugin", plugin, "--port", "0", "--env-timeout", "2", "--env-workers", "1"
      ])
      let done = false
      const frozen = yield* Effect.forkChild(
        exchange(server.url, [{ type: "reset", data: { block: "reset" } }]).pipe(Effect.ensuring(Effect.sync(() => (done = true))))
      )
      const answers = yield* healthWhile(server.url, () => !done)
      expect(answers.every((a) => a === 200), JSON.stringify(answers)).toBe(true)
      const ended = yield* Effect.flatten(Fiber.await(frozen))
      expect(ended.frames).toEqual([{
        type: "error",
        data: { code: "SESSION_ERROR", message: "reset did not answer within 2s: the session is closed" }
      }])
      expect(ended.code).toBe(1000)
      const fine = yield* exchange(server.url, [{ type: "reset", data: {} }, { type: "step", data: { message: "hello" } }])
      expect(fine.frames[1], JSON.stringify(fine)).toMatchObject({ type: "observation", data: { reward: 1, done: false } })
      // the slot of a closed session comes back as the server sees the close
      let sessions: any
      for (let i = 0; i < 50; i++) {
        sessions = yield* Effect.promise(() => fetch(`${server.url}/sessions`).then((r) => r.json() as Promise<any>))
        if (sessions.active_sessions === 0) break
        yield* Effect.sleep("100 millis")
      }
      expect(sessions).toMatchObject({ active_sessions: 0, stuck: 1 })
      server.child.kill("SIGINT")
      expect(yield* Effect.promise(() => server.exit)).toEqual([0, null])
    }).pipe(Effect.scoped))

  it.live("SIGTERM while a step blocks: every session ends, exit 0", () =>
    Effect.gen(function*() {
      const server = yield* launch(["openenv", "serve", "--env", "blocking", "--plugin", plugin, "--port", "0", "--env-timeout", "600"])
      const frozen = yield* Effect.forkChild(exchange(server.url, [{ type: "reset", data: {} }, { type: "step", data: { message: "block" } }]))
      yield* Effect.sleep("1500 millis")
      expect(yield* healthWithin1s(server.url)).toBe(200)
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exit), server.stderr()).toEqual([0, null])
      const ended = yield* Effect.flatten(Fiber.await(frozen))
      expect(ended.frames[0]).toMatchObject({ type: "observation" })
      expect(ended.frames[1]).toEqual({ type: "error", data: { code: "SESSION_ERROR", message: "the server is shutting down" } })
      expect(ended.code).toBe(1001)
    }).pipe(Effect.scoped))
})

describe("effect-gym run --isolate-envs, from the bundle alone", () => {
  /**
   * The command line as installed: bin/ and dist/bundle/ copied to a fresh folder (inside the
   * package, so that node_modules is found), without dist/isolation: the worker threads must start
   * from the bundle's own entry (dist/bundle/env-worker.js).
   */
  it.live("an env that blocks its reset fails that trajectory with a typed Timeout; the others (one lost with the terminated worker, run again) are written", () =>
    Effect.gen(function*() {
      fs.mkdirSync(path.join(root, "scratch"), { recursive: true })
      const copy = fs.mkdtempSync(path.join(root, "scratch", "bundle-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(copy, { recursive: true, force: true })))
      fs.cpSync(path.join(root, "bin"), path.join(copy, "bin"), { recursive: true })
      fs.cpSync(path.join(root, "dist/bundle"), path.join(copy, "dist/bundle"), { recursive: true })
      fs.copyFileSync(path.join(root, "package.json"), path.join(copy, "package.json"))
      expect(fs.existsSync(path.join(copy, "dist/isolation"))).toBe(false)
      const dataset = path.join(copy, "rows.jsonl")
      fs.writeFileSync(
        dataset,
        [{ block: "reset" }, {}, {}].map((env_config) => JSON.stringify({ messages: [], env_config })).join("\n") + "\n"
      )
      const output = path.join(copy, "out.jsonl")
      const ran = yield* Effect.promise(() =>
        new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
          const child = spawn(process.execPath, [
            path.join(copy, "bin/effect-gym.js"), "run", "--dataset", dataset, "--plugin", plugin, "--env", "blocking",
            "--policy", "random", "--num-generations", "1", "--max-turns", "3", "--output", output, "--isolate-envs",
            "--env-workers", "2", "--env-timeout", "2", "--trajectory-retries", "1", "--json"
          ], { cwd: copy, stdio: ["ignore", "pipe", "pipe"] })
          let stdout = ""
          let stderr = ""
          child.stdout.on("data", (chunk) => void (stdout += String(chunk)))
          child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
          child.on("exit", (code) => resolve({ code, stdout, stderr }))
        })
      )
      const lines = fs.readFileSync(output, "utf8").trim().split("\n").map((line) => JSON.parse(line))
      expect(lines, ran.stderr).toHaveLength(3)
      const failed = lines.filter((line) => line.error != null)
      expect(failed, JSON.stringify(lines)).toHaveLength(1)
      expect(failed[0].error).toMatchObject({
        _tag: "EnvError",
        env: "blocking",
        phase: "reset",
        details: { reason: "Timeout", timeout_ms: 2000 }
      })
      // the two others ran in a worker thread (the env says where it runs), also the one that was
      // queued behind the blocked reset on the same worker (WorkerLost, transient: run again)
      const fine = lines.filter((line) => line.error == null)
      expect(fine.map((line) => line.rollout_infos.reset_info)).toEqual([{ thread: "worker" }, { thread: "worker" }])
      expect(ran.code, ran.stderr).toBe(1)
    }).pipe(Effect.scoped))
})
