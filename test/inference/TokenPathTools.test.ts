/**
 * The token path with tools (issue 30, item 3), on Qwen3's real vocabulary and template: the `calculator` env
 * against a fake vLLM whose "model" plays the calculator solver one character at a time (each character's own
 * tokens, as models sample non-canonical splits). The tools are rendered into the token prompt by the template,
 * the calls come back as text in the sampled tokens (trained, mask 1), the tool results are template tokens
 * after them (not trained, mask 0), and `--tito-check` compares the whole sequence with the re-rendered conversation.
 */
import type { HttpClient } from "effect/http"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { CompletionLine } from "../../src/CompletionsLog.js"
import * as Calculator from "../../src/envs/Calculator.js"
import { calculatorReply } from "../../src/inference/Scripted.js"
import * as ToolParsers from "../../src/inference/ToolParsers.js"
import type { Message } from "../../src/Message.js"
import { cli, readLines, tmp } from "./cli.js"
import * as FakeOpenAi from "./FakeOpenAi.js"
import * as Llama31 from "./llama31.js"
import * as Qwen3 from "./qwen3.js"

const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })
const live = (name: string, f: () => Effect.Effect<void, unknown, HttpClient.HttpClient | Scope.Scope>) =>
  it.live(name, () => Effect.scoped(f()).pipe(Effect.provide(httpClient)), 60_000)

/** The conversation a Qwen3 token prompt holds (system prompt left out): user turns, calls, tool results. */
const conversationOf = (text: string): Array<Message> => {
  const messages: Array<Message> = []
  const pending: Array<{ readonly id: string; readonly name: string }> = []
  let calls = 0
  for (const segment of text.split("<|im_start|>").slice(1)) {
    const newline = segment.indexOf("\n")
    const role = segment.slice(0, newline)
    const content = segment.slice(newline + 1).split("<|im_end|>")[0]
    if (role === "user" && content.startsWith("<tool_response>")) {
      for (const match of content.matchAll(/<tool_response>\n([\s\S]*?)\n<\/tool_response>/g)) {
        const call = pending.shift()!
        messages.push({ role: "tool", content: match[1], tool_call_id: call.id, name: call.name })
      }
    } else if (role === "user") {
      messages.push({ role: "user", content })
    } else if (role === "assistant" && content !== "") {
      const parsed = ToolParsers.parse("hermes", content, () => `c${calls++}`)
      for (const call of parsed.toolCalls) pending.push({ id: call.id, name: call.function.name })
      messages.push({ role: "assistant", content: parsed.content ?? "", tool_calls: parsed.toolCalls })
    }
  }
  return messages
}

const calculatorServer = Effect.map(FakeOpenAi.make, (server) => {
  server.state.tokenizer = Qwen3.fake
  server.state.maxModelLen = 8192
  server.state.reply = (body) => calculatorReply(conversationOf(Qwen3.text(body.prompt as Array<number>)))
  return server
})

/** The runs of one mask value, as text, in order. */
const runsOf = (line: CompletionLine, value: 0 | 1): Array<string> => {
  const out: Array<string> = []
  let run: Array<number> = []
  line.loss_mask!.forEach((m, i) => {
    if (m === value) run.push(line.token_ids![i])
    else if (run.length > 0) {
      out.push(Qwen3.text(run))
      run = []
    }
  })
  if (run.length > 0) out.push(Qwen3.text(run))
  return out
}

const runArgs = (dir: string, output: string, baseUrl: string, ...extra: Array<string>) => {
  const dataset = path.join(dir, "calc.jsonl")
  fs.writeFileSync(dataset, [0, 1].map((seed) => JSON.stringify({ env_config: { seed, items: 2 } })).join("\n") + "\n")
  return [
    "run", "--dataset", dataset, "--env", "calculator", "--mode", "server", "--base-url", baseUrl, "--model", "tiny",
    "--max-tokens", "400", "--num-generations", "2", "--max-turns", "8", "--seed", "4", "--output", output, "--json",
    "--tito-check", "--token-path", "require", ...extra
  ]
}

const tools = Calculator.tools({}, new Set()).specs

describe("the token path with tools (calculator env, Qwen3's template)", () => {
  for (const renderer of ["local", "server"] as const) {
    live(`${renderer} renderer: tools in the prompt, calls sampled (mask 1), tool results inserted (mask 0), --tito-check covers them`, () =>
      Effect.gen(function*() {
        const server = yield* calculatorServer
        const dir = tmp()
        const output = path.join(dir, "out.jsonl")
        const extra = renderer === "local" ? ["--tokenizer", Qwen3.QWEN3_TOKENIZER] : []
        const { code, stdout, stderr } = yield* cli(...runArgs(dir, output, server.baseUrl, ...extra))
        expect(stderr).toBe("")
        expect(code).toBe(0)
        const summary = JSON.parse(stdout)
        // 2 items: 2 lookups, 2 products, 1 sum, then the answer
        expect(summary).toMatchObject({ trajectories: 4, failures: 0, mean_reward: 1, tools: { calls: 4 * 5, errors: 0, malformed: 0 } })
        // every call went by /v1/completions with a token prompt, none by the chat API
        expect(server.state.requests.filter((r) => !Array.isArray(r.body.prompt))).toEqual([])
        for (const line of readLines(output)) {
          expect(line.token_ids).not.toBeNull()
          const first = line.messages.slice(0, 2)
          // the first prompt: Qwen3's template with the env's tools
          const rendered = Result.getOrThrow(Qwen3.tokenizer.template!.render(first, { addGenerationPrompt: true, tools }))
          expect(rendered).toContain("# Tools")
          expect(rendered).toContain('"name": "lookup"')
          expect(line.prompt_token_ids).toEqual(Qwen3.tokenizer.encode(rendered))
          // trained: each reply as the model sampled it, its calls' text included, and its end of turn
          const replies = line.messages.filter((m) => m.role === "assistant")
          const sampled = runsOf(line, 1)
          expect(sampled.length).toBe(replies.length)
          sampled.forEach((text, k) => {
            expect(text.endsWith("<|im_end|>")).toBe(true)
            if (k < 3) expect(text).toContain("<tool_call>\n{\"name\":")
            expect(text.split("<tool_call>").length - 1).toBe(replies[k].tool_calls?.length ?? 0)
          })
          expect(sampled.at(-1)).toMatch(/^<answer>\d+<\/answer><\|im_end\|>$/)
          // not trained: the tool results, as the template wraps them, then the generation prompt
          const results = line.messages.filter((m) => m.role === "tool")
          const inserted = runsOf(line, 0)
          expect(inserted.join("")).toBe(
            replies.slice(0, -1).map((reply) => {
              const answers = results.filter((r) => reply.tool_calls!.some((c) => c.id === r.tool_call_id))
              return "\n<|im_start|>user" + answers.map((r) => `\n<tool_response>\n${r.content}\n</tool_response>`).join("") +
                "<|im_end|>\n<|im_start|>assistant\n"
            }).join("")
          )
          line.loss_mask!.forEach((m, i) => expect(line.logprobs![i] === null).toBe(m === 0))
        }
        // the tool parser: from the local template, or from the server's rendering of a call
        expect(summary.tool_parser).toEqual({
          name: "hermes",
          chosen_by: renderer === "local"
            ? "the chat template (it writes <tool_call>)"
            : "the server's chat template (its /tokenize rendering of a call) (it writes <tool_call>)"
        })
        // --tito-check re-renders the final conversations with their tools: the fake model's character-by-character
        // tokens differ from re-encoding, and the compact JSON it writes differs from the template's
        expect(summary.tito_check).toMatchObject({ checked: 4, unavailable: 0, drifted: 4 })
      }))
  }

  live("a Llama 3.1 server without --tokenizer: its /tokenize rendering of a call chooses llama3_json", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAi.make
      server.state.tokenizer = Llama31.fake
      server.state.maxModelLen = 8192
      server.state.reply = () => '{"name": "lookup", "parameters": {"item": "widget"}}'
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout } = yield* cli(...runArgs(dir, output, server.baseUrl).map((a) => (a === "8" ? "2" : a)))
      expect(code).toBe(0)
      const summary = JSON.parse(stdout)
      expect(summary.tool_parser).toEqual({
        name: "llama3_json",
        chosen_by: "the server's chat template (its /tokenize rendering of a call) (Llama 3.x: <|python_tag|>, Environment: ipython)"
      })
      // the calls were read (by llama3_json) and answered; each prompt is Llama 3.1's, tools in the first user turn
      expect(summary.tools).toMatchObject({ calls: 8, malformed: 0 })
      const line = readLines(output)[0]
      expect(Llama31.fake.decode(line.prompt_token_ids!)).toContain("Given the following functions")
      expect(Llama31.fake.decode(line.token_ids!)).toContain("<|start_header_id|>ipython<|end_header_id|>\n\n\"")
    }))

  live("a model that samples canonical tokens and writes calls as the template does: no tool turn drifts", () =>
    Effect.gen(function*() {
      const server = yield* calculatorServer
      server.state.sampling = "canonical"
      const solve = server.state.reply
      // The calls' JSON as Python writes it (the template re-serialises arguments with json.dumps).
      server.state.reply = (body) =>
        solve(body).replace(
          /<tool_call>\n(.*)\n<\/tool_call>/g,
          (_, json: string) => `<tool_call>\n${ToolParsers.pythonJson(JSON.parse(json))}\n</tool_call>`
        )
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      const { code, stdout } = yield* cli(...runArgs(dir, output, server.baseUrl, "--tokenizer", Qwen3.QWEN3_TOKENIZER))
      expect(code).toBe(0)
      const summary = JSON.parse(stdout)
      expect(summary).toMatchObject({ trajectories: 4, mean_reward: 1 })
      // Every call, result and prompt re-renders to the sequence's tokens; the first difference is Qwen3's empty
      // think block, which its template writes into the last reply when it re-renders it.
      const lines = readLines(output)
      const drifted = lines.find((l) => l.id === summary.tito_check.first.id)!
      expect(summary.tito_check.first.turn).toBe(drifted.rollout_infos.num_turns)
      expect(Qwen3.text(summary.tito_check.first.retokenized)).toContain("<think>")
      for (const line of lines) {
        const all = [...line.prompt_token_ids!, ...line.token_ids!]
        const lastReply = line.loss_mask!.lastIndexOf(0) + 1 + line.prompt_token_ids!.length
        const full = Result.getOrThrow(Qwen3.tokenizer.template!.render(line.messages, { addGenerationPrompt: false, tools }))
        expect(Qwen3.tokenizer.encode(full).slice(0, lastReply)).toEqual(all.slice(0, lastReply))
      }
    }))
})
