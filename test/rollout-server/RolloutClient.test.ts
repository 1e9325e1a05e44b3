/**
 * RolloutClient against the real server (results, typed errors, interruption) and against a
 * scripted HTTP server (the failures a real server should never produce: bad lines, cut streams).
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Duration, Effect, Exit, Fiber, Option, Redacted, Scope, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as RolloutClient from "../../src/rollout-server/RolloutClient.js"
import { Api, eventually, start, withoutTimings } from "./helpers.js"

const client = (options: RolloutClient.Options) =>
  RolloutClient.make(options).pipe(Effect.provide(NodeHttpClient.layerNodeHttp))

const failure = <A>(exit: Exit.Exit<A, RolloutClient.RolloutClientError>) => {
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
  if (error === undefined) throw new Error(`expected a typed failure, got ${String(exit.cause)}`)
  return error
}

describe("RolloutClient against the server", () => {
  it.live("streams decoded results; run gives the same in row order; info, health and infer decode", () =>
    Effect.gen(function*() {
      const server = yield* start()
      const rollouts = yield* client({ baseUrl: `${server.url}/` })
      const batch = { requests: [{ env_config: { seed: 1 }, num_generations: 2, uuid: "a" }, { env_config: { seed: 2 }, uuid: "b" }] }
      const streamed = yield* Stream.runCollect(rollouts.stream(batch))
      expect(streamed.length).toBe(3)
      const all = yield* rollouts.run(batch)
      expect(all.map((r) => [r.row, r.generation, r.uuid])).toEqual([[0, 0, "a"], [0, 1, "a"], [1, 0, "b"]])
      const key = (r: Api.RolloutResult) => `${r.row}-${r.generation}`
      expect([...streamed].sort((a, b) => key(a).localeCompare(key(b))).map(withoutTimings)).toEqual(all.map(withoutTimings))
      expect((yield* rollouts.info).default_env).toBe("frozen_lake")
      expect(yield* rollouts.health).toEqual({ status: "ok", trajectories_in_flight: 0 })
      const outputs = yield* rollouts.infer({ infer_requests: [{ messages: [], data_dict: { env_config: { seed: 1 } }, uuid: "i" }] })
      expect(outputs[0].messages).toEqual(all[0].messages)
      // the accessor form, with the client as a layer
      const viaLayer = yield* RolloutClient.stream({ requests: [{ env_config: { seed: 1 } }] }).pipe(
        Stream.runCollect,
        Effect.provide(RolloutClient.layer({ baseUrl: server.url })),
        Effect.provide(NodeHttpClient.layerNodeHttp)
      )
      expect(viaLayer.length).toBe(1)
    }))

  it.live("errors are typed: the status with the server's error object, the key, a connection refused", () =>
    Effect.gen(function*() {
      const server = yield* start({ apiKey: Redacted.make("k3y") })
      const keyed = yield* client({ baseUrl: server.url, apiKey: Redacted.make("k3y") })
      const bad = failure(yield* Effect.exit(keyed.run({ requests: [{ env_config: { name: "ghost" } }] })))
      expect(bad).toMatchObject({ reason: "Status", status: 400, body: { type: "invalid_request", path: "requests[0].env_config.name" } })
      expect(bad.message).toContain("rollout server: Status (HTTP 400): requests[0].env_config.name: unknown env \"ghost\"")
      const streamBad = failure(yield* Effect.exit(Stream.runCollect(keyed.stream({ requests: [{ max_turns: 0 }] }))))
      expect(streamBad).toMatchObject({ reason: "Status", status: 400, body: { path: "requests[0].max_turns" } })
      const anonymous = yield* client({ baseUrl: server.url })
      expect(failure(yield* Effect.exit(anonymous.info))).toMatchObject({ reason: "Status", status: 401, body: { type: "unauthorized" } })
      expect((yield* keyed.info).auth).toBe(true)
      const nowhere = yield* client({ baseUrl: "http://127.0.0.1:9" })
      expect(failure(yield* Effect.exit(nowhere.health))).toMatchObject({ reason: "Transport" })
    }))

  it.live("interrupting the stream closes the connection: the server cancels the trajectories and closes their envs", () =>
    Effect.gen(function*() {
      const server = yield* start({ policy: "random", latencyMs: 5 })
      const rollouts = yield* client({ baseUrl: server.url })
      const first = yield* rollouts.stream({
        requests: [
          { env_config: { name: "counting", length: 1 } },
          { env_config: { name: "counting", length: 100000 }, num_generations: 3, max_turns: 10000 }
        ]
      }).pipe(Stream.take(1), Stream.runCollect)
      expect(first.length).toBe(1)
      expect(yield* eventually(() => server.counters.created === 4 && server.counters.open === 0)).toBe(true)
      expect(yield* eventually(() => server.stats.trajectoriesInFlight === 0)).toBe(true)
      expect(server.stats).toMatchObject({ completed: 1, cancelled: 3 })
    }))

  it.live("a stream the server cuts at shutdown fails with ServerError after the results that finished", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      const server = yield* Scope.provide(start({ policy: "random", latencyMs: 5, shutdownGrace: "50 millis" }), scope)
      const rollouts = yield* client({ baseUrl: server.url })
      const received: Array<Api.RolloutResult> = []
      const fiber = yield* rollouts.stream({
        requests: [
          { env_config: { name: "counting", length: 1 } },
          { env_config: { name: "counting", length: 100000 }, max_turns: 10000 }
        ]
      }).pipe(Stream.runForEach((r) => Effect.sync(() => received.push(r))), Effect.exit, Effect.forkChild)
      expect(yield* eventually(() => received.length === 1 && server.counters.created === 2)).toBe(true)
      yield* Scope.close(scope, Exit.void)
      const error = failure(yield* Fiber.join(fiber))
      expect(error).toMatchObject({ reason: "ServerError", body: { type: "shutting_down" } })
      expect(error.detail).toContain("1 trajectories of this request were cut")
      expect(server.counters.open).toBe(0)
    }))
})

/** A server that answers every request with the next scripted reply. */
const scripted = (replies: Array<(res: http.ServerResponse) => void>) =>
  Effect.acquireRelease(
    Effect.callback<http.Server & { url: string }>((resume) => {
      const server = http.createServer((req, res) => {
        req.resume()
        req.on("end", () => (replies.shift() ?? ((r) => r.writeHead(500).end()))(res))
      })
      server.listen(0, "127.0.0.1", () => {
        resume(Effect.succeed(Object.assign(server, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })))
      })
    }),
    (server) =>
      Effect.callback<void>((resume) => {
        server.close(() => resume(Effect.void))
      })
  )

const line = (uuid: string) =>
  JSON.stringify({
    row: 0,
    generation: 0,
    id: "r0-g0",
    env: "x",
    env_config: {},
    messages: [],
    rewards: null,
    reward: null,
    advantage: null,
    rollout_infos: { total_reward: 0, step_rewards: [], num_turns: 0, reset_info: null, step_infos: [] },
    end_reason: "done",
    error: null,
    finish_reasons: [],
    timings: { total_ms: 0, reset_ms: 0, turns: [] },
    uuid
  }) + "\n"

const ndjson = (count: number, body: string, cut = false) => (res: http.ServerResponse) => {
  res.writeHead(200, { "content-type": Api.NDJSON, [Api.TRAJECTORIES_HEADER]: String(count) })
  if (cut) {
    res.write(body)
    setTimeout(() => res.destroy(), 20)
  } else res.end(body)
}

/**
 * Runs `effect` on the TestClock, moving the clock on by each sleep it waits on (a 429's retry
 * delay) once it waits: its exit and those delays, in milliseconds. (The TestClock of Effect 4
 * does not list its sleeps: the clock the effect runs on records each one as it starts.)
 */
const drivingClock = <A, E>(effect: Effect.Effect<A, E>) =>
  TestClock.testClockWith((clock) =>
    Effect.gen(function*() {
      const waiting: Array<number> = []
      const recording: Clock.Clock = {
        ...clock,
        sleep: (duration) => {
          waiting.push(Duration.toMillis(duration))
          return clock.sleep(duration)
        }
      }
      const fiber = yield* Effect.forkChild(Effect.provideService(effect, Clock.Clock, recording))
      const delays: Array<number> = []
      while (true) {
        const exit = fiber.pollUnsafe()
        if (exit !== undefined) return { exit, delays }
        const delay = waiting.shift()
        if (delay !== undefined) {
          delays.push(delay)
          yield* TestClock.adjust(delay)
        } else yield* clock.withLive(Effect.sleep("1 millis")) // the request is on the wire
      }
    })
  )

describe("RolloutClient against a misbehaving server", () => {
  it.effect("429 is retried after the server's hint; bad lines, short and broken streams are typed errors", () =>
    Effect.gen(function*() {
      const at = (status: number, body: unknown) => (res: http.ServerResponse) =>
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))
      const busy = at(429, { error: { type: "at_capacity", message: "busy", retry_after_ms: 30 } })
      const server = yield* scripted([
        busy,
        busy,
        ndjson(2, line("a") + line("b")),
        busy,
        busy,
        busy,
        ndjson(3, line("a") + "{\"row\": \"zero\"}\n"),
        ndjson(1, "not json\n"),
        ndjson(3, line("a")),
        ndjson(3, line("a"), true),
        at(500, "oops")
      ])
      const rollouts = yield* client({ baseUrl: server.url, retries: 2 })
      const batch = { requests: [{}] }
      // two 429s: each retried after the server's hint (30 ms on the TestClock), then the results
      const ok = yield* drivingClock(Stream.runCollect(rollouts.stream(batch)))
      expect(ok.delays).toEqual([30, 30])
      expect((yield* ok.exit).map((r) => r.uuid)).toEqual(["a", "b"])
      // three 429s in a row: two retries, then the error with the hint
      const third = yield* drivingClock(Stream.runCollect(rollouts.stream(batch)))
      expect(third.delays).toEqual([30, 30])
      const gaveUp = failure(third.exit)
      expect(gaveUp).toMatchObject({ reason: "Status", status: 429, retryAfterMs: 30, body: { type: "at_capacity" } })
      const received: Array<string> = []
      const badLine = failure(
        yield* Effect.exit(Stream.runForEach(rollouts.stream(batch), (r) => Effect.sync(() => received.push(r.uuid))))
      )
      expect(received).toEqual(["a"])
      expect(badLine).toMatchObject({ reason: "Malformed", line: 2 })
      expect(badLine.detail).toContain("[\"row\"]")
      expect(failure(yield* Effect.exit(Stream.runCollect(rollouts.stream(batch))))).toMatchObject({ reason: "Malformed", line: 1 })
      const short = failure(yield* Effect.exit(Stream.runCollect(rollouts.stream(batch))))
      expect(short).toMatchObject({ reason: "ConnectionLost", detail: "the stream ended after 1 of 3 results" })
      const broken = failure(yield* Effect.exit(Stream.runCollect(rollouts.stream(batch))))
      expect(broken.reason).toBe("ConnectionLost")
      const plain = failure(yield* Effect.exit(rollouts.run(batch)))
      expect(plain).toMatchObject({ reason: "Status", status: 500, detail: "\"oops\"" })
    }))
})
