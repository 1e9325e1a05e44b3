/**
 * An OpenAI-compatible server for the tests, on loopback at a random free port: chat completions,
 * `GET /v1/models`, and (with a `tokenizer`) vLLM's token-level routes: `/v1/completions` with a
 * token-id prompt (`return_token_ids`, `logprobs`) and `/tokenize` (chat messages or a prompt).
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
import { NodeHttpServer, NodeHttpServerRequest } from "@effect/platform-node"
import { Effect, type Scope } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import { createServer } from "node:http"
import { parseGrid, planMove } from "../../src/inference/Scripted.js"

export type Fault =
  | { readonly kind: "status"; readonly status: number; readonly body?: string; readonly headers?: Record<string, string> }
  | { readonly kind: "delay"; readonly ms: number }
  | { readonly kind: "drop" }
  | { readonly kind: "malformed" }
  | { readonly kind: "noChoice" }
  | { readonly kind: "wrongShape" }
  /** Answer normally (to place faults after some good answers). */
  | { readonly kind: "ok" }

/** How token-level output is shaped: vLLM, llama-server, Ollama, a server without logprobs. */
export type Flavor = "vllm" | "vllm-token-strings" | "llamacpp" | "ollama" | "plain"

export interface Recorded {
  readonly body: Record<string, unknown>
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly at: number
  /** The request's URL as the server saw it (path and query). */
  readonly url?: string
}

/** What the fake needs of a real tokenizer for the token-level routes (see `HfTokenizer`). */
export interface FakeTokenizer {
  readonly encode: (text: string) => Array<number>
  readonly decode: (ids: ReadonlyArray<number>) => string
  readonly tokenString: (id: number) => string | undefined
  readonly render: (messages: ReadonlyArray<{ role: string; content: string }>, options: {
    readonly addGenerationPrompt: boolean
    readonly continueFinal?: boolean
    readonly kwargs?: Readonly<Record<string, unknown>>
    /** The request's `tools` (OpenAI's format), as vLLM's /tokenize takes them. */
    readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string; readonly description?: string; readonly parameters?: Record<string, unknown> } }>
  }) => string
  /** The end-of-turn token the "model" samples last. */
  readonly endOfTurn: number
}

export class FakeServerState {
  flavor: Flavor = "vllm"
  /** With a tokenizer, /v1/completions and /tokenize work, and chat responses carry real token ids. */
  tokenizer: FakeTokenizer | undefined = undefined
  /** Request fields this server refuses with a 422 naming them (as `transformers serve` does). */
  readonly rejectFields = new Set<string>()
  /** Routes answered 404 (e.g. `/tokenize`, `/v1/completions`, `/v1/models`). */
  readonly missingRoutes = new Set<string>()
  /** `max_model_len` reported by /v1/models (absent when undefined). */
  maxModelLen: number | undefined = undefined
  /** Requests to the probing routes (/v1/models, /tokenize), kept apart from `requests`. */
  readonly probes: Array<{ readonly path: string; readonly body: unknown }> = []
  /** Added to every request (on top of any delay fault). */
  latencyMs = 0
  readonly faults: Array<Fault> = []
  readonly requests: Array<Recorded> = []
  inFlight = 0
  maxInFlight = 0
  /** The reply text for a request; by default the FrozenLake move. */
  reply: (body: Record<string, unknown>) => string = frozenLakeReply
  /**
   * The reply's `tool_calls` for a chat request (as a server with a tool parser sends them), or
   * `undefined` for none; with calls, `content` is `null` when the reply text is empty.
   */
  toolCalls: (body: Record<string, unknown>) => ReadonlyArray<Record<string, unknown>> | undefined = () => undefined
  /** How /v1/completions samples a reply: one character at a time (the default), or its canonical tokens. */
  sampling: "characters" | "canonical" = "characters"
  /** Every token prompt /v1/completions received, in order. */
  get tokenPrompts(): Array<ReadonlyArray<number>> {
    return this.requests.filter((r) => Array.isArray(r.body.prompt)).map((r) => r.body.prompt as Array<number>)
  }
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

/**
 * How the fake model samples a reply with a real tokenizer: one character at a time (each
 * character's own tokens), then the end-of-turn token. Models do sample such non-canonical splits;
 * re-encoding the text merges them, which is the drift the token path avoids.
 */
export const sampleIds = (tokenizer: FakeTokenizer, text: string): Array<number> =>
  [...Array.from(text).flatMap((ch) => tokenizer.encode(ch)), tokenizer.endOfTurn]

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
  const calls = state.toolCalls(body)
  const choice: Record<string, unknown> = {
    index: 0,
    message: calls === undefined
      ? { role: "assistant", content: text }
      : { role: "assistant", content: text === "" ? null : text, tool_calls: calls },
    finish_reason: calls === undefined ? finish : "tool_calls"
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
  const tokenizer = state.tokenizer
  if (tokenizer !== undefined) {
    // As vLLM: the chat template rendered and tokenized by the server, the reply sampled in tokens.
    const sampled = sampleIds(tokenizer, text).slice(0, maxTokens ?? Infinity)
    const messages = body.messages as Array<{ role: string; content: string }>
    const kwargs = body.chat_template_kwargs as Record<string, unknown> | undefined
    response.prompt_token_ids = tokenizer.encode(
      tokenizer.render(messages, { addGenerationPrompt: true, ...(kwargs === undefined ? {} : { kwargs }) })
    )
    if (body.return_token_ids === true) choice.token_ids = sampled
    if (wantsLogprobs) {
      choice.logprobs = { content: sampled.map((id, i) => ({ token: tokenizer.decode([id]), logprob: logprobs[i] ?? -1 })) }
    }
  }
  return response
}

/** The text that a token prompt holds, its last user turn being what the reply answers. */
const textCompletion = (state: FakeServerState, body: Record<string, unknown>): Record<string, unknown> => {
  const tokenizer = state.tokenizer!
  const prompt = body.prompt as Array<number>
  const text = tokenizer.decode(prompt)
  const users = text.split("<|im_start|>user\n")
  const lastUser = (users.at(-1) ?? "").split("<|im_end|>")[0]
  const reply = state.reply({ messages: [{ role: "user", content: lastUser }], prompt })
  let ids = state.sampling === "canonical" ? [...tokenizer.encode(reply), tokenizer.endOfTurn] : sampleIds(tokenizer, reply)
  let finish = "stop"
  const maxTokens = typeof body.max_tokens === "number" ? body.max_tokens : 16
  if (ids.length > maxTokens) {
    ids = ids.slice(0, maxTokens)
    finish = "length"
  }
  const visible = ids.filter((id) => id !== tokenizer.endOfTurn)
  const choice: Record<string, unknown> = { index: 0, text: tokenizer.decode(visible), finish_reason: finish }
  if (typeof body.logprobs === "number") {
    choice.logprobs = {
      tokens: ids.map((id) => tokenizer.decode([id])),
      token_logprobs: logprobsOf(ids),
      top_logprobs: ids.map(() => ({})),
      text_offset: ids.map(() => 0)
    }
  }
  if (body.return_token_ids === true) {
    choice.token_ids = ids
    choice.prompt_token_ids = prompt
  }
  return {
    id: `cmpl-${state.requests.length}`,
    object: "text_completion",
    model: body.model,
    choices: [choice],
    usage: { prompt_tokens: prompt.length, completion_tokens: ids.length, total_tokens: prompt.length + ids.length }
  }
}

const json = (value: unknown, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(JSON.stringify(value), { status, contentType: "application/json", headers })

const app = (state: FakeServerState) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const route = request.url.split("?")[0]
    const notFound = json({ error: { message: `no route ${request.method} ${request.url}`, type: "not_found" } }, 404)
    if (state.missingRoutes.has(route)) return notFound
    if (request.method === "GET" && route === "/v1/models") {
      state.probes.push({ path: route, body: null })
      const entry: Record<string, unknown> = { id: "tiny", object: "model" }
      if (state.maxModelLen !== undefined) entry.max_model_len = state.maxModelLen
      return json({ object: "list", data: [entry] })
    }
    const tokenRoute = route === "/v1/completions" || route === "/tokenize"
    if (request.method !== "POST" || !(route === "/v1/chat/completions" || (tokenRoute && state.tokenizer))) {
      return notFound
    }
    const body = (yield* Effect.orDie(request.json)) as Record<string, unknown>
    if (route === "/tokenize") {
      state.probes.push({ path: route, body })
      const tokenizer = state.tokenizer!
      const text = Array.isArray(body.messages)
        ? tokenizer.render(body.messages as Array<{ role: string; content: string }>, {
          addGenerationPrompt: body.add_generation_prompt !== false,
          continueFinal: body.continue_final_message === true,
          ...(body.chat_template_kwargs === undefined ? {} : { kwargs: body.chat_template_kwargs as Record<string, unknown> }),
          ...(Array.isArray(body.tools) ? { tools: body.tools } : {})
        })
        : String(body.prompt)
      const tokens = tokenizer.encode(text)
      const strings = body.return_token_strs === true ? tokens.map((id) => tokenizer.tokenString(id) ?? "") : null
      return json({ count: tokens.length, max_model_len: state.maxModelLen ?? 4096, tokens, token_strs: strings })
    }
    const rejected = Object.keys(body).filter((key) => state.rejectFields.has(key))
    if (rejected.length > 0) {
      // FastAPI's validation error, as transformers serve answers an unknown field.
      return json({
        detail: rejected.map((key) => ({ type: "extra_forbidden", loc: ["body", key], msg: "Extra inputs are not permitted", input: body[key] }))
      }, 422)
    }
    state.requests.push({ body, headers: request.headers, at: performance.now(), url: request.url })
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
        case "ok":
          return json(route === "/v1/completions" ? textCompletion(state, body) : completion(state, body))
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

/** Starts the server in the current scope, on `port` (0: a free one); `baseUrl` ends in `/v1`. */
export const makeAt = (port: number): Effect.Effect<{ readonly state: FakeServerState; readonly baseUrl: string }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const state = new FakeServerState()
    const server = yield* Effect.orDie(NodeHttpServer.make(() => createServer(), { port, host: "127.0.0.1" }))
    yield* server.serve(app(state))
    const address = server.address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("expected a TCP address"))
    return { state, baseUrl: `http://127.0.0.1:${address.port}/v1` }
  })

/** {@link makeAt} a free port. */
export const make = makeAt(0)
