/**
 * `effect-gym serve` as a user runs it: in-process with a full argv (option errors, server mode
 * against the fake OpenAI-compatible server) and as the real binary (SIGTERM with trajectories in
 * flight: every env closed, exit code 0).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, healthy, launchScoped, tmp } from "../cli.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import { freePort } from "../openenv/helpers.js"
import { Api, eventually, linesOf, request } from "./helpers.js"

const root = path.resolve(import.meta.dirname, "../..")
const { bytes } = FakeOpenAi


describe("effect-gym serve (in-process)", () => {
  it.live("bad invocations exit with code 2 and say why", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["--port", "70000"], "--port: must be between 0 and 65535, got 70000"],
        [["--env", "ghost"], "unknown env \"ghost\"; registered: calculator, frozen_lake, kv_store, sudoku"],
        [["--scheduler", "ghost"], "unknown scheduler \"ghost\""],
        [["--api-key-env", "EFFECT_GYM_TEST_UNSET_KEY"], "--api-key-env: the environment variable EFFECT_GYM_TEST_UNSET_KEY is not set"],
        [
          ["--mode", "server", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--inference-api-key-env", "EFFECT_GYM_TEST_UNSET_KEY"],
          "--model-api-key-env: the environment variable EFFECT_GYM_TEST_UNSET_KEY is not set"
        ],
        [["--concurrency", "8", "--max-request-trajectories", "9"], "--max-request-trajectories: 9 is more than --concurrency (8)"],
        [["--shutdown-grace", "-1"], "--shutdown-grace: must be >= 0 seconds, got -1"],
        [["--max-body", "0"], "--max-body: must be a whole number >= 1, got 0"],
        [["--temperature", "-2"], "--temperature: must be a number >= 0, got -2"],
        [["--policy", "random", "--mode", "server", "--base-url", "http://x/v1", "--model", "m"], "--policy: only with --mode scripted"]
      ]
      for (const [extra, message] of cases) {
        const { code, stderr } = yield* cli("serve", ...(extra.includes("--port") ? [] : ["--port", "0"]), ...extra)
        expect(stderr, extra.join(" ")).toContain(message)
        expect(code, extra.join(" ")).toBe(2)
      }
    }))

  // Issue 28, item 2: after the backend's first 422 for top_k (or seed), the field was dropped for the
  // life of the server and /infer/ answered 200 with samples drawn without it.
  it.live("--mode server: a request field the backend rejects (top_k, seed) is a 400 naming it, every time, never dropped", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeOpenAi.make
      upstream.state.rejectFields.add("top_k")
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const server = yield* Effect.forkChild(cli(
        "serve", "--port", String(port), "--env", "frozen_lake", "--mode", "server", "--base-url", upstream.baseUrl,
        "--model", "tiny", "--max-tokens", "32", "--seeded-sampling", "--on-failure", "zero-reward"
      ))
      yield* healthy(base, {})
      const infer = (requestConfig: Record<string, unknown>) =>
        request(`${base}/infer/`, {
          body: { infer_requests: [{ messages: [], data_dict: { env_config: { seed: 5, size: 5 } } }], request_config: requestConfig }
        })
      for (let i = 0; i < 2; i++) {
        const refused = yield* infer({ top_k: 5, seed: 1 })
        // (the second too: a dropped field would have answered 200)
        expect(refused.status, `request ${i + 1}`).toBe(400)
        expect(JSON.parse(refused.text).error).toMatchObject({ type: "invalid_request", path: "request_config.top_k" })
        expect(JSON.parse(refused.text).error.message).toContain("cannot honour it")
      }
      const plain = yield* infer({ seed: 1 })
      expect(plain.status).toBe(200)
      // /v1/rollouts: the trajectory fails, its error naming the field (no reward to learn from)
      const rollouts = yield* request(`${base}/v1/rollouts`, {
        body: { requests: [{ env_config: { seed: 5, size: 5 }, num_generations: 1 }], sampling: { top_k: 5 } }
      })
      expect(rollouts.status, rollouts.text).toBe(200)
      const [line] = JSON.parse(rollouts.text) as Array<{ error: Record<string, unknown>; rollout_infos: { total_reward: unknown } }>
      expect(line.error).toMatchObject({ _tag: "InferenceError", reason: "InvalidRequest", status: 422, field: "top_k" })
      upstream.state.rejectFields.add("seed")
      const seeded = yield* infer({ seed: 1 })
      expect(seeded.status).toBe(400)
      expect(JSON.parse(seeded.text).error).toMatchObject({ path: "request_config.seed" })
      yield* Fiber.interrupt(server)
    }).pipe(Effect.scoped))

  it.live("--mode server: per-turn token ids, loss masks and logprobs reach /infer/ and /v1/rollouts; both keys are used", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeOpenAi.make
      process.env.EFFECT_GYM_TEST_SERVE_KEY = "serve-key"
      process.env.EFFECT_GYM_TEST_UPSTREAM_KEY = "upstream-key"
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const auth = { authorization: "Bearer serve-key" }
      const server = yield* Effect.forkChild(cli(
        "serve", "--port", String(port), "--env", "frozen_lake", "--mode", "server", "--base-url", upstream.baseUrl,
        "--model", "tiny", "--inference-api-key-env", "EFFECT_GYM_TEST_UPSTREAM_KEY", "--api-key-env",
        "EFFECT_GYM_TEST_SERVE_KEY", "--max-tokens", "32", "--num-generations", "2"
      ))
      yield* healthy(base, auth)
      const info = Schema.decodeUnknownSync(Api.Info)(JSON.parse((yield* request(`${base}/info`, { headers: auth })).text))
      expect(info).toMatchObject({ inference: { mode: "server", model: "tiny" }, auth: true, defaults: { num_generations: 2 } })
      expect(info.inference.backend).toContain(upstream.baseUrl)
      expect((yield* request(`${base}/info`)).status).toBe(401)

      const reply = yield* request(`${base}/infer/`, {
        headers: auth,
        body: { infer_requests: [{ messages: [], data_dict: { env_config: { seed: 5, size: 5 } } }], request_config: { temperature: 0.7, logprobs: true, return_details: true } }
      })
      expect(reply.status).toBe(200)
      const [output] = Schema.decodeUnknownSync(Schema.Array(Api.InferOutput))(JSON.parse(reply.text))
      const replies = output.messages.filter((m) => m.role === "assistant").map((m) => m.content)
      expect(replies.length).toBe(output.rollout_infos.num_turns)
      expect(output.rollout_infos.total_reward).toBe(1)
      const expected = FakeOpenAi.expectedTokens(replies)
      expect(output.response_token_ids).toEqual(expected.ids)
      expect(output.response_loss_mask).toEqual(expected.mask)
      expect(output.rollout_logprobs).toEqual(expected.logprobs)
      expect(output.response).toMatchObject({ model: "tiny", choices: [{ message: { content: replies.at(-1) }, token_ids: bytes(replies.at(-1)!) }] })

      const streamed = yield* request(`${base}/v1/rollouts`, {
        headers: { ...auth, accept: Api.NDJSON },
        body: { requests: [{ env_config: { seed: 5, size: 5 } }] }
      })
      const lines = linesOf(streamed.text).map((l) => Schema.decodeUnknownSync(Api.RolloutResult)(l))
      expect(lines.length).toBe(2)
      for (const line of lines) {
        const said = line.messages.filter((m) => m.role === "assistant").map((m) => m.content)
        expect(line.response_token_ids).toEqual(said.map(bytes))
      }
      // the request's sampling reached the model server, with the upstream key (never this server's)
      const first = upstream.state.requests[0]
      expect(first.body).toMatchObject({ model: "tiny", temperature: 0.7, max_tokens: 32, logprobs: true })
      for (const { headers } of upstream.state.requests) expect(headers.authorization).toBe("Bearer upstream-key")
      yield* Fiber.interrupt(server)
    }).pipe(
      Effect.scoped,
      Effect.ensuring(Effect.sync(() => {
        delete process.env.EFFECT_GYM_TEST_SERVE_KEY
        delete process.env.EFFECT_GYM_TEST_UPSTREAM_KEY
      }))
    ))
})

describe("effect-gym serve (the built binary)", () => {
  /** Starts the binary; resolves with the URL it prints, its output so far and its exit. */
  const launch = (args: ReadonlyArray<string>, env: Record<string, string>) => launchScoped(["serve", ...args], env)

  it.live("SIGTERM with trajectories in flight: the grace period, then every env closed, exit code 0", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const log = path.join(dir, "envs.log")
      const counts = () => {
        const lines = fs.existsSync(log) ? fs.readFileSync(log, "utf8").trim().split("\n") : []
        return { created: lines.filter((l) => l === "create").length, closed: lines.filter((l) => l === "close").length }
      }
      const server = yield* launch([
        "--port", "0", "--plugin", path.join(root, "test/fixtures/plugins/logged_env.mjs"), "--env", "endless",
        "--policy", "random", "--policy-option", "latency_ms=20", "--max-turns", "10000", "--shutdown-grace", "0.3"
      ], { EFFECT_GYM_ENV_LOG: log })
      const streamed = yield* Effect.forkChild(request(`${server.url}/v1/rollouts`, {
        headers: { accept: Api.NDJSON },
        body: { requests: [{ num_generations: 3 }, {}] }
      }))
      // (envs start in worker threads: the second worker starts with the request, slowly on a loaded machine)
      expect(yield* eventually(() => counts().created === 4, 30_000)).toBe(true)
      const signalled = Date.now()
      server.child.kill("SIGTERM")
      const [code, signal] = yield* Effect.promise(() => server.exit)
      expect([code, signal]).toEqual([0, null])
      // it waited for the grace period before cutting the trajectories
      expect(Date.now() - signalled).toBeGreaterThanOrEqual(300)
      expect(counts()).toEqual({ created: 4, closed: 4 })
      expect(server.stderr()).toContain("rollout server: stopped (0 trajectories completed, 4 cut)")
      const reply = yield* Fiber.join(streamed)
      expect(reply.status).toBe(200)
      expect(linesOf(reply.text)).toEqual([{
        server_error: {
          type: "shutting_down",
          message: "the server is shutting down: 4 trajectories of this request were cut after the grace period"
        }
      }])
    }).pipe(Effect.scoped))

  it.live("SIGINT on an idle server: exit code 0", () =>
    Effect.gen(function*() {
      const server = yield* launch(["--port", "0"], {})
      expect((yield* request(`${server.url}/health`)).status).toBe(200)
      server.child.kill("SIGINT")
      expect(yield* Effect.promise(() => server.exit)).toEqual([0, null])
    }).pipe(Effect.scoped))
})
