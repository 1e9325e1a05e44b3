/** Starts rollout servers on loopback for tests and talks to them with plain HTTP. */
import { Effect, Schema } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"
import * as Builtins from "../../src/Builtins.js"
import * as Inference from "../../src/Inference.js"
import { frozenLakeSolver, random } from "../../src/inference/Scripted.js"
import * as Registry from "../../src/Registry.js"
import * as Api from "../../src/rollout-server/Api.js"
import * as RolloutServer from "../../src/rollout-server/RolloutServer.js"
import { countingEnv, Counters } from "../helpers.js"

export { Api, Counters, RolloutServer }

export type Policy = "solver" | "random"

/**
 * A server with the built-ins plus a `counting` env (every env created and closed is counted), a
 * scripted policy with an optional latency per call, on a free port, for the current scope.
 */
export const start = (
  options: Partial<RolloutServer.ServeOptions> & {
    readonly policy?: Policy | Inference.Service | undefined
    readonly latencyMs?: number | undefined
  } = {}
) =>
  Effect.gen(function*() {
    const counters = new Counters()
    const inference = typeof options.policy === "object"
      ? options.policy
      : yield* Effect.orDie((options.policy === "random" ? random : frozenLakeSolver).make({ latency_ms: options.latencyMs ?? 0 }))
    const running = yield* RolloutServer.serve({
      registry: Registry.add(Builtins.registry, { envs: [countingEnv(counters)] }),
      
      defaultEnv: "frozen_lake",
      port: 0,
      ...options
    }).pipe(Effect.provideService(Inference.Inference, inference), Effect.orDie)
    return { ...running, counters }
  })

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
}

/** One HTTP request with fetch; the body is sent as is when it is a string, else as JSON. */
export const request = (
  url: string,
  options: { readonly method?: string; readonly body?: unknown; readonly headers?: Record<string, string> } = {}
): Effect.Effect<Reply> =>
  // Interrupting the request aborts it: the server sees a client that went away.
  Effect.promise(async (signal) => {
    const body = options.body === undefined
      ? undefined
      : typeof options.body === "string" || options.body instanceof Uint8Array
      ? options.body
      : JSON.stringify(options.body)
    const init: RequestInit = {
      signal,
      method: options.method ?? (body === undefined ? "GET" : "POST"),
      headers: { "content-type": "application/json", ...options.headers }
    }
    if (body !== undefined) init.body = body
    const response = await fetch(url, init)
    return { status: response.status, headers: response.headers, text: await response.text() }
  })

export const errorOf = (reply: Reply) => Schema.decodeUnknownSync(Api.ErrorBody)(JSON.parse(reply.text)).error

export const resultsOf = (reply: Reply) => Schema.decodeUnknownSync(Schema.Array(Api.RolloutResult))(JSON.parse(reply.text))

/** The lines of an NDJSON body, parsed. */
export const linesOf = (text: string): Array<Record<string, unknown>> =>
  text.split("\n").filter((line) => line.trim() !== "").map((line) => JSON.parse(line) as Record<string, unknown>)

export { eventually, withoutTimings } from "../helpers.js"


/**
 * A streaming request with node:http that can be cut: `lines` fills as lines arrive; `cut()`
 * destroys the connection (a client that goes away).
 */
export const openStream = (url: string, body: unknown): Effect.Effect<StreamHandle, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const handle: StreamHandle = {
        lines: [],
        status: undefined,
        ended: false,
        error: undefined,
        cut: () => req.destroy()
      }
      const req = Http.request(url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: Api.NDJSON }
      }, (res) => {
        handle.status = res.statusCode
        let buffer = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          buffer += chunk
          let newline = buffer.indexOf("\n")
          while (newline >= 0) {
            const line = buffer.slice(0, newline)
            buffer = buffer.slice(newline + 1)
            if (line.trim() !== "") handle.lines.push(JSON.parse(line) as Record<string, unknown>)
            newline = buffer.indexOf("\n")
          }
        })
        res.on("end", () => void (handle.ended = true))
        res.on("error", (error) => void (handle.error = error))
      })
      req.on("error", (error) => void (handle.error = error))
      req.end(JSON.stringify(body))
      return handle
    }),
    (handle) => Effect.sync(() => handle.cut())
  )

export interface StreamHandle {
  readonly lines: Array<Record<string, unknown>>
  status: number | undefined
  ended: boolean
  error: Error | undefined
  readonly cut: () => void
}
