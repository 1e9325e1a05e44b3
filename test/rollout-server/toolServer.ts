/**
 * A rollout server for the tool tests: an env that answers the calls its requests' tools let the
 * model make, and a fake vLLM with Qwen3's tokenizer behind it (the token path, calls parsed out of
 * the reply text by the hermes parser). Shared by the rollout server's and the Python client's tests.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { Effect } from "effect"
import * as Builtins from "../../src/Builtins.js"
import * as Env from "../../src/Env.js"
import * as OpenAiCompat from "../../src/inference/OpenAiCompat.js"
import * as ToolParsers from "../../src/inference/ToolParsers.js"
import * as Message from "../../src/Message.js"
import * as Registry from "../../src/Registry.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import * as Qwen3 from "../inference/qwen3.js"
import { start } from "./helpers.js"

export const httpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })

/** The tools of the requests, as ms-swift's trainer sends a dataset's `tools` column (OpenAI's format). */
export const lookup = {
  type: "function",
  function: {
    name: "lookup",
    description: "Looks a key up",
    parameters: { type: "object", properties: { key: { type: "string" } }, required: ["key"] }
  }
}

/**
 * An env that offers no tools of its own and answers the reply's calls (as ms-swift's gym envs
 * answer what their requests' tools let the model call): `lookup` gives the key's value, any other
 * name says so; a reply without calls ends the episode, rewarded when it says the value.
 */
export const answering = Env.make({
  name: "answering",
  create: () => ({
    // (the request's messages, as the env gets them, in the reset info)
    reset: (r: Env.ResetRequest) => ({ observation: "What is the value of a?", info: { given: r.messages } }),
    step: (messages: ReadonlyArray<Message.Message>) => {
      const reply = messages.at(-1)!
      if (reply.tool_calls === undefined) {
        return { observation: "", reward: reply.content.includes("value-of-a") ? 1 : 0, done: true, info: {} }
      }
      return {
        observation: "",
        reward: 0,
        done: false,
        info: {},
        toolMessages: reply.tool_calls.map((c) =>
          Message.tool(
            c.id,
            c.function.name,
            c.function.name !== "lookup"
              ? `no tool named ${c.function.name}`
              : /^\{"key": "(\w+)"\}$/.test(c.function.arguments)
              ? `value-of-${/"key": "(\w+)"/.exec(c.function.arguments)![1]}`
              : `bad arguments: ${c.function.arguments}`
          )
        )
      }
    }
  })
})

export const registry = Registry.add(Builtins.registry, { envs: [answering] })

export const HERMES_CALL = "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"key\": \"a\"}}\n</tool_call>"

/** A fake vLLM with Qwen3's tokenizer: the token path, its replies' calls parsed out of their text (hermes). */
export const tokenPath = Effect.gen(function*() {
  const fake = yield* FakeOpenAi.make
  fake.state.tokenizer = Qwen3.fake
  fake.state.maxModelLen = 8192
  fake.state.reply = (body) => {
    const prompt = Qwen3.text(body.prompt as ReadonlyArray<number>)
    return prompt.includes("<tool_response>") ? "It is value-of-a." : HERMES_CALL
  }
  const client = yield* OpenAiCompat.make({
    baseUrl: fake.baseUrl,
    model: "tiny",
    tokenizer: Qwen3.QWEN3_TOKENIZER,
    rejectedFields: "refuse",
    onWarning: () => Effect.void
  }).pipe(Effect.provide(httpClient), Effect.orDie)
  const server = yield* start({ policy: ToolParsers.wrap(client, "hermes"), registry, defaultEnv: "answering" })
  return { fake, server }
})
