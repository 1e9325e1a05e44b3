/**
 * The conversation step is written once (Scheduler.opening / withReply / afterStep): a run, an
 * EnvCheck transcript and an OpenEnv server session step an env with the same conversations.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as EnvCheck from "../src/check/EnvCheck.js"
import * as Env from "../src/Env.js"
import * as Inference from "../src/Inference.js"
import type * as Message from "../src/Message.js"
import * as OpenEnvClient from "../src/openenv/OpenEnvClient.js"
import * as Rollout from "../src/Rollout.js"
import { serve } from "./openenv/helpers.js"

/** An env that records every conversation it is stepped with (done at turn 3). */
const recording = (seen: Array<ReadonlyArray<Message.Message>>) =>
  Env.make({
    name: "recording",
    create: () => {
      let turn = 0
      return {
        reset: () => ({ observation: "start", info: {}, systemPrompt: "be brief" }),
        step: (messages: ReadonlyArray<Message.Message>) => {
          seen.push(messages.map((m) => ({ ...m })))
          turn++
          return { observation: `obs ${turn}`, reward: 0, done: turn >= 3, info: {} }
        }
      }
    }
  })

const replies = ["reply 1", "reply 2", "reply 3"]
const policy = Inference.layerFunction("echo", (request) =>
  Effect.succeed({ text: `reply ${request.turn}`, finishReason: "stop" as const }))

describe("one conversation step", () => {
  it.live("a run, an EnvCheck transcript and an OpenEnv session step the env with the same conversations", () =>
    Effect.gen(function*() {
      const viaRun: Array<ReadonlyArray<Message.Message>> = []
      yield* Stream.make({}).pipe(
        Rollout.run(Rollout.make({ envs: [recording(viaRun)], numGenerations: 1 })),
        Stream.runDrain,
        Effect.provide(policy)
      )
      const viaTranscript: Array<ReadonlyArray<Message.Message>> = []
      yield* EnvCheck.transcript(recording(viaTranscript), {}, replies)
      const viaServer: Array<ReadonlyArray<Message.Message>> = []
      const server = yield* serve({ env: recording(viaServer), maxConcurrentEnvs: 4 })
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        yield* session.reset({})
        for (const message of replies) yield* session.step({ message })
      })).pipe(Effect.provide(OpenEnvClient.layerWebSocketConstructor))
      expect(viaRun.length).toBe(3)
      expect(viaRun.at(-1)!.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user", "assistant"])
      expect(viaTranscript).toEqual(viaRun)
      expect(viaServer).toEqual(viaRun)
    }))
})
