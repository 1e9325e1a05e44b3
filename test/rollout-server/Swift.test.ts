/**
 * ms-swift's GRPO trainer against `effect-gym serve --mode swift-rollout`: a replay of the trainer's
 * HTTP calls (SwiftReplay.ts, built from ms-swift's client code) through effect-gym to a fake
 * `swift rollout` backend (FakeSwift.ts); the control endpoints without a backend; the failure
 * policy of `/infer/`; every RequestConfig field honoured or refused; the policy version.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Redacted, Schema } from "effect"
import * as Summary from "../../src/Summary.js"
import * as SwiftRollout from "../../src/inference/SwiftRollout.js"
import { cli, healthy } from "../cli.js"
import { freePort } from "../openenv/helpers.js"
import * as FakeSwift from "./FakeSwift.js"
import { Api, errorOf, request, resultsOf, start } from "./helpers.js"
import * as Replay from "./SwiftReplay.js"

const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: false })

/** The swift-rollout service and control on a fake backend, for `start` (the in-process server helper). */
const swiftBackend = (url: string, options: Partial<SwiftRollout.Options> = {}) =>
  SwiftRollout.make({ baseUrl: url, retries: 0, ...options }).pipe(Effect.provide(httpClient), Effect.orDie)

const decodeOutputs = (text: string) => Schema.decodeUnknownSync(Schema.Array(Api.InferOutput))(JSON.parse(text))

describe("ms-swift's trainer against effect-gym serve --mode swift-rollout", () => {
  it.live("the replay of the trainer's calls: control calls forwarded unchanged in order, /infer/ runs whole trajectories", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const server = yield* Effect.forkChild(cli(
        "serve", "--port", String(port), "--env", "frozen_lake", "--mode", "swift-rollout", "--base-url", fake.url,
        "--max-turns", "8", "--retries", "0"
      ))
      yield* healthy(base)
      const started = fake.state.requests.length // effect-gym's own start-up checks (health, engine type)
      expect(fake.state.requests.map((r) => `${r.method} ${r.path}`)).toEqual(["GET /health/", "POST /get_engine_type/"])

      const config = Replay.trainerRequestConfig(512, 0.9)
      const step = (n: number) => [
        Replay.inferRequest(`chatcmpl-${n}a`, { env_config: { name: "frozen_lake", seed: 10 + n, size: 4 } }),
        Replay.inferRequest(`chatcmpl-${n}b`, { env_config: { seed: 20 + n } }, { enable_thinking: false })
      ]
      const calls: Array<Replay.Call> = [
        ...Replay.startup(1),
        ...Replay.fullSync(),
        { method: "POST", path: "/infer/", body: Replay.inferBody(step(1), config), from: "VLLMInferClient.infer" },
        ...Replay.fullSync(),
        { method: "POST", path: "/infer/", body: Replay.inferBody(step(2), config), from: "VLLMInferClient.infer" },
        ...Replay.shutdown()
      ]
      const answers: Array<{ call: Replay.Call; status: number; text: string }> = []
      for (const call of calls) {
        const answer = yield* Effect.promise(() => Replay.send(base, call))
        expect(answer.status, `${call.method} ${call.path} (${call.from}): ${answer.text}`).toBe(200)
        answers.push({ call, ...answer })
      }

      // every control call reached the backend as the trainer sent it, in order, and its answer came back as it is
      const controlCalls = calls.filter((c) => c.path !== "/infer/" && c.path !== "/health/" && c.path !== "/get_engine_type/")
      const forwarded = fake.state.requests.slice(started).filter((r) => r.path !== "/infer/")
      expect(forwarded.map((r) => [r.method, r.path, r.body])).toEqual(controlCalls.map((c) => [c.method, c.path, c.body ?? ""]))
      for (const r of forwarded) expect(r.contentType, r.path).toBe(r.body === "" ? undefined : "application/json")
      expect(answers.find((a) => a.call.path === "/get_world_size/")!.text).toBe(JSON.stringify({ world_size: 1 }))
      expect(answers.find((a) => a.call.path === "/init_communicator/")!.text).toBe(
        JSON.stringify({ message: "Request received, initializing communicator" })
      )
      // /get_engine_type/ is this server's: it runs the multi-turn gym loop
      expect(JSON.parse(answers.find((a) => a.call.path === "/get_engine_type/")!.text)).toEqual({
        engine_type: "AsyncLLMEngine",
        enable_multi_turn: true,
        use_gym_env: true,
        enable_lora: false
      })

      // /infer/: one RolloutOutput per request, as the trainer reads them
      const infers = answers.filter((a) => a.call.path === "/infer/").map((a) => decodeOutputs(a.text))
      for (const [n, outputs] of infers.entries()) {
        expect(outputs.map((o) => o.uuid)).toEqual([`chatcmpl-${n + 1}a`, `chatcmpl-${n + 1}b`])
        for (const output of outputs) {
          // the trainer matches outputs by response.id: the request's own uuid
          expect(output.response.id).toBe(output.uuid)
          const replies = output.messages.filter((m) => m.role === "assistant").map((m) => m.content)
          expect(output.messages.at(-1)!.role).toBe("assistant")
          expect(output.rollout_infos).toMatchObject({ total_reward: 1, num_turns: replies.length, end_reason: "done", error: null })
          // the backend's sampled tokens per turn (the reply and its end-of-turn token), masks, logprobs
          expect(output.response_token_ids).toEqual(replies.map((r) => FakeSwift.bytes(r + FakeSwift.END)))
          expect(output.response_loss_mask).toEqual(output.response_token_ids.map((ids) => ids.map(() => 1)))
          expect(output.rollout_logprobs).toEqual(output.response_token_ids.map((ids) => ids.map((_, i) => -(i + 1) / 100)))
          // ms-swift keeps rollout_logprobs only when their count is the loss mask's count of ones
          expect(output.rollout_logprobs.flat().length).toBe(output.response_loss_mask.flat().filter((m) => m === 1).length)
          // return_details: the last turn's tokens and its prompt
          expect(output.response.choices[0].token_ids).toEqual(output.response_token_ids.at(-1))
          expect(output.response.prompt_token_ids).toEqual(
            FakeSwift.bytes(FakeSwift.render(output.messages.slice(0, -1), false))
          )
          // the weights of step n are version n (each sync ended with /reset_prefix_cache/)
          expect(output.rollout_infos.policy_versions).toEqual(replies.map(() => n + 1))
        }
      }

      // each turn was one single-turn /infer/ call with the trainer's request_config, as ms-swift's client sends it
      const sent = fake.state.infers
      expect(sent.length).toBe(infers.flat().reduce((n, o) => n + o.rollout_infos.num_turns, 0))
      for (const body of sent) {
        expect((body.infer_requests as Array<unknown>).length).toBe(1)
        expect(body.request_config).toMatchObject({
          max_tokens: 512,
          temperature: 0.9,
          top_k: -1,
          top_p: 1,
          min_p: 0,
          repetition_penalty: 1,
          stop: [],
          logprobs: true,
          return_details: true,
          n: 1,
          stream: false
        })
      }
      // the request's chat_template_kwargs reached its calls, not the other request's
      const kwargs = sent.map((b) => (b.infer_requests as Array<{ chat_template_kwargs: unknown }>)[0].chat_template_kwargs)
      expect(kwargs).toContainEqual({ enable_thinking: false })
      expect(kwargs).toContainEqual({})

      const info = Schema.decodeUnknownSync(Api.Info)(JSON.parse((yield* request(`${base}/info`)).text))
      expect(info.policy).toMatchObject({ version: 2, versioned: true })
      yield* Fiber.interrupt(server)
    }).pipe(Effect.scoped))

  it.live("a LoRA sync: /get_model_state_keys/ and the adapter update are forwarded; enable_lora is the backend's", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      fake.state.enableLora = true
      const swift = yield* swiftBackend(fake.url)
      const server = yield* start({ policy: swift.service, control: swift.control })
      const before = fake.state.requests.length
      const engine = yield* request(`${server.url}/get_engine_type/`, { method: "POST" })
      expect(JSON.parse(engine.text)).toMatchObject({ enable_multi_turn: true, use_gym_env: true, enable_lora: true })
      for (const call of Replay.loraSync()) {
        const answer = yield* Effect.promise(() => Replay.send(server.url, call))
        expect(answer.status, call.path).toBe(200)
      }
      expect(fake.state.requests.slice(before).map((r) => [r.method, r.path, r.body])).toEqual(
        Replay.loraSync().map((c) => [c.method, c.path, c.body ?? ""])
      )
      const keys = yield* request(`${server.url}/get_model_state_keys/`)
      expect(JSON.parse(keys.text)).toEqual({ keys: ["model.embed_tokens.weight", "lm_head.weight"] })
      // an adapter sync ended by the cache reset is a new policy version
      const version = JSON.parse((yield* request(`${server.url}/v1/policy-version`)).text)
      expect(version).toMatchObject({ version: 1, versioned: true })
    }).pipe(Effect.scoped))

  it.live("the backend's answers are passed back as they are; a backend that is gone is a 502 saying so", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url)
      const server = yield* start({ policy: swift.service, control: swift.control })
      const missing = yield* request(`${server.url}/get_world_size/`)
      expect(missing.status).toBe(200)
      fake.state.worldSize = 4
      expect(JSON.parse((yield* request(`${server.url}/get_world_size/`)).text)).toEqual({ world_size: 4 })
      const gone = yield* swiftBackend(fake.url, { checkServer: false, baseUrl: "http://127.0.0.1:1" })
      const orphan = yield* start({ policy: gone.service, control: gone.control })
      const reply = yield* request(`${orphan.url}/init_communicator/`, { body: { host: "0.0.0.0", port: 51216, world_size: 2 } })
      expect(reply.status).toBe(502)
      expect(errorOf(reply)).toMatchObject({ type: "backend_unavailable" })
      expect(errorOf(reply).message).toContain("POST /init_communicator/ could not be forwarded to swift rollout http://127.0.0.1:1")
    }).pipe(Effect.scoped))
})

describe("control endpoints without a swift rollout backend", () => {
  it.live("each answers 501 saying why and what to run instead; /get_engine_type/ answers; the key guards them", () =>
    Effect.gen(function*() {
      const server = yield* start({ info: { mode: "scripted" } })
      for (const call of [...Replay.startup(1).slice(1), ...Replay.fullSync(), ...Replay.loraSync(), ...Replay.shutdown()]) {
        if (call.path === "/get_engine_type/") continue
        const reply = yield* Effect.promise(() => Replay.send(server.url, call))
        expect(reply.status, call.path).toBe(501)
        const error = Schema.decodeUnknownSync(Api.ErrorBody)(JSON.parse(reply.text)).error
        expect(error.type).toBe("not_supported")
        expect(error.message).toContain(`${call.method} ${call.path} is one of the reference rollout server's weight-sync endpoints`)
        expect(error.message).toContain("has no model weights to update")
        expect(error.message).toContain("effect-gym serve --mode swift-rollout --base-url")
      }
      const engine = yield* request(`${server.url}/get_engine_type/`, { method: "POST" })
      expect(JSON.parse(engine.text)).toEqual({ engine_type: "AsyncLLMEngine", enable_multi_turn: true, use_gym_env: true, enable_lora: false })

      const server2 = yield* start({ info: { mode: "server" }, apiKey: Redacted.make("k3y") })
      const refused = yield* request(`${server2.url}/get_world_size/`)
      expect(refused.status).toBe(401)
      const withKey = yield* request(`${server2.url}/get_world_size/`, { headers: { authorization: "Bearer k3y" } })
      expect(withKey.status).toBe(501)
      expect(errorOf(withKey).message).toContain("has no weight-sync endpoints: update its weights yourself")
      expect((yield* request(`${server2.url}/get_engine_type/`, { method: "POST" })).status).toBe(401)
    }))
})

describe("POST /infer/ failures", () => {
  const oneRequest = (uuid: string) => ({
    infer_requests: [{ messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 3 } }, uuid }],
    request_config: { max_tokens: 64 }
  })

  it.live("a transient failure is retried with a fresh env: the trainer gets the trajectory, not a reward-0 sample", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url)
      const server = yield* start({ policy: swift.service, control: swift.control })
      fake.state.dropInfer = 1
      const reply = yield* request(`${server.url}/infer/`, { body: oneRequest("chatcmpl-x") })
      expect(reply.status).toBe(200)
      const [output] = decodeOutputs(reply.text)
      expect(output.rollout_infos).toMatchObject({ total_reward: 1, error: null, end_reason: "done" })
      expect(server.counters.open).toBe(0)
    }).pipe(Effect.scoped))

  it.live("still failing after the retries: a 500 listing each failed uuid and its error; nothing half-done is sent", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url, { maxTransportFailures: 0 })
      const server = yield* start({ policy: swift.service, control: swift.control, inferRetries: 2 })
      fake.state.dropInfer = 1000
      const body = {
        infer_requests: [
          { messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 3 } }, uuid: "chatcmpl-a" },
          { messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { name: "counting" } }, uuid: "chatcmpl-b" }
        ]
      }
      const reply = yield* request(`${server.url}/infer/`, { body })
      expect(reply.status).toBe(500)
      const error = errorOf(reply) as unknown as {
        type: string
        message: string
        failed: Array<{ uuid: string; index: number; attempts: number; error: { _tag: string; reason: string; message: string } }>
      }
      expect(error.type).toBe("trajectories_failed")
      expect(error.message).toContain("2 of 2 trajectories failed (transient failures were retried up to 2 times)")
      expect(error.failed.map((f) => [f.uuid, f.index, f.attempts, f.error._tag, f.error.reason])).toEqual([
        ["chatcmpl-a", 0, 3, "InferenceError", "Transport"],
        ["chatcmpl-b", 1, 3, "InferenceError", "Transport"]
      ])
      // three attempts of two trajectories, each with its own env, all closed
      expect(server.counters.created).toBe(3)
      expect(server.counters.open).toBe(0)
      expect(server.stats).toMatchObject({ trajectoriesInFlight: 0, completed: 2, cancelled: 0 })
    }).pipe(Effect.scoped))

  it.live("a failure that is not transient is not retried; --on-failure zero-reward answers it as before", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url)
      const strict = yield* start({ policy: swift.service, control: swift.control })
      fake.state.failInfer = [{ status: 400, body: JSON.stringify({ detail: "bad regex" }) }]
      const reply = yield* request(`${strict.url}/infer/`, { body: oneRequest("chatcmpl-r") })
      expect(reply.status).toBe(500)
      const failed = (errorOf(reply) as unknown as { failed: Array<{ attempts: number; error: { message: string } }> }).failed
      expect(failed.map((f) => f.attempts)).toEqual([1])
      expect(failed[0].error.message).toContain("bad regex")

      const lenient = yield* start({ policy: swift.service, control: swift.control, onFailure: "zero-reward" })
      fake.state.failInfer = [{ status: 400, body: JSON.stringify({ detail: "bad regex" }) }]
      const zero = yield* request(`${lenient.url}/infer/`, { body: oneRequest("chatcmpl-z") })
      expect(zero.status).toBe(200)
      const [output] = decodeOutputs(zero.text)
      expect(output.rollout_infos).toMatchObject({ total_reward: 0, end_reason: "error", num_turns: 0 })
      expect(output.rollout_infos.error?.message).toContain("bad regex")
    }).pipe(Effect.scoped))
})

describe("POST /infer/ RequestConfig: every field honoured or refused", () => {
  const body = (requestConfig: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    infer_requests: [{ messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 1 } }, ...extra }],
    request_config: requestConfig,
    ...(extra.adapter_request === undefined ? {} : { adapter_request: extra.adapter_request })
  })

  it.live("a scripted backend: the trainer's defaults pass; what it cannot honour is a 400 naming the field", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const defaults = JSON.parse(Replay.pyJson(Replay.trainerRequestConfig(512, 0.9))) as Record<string, unknown>
      expect((yield* request(`${server.url}/infer/`, { body: body(defaults) })).status).toBe(200)
      expect((yield* request(`${server.url}/infer/`, { body: body({ top_k: 0 }) })).status).toBe(200)
      const refused: ReadonlyArray<[Record<string, unknown>, Record<string, unknown>, string, string]> = [
        [{ min_p: 0.05 }, {}, "request_config.min_p", "not supported by this server's inference backend (policy frozen-lake-solver)"],
        [{ repetition_penalty: 1.1 }, {}, "request_config.repetition_penalty", "not supported"],
        [{ structured_outputs_regex: "<action>(up|down)</action>" }, {}, "request_config.structured_outputs_regex", "not supported"],
        [{ prompt_logprobs: 1 }, {}, "request_config.prompt_logprobs", "a multi-turn rollout has no single prompt"],
        [{ top_logprobs: 5 }, {}, "request_config.top_logprobs", "top_logprobs is not supported"],
        [{ min_p: 1.5 }, {}, "request_config.min_p", "must be a number in [0, 1]"],
        [{ repetition_penalty: 0 }, {}, "request_config.repetition_penalty", "must be a number > 0"],
        [{}, { chat_template_kwargs: { enable_thinking: false } }, "infer_requests[0].chat_template_kwargs", "not supported"],
        [{}, { adapter_request: { name: "lora", path: "/x" } }, "adapter_request", "LoRA adapter requests are not supported"]
      ]
      for (const [config, extra, path, message] of refused) {
        const reply = yield* request(`${server.url}/infer/`, { body: body(config, extra) })
        expect(reply.status, path).toBe(400)
        expect(errorOf(reply).path).toBe(path)
        expect(errorOf(reply).message).toContain(message)
      }
      expect(server.counters.created).toBe(0)
    }))

  it.live("a swift rollout backend honours them all: they reach its request_config", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url)
      const server = yield* start({ policy: swift.service, control: swift.control })
      const config = { min_p: 0.05, repetition_penalty: 1.1, structured_outputs_regex: "<action>\\w+</action>", top_k: 20, max_tokens: 64, seed: 5 }
      const reply = yield* request(`${server.url}/infer/`, { body: body(config, { chat_template_kwargs: { enable_thinking: false } }) })
      expect(reply.status).toBe(200)
      for (const sent of fake.state.infers) {
        expect(sent.request_config).toMatchObject({ min_p: 0.05, repetition_penalty: 1.1, structured_outputs_regex: "<action>\\w+</action>", top_k: 20, max_tokens: 64 })
        expect((sent.infer_requests as Array<Record<string, unknown>>)[0].chat_template_kwargs).toEqual({ enable_thinking: false })
      }
      // return_details absent: the reference's default (false) gives no token ids in response
      const [output] = decodeOutputs(reply.text)
      expect(output.response.choices[0].token_ids).toBeNull()
      expect(output.response_token_ids.length).toBe(output.rollout_infos.num_turns)
    }).pipe(Effect.scoped))
})

describe("swift-rollout mode's token sequence", () => {
  it.live("each prompt the backend renders continues the previous tokens: one sequence; a template that re-renders earlier turns says why not", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const swift = yield* swiftBackend(fake.url)
      const server = yield* start({ policy: swift.service, control: swift.control })
      const batch = { requests: [{ env_config: { seed: 3, size: 5 } }] }
      const [line] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: batch }))
      expect(line.rollout_infos.num_turns).toBeGreaterThan(1)
      expect(line.prompt_token_ids).toEqual(FakeSwift.bytes(FakeSwift.render(line.messages.slice(0, 2), false)))
      expect([...line.prompt_token_ids!, ...line.token_ids!]).toEqual(
        FakeSwift.bytes(FakeSwift.render(line.messages, false).replace(/<\|im_start\|>assistant\n$/, ""))
          .slice(0, line.prompt_token_ids!.length + line.token_ids!.length)
      )
      expect(line.loss_mask!.filter((m) => m === 1).length).toBe(line.response_token_ids!.flat().length)

      fake.state.dropEarlierReplies = true
      const [broken] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: batch }))
      expect(broken.token_ids).toBeNull()
      expect(broken.token_ids_unavailable).toContain("turn 2's prompt differs from the previous tokens at token")
      expect(broken.token_ids_unavailable).toContain("token 0 of the previous reply (the template renders it differently")
      // each turn still has its own sampled tokens
      expect(broken.response_token_ids!.every((ids) => ids !== null)).toBe(true)
    }).pipe(Effect.scoped))
})

describe("--mode swift-rollout at start", () => {
  it.live("no backend, a multi-turn backend, options of other modes: exit code 2 with the reason", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSwift.make
      const dead = yield* cli("serve", "--port", "0", "--mode", "swift-rollout", "--base-url", "http://127.0.0.1:1")
      expect(dead.code).toBe(2)
      expect(dead.stderr).toContain("cannot reach the swift rollout server at http://127.0.0.1:1")
      fake.state.enableMultiTurn = true
      const multi = yield* cli("serve", "--port", "0", "--mode", "swift-rollout", "--base-url", fake.url)
      expect(multi.code).toBe(2)
      expect(multi.stderr).toContain("runs its own multi-turn scheduler (--multi_turn_scheduler)")
      const cases: ReadonlyArray<[Array<string>, string]> = [
        [["--model", "m"], "--model: only with --mode server"],
        [["--tokenizer", "/x"], "--tokenizer: only with --mode server"],
        [["--strict-openai"], "--strict-openai: only with --mode server"],
        [["--context-size", "9"], "--context-size: only with --mode colocate"],
        [["--on-failure", "zero-reward", "--infer-retries", "3"], "--infer-retries: only with --on-failure retry"]
      ]
      for (const [extra, message] of cases) {
        const result = yield* cli("serve", "--port", "0", "--mode", "swift-rollout", "--base-url", fake.url, ...extra)
        expect(result.stderr, extra.join(" ")).toContain(message)
        expect(result.code).toBe(2)
      }
      const missing = yield* cli("serve", "--port", "0", "--mode", "swift-rollout")
      expect(missing.stderr).toContain("--base-url: required with --mode swift-rollout")
    }).pipe(Effect.scoped))
})

describe("policy version", () => {
  it.live("POST /v1/policy-version sets it; every turn records the version it was sampled with; /info counts them", () =>
    Effect.gen(function*() {
      const server = yield* start()
      // not versioned until a version is set: lines have no policy_versions
      const [before] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { seed: 3 } }] } }))
      expect(before.policy_versions).toBeUndefined()
      const set = yield* request(`${server.url}/v1/policy-version`, { body: { version: 7 } })
      expect(JSON.parse(set.text)).toEqual({ version: 7, previous: 0 })
      const [after] = resultsOf(yield* request(`${server.url}/v1/rollouts`, { body: { requests: [{ env_config: { seed: 3 } }] } }))
      expect(after.policy_versions).toEqual(after.finish_reasons.map(() => 7))
      const infer = decodeOutputs((yield* request(`${server.url}/infer/`, {
        body: { infer_requests: [{ messages: [{ role: "user", content: "<placeholder>" }], data_dict: { env_config: { seed: 3 } } }] }
      })).text)
      expect(infer[0].rollout_infos.policy_versions).toEqual(after.policy_versions)
      const info = Schema.decodeUnknownSync(Api.Info)(JSON.parse((yield* request(`${server.url}/info`)).text))
      expect(info.policy).toMatchObject({ version: 7, versioned: true, turns_by_version: { 7: after.finish_reasons.length * 2 } })
      for (const bad of [{ version: -1 }, { version: 1.5 }, { version: "2" }, {}, { version: 1, extra: true }]) {
        const reply = yield* request(`${server.url}/v1/policy-version`, { body: bad })
        expect(reply.status, JSON.stringify(bad)).toBe(400)
      }
    }))

  it("the run summary reports the versions its turns were sampled with", () => {
    const acc = new Summary.Accumulator()
    const counts: Record<string, number> = {}
    Summary.countPolicyVersions(counts, [{ policyVersion: 3 }, { policyVersion: 3 }, { policyVersion: 4 }, {}])
    expect(counts).toEqual({ 3: 2, 4: 1 })
    expect(acc.summary(1).policyVersions).toBeUndefined()
    Object.assign(acc.policyVersions, counts)
    const summary = acc.summary(1)
    expect(summary.policyVersions).toEqual({ 3: 2, 4: 1 })
    expect(Summary.format(summary)).toContain("policy         versions 3-4 (turns: v3 2, v4 1)")
  })
})
