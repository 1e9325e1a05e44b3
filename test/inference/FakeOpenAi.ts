/**
 * An OpenAI-compatible chat-completions server for the tests, on loopback at a random free port.
 *
 * It answers like a FrozenLake-playing model (a shortest safe move for the grid in the last user
 * message, `<action>dir</action>`), with token-level output in the style of the server it imitates
 * (`flavor`), and injects faults taken in arrival order from `faults`: HTTP statuses with bodies and
 * headers, delays, dropped connections, malformed JSON, responses without choices. It counts
 * requests in flight (and the most at once) and records every request.
 *
 * Token ids are the UTF-8 bytes of the reply (a byte-level vocabulary), so a test can check them
 * against the text; the logprob of the i-th token is `-(i + 1) / 100`.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer, NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import type * as Scope from "effect/Scope"
import { createServer } from "node:http"
import { parseGrid, planMove } from "../../src/inference/Scripted.js"

export type Fault =
  | { readonly kind: "status"; readonly status: number; readonly body?: string; readonly headers?: Record<string, string> }
  | { readonly kind: "delay"; readonly ms: number }
  | { readonly kind: "drop" }
  | { readonly kind: "malformed" }
  | { readonly kind: "noChoice" }
  | { readonly kind: "wrongShape" }

/** How token-level output is shaped: vLLM, llama-server, Ollama, a server without logprobs. */
export type Flavor = "vllm" | "vllm-token-strings" | "llamacpp" | "ollama" | "plain"

export interface Recorded {
  readonly body: Record<string, unknown>
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly at: number
}

export class FakeServerState {
  flavor: Flavor = "vllm"
  /** Added to every request (on top of any delay fault). */
  latencyMs = 0
  readonly faults: Array<Fault> = []
  readonly requests: Array<Recorded> = []
  inFlight = 0
  maxInFlight = 0
  /** The reply text for a request; by default the FrozenLake move. */
  reply: (body: Record<string, unknown>) => string = frozenLakeReply
}

const lastUser = (body: Record<string, unknown>): string => {
  const messages = Array.isArray(body.messages) ? (body.messages as Array<{ role: string; content: string }>) : []
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") return messages[i].content
  return ""
}

export const frozenLakeReply = (body: Record<string, unknown>): string => {
  const grid = parseGrid(lastUser(body))
  const move = grid === undefined ? undefined : planMove(grid)
  return `<action>${move ?? "up"}</action>`
}

/** The fake tokenizer: one token per UTF-8 byte. */
export const bytes = (text: string): Array<number> => Array.from(new TextEncoder().encode(text))

/** The fake logprobs of a completion's tokens: -0.01, -0.02, ... */
const logprobsOf = (ids: ReadonlyArray<number>): Array<number> => ids.map((_, i) => -(i + 1) / 100)

/** What this server sends for each reply, as the completions log keeps it (per turn). */
export const expectedTokens = (replies: ReadonlyArray<string>) => ({
  ids: replies.map(bytes),
  mask: replies.map((r) => bytes(r).map(() => 1)),
  logprobs: replies.map((r) => logprobsOf(bytes(r)))
})

const completion = (state: FakeServerState, body: Record<string, unknown>): Record<string, unknown> => {
  let ids = bytes(state.reply(body))
  let finish = "stop"
  const maxTokens = typeof body.max_tokens === "number" ? body.max_tokens : undefined
  if (maxTokens !== undefined && ids.length > maxTokens) {
    ids = ids.slice(0, maxTokens)
    finish = "length"
  }
  const text = new TextDecoder().decode(new Uint8Array(ids))
  const logprobs = logprobsOf(ids)
  const choice: Record<string, unknown> = {
    index: 0,
    message: { role: "assistant", content: text },
    finish_reason: finish
  }
  const wantsLogprobs = body.logprobs === true && state.flavor !== "plain"
  if (wantsLogprobs) {
    choice.logprobs = {
      content: ids.map((id, i) => {
        const token = state.flavor === "vllm-token-strings" ? `token_id:${id}` : String.fromCharCode(id)
        const entry: Record<string, unknown> = { token, logprob: logprobs[i], bytes: [id], top_logprobs: [] }
        if (state.flavor === "llamacpp") entry.id = id
        return entry
      })
    }
  }
  const response: Record<string, unknown> = {
    id: `chatcmpl-${state.requests.length}`,
    object: "chat.completion",
    model: body.model,
    choices: [choice],
    usage: { prompt_tokens: 7, completion_tokens: ids.length, total_tokens: 7 + ids.length }
  }
  if (state.flavor === "vllm" && body.return_token_ids === true) {
    choice.token_ids = ids
    response.prompt_token_ids = bytes(lastUser(body))
  }
  return response
}

const json = (value: unknown, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(JSON.stringify(value), { status, contentType: "application/json", headers })

const app = (state: FakeServerState) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (request.method !== "POST" || !request.url.endsWith("/v1/chat/completions")) {
      return json({ error: { message: `no route ${request.method} ${request.url}`, type: "not_found" } }, 404)
    }
    const body = (yield* Effect.orDie(request.json)) as Record<string, unknown>
    state.requests.push({ body, headers: request.headers, at: performance.now() })
    state.inFlight++
    state.maxInFlight = Math.max(state.maxInFlight, state.inFlight)
    return yield* Effect.gen(function*() {
      if (state.latencyMs > 0) yield* Effect.sleep(state.latencyMs)
      let fault = state.faults.shift()
      while (fault?.kind === "delay") {
        yield* Effect.sleep(fault.ms)
        fault = state.faults.shift()
      }
      switch (fault?.kind) {
        case undefined:
          return json(completion(state, body))
        case "status":
          return HttpServerResponse.text(fault.body ?? "", {
            status: fault.status,
            contentType: "application/json",
            headers: fault.headers ?? {}
          })
        case "drop": {
          NodeHttpServerRequest.toIncomingMessage(request).socket.destroy()
          return HttpServerResponse.empty()
        }
        case "malformed":
          return HttpServerResponse.text("{\"choices\": [{\"message\": ", { contentType: "application/json" })
        case "noChoice":
          return json({ id: "x", object: "chat.completion", choices: [] })
        case "wrongShape":
          return json({ choices: [{ message: { content: 42 } }] })
      }
    }).pipe(Effect.ensuring(Effect.sync(() => state.inFlight--)))
  })

/** Starts the server in the current scope; `baseUrl` ends in `/v1`. */
export const make: Effect.Effect<{ readonly state: FakeServerState; readonly baseUrl: string }, never, Scope.Scope> =
  Effect.gen(function*() {
    const state = new FakeServerState()
    const server = yield* Effect.orDie(NodeHttpServer.make(() => createServer(), { port: 0, host: "127.0.0.1" }))
    yield* server.serve(app(state))
    const address = server.address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    return { state, baseUrl: `http://127.0.0.1:${address.port}/v1` }
  })
