// A zero-latency OpenAI-compatible server for the client benchmarks: every POST .../chat/completions
// gets the same vLLM-style completion (token ids and logprobs included), every POST .../completions
// (the token path: a token-id prompt) the same text completion with token ids ending in Qwen3's
// <|im_end|>, GET .../models a model list with max_model_len. Plain node:http, keep-alive.
import * as http from "node:http"

const body = JSON.stringify({
  id: "cmpl-bench",
  object: "chat.completion",
  model: "canned",
  choices: [{
    index: 0,
    message: { role: "assistant", content: "<action>down</action>" },
    finish_reason: "stop",
    token_ids: [27, 1311, 29, 2923, 524, 1311, 29],
    logprobs: { content: [27, 1311, 29, 2923, 524, 1311, 29].map((id) => ({ token: `token_id:${id}`, logprob: -0.1 })) }
  }],
  usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 }
})

const ids = [27, 1311, 29, 2923, 524, 1311, 29, 151645]
const textBody = JSON.stringify({
  id: "cmpl-bench",
  object: "text_completion",
  model: "canned",
  choices: [{
    index: 0,
    text: "<action>down</action>",
    finish_reason: "stop",
    token_ids: ids,
    logprobs: { tokens: ids.map((id) => `token_id:${id}`), token_logprobs: ids.map(() => -0.1), top_logprobs: ids.map(() => ({})), text_offset: ids.map(() => 0) }
  }],
  usage: { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 }
})
const models = JSON.stringify({ object: "list", data: [{ id: "canned", object: "model", max_model_len: 32768 }] })

const server = http.createServer({ keepAlive: true }, (req, res) => {
  req.resume()
  req.on("end", () => {
    const answer = req.url.endsWith("/models") ? models : req.url.endsWith("/v1/completions") ? textBody : body
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) })
    res.end(answer)
  })
})
server.keepAliveTimeout = 60_000
server.listen(0, "127.0.0.1", () => process.send?.({ port: server.address().port }))
process.on("disconnect", () => process.exit(0))
