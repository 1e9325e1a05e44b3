/**
 * Issue 28's hostile pass (after the merge): /infer/ in server mode never answers without a field the
 * trainer asked for (item 2), whatever field, however often, concurrently.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { cli, healthy } from "../cli.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import { freePort } from "../openenv/helpers.js"
import { request } from "../rollout-server/helpers.js"

const serve = (upstream: { readonly baseUrl: string }, ...extra: Array<string>) =>
  Effect.gen(function*() {
    const port = yield* Effect.promise(freePort)
    const base = `http://127.0.0.1:${port}`
    const server = yield* Effect.forkChild(cli(
      "serve", "--port", String(port), "--env", "frozen_lake", "--mode", "server", "--base-url", upstream.baseUrl,
      "--model", "tiny", "--max-tokens", "32", "--in-process-envs", ...extra
    ))
    yield* healthy(base, {})
    const infer = (requestConfig: Record<string, unknown>) =>
      request(`${base}/infer/`, {
        body: { infer_requests: [{ messages: [], data_dict: { env_config: { seed: 5, size: 5 } } }], request_config: requestConfig }
      })
    return { base, server, infer }
  })

const pathOf = (text: string): unknown => (JSON.parse(text) as { error: { path?: unknown } }).error.path

describe("issue 28 item 2, hostile: /infer/ never answers without a field it was given", () => {
  // A backend's 422 for logprobs dropped it (200, logprobs null); for min_p, repetition_penalty,
  // presence_penalty, stop or top_p the trajectory failed: a zero-reward output (200) or a 500.
  it.live("every sampling field the backend rejects is a 400 naming it, under either --on-failure, every time", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[string, Record<string, unknown>]> = [
        ["logprobs", { logprobs: true }],
        ["min_p", { min_p: 0.1 }],
        ["repetition_penalty", { repetition_penalty: 1.2 }],
        ["presence_penalty", { presence_penalty: 0.5 }],
        ["frequency_penalty", { frequency_penalty: 0.5 }],
        ["stop", { stop: ["x"] }],
        ["top_p", { top_p: 0.5 }],
        ["temperature", { temperature: 0.5 }],
        ["top_k", { top_k: 5 }],
        ["seed", { seed: 3 }]
      ]
      for (const onFailure of ["zero-reward", "retry"]) {
        for (const [field, config] of cases) {
          const upstream = yield* FakeOpenAi.make
          upstream.state.rejectFields.add(field)
          const { infer, server } = yield* serve(upstream, "--seeded-sampling", "--on-failure", onFailure)
          for (let i = 0; i < 2; i++) {
            const reply = yield* infer(config)
            expect(reply.status, `${onFailure} ${field} #${i + 1}: ${reply.text.slice(0, 300)}`).toBe(400)
            expect(pathOf(reply.text), `${onFailure} ${field}`).toBe(`request_config.${field}`)
          }
          if (field === "logprobs") {
            // not asked for: server mode's own default, dropped with its warning as before
            const plain = yield* infer({})
            expect(plain.status, plain.text.slice(0, 400)).toBe(200)
          }
          yield* Fiber.interrupt(server)
        }
      }
    }).pipe(Effect.scoped), 120_000)

  it.live("concurrent requests, and a backend that rejects top_k and then takes it", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeOpenAi.make
      upstream.state.rejectFields.add("top_k")
      const { infer, server } = yield* serve(upstream, "--on-failure", "zero-reward")
      const replies = yield* Effect.all(
        Array.from({ length: 12 }, (_, i) => infer(i % 2 === 0 ? { top_k: 5 } : { temperature: 0.5 })),
        { concurrency: "unbounded" }
      )
      replies.forEach((reply, i) => expect(reply.status, `request ${i}`).toBe(i % 2 === 0 ? 400 : 200))
      upstream.state.rejectFields.delete("top_k")
      const taken = yield* infer({ top_k: 5 })
      expect(taken.status, taken.text.slice(0, 300)).toBe(200)
      expect(upstream.state.requests.at(-1)?.body.top_k).toBe(5)
      yield* Fiber.interrupt(server)
    }).pipe(Effect.scoped))
})
