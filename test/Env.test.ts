import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Result, Schema, Scope } from "effect"
import * as Env from "../src/Env.js"
import * as Message from "../src/Message.js"

const request: Env.ResetRequest = { trajectoryId: "t", seed: 1, messages: [], dataDict: {}, envConfig: {} }

/** Creates, resets, steps once and closes an env definition; returns the results. */
const cycle = (definition: Env.Definition, config: Env.EnvConfig = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const env = yield* Result.getOrThrow(definition.prepare(config))
    const reset = yield* env.reset({ ...request, envConfig: config })
    const step = yield* env.step([Message.user(reset.observation), Message.assistant("go")])
    return { reset, step }
  }))

describe("Env adapters", () => {
  it.effect("plain objects with sync, async and Effect methods are adapted; close runs once", () =>
    Effect.gen(function*() {
      let closed = 0
      const kinds = [
        Env.make({
          name: "sync",
          create: () => ({
            reset: () => ({ observation: "hi", info: {} }),
            step: () => ({ observation: "o", reward: 1, done: true, info: {} }),
            close: () => void closed++
          })
        }),
        Env.make({
          name: "async",
          create: async () => ({
            reset: async () => ({ observation: "hi", info: {} }),
            step: async () => ({ observation: "o", reward: 1, done: true, info: {} }),
            close: async () => void closed++
          })
        }),
        Env.make({
          name: "effect",
          create: () => ({
            reset: () => Effect.succeed({ observation: "hi", info: {} }),
            step: () => Effect.succeed({ observation: "o", reward: 1, done: true, info: {} }),
            close: () => Effect.sync(() => void closed++)
          })
        })
      ]
      for (const definition of kinds) {
        const { reset, step } = yield* cycle(definition)
        expect(reset.observation).toBe("hi")
        expect(step).toEqual({ observation: "o", reward: 1, done: true, info: {} })
      }
      expect(closed).toBe(3)
    }))

  it.effect("classes written like Python envs, with tuple returns", () =>
    Effect.gen(function*() {
      const events: Array<string> = []
      class Counter {
        n = 0
        constructor(readonly config: { readonly start: number }) {
          events.push(`new ${config.start}`)
        }
        async reset() {
          this.n = this.config.start
          return [`at ${this.n}`, { n: this.n }, "system!"] as const
        }
        async step(messages: ReadonlyArray<Message.Message>) {
          this.n++
          return [`${messages.at(-1)?.content} ${this.n}`, 0.5, this.n > 3, { n: this.n }] as const
        }
        async close() {
          events.push("close")
        }
      }
      const definition = Env.fromClass({
        name: "counter",
        config: Schema.Struct({ start: Schema.FiniteFromString }),
        class: Counter
      })
      const { reset, step } = yield* cycle(definition, { start: "2" })
      expect(reset).toEqual({ observation: "at 2", info: { n: 2 }, systemPrompt: "system!" })
      expect(step).toEqual({ observation: "go 3", reward: 0.5, done: false, info: { n: 3 } })
      expect(events).toEqual(["new 2", "close"])
      const bad = Result.flip(definition.prepare({ start: "x" })).pipe(Result.getOrThrow)
      expect(bad.path).toBe("env_config.start")
      expect(bad._tag).toBe("EnvConfigError")
    }))

  it.effect("throws, rejections and Effect failures in user code become EnvError with the phase", () =>
    Effect.gen(function*() {
      const throwing = (phase: "create" | "reset" | "step") =>
        Env.make({
          name: `throws-${phase}`,
          create: () => {
            if (phase === "create") throw new Error("boom at create")
            return {
              reset: async () => {
                if (phase === "reset") throw new Error("boom at reset")
                return { observation: "", info: {} }
              },
              step: () => (phase === "step" ? Effect.fail("boom at step") : { observation: "", reward: 0, done: true, info: {} })
            }
          }
        })
      for (const phase of ["create", "reset", "step"] as const) {
        const exit = yield* Effect.exit(cycle(throwing(phase)))
        expect(Exit.isFailure(exit)).toBe(true)
        const reason = Exit.isFailure(exit) && exit.cause.reasons.length === 1 ? exit.cause.reasons[0] : undefined
        if (reason?._tag === "Fail") {
          const error = reason.error
          expect(error._tag).toBe("EnvError")
          expect(error.phase).toBe(phase)
          expect(error.message).toBe(`env throws-${phase}: ${phase} failed: boom at ${phase}`)
        } else {
          expect.fail("expected a typed failure")
        }
      }
    }))

  it.effect("close runs exactly once even when reset fails; a failing close fails closing the scope with EnvError(close)", () =>
    Effect.gen(function*() {
      let closes = 0
      const definition = Env.make({
        name: "flaky",
        create: () => ({
          reset: () => Promise.reject(new Error("nope")),
          step: () => ({ observation: "", reward: 0, done: true, info: {} }),
          close: () => {
            closes++
            throw new Error("close failed")
          }
        })
      })
      const scope = yield* Scope.make()
      const env = yield* Scope.provide(Result.getOrThrow(definition.prepare({})), scope)
      const exit = yield* Effect.exit(env.reset(request))
      expect(Exit.isFailure(exit)).toBe(true)
      const closed = yield* Effect.exit(Scope.close(scope, Exit.void))
      expect(closes).toBe(1)
      // not swallowed: whoever closes the scope (a trajectory) gets the typed error
      assert(Exit.isFailure(closed))
      const error = Cause.squash(closed.cause)
      assert(error instanceof Env.EnvError)
      expect([error.phase, error.detail]).toEqual(["close", "close failed"])
    }))
})
