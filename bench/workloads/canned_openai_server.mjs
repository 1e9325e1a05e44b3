// A zero-latency OpenAI-compatible server for the client benchmark: every POST .../chat/completions
// gets the same vLLM-style completion (token ids and logprobs included). Plain node:http, keep-alive.
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

const server = http.createServer({ keepAlive: true }, (req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
    res.end(body)
  })
})
server.keepAliveTimeout = 60_000
server.listen(0, "127.0.0.1", () => process.send?.({ port: server.address().port }))
process.on("disconnect", () => process.exit(0))
