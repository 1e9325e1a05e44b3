import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { cli, frozenLakeDataset, readLines, tmp } from "./cli.js"
import * as FakeOpenAi from "./FakeOpenAi.js"


describe("effect-gym run --mode server (in-process CLI against the loopback server)", () => {
  it.live("a multi-turn FrozenLake run keeps token ids, loss masks and logprobs of every turn in the log", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      const dir = tmp()
      const dataset = frozenLakeDataset(dir, 8)
      const output = path.join(dir, "completions.jsonl")
      const { code, stdout, stderr } = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "server", "--base-url", server.baseUrl,
        "--model", "tiny", "--temperature", "0.8", "--top-p", "0.95", "--max-tokens", "32", "--seeded-sampling",
        "--inference-concurrency", "4", "--num-generations", "2", "--max-turns", "10", "--seed", "3",
        "--output", output, "--json"
      )
      // this server has no token path: said once, and in every line
      expect(stderr.split("\n")).toEqual([expect.stringContaining("warning: server mode on the chat path: no tokenizer")])
      expect(code).toBe(0)
      expect(JSON.parse(stdout)).toMatchObject({ trajectories: 16, failures: 0, successes: 16 })
      const lines = readLines(output)
      expect(lines.length).toBe(16)
      let turns = 0
      for (const line of lines) {
        const n = line.rollout_infos.num_turns
        turns += n
        const replies = line.messages.filter((m) => m.role === "assistant").map((m) => m.content)
        expect(replies.length).toBe(n)
        const expected = FakeOpenAi.expectedTokens(replies)
        expect(line.response_token_ids).toEqual(expected.ids)
        expect(line.response_loss_mask).toEqual(expected.mask)
        expect(line.rollout_logprobs).toEqual(expected.logprobs)
        expect(line.finish_reasons).toEqual(replies.map(() => "stop"))
        expect(line.token_ids).toBeNull()
        expect(line.token_ids_unavailable).toContain("server mode on the chat path")
      }
      // multi-turn: the solver needs several moves on most maps
      expect(turns).toBeGreaterThan(lines.length)
      expect(server.state.requests.length).toBe(turns)
      expect(server.state.maxInFlight).toBeLessThanOrEqual(4)
      for (const { body } of server.state.requests) {
        expect(body).toMatchObject({ model: "tiny", temperature: 0.8, top_p: 0.95, max_tokens: 32, logprobs: true })
      }
      // every call has its own seed, derived from --seed
      const seeds = new Set(server.state.requests.map((r) => r.body.seed))
      expect(seeds.size).toBe(turns)
    }).pipe(Effect.scoped))

  it.live("a failing request fails only its trajectory (after retries); the summary counts it; exit code 1", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      server.state.faults.push(
        { kind: "status", status: 500 },
        { kind: "drop" },
        { kind: "status", status: 400, body: "{\"error\":{\"message\":\"prompt is too long\"}}" }
      )
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout } = yield* cli(
        "run", "--dataset", frozenLakeDataset(dir, 4), "--env", "frozen_lake", "--mode", "server",
        "--base-url", server.baseUrl, "--model", "tiny", "--num-generations", "2", "--concurrency", "1",
        "--output", output, "--json"
      )
      expect(code).toBe(1)
      const summary = JSON.parse(stdout)
      expect(summary).toMatchObject({ trajectories: 8, failures: 1, failures_by_error: { InferenceError: 1 } })
      const failed = readLines(output).filter((l) => l.error !== null)
      expect(failed.length).toBe(1)
      expect(failed[0].error).toMatchObject({ _tag: "InferenceError", reason: "InvalidRequest", status: 400 })
      expect(failed[0].error!.message).toContain("prompt is too long")
    }).pipe(Effect.scoped))

  it.live("server down at start: one clear message (GET /v1/models), exit code 2, nothing run", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout, stderr } = yield* cli(
        "run", "--dataset", frozenLakeDataset(dir, 2), "--env", "frozen_lake", "--mode", "server",
        "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny", "--retries", "1", "--num-generations", "2",
        "--output", output, "--json"
      )
      expect(code).toBe(2)
      expect(stdout).toBe("")
      expect(stderr.split("\n")).toEqual([
        expect.stringContaining("error: openai-compat: Unavailable: cannot reach the inference server (GET http://127.0.0.1:9/v1/models")
      ])
    }))

  it.live("server gone mid-run: the run stops after --max-transport-failures failures in a row, keeps what finished", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      // Eight good answers, then every connection is dropped.
      server.state.faults.push(...Array.from({ length: 8 }, () => ({ kind: "ok" as const })))
      server.state.faults.push(...Array.from({ length: 400 }, () => ({ kind: "drop" as const })))
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const started = performance.now()
      const { code, stdout, stderr } = yield* cli(
        "run", "--dataset", frozenLakeDataset(dir, 64), "--env", "frozen_lake", "--mode", "server",
        "--base-url", server.baseUrl, "--model", "tiny", "--token-path", "off", "--retries", "3",
        "--max-transport-failures", "6", "--num-generations", "2", "--concurrency", "4", "--output", output, "--json"
      )
      const ms = performance.now() - started
      expect(code).toBe(3)
      expect(stderr).toContain("is not answering: 6 requests in a row failed without a response")
      expect(stderr.split("\n").filter((l) => l.startsWith("error:")).length).toBe(1)
      // far fewer requests than 128 trajectories x 4 attempts: the run stopped
      expect(server.state.requests.length).toBeLessThan(40)
      const summary = JSON.parse(stdout)
      expect(summary.trajectories).toBeLessThan(128)
      // what finished is in the log, as the summary counts it
      expect(readLines(output).length).toBe(summary.trajectories)
      console.log(`server gone mid-run: stopped after ${server.state.requests.length} requests, ${ms.toFixed(0)} ms`)
    }).pipe(Effect.scoped))

  it.live("inference options are checked before anything runs: clear errors, exit code 2", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = frozenLakeDataset(dir, 1)
      const base = ["run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "o.jsonl")]
      const server = ["--mode", "server", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["--mode", "server", "--model", "m"], "--base-url: required with --mode server"],
        [["--mode", "server", "--base-url", "http://127.0.0.1:9/v1"], "--model: required with --mode server"],
        [["--mode", "colocate"], "--model: required with --mode colocate"],
        [[...server, "--context-size", "512"], "--context-size: only with --mode colocate"],
        [["--base-url", "http://x/v1"], "--base-url: only with --mode server"],
        [["--model", "m"], "--model: only with --mode server or --mode colocate"],
        [[...server, "--policy", "random"], "--policy: only with --mode scripted"],
        [[...server, "--temperature", "-1"], "--temperature: must be a number >= 0, got -1"],
        [[...server, "--top-p", "1.5"], "--top-p: must be a number in (0, 1]"],
        [[...server, "--temperature", "hot"], "--temperature: \"hot\" is not a number"],
        [[...server, "--api-key-env", "EFFECT_GYM_TEST_UNSET_KEY"], "the environment variable EFFECT_GYM_TEST_UNSET_KEY is not set"],
        [["--mode", "server", "--base-url", "localhost:8000", "--model", "m"], "only http:// and https:// URLs"],
        [["--mode", "colocate", "--model", path.join(dir, "missing.gguf")], "missing.gguf: no such file"],
        [["--mode", "colocate", "--model", dataset], "not a GGUF file"],
        [[...server, "--tokenizer", dir], "--tokenizer " + dir + ": no tokenizer.json there"],
        [["--mode", "colocate", "--model", dataset, "--tokenizer", dir], "--tokenizer: only with --mode server"],
        [["--mode", "colocate", "--model", dataset, "--token-path", "off"], "--token-path: only with --mode server"],
        [[...server, "--chat-template-kwargs", "{\"messages\": []}"], "messages is set by effect-gym itself"],
        [[...server, "--chat-template-kwargs", "{oops"], "--chat-template-kwargs: not JSON"],
        [["--chat-template-kwargs", "{}"], "--chat-template-kwargs: only with --mode server or --mode colocate"],
        [[...server, "--max-transport-failures", "-1"], "--max-transport-failures: must be a whole number >= 0"]
      ]
      for (const [extra, message] of cases) {
        const { code, stderr } = yield* cli(...base, ...extra)
        expect(stderr, extra.join(" ")).toContain(message)
        expect(code, extra.join(" ")).toBe(2)
      }
    }))
})
