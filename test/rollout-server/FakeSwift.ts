/**
 * A `swift rollout` server for the tests (ms-swift's `swift/pipelines/infer/rollout.py`, without a
 * multi-turn scheduler), on loopback at a random free port: the control endpoints (answered as the
 * reference's are, every request recorded with its raw body) and the single-turn `POST /infer/`,
 * which answers each request with a FrozenLake move as a `RolloutOutput` whose `response` carries
 * `token_ids`, `logprobs` and `prompt_token_ids` (with `return_details`).
 *
 * Its "tokenizer" is one token per UTF-8 byte of a ChatML rendering of the messages
 * (`<|im_start|>role\ncontent<|im_end|>\n`, then the generation prompt); a reply is sampled as the
 * bytes of its text and of `<|im_end|>`, so a later prompt begins with the earlier prompt and the
 * sampled tokens, unless `dropEarlierReplies` makes its template render earlier replies differently
 * (as Qwen3's drops their reasoning).
 *
 * With a request's `tools` it acts as ms-swift's hermes agent template: the tools in a system block,
 * a `tool` message as a user turn of `<tool_response>`, an assistant's OpenAI `tool_calls` written as
 * `<tool_call>` blocks after its text; and, tools or not, each `<tool_call>` block of the reply read
 * back as `tool_calls` (`toolcall-<hex>` ids), its `content` the whole reply.
 */
import * as http from "node:http"
import { Effect } from "effect"
import type { Scope } from "effect"
import { pythonJson } from "../../src/inference/ToolParsers.js"
import { frozenLakeReply } from "../inference/FakeOpenAi.js"

export interface Recorded {
  readonly method: string
  readonly path: string
  readonly body: string
  readonly contentType: string | undefined
}

export class FakeSwiftState {
  readonly requests: Array<Recorded> = []
  worldSize = 1
  enableMultiTurn = false
  enableLora = false
  /** /infer/ calls to fail by dropping the connection (first ones first). */
  dropInfer = 0
  /** /infer/ calls to fail with this status and body. */
  failInfer: Array<{ readonly status: number; readonly body: string }> = []
  /** Render earlier assistant messages with a prefix: later prompts then do not continue the tokens. */
  dropEarlierReplies = false
  /** Weight syncs seen (a process_weights_after_loading or an adapter update). */
  syncs = 0
  /** The reply to a request's messages; by default the FrozenLake move. */
  reply: (messages: ReadonlyArray<WireMessage>) => string = (messages) => frozenLakeReply({ messages })
  get infers(): Array<Record<string, unknown>> {
    return this.requests.filter((r) => r.path === "/infer/").map((r) => JSON.parse(r.body) as Record<string, unknown>)
  }
  get control(): Array<Recorded> {
    return this.requests.filter((r) => r.path !== "/infer/" && r.path !== "/health/")
  }
}

export const END = "<|im_end|>"
const encoder = new TextEncoder()
export const bytes = (text: string): Array<number> => Array.from(encoder.encode(text))

/** A message as the backend takes it (an assistant's `tool_calls` in OpenAI's format). */
export interface WireMessage {
  readonly role: string
  readonly content: string
  readonly tool_calls?: ReadonlyArray<{ readonly function: { readonly name: string; readonly arguments: string } }>
}

/** A call as ms-swift's hermes agent template writes it (`json.dumps` of name and arguments). */
const hermesCall = (name: string, args: unknown) => `<tool_call>\n${pythonJson({ name, arguments: args })}\n</tool_call>`

/** The toy template: ChatML (tools in a system block, as the hermes agent template), then the generation prompt. */
export const render = (messages: ReadonlyArray<WireMessage>, dropEarlier: boolean, tools?: ReadonlyArray<unknown> | null): string => {
  let text = tools === undefined || tools === null || tools.length === 0
    ? ""
    : `<|im_start|>system\n# Tools\n<tools>\n${tools.map((t) => JSON.stringify(t)).join("\n")}\n</tools>${END}\n`
  messages.forEach((m, i) => {
    let content = dropEarlier && m.role === "assistant" && i < messages.length - 1 ? `(earlier) ${m.content}` : m.content
    if (m.tool_calls !== undefined) {
      const calls = m.tool_calls.map((c) => hermesCall(c.function.name, JSON.parse(c.function.arguments))).join("\n")
      content = content === "" ? calls : `${content}\n${calls}`
    }
    text += m.role === "tool"
      ? `<|im_start|>user\n<tool_response>\n${content}\n</tool_response>${END}\n`
      : `<|im_start|>${m.role}\n${content}${END}\n`
  })
  return text + "<|im_start|>assistant\n"
}

/** The calls of a reply, as ms-swift's hermes agent template reads them (`get_toolcall`). */
const callsOf = (reply: string) =>
  [...reply.matchAll(/<tool_call>(.+?)<\/tool_call>/gs)].map((match, i) => {
    const call = JSON.parse(match[1]) as { name: string; arguments: unknown }
    return {
      // (ms-swift's Function writes the arguments with json.dumps)
      function: { name: call.name, arguments: pythonJson(call.arguments) },
      type: "function",
      id: `toolcall-${i}f0e1d2c3b4a5968778695a4b3c2d1e0f`
    }
  })

const message = (text: string) => JSON.stringify({ message: text })

const answer = (state: FakeSwiftState, method: string, path: string, body: string): [number, string] => {
  switch (`${method} ${path}`) {
    case "GET /health/":
      return [200, JSON.stringify({ status: "ok" })]
    case "GET /get_world_size/":
      return [200, JSON.stringify({ world_size: state.worldSize })]
    case "GET /get_model_state_keys/":
      return [200, JSON.stringify({ keys: ["model.embed_tokens.weight", "lm_head.weight"] })]
    case "POST /init_communicator/":
      return [200, message("Request received, initializing communicator")]
    case "POST /update_named_param/":
      return [200, message("Request received, updating named parameter")]
    case "POST /update_flattened_params/":
      return [200, message("Request received, updating flattened parameters")]
    case "POST /update_adapter_flattened_param/":
    case "POST /update_adapter_param/":
      state.syncs++
      return [200, message("Request received, updating adapter parameter")]
    case "POST /process_weights_after_loading/":
      state.syncs++
      return [200, message("Weights processed after loading")]
    case "POST /reset_prefix_cache/":
      return [200, message("Request received, resetting prefix cache status: True")]
    case "POST /reset_encoder_cache/":
      return [200, message("Request received, resetting encoder cache status: True")]
    case "POST /reset_mm_cache/":
      return [200, message("Request received, resetting mm cache status: True")]
    case "POST /close_communicator/":
      return [200, message("Request received, closing communicator")]
    case "POST /get_engine_type/":
      return [200, JSON.stringify({
        engine_type: "AsyncLLMEngine",
        enable_multi_turn: state.enableMultiTurn,
        use_gym_env: false,
        enable_lora: state.enableLora
      })]
    case "POST /infer/":
      return [200, JSON.stringify(infer(state, JSON.parse(body) as Record<string, unknown>))]
    default:
      return [404, JSON.stringify({ detail: "Not Found" })]
  }
}

/** One RolloutOutput per request, as GRPOVllmEngine.async_infer answers without a scheduler. */
const infer = (state: FakeSwiftState, body: Record<string, unknown>) => {
  const config = (body.request_config ?? {}) as Record<string, unknown>
  const details = config.return_details === true
  return (body.infer_requests as Array<{ messages: Array<WireMessage>; uuid: string | null; tools: Array<unknown> | null }>).map(
    (request) => {
      const reply = state.reply(request.messages)
      let ids = bytes(reply + END)
      let finish = "stop"
      const max = typeof config.max_tokens === "number" ? config.max_tokens : undefined
      if (max !== undefined && ids.length > max) {
        ids = ids.slice(0, max)
        finish = "length"
      }
      const prompt = bytes(render(request.messages, state.dropEarlierReplies, request.tools))
      // (ms-swift's engine reads calls out of every reply, tools or not)
      const calls = callsOf(reply)
      return {
        response: {
          model: "fake-swift",
          choices: [{
            index: 0,
            message: { role: "assistant", content: reply, tool_calls: calls.length === 0 ? null : calls, reasoning_content: null },
            finish_reason: finish,
            logprobs: config.logprobs === true
              ? { content: ids.map((id, i) => ({ token: String.fromCharCode(id), logprob: -(i + 1) / 100, bytes: [id] })) }
              : null,
            token_ids: details ? ids : null
          }],
          usage: { prompt_tokens: prompt.length, completion_tokens: ids.length, total_tokens: prompt.length + ids.length },
          id: request.uuid ?? "5c1e0ffa1e4b4bd6a3ad8e8c2f1f6b57",
          object: "chat.completion",
          created: 1,
          prompt_token_ids: details ? prompt : null,
          prompt_logprobs: null,
          images_size: null
        },
        messages: null,
        response_token_ids: [],
        response_loss_mask: [],
        rollout_infos: {},
        rollout_logprobs: [],
        prompt_logprobs: null
      }
    }
  )
}

/** Starts the fake in the current scope. */
export const make: Effect.Effect<{ readonly state: FakeSwiftState; readonly url: string }, never, Scope.Scope> = Effect
  .acquireRelease(
    Effect.callback<{ state: FakeSwiftState; url: string; server: http.Server }>((resume) => {
      const state = new FakeSwiftState()
      const server = http.createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (chunk: Buffer) => chunks.push(chunk))
        req.on("end", () => {
          const path = req.url ?? "/"
          const method = req.method ?? "GET"
          const body = Buffer.concat(chunks).toString("utf8")
          state.requests.push({ method, path, body, contentType: req.headers["content-type"] })
          if (path === "/infer/") {
            if (state.dropInfer > 0) {
              state.dropInfer--
              req.socket.destroy()
              return
            }
            const failure = state.failInfer.shift()
            if (failure !== undefined) {
              res.writeHead(failure.status, { "content-type": "application/json" }).end(failure.body)
              return
            }
          }
          const [status, text] = answer(state, method, path, body)
          res.writeHead(status, { "content-type": "application/json" }).end(text)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address() as { port: number }
        resume(Effect.succeed({ state, url: `http://127.0.0.1:${address.port}`, server }))
      })
    }),
    ({ server }) =>
      Effect.callback<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  .pipe(Effect.map(({ state, url }) => ({ state, url })))
