/**
 * Issue 14, "layers at the root": a scripted policy is a Layer (`Policy.layer`), and the command
 * line's inference options select ONE layer (`InferenceOptions.layer`) that `run` and `serve`
 * provide at their composition root; a bad option fails the layer when it is built (before a run
 * starts), with a typed error naming the option.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Option } from "effect"
import * as Builtins from "../src/Builtins.js"
import * as InferenceOptions from "../src/cli/InferenceOptions.js"
import { Inference } from "../src/Inference.js"
import { frozenLakeSolver, random } from "../src/inference/Scripted.js"
import * as Policy from "../src/Policy.js"

const args = (overrides: Partial<InferenceOptions.InferenceArgs> = {}): InferenceOptions.InferenceArgs => ({
  mode: "scripted",
  baseUrl: Option.none(),
  model: Option.none(),
  apiKeyEnv: Option.none(),
  strictOpenai: false,
  seededSampling: false,
  noLogprobs: false,
  requestTimeout: Option.none(),
  retries: Option.none(),
  inferenceConcurrency: Option.none(),
  contextSize: Option.none(),
  gpuLayers: Option.none(),
  threads: Option.none(),
  temperature: Option.none(),
  topP: Option.none(),
  topK: Option.none(),
  maxTokens: Option.none(),
  stop: [],
  tokenPath: Option.none(),
  tokenizer: Option.none(),
  chatTemplateKwargs: Option.none(),
  titoCheck: false,
  maxTransportFailures: Option.none(),
  toolParser: Option.none(),
  presencePenalty: Option.none(),
  frequencyPenalty: Option.none(),
  ...overrides
})

const scripted = (policy?: string, policyOptions: Record<string, unknown> = {}) => ({
  registry: Builtins.registry,
  policy: Option.fromNullishOr(policy),
  policyOptions
})

const request = { messages: [], sampling: {}, seed: 7 } as unknown as Parameters<Inference["Service"]["chat"]>[0]

describe("Policy.layer", () => {
  it.effect("a scripted policy as a layer of Inference; its options decoded from strings", () =>
    Effect.gen(function*() {
      const name = yield* Effect.map(Inference, (s) => s.name).pipe(
        Effect.provide(Policy.layer(random, { latency_ms: "0" }))
      )
      expect(name).toBe("policy random")
      const reply = yield* Effect.flatMap(Inference, (s) => s.chat(request)).pipe(Effect.provide(Policy.layer(random)))
      expect(reply.text).toMatch(/^<action>(up|down|left|right)<\/action>$/)
    }))

  it.effect("options the policy cannot use fail the layer with a PolicyConfigError naming the option", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Effect.provide(Inference, Policy.layer(frozenLakeSolver, { epsilon: "2" })))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(Effect.provide(Inference, Policy.layer(frozenLakeSolver, { epsilon: "2" })))
      expect(error._tag).toBe("PolicyConfigError")
      expect(error.message).toContain("epsilon")
    }))

  it.effect("a bad option is named as the caller spells it: Policy.layer's options from the library, --policy-option from the command line (one check)", () =>
    Effect.gen(function*() {
      const library = yield* Effect.flip(Effect.provide(Inference, Policy.layer(frozenLakeSolver, { epsilon: "2" })))
      expect(library.message).toBe("option epsilon: must be a probability in [0, 1] (policy frozen-lake-solver)")
      const flags = yield* Effect.flip(Effect.provide(Inference, Policy.layer(frozenLakeSolver, { epsilon: "2" }, "flags")))
      expect(flags.message).toBe("--policy-option epsilon: must be a probability in [0, 1] (policy frozen-lake-solver)")
      const cli = yield* Effect.flip(
        Effect.provide(Inference, InferenceOptions.layer(args(), scripted("frozen-lake-solver", { epsilon: "2" })))
      )
      expect(cli.message).toBe("--policy-option epsilon: must be a probability in [0, 1] (policy frozen-lake-solver)")
    }))
})

describe("InferenceOptions.layer (the one layer run and serve provide)", () => {
  it.effect("scripted mode: the named policy, and no backend control", () =>
    Effect.gen(function*() {
      const [service, control] = yield* Effect.all([Inference, InferenceOptions.Control]).pipe(
        Effect.provide(InferenceOptions.layer(args(), scripted("frozen-lake-solver", { epsilon: "0.5" })))
      )
      expect(service.name).toContain("solver")
      assert.isTrue(Option.isNone(control))
    }))

  it.effect("a bad choice fails when the layer is built, with the option named", () =>
    Effect.gen(function*() {
      const fails = (a: InferenceOptions.InferenceArgs, s = scripted()) =>
        Effect.flip(Effect.provide(Inference, InferenceOptions.layer(a, s)))
      const other = yield* fails(args({ baseUrl: Option.some("http://127.0.0.1:1/v1") }))
      expect(other).toMatchObject({ _tag: "OptionError", option: "--base-url" })
      const missing = yield* fails(args({ mode: "server", model: Option.some("m") }))
      expect(missing).toMatchObject({ _tag: "OptionError", option: "--base-url" })
      const policyInServer = yield* fails(
        args({ mode: "server", baseUrl: Option.some("http://127.0.0.1:1/v1"), model: Option.some("m") }),
        scripted("random")
      )
      expect(policyInServer).toMatchObject({ _tag: "OptionError", option: "--policy" })
      const unknown = yield* fails(args(), scripted("no-such-policy"))
      expect(unknown._tag).toBe("NotRegistered")
      const badOption = yield* fails(args(), scripted("random", { latency_ms: "-1" }))
      expect(badOption._tag).toBe("PolicyConfigError")
    }))

  it.effect("the policy's resources live as long as the layer's scope", () =>
    Effect.gen(function*() {
      let released = 0
      const counted: Policy.Definition = {
        name: "counted",
        description: "",
        make: () =>
          Effect.acquireRelease(
            Effect.succeed({ name: "counted", chat: () => Effect.die("unused") }),
            () => Effect.sync(() => void released++)
          )
      }
      yield* Effect.provide(Effect.sync(() => expect(released).toBe(0)), Policy.layer(counted))
      expect(released).toBe(1)
    }))
})
