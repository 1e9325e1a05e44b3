/**
 * The rollout server end to end on loopback (real ports, the server started in the test), with the
 * scripted policies and a counting env.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Redacted, Schema, Scope } from "effect"
import * as http from "node:http"
import * as Builtins from "../../src/Builtins.js"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Inference from "../../src/Inference.js"
import * as Reward from "../../src/Reward.js"
import * as Rollout from "../../src/Rollout.js"
import { randomPolicy, records, rows, runConfig, solverPolicy } from "../helpers.js"
import { Api, errorOf, eventually, linesOf, openStream, request, resultsOf, RolloutServer, start, withoutTimings } from "./helpers.js"

/** What a local run (no server) gives for the same rows, as result lines without timings. */
const localRun = (
  values: ReadonlyArray<unknown>,
  options: { readonly numGenerations: number; readonly seed?: number; readonly policy?: "solver" | "random" }
) =>
  Effect.gen(function*() {
    const config = yield* runConfig({ defaultEnv: "frozen_lake", numGenerations: options.numGenerations, seed: options.seed ?? 0 })
    const items = yield* Rollout.runAll(config, rows(values)).pipe(
      Effect.provide(options.policy === "random" ? randomPolicy() : solverPolicy())
    )
    return records(items).map((record) => withoutTimings(CompletionsLog.toLine(record)))
  }).pipe(Effect.scoped)

const stripUuid = ({ uuid: _uuid, ...rest }: Record<string, unknown>) => rest

describe("POST /v1/rollouts", () => {
  it.live("a JSON array in row order, and the same results streamed as NDJSON", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const batch = {
        requests: [
          { env_config: { seed: 3, size: 6 }, num_generations: 3, uuid: "row-a" },
          { messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 4 }, extra: 1 }, num_generations: 2 }
        ]
      }
      const reply = yield* request(`${server.url}/v1/rollouts`, { body: batch })
      expect(reply.status).toBe(200)
      expect(reply.headers.get("content-type")).toBe("application/json")
      expect(reply.headers.get(Api.TRAJECTORIES_HEADER)).toBe("5")
      const results = resultsOf(reply)
      expect(results.map((r) => [r.row, r.generation])).toEqual([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]])
      // the uuid given is echoed; a row without one gets one, shared by its group
      expect(results.slice(0, 3).map((r) => r.uuid)).toEqual(["row-a", "row-a", "row-a"])
      expect(results[3].uuid).toMatch(/^[0-9a-f-]{36}$/)
      expect(results[4].uuid).toBe(results[3].uuid)
      // data_dict's env_config reaches the env
      expect(results[3].env_config).toEqual({ seed: 4 })
      for (const r of results) {
        expect(r.end_reason).toBe("done")
        expect(r.rewards).toEqual({ gym_reward: 1 })
        expect(r.rollout_infos.num_turns).toBe(r.rollout_infos.step_rewards!.length)
      }
      // exactly what a local run of the same rows gives (same seeds: row = index in the batch)
      const local = yield* localRun(
        [{ env_config: { seed: 3, size: 6 } }, { messages: [{ role: "user", content: "<placeholder>" }], env_config: { seed: 4 }, extra: 1 }],
        { numGenerations: 3 }
      )
      expect(results.slice(0, 3).map((r) => stripUuid(withoutTimings(r)))).toEqual(local.filter((l) => l.row === 0))
      expect(results.slice(3).map((r) => stripUuid(withoutTimings(r)))).toEqual(local.filter((l) => l.row === 1).slice(0, 2))

      const streamed = yield* request(`${server.url}/v1/rollouts`, { body: batch, headers: { accept: Api.NDJSON } })
      expect(streamed.status).toBe(200)
      expect(streamed.headers.get("content-type")).toBe(Api.NDJSON)
      const lines = linesOf(streamed.text).map((line) => Schema.decodeUnknownSync(Api.RolloutResult)(line))
      expect(lines.length).toBe(5)
      // each group's lines are written together
      const rows = lines.map((l) => l.row)
      expect(rows.join("")).toMatch(/^(00011|11000)$/)
      const key = (r: Api.RolloutResult) => `${r.row}-${r.generation}`
      const sorted = [...lines].sort((a, b) => key(a).localeCompare(key(b)))
      expect(sorted.map((r) => withoutTimings(r))).toEqual(results.map((r) => withoutTimings(r)).map((r, i) => i < 3 ? r : { ...r, uuid: sorted[i].uuid }))
      expect(server.counters.open).toBe(0)
      expect(server.stats).toMatchObject({ trajectoriesInFlight: 0, admitted: 10, completed: 10, cancelled: 0 })
    }))

  it.live("seed, max_turns, num_generations and sampling come from the server, the batch and the row", () =>
    Effect.gen(function*() {
      const seen: Array<Inference.ChatRequest> = []
      const policy: Inference.Service = {
        name: "recording",
        chat: (req) => Effect.sync(() => {
          seen.push(req)
          return { text: `reply ${req.turn}`, finishReason: "stop" as const }
        })
      }
      const server = yield* start({ policy, numGenerations: 2, maxTurns: 4, sampling: { temperature: 0.5, maxTokens: 9 } })
      const batch = {
        requests: [
          { env_config: { name: "counting", length: 100 }, sampling: { max_tokens: 7, stop: "END" } },
          { env_config: { name: "counting", length: 100 }, max_turns: 2, num_generations: 1 }
        ],
        sampling: { top_p: 0.9 },
        seed: 11
      }
      const reply = yield* request(`${server.url}/v1/rollouts`, { body: batch })
      expect(reply.status).toBe(200)
      const results = resultsOf(reply)
      expect(results.map((r) => [r.row, r.generation, r.end_reason, r.rollout_infos.num_turns])).toEqual([
        [0, 0, "max_turns", 4],
        [0, 1, "max_turns", 4],
        [1, 0, "max_turns", 2]
      ])
      const row0 = seen.filter((r) => r.trajectoryId.startsWith("r0-"))
      const row1 = seen.filter((r) => r.trajectoryId.startsWith("r1-"))
      for (const r of row0) expect(r.sampling).toEqual({ temperature: 0.5, maxTokens: 7, topP: 0.9, stop: ["END"] })
      for (const r of row1) expect(r.sampling).toEqual({ temperature: 0.5, maxTokens: 9, topP: 0.9 })
      // the batch's seed decides every call's seed: the same batch gives the same seeds
      const seeds = seen.map((r) => `${r.trajectoryId}/${r.turn}/${r.seed}`).sort()
      seen.length = 0
      yield* request(`${server.url}/v1/rollouts`, { body: batch })
      expect(seen.map((r) => `${r.trajectoryId}/${r.turn}/${r.seed}`).sort()).toEqual(seeds)
      seen.length = 0
      yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" } }], seed: 12 } })
      expect(seen.map((r) => `${r.trajectoryId}/${r.turn}/${r.seed}`)).not.toEqual(
        seeds.filter((s) => s.startsWith("r0-g0/")).slice(0, 3)
      )
      expect(server.counters.open).toBe(0)
    }))

  it.live("reward functions score every trajectory; an empty batch is an empty array", () =>
    Effect.gen(function*() {
      const server = yield* start({ rewards: [Reward.format], rewardWeights: [0.5, 1] })
      const results = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { seed: 1 } }] } }))
      expect(results[0].rewards).toEqual({ format: 0, gym_reward: 1 })
      expect(results[0].reward).toBe(1)
      const empty = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [] } })
      expect([empty.status, empty.text]).toEqual([200, "[]"])
    }))

  it.live("a failed trajectory's result has no reward: every reward field is null, in the array and the stream (issue 28, item 3)", () =>
    Effect.gen(function*() {
      const server = yield* start({ rewards: [Reward.format] })
      // step 1 gives 0.25, step 2 fails: the partial sum (or 0) must not reach a trainer as a reward
      const batch = {
        requests: [
          { env_config: { name: "counting", fail: "step", at: 2 } },
          { env_config: { name: "counting", fail: "reset" } },
          { env_config: { name: "counting" } }
        ]
      }
      const array = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: batch }))
      const streamed = linesOf((yield* request(`${server.url}/v1/rollouts`, { body: batch, headers: { accept: Api.NDJSON } })).text)
      for (const results of [array, streamed as unknown as typeof array]) {
        const byRow = [...results].sort((a, b) => a.row - b.row)
        for (const failed of byRow.slice(0, 2)) {
          expect(failed.error?._tag).toBe("EnvError")
          expect(failed).toMatchObject({ reward: null, rewards: null, advantage: null })
          expect(failed.rollout_infos).toMatchObject({ total_reward: null, step_rewards: null })
        }
        expect(byRow[0].rollout_infos.num_turns).toBe(2)
        expect(byRow[2].rollout_infos).toMatchObject({ total_reward: 1.5, step_rewards: [0.25, 0.25, 1] })
        expect(byRow[2].reward).toBe(1.5)
      }
    }))
})

describe("POST /infer/ (the reference's shape)", () => {
  it.live("one RolloutOutput per infer_request, in order, with rollout_infos and the whole conversation", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const body = {
        infer_requests: [
          { messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 7, size: 5 } }, uuid: "u-1", images: [], tools: null },
          { messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { name: "counting", length: 2 } } }
        ],
        // ms-swift's RequestConfig as its client sends it (defaults included)
        request_config: {
          max_tokens: null, temperature: 1.0, top_k: null, top_p: null, repetition_penalty: null, num_beams: 1, stop: [],
          seed: 3, stream: false, logprobs: false, top_logprobs: null, n: 1, best_of: null, presence_penalty: 0.0,
          frequency_penalty: 0.0, length_penalty: 1.0, return_details: false
        },
        use_tqdm: false
      }
      const reply = yield* request(`${server.url}/infer/`, { body })
      expect(reply.status).toBe(200)
      const outputs = Schema.decodeUnknownSync(Schema.Array(Api.InferOutput))(JSON.parse(reply.text))
      expect(outputs.length).toBe(2)
      expect(outputs[0].uuid).toBe("u-1")
      // a request without a uuid gets one shaped as the trainer's own (chatcmpl-<hex>); response.id is the uuid
      expect(outputs[1].uuid).toMatch(/^chatcmpl-[0-9a-f]{32}$/)
      expect(outputs.map((o) => o.response.id)).toEqual(outputs.map((o) => o.uuid))
      const [lake, counting] = outputs
      expect(lake.rollout_infos).toMatchObject({ total_reward: 1, end_reason: "done", error: null })
      expect(lake.rollout_infos.step_rewards.length).toBe(lake.rollout_infos.num_turns)
      const replies = lake.messages.filter((m) => m.role === "assistant")
      expect(replies.length).toBe(lake.rollout_infos.num_turns)
      expect(lake.response.choices[0]).toMatchObject({ message: { role: "assistant", content: replies.at(-1)!.content }, finish_reason: "stop" })
      // a scripted policy gives no token ids: empty lists, so the trainer tokenizes the messages itself
      expect([lake.response_token_ids, lake.response_loss_mask, lake.rollout_logprobs]).toEqual([[], [], []])
      expect(counting.rollout_infos).toMatchObject({ total_reward: 1.25, step_rewards: [0.25, 1], num_turns: 2 })
      expect(counting.messages[0]).toEqual({ role: "system", content: "be brief" })
      // the same as /v1/rollouts with the same rows and seed
      const v1 = resultsOf(yield* request(`${server.url}/v1/rollouts`, {
        body: { requests: body.infer_requests.map((r) => ({ messages: r.messages, data_dict: r.data_dict })), seed: 3, sampling: { temperature: 1, logprobs: false } }
      }))
      // (the counting env numbers its instances in its prompt: compare the lake only)
      expect(v1[0].messages).toEqual(lake.messages)
      expect(v1[1].rollout_infos.step_rewards).toEqual(counting.rollout_infos.step_rewards)
      expect(server.counters.open).toBe(0)
    }))
})

describe("auth", () => {
  it.live("with a key, every request needs the bearer token; without one, none does", () =>
    Effect.gen(function*() {
      const server = yield* start({ apiKey: Redacted.make("s3cret-key") })
      const cases: ReadonlyArray<[Record<string, string>, number]> = [
        [{}, 401],
        [{ authorization: "Bearer wrong" }, 401],
        [{ authorization: "Bearer s3cret-ke" }, 401],
        [{ authorization: "Bearer s3cret-keyy" }, 401],
        [{ authorization: "Basic s3cret-key" }, 401],
        [{ authorization: "s3cret-key" }, 401],
        [{ authorization: "Bearer s3cret-key" }, 200],
        [{ authorization: "bearer s3cret-key" }, 200]
      ]
      for (const [headers, status] of cases) {
        for (const path of ["/health", "/info"]) {
          const reply = yield* request(`${server.url}${path}`, { headers })
          expect(reply.status, `${path} ${JSON.stringify(headers)}`).toBe(status)
          if (status === 401) {
            expect(reply.headers.get("www-authenticate")).toBe("Bearer")
            expect(errorOf(reply).type).toBe("unauthorized")
          }
        }
      }
      // refused before the body is even read: nothing runs
      const refused = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" } }] } })
      expect(refused.status).toBe(401)
      expect(server.counters.created).toBe(0)
      const ok = yield* request(`${server.url}/v1/rollouts`, {
        body: { requests: [{ env_config: { name: "counting" } }] },
        headers: { authorization: "Bearer s3cret-key" }
      })
      expect(ok.status).toBe(200)
      const info = Schema.decodeUnknownSync(Api.Info)(JSON.parse((yield* request(`${server.url}/info`, { headers: { authorization: "Bearer s3cret-key" } })).text))
      expect(info.auth).toBe(true)

      const open = yield* start()
      expect((yield* request(`${open.url}/health`, { headers: { authorization: "Bearer anything" } })).status).toBe(200)
      expect((yield* request(`${open.url}/health`)).status).toBe(200)
    }))
})

describe("bad requests", () => {
  it.live("malformed bodies: 400 with the field's path and what is wrong; nothing runs", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const counting = { name: "counting" }
      const cases: ReadonlyArray<[string, unknown, number, string | undefined, string]> = [
        ["/v1/rollouts", "", 400, undefined, "the body is empty"],
        ["/v1/rollouts", "{\"requests\": [", 400, undefined, "malformed JSON"],
        ["/v1/rollouts", "[]", 400, "(body)", "Expected"],
        ["/v1/rollouts", {}, 400, "requests", "is missing"],
        ["/v1/rollouts", { requests: {} }, 400, "requests", "Expected array"],
        ["/v1/rollouts", { requests: [{ messages: "hi" }] }, 400, "requests[0].messages", "Expected array"],
        ["/v1/rollouts", { requests: [{}, { messages: [{ role: "robot", content: "x" }] }] }, 400, "requests[1].messages[0].role", "Expected \"system\""],
        ["/v1/rollouts", { requests: [{ env_config: [1] }] }, 400, "requests[0].env_config", "expected a JSON object"],
        ["/v1/rollouts", { requests: [{ env_config: counting }, { env_config: { name: "ghost" } }] }, 400, "requests[1].env_config.name", "unknown env \"ghost\"; registered: calculator, counting, frozen_lake, kv_store, sudoku"],
        ["/v1/rollouts", { requests: [{ data_dict: { env_config: { name: "ghost" } } }] }, 400, "requests[0].data_dict.env_config.name", "unknown env \"ghost\""],
        ["/v1/rollouts", { requests: [{ env_config: { name: "" } }] }, 400, "requests[0].env_config.name", "Expected a string at least 1 character"],
        ["/v1/rollouts", { requests: [{ env_config: { size: "big" } }] }, 400, "requests[0].env_config.size", "expected an integer"],
        ["/v1/rollouts", { requests: [{ env_config: counting, data_dict: { env_config: counting } }] }, 400, "requests[0].env_config", "not both"],
        ["/v1/rollouts", { requests: [{ num_generations: 0 }] }, 400, "requests[0].num_generations", "expected a whole number >= 1, got 0"],
        ["/v1/rollouts", { requests: [{ max_turns: 1.5 }] }, 400, "requests[0].max_turns", "expected a whole number >= 1, got 1.5"],
        ["/v1/rollouts", { requests: [{ max_turns: 10001 }] }, 400, "requests[0].max_turns", "expected at most 10000 (a trajectory holds its whole conversation"],
        ["/v1/rollouts", { requests: [{ num_generations: 4097 }] }, 400, "requests[0].num_generations", "expected at most 4096 (a group's trajectories are held in memory"],
        ["/v1/rollouts", { requests: [{ uuid: "" }] }, 400, "requests[0].uuid", "at least 1 character"],
        ["/v1/rollouts", { requests: [{ sampling: { top_p: 2 } }] }, 400, "requests[0].sampling.top_p", "must be a number in (0, 1], got 2"],
        ["/v1/rollouts", { requests: [{ sampling: { stop: [""] } }] }, 400, "requests[0].sampling.stop", "must not be empty"],
        ["/v1/rollouts", { requests: [{ sampling: { temprature: 1 } }] }, 400, "requests[0].sampling.temprature", "is unexpected"],
        ["/v1/rollouts", { requests: [{ num_generation: 2 }] }, 400, "requests[0].num_generation", "is unexpected"],
        ["/v1/rollouts", { requests: [{}], seed: "x" }, 400, "seed", "expected a safe integer"],
        ["/v1/rollouts", "{\"requests\": [{}], \"seed\": 12345678901234567890}", 400, "seed", "expected a safe integer, got 12345678901234567890"],
        ["/v1/rollouts", { requests: [{}], sampling: { temperature: -1 } }, 400, "sampling.temperature", "must be a number >= 0"],
        ["/infer/", { infer_requests: [{ messages: [], images: ["x.png"] }] }, 400, "infer_requests[0].images", "not supported"],
        ["/infer/", { infer_requests: [{ messages: [] }], request_config: { n: 4 } }, 400, "request_config.n", "repeat the request"],
        ["/infer/", { infer_requests: [{ messages: [] }], request_config: { top_k: -2 } }, 400, "request_config.top_k", "must be a whole number >= 1, or -1 for no limit"],
        ["/infer/", { infer_requests: [{ data_dict: {} }] }, 400, "infer_requests[0].messages", "is missing"]
      ]
      for (const [path, body, status, at, message] of cases) {
        const what = `${path} ${typeof body === "string" ? body : JSON.stringify(body)}`
        const reply = yield* request(`${server.url}${path}`, { body: typeof body === "string" ? body : JSON.stringify(body) })
        expect(reply.status, what).toBe(status)
        const error = errorOf(reply)
        expect(error.path, what).toBe(at)
        expect(error.message, what).toContain(message)
        expect(error.type, what).toBe(reply.text.includes("malformed JSON") || reply.text.includes("body is empty") ? "invalid_json" : "invalid_request")
      }
      const unknown = errorOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "ghost" } }] } }))
      expect(unknown.registered_envs).toEqual(["calculator", "counting", "frozen_lake", "kv_store", "sudoku"])
      const notUtf8 = yield* request(`${server.url}/v1/rollouts`, { body: new Uint8Array([0x7b, 0xff, 0x7d]) })
      expect([notUtf8.status, errorOf(notUtf8).message]).toEqual([400, "the body is not UTF-8 text"])
      const notFound = yield* request(`${server.url}/v2/rollouts`, { body: {} })
      expect([notFound.status, errorOf(notFound).type]).toEqual([404, "not_found"])
      expect((yield* request(`${server.url}/v1/rollouts`)).status).toBe(404)
      // nothing reached the scheduler: not one env was created
      expect(server.counters.created).toBe(0)
      expect(server.stats.admitted).toBe(0)
    }))

  it.live("a body over --max-body gets 413, read or not; the server stays healthy", () =>
    Effect.gen(function*() {
      const server = yield* start({ maxBodyBytes: 1000 })
      const big = JSON.stringify({ requests: [{ env_config: { name: "counting", pad: "x".repeat(2000) } }] })
      const declared = yield* request(`${server.url}/v1/rollouts`, { body: big })
      expect(declared.status).toBe(413)
      expect(errorOf(declared)).toMatchObject({ type: "body_too_large", message: "the body is larger than this server's limit of 1000 bytes" })
      // chunked (no Content-Length): cut off once it passes the limit
      const chunked = yield* Effect.promise(() =>
        new Promise<number | string>((resolve) => {
          const req = http.request(`${server.url}/v1/rollouts`, { method: "POST", headers: { "transfer-encoding": "chunked" } }, (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          })
          req.on("error", (error) => resolve((error as NodeJS.ErrnoException).code ?? error.message))
          for (let i = 0; i < 10; i++) req.write(big.slice(i * 250, (i + 1) * 250))
          req.end()
        })
      )
      expect([413, "ECONNRESET", "EPIPE"]).toContain(chunked)
      // a body just under the limit is fine
      const small = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting", pad: "x".repeat(900) } }] } })
      expect(small.status).toBe(200)
      expect(server.counters.created).toBe(1)
      expect((yield* request(`${server.url}/health`)).status).toBe(200)
    }))
})

describe("admission", () => {
  it.live("over the global limit: 429 with a retry hint, decided before work starts; over the per-request limit: 413", () =>
    Effect.gen(function*() {
      const server = yield* start({ maxTrajectoriesInFlight: 4, maxRequestTrajectories: 3, policy: "random", latencyMs: 10 })
      const long = { requests: [{ env_config: { name: "counting", length: 1000 }, num_generations: 3, max_turns: 1000 }] }
      const first = yield* openStream(`${server.url}/v1/rollouts`, long)
      expect(yield* eventually(() => server.counters.created === 3)).toBe(true)
      expect(server.stats.trajectoriesInFlight).toBe(3)
      const tooMany = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" }, num_generations: 2 }] } })
      expect(tooMany.status).toBe(429)
      const error = errorOf(tooMany)
      expect(error.type).toBe("at_capacity")
      expect(error.message).toContain("3 of 4 trajectories in flight; 2 more do not fit")
      expect(error.retry_after_ms).toBeGreaterThan(0)
      expect(Number(tooMany.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      // one more fits exactly
      const one = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting", length: 1 } }] } })
      expect(one.status).toBe(200)
      const split = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" } }, { env_config: { name: "counting" }, num_generations: 3 }] } })
      expect(split.status).toBe(413)
      expect(errorOf(split).message).toContain("asks for 4 trajectories; this server takes at most 3 per request")
      // only the first request's envs and the single one were ever created
      expect(server.counters.created).toBe(4)
      expect(server.stats.rejected).toBe(1)
      first.cut()
      expect(yield* eventually(() => server.stats.trajectoriesInFlight === 0 && server.counters.open === 0)).toBe(true)
      const after = yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" }, num_generations: 3 }] } })
      expect(after.status).toBe(200)
    }))
})

describe("clients that go away", () => {
  it.live("a client disconnecting mid-stream cancels its trajectories; their envs are closed; the server stays healthy", () =>
    Effect.gen(function*() {
      const server = yield* start({ policy: "random", latencyMs: 5 })
      const stream = yield* openStream(`${server.url}/v1/rollouts`, {
        requests: [
          { env_config: { name: "counting", length: 1 }, num_generations: 2 },
          { env_config: { name: "counting", length: 100000 }, num_generations: 4, max_turns: 10000 }
        ]
      })
      // the short group arrives, the long one is still running
      expect(yield* eventually(() => stream.lines.length === 2)).toBe(true)
      expect(stream.status).toBe(200)
      expect(server.counters.created).toBe(6)
      expect(server.counters.open).toBe(4)
      expect(server.stats.trajectoriesInFlight).toBe(4)
      stream.cut()
      expect(yield* eventually(() => server.counters.open === 0)).toBe(true)
      expect(yield* eventually(() => server.stats.trajectoriesInFlight === 0 && server.stats.requestsInFlight === 0)).toBe(true)
      expect(server.stats).toMatchObject({ completed: 2, cancelled: 4 })
      for (const [, count] of server.counters.closedIds) expect(count).toBe(1)
      // the same for a client waiting for a JSON array
      const fiber = yield* Effect.forkChild(request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting", length: 100000 }, num_generations: 2, max_turns: 10000 }] } }))
      expect(yield* eventually(() => server.counters.created === 8)).toBe(true)
      yield* Fiber.interrupt(fiber)
      expect(yield* eventually(() => server.counters.open === 0 && server.stats.trajectoriesInFlight === 0)).toBe(true)
      const health = yield* request(`${server.url}/health`)
      expect(JSON.parse(health.text)).toEqual({ status: "ok", trajectories_in_flight: 0 })
      const again = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting" } }] } }))
      expect(again[0].end_reason).toBe("done")
    }))
})

describe("graceful shutdown", () => {
  it.live("stops admitting, lets trajectories finish within the grace period, cuts the rest; every env is closed", () =>
    Effect.gen(function*() {
      // Closed by the test (or, if an assertion fails first, with the test's scope).
      const scope = yield* Scope.make()
      const streamScope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Effect.andThen(Scope.close(streamScope, Exit.void), Scope.close(scope, Exit.void)))
      const server = yield* Scope.provide(start({ policy: "random", latencyMs: 10, shutdownGrace: "400 millis" }), scope)
      // finishes within the grace period (about 5 turns of 10 ms)...
      const short = yield* Scope.provide(openStream(`${server.url}/v1/rollouts`, { requests: [{ env_config: { name: "counting", length: 5 }, num_generations: 2 }] }), streamScope)
      // ...does not (10 s)
      const long = yield* Scope.provide(openStream(`${server.url}/v1/rollouts`, {
        requests: [{ env_config: { name: "counting", length: 3 } }, { env_config: { name: "counting", length: 1000 }, num_generations: 3, max_turns: 1000 }]
      }), streamScope)
      const batch = yield* Effect.forkChild(request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { name: "counting", length: 1000 }, max_turns: 1000 }] } }))
      expect(yield* eventually(() => server.counters.created === 7)).toBe(true)
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      expect(yield* eventually(() => server.stats.draining)).toBe(true)
      // no new work: the port no longer accepts connections
      const late = yield* Effect.promise(() => fetch(`${server.url}/health`).then((r) => r.status, () => "refused"))
      expect(late).toBe("refused")
      yield* Fiber.join(closing)
      // every env created was closed, exactly once
      expect(server.counters.created).toBe(7)
      expect(server.counters.open).toBe(0)
      for (const [, count] of server.counters.closedIds) expect(count).toBe(1)
      expect(server.stats).toMatchObject({ trajectoriesInFlight: 0, requestsInFlight: 0, completed: 3, cancelled: 4 })
      // the short request completed; the long one got its finished group, then the server's last word
      expect(yield* eventually(() => short.ended && long.ended)).toBe(true)
      expect(short.lines.map((l) => l.end_reason)).toEqual(["done", "done"])
      expect(long.lines.length).toBe(2)
      expect(long.lines[0]).toMatchObject({ row: 0, end_reason: "done" })
      expect(long.lines[1]).toEqual({
        server_error: {
          type: "shutting_down",
          message: "the server is shutting down: 3 trajectories of this request were cut after the grace period"
        }
      })
      const cut = yield* Fiber.join(batch)
      expect(cut.status).toBe(503)
      expect(errorOf(cut).type).toBe("shutting_down")
    }))
})

describe("many clients", () => {
  it.live("200 concurrent clients each get their own, correct results", () =>
    Effect.gen(function*() {
      const server = yield* start({ latencyMs: 2 })
      const clients = Array.from({ length: 200 }, (_, i) => i)
      const replies = yield* Effect.forEach(
        clients,
        (i) =>
          request(`${server.url}/v1/rollouts`, {
            body: { requests: [{ env_config: { seed: i, size: 5 }, uuid: `client-${i}`, num_generations: 2 }] },
            headers: i % 2 === 0 ? { accept: Api.NDJSON } : {}
          }),
        { concurrency: "unbounded" }
      )
      const local = yield* localRun(clients.map((i) => ({ env_config: { seed: i, size: 5 } })), { numGenerations: 2 })
      for (const i of clients) {
        const reply = replies[i]
        expect(reply.status, `client ${i}`).toBe(200)
        const lines = (i % 2 === 0 ? linesOf(reply.text) : JSON.parse(reply.text) as Array<Record<string, unknown>>)
          .map((l) => Schema.decodeUnknownSync(Api.RolloutResult)(l))
          .sort((a, b) => a.generation - b.generation)
        expect(lines.map((l) => l.uuid)).toEqual([`client-${i}`, `client-${i}`])
        // every client's rows are row 0 of its own batch: compare with a local run of that row
        const expected = local.filter((l) => l.row === i).map((l) => ({ ...l, row: 0, id: `r0-g${l.generation}` }))
        expect(lines.map((l) => stripUuid(withoutTimings(l)))).toEqual(expected)
      }
      expect(server.stats).toMatchObject({ admitted: 400, completed: 400, cancelled: 0, trajectoriesInFlight: 0 })
      expect(server.counters.created).toBe(0)
    }))
})

describe("GET /info and /health", () => {
  it.live("say what runs here and the limits", () =>
    Effect.gen(function*() {
      const server = yield* start({ maxTrajectoriesInFlight: 32, maxRequestTrajectories: 8, maxBodyBytes: 4096, shutdownGrace: "2 seconds", numGenerations: 4, info: { version: "9.9.9", mode: "scripted" } })
      const info = Schema.decodeUnknownSync(Api.Info)(JSON.parse((yield* request(`${server.url}/info`)).text))
      expect(info).toMatchObject({
        name: "effect-gym",
        version: "9.9.9",
        inference: { mode: "scripted", model: null, backend: "policy frozen-lake-solver" },
        scheduler: "gym_scheduler",
        default_env: "frozen_lake",
        reward_columns: [{ name: "gym_reward", weight: 1 }],
        defaults: { num_generations: 4, max_turns: 10, seed: 0, sampling: {} },
        limits: { max_trajectories_in_flight: 32, max_request_trajectories: 8, max_body_bytes: 4096, shutdown_grace_seconds: 2 },
        auth: false,
        in_flight: { trajectories: 0, requests: 0 }
      })
      expect(info.envs.map((e) => e.name)).toEqual(["frozen_lake", "sudoku", "calculator", "kv_store", "counting"])
      expect(info.reward_functions.map((e) => e.name)).toEqual(["format"])
      const health = yield* request(`${server.url}/health`)
      expect(Schema.decodeUnknownSync(Api.Health)(JSON.parse(health.text))).toEqual({ status: "ok", trajectories_in_flight: 0 })
      // the reference's trainer checks GET /health/
      expect((yield* request(`${server.url}/health/`)).status).toBe(200)
    }))

  it.effect("bad settings fail before the server starts, naming the option", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[Partial<RolloutServer.ServeOptions>, string]> = [
        [{ maxRequestTrajectories: 10, maxTrajectoriesInFlight: 4 }, "--max-request-trajectories: 10 is more than --concurrency (4)"],
        [{ maxTrajectoriesInFlight: 0 }, "--concurrency: must be a whole number >= 1"],
        [{ maxBodyBytes: 0 }, "--max-body: must be a whole number >= 1"],
        [{ numGenerations: 0 }, "--num-generations: must be a whole number >= 1"],
        [{ sampling: { topP: 3 } }, "--top-p: must be a number in (0, 1]"],
        [{ defaultEnv: "ghost" }, "unknown env \"ghost\""]
      ]
      for (const [options, message] of cases) {
        const exit = yield* Effect.exit(Effect.scoped(RolloutServer.serve({
          registry: Builtins.registry,
          
          port: 0,
          ...options
        }).pipe(Effect.provideService(Inference.Inference, { name: "none", chat: () => Effect.die("unused") }))))
        expect(Exit.isFailure(exit), message).toBe(true)
        if (Exit.isFailure(exit)) expect(String(exit.cause), message).toContain(message)
      }
    }))
})
