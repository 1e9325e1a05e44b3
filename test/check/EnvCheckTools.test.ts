/**
 * The checker's `tools` check (issue 30, item 1): tool specs are valid, every tool makes a round trip,
 * and bad calls (malformed JSON, the wrong shape, an unknown tool) are answered by a tool message,
 * never a failed or crashed step. Each broken tool env fails it with the right message.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as EnvCheck from "../../src/check/EnvCheck.js"
import { exampleOf, specProblem } from "../../src/check/internal/tools.js"
import * as Env from "../../src/Env.js"
import type * as Message from "../../src/Message.js"
import * as Tool from "../../src/Tool.js"
import { cli } from "../cli.js"

const add = Tool.make({
  name: "add",
  description: "Adds two integers",
  parameters: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  run: ({ a, b }) => Effect.succeed(a + b)
})

/** A tool env whose reset offers `specs` and whose step answers calls with `answer`. */
const toolEnv = (
  name: string,
  specs: ReadonlyArray<Tool.Spec>,
  answer: (reply: Message.Message) => Effect.Effect<Env.StepResult, Env.EnvError>
) =>
  Env.define({
    name,
    make: () =>
      Effect.succeed<Env.Env>({
        reset: () => Effect.succeed({ observation: "go", info: {}, tools: specs }),
        step: (messages) => {
          const reply = messages.at(-1)!
          return reply.tool_calls === undefined
            ? Effect.succeed({ observation: "", reward: 1, done: true, info: {} })
            : answer(reply)
        }
      })
  })

const answeredBy = <E extends Tool.ToolError>(kit: Tool.Toolkit<never, E>) => (reply: Message.Message) =>
  Effect.map(kit.handle(reply), (handled): Env.StepResult => ({
    observation: "",
    reward: 0,
    done: false,
    info: {},
    toolMessages: handled.messages
  }))

const check = (definition: Env.Definition) => EnvCheck.check(definition, { seeds: 1, runs: 2 })

const toolFailure = (report: EnvCheck.Report) => report.failures.find((f) => f.check === "tools")?.message

describe("EnvCheck: tools", () => {
  it.live("a toolkit env passes, tools included", () =>
    Effect.gen(function*() {
      const report = yield* check(toolEnv("good_tools", [add.spec], answeredBy(Tool.toolkit([add]))))
      expect(report.failures, EnvCheck.format(report)).toEqual([])
      expect(report.passed).toContain("tools")
    }))

  it.live("a spec whose parameters are not an object schema fails, naming the field", () =>
    Effect.gen(function*() {
      const bad = { ...add.spec, parameters: { type: "object", properties: { a: { type: "int" } }, required: ["a"] } }
      const report = yield* check(toolEnv("bad_spec", [bad], answeredBy(Tool.toolkit([add]))))
      expect(toolFailure(report)).toBe(
        "the tools offered at reset: tools[0] (add).parameters.properties.a.type \"int\" is not a JSON Schema type"
      )
      const named = yield* check(toolEnv("bad_name", [{ ...add.spec, name: "add numbers" }], answeredBy(Tool.toolkit([add]))))
      expect(toolFailure(named)).toMatch(/^the tools offered at reset: tools\[0\]\.name "add numbers" must be 1 to 64 letters/)
    }))

  it.live("a step that fails on a bad call fails the check", () =>
    Effect.gen(function*() {
      const strict = Tool.toolkit([add], { onBadCall: "fail" })
      const failing = (reply: Message.Message) =>
        Effect.mapError(
          answeredBy(strict)(reply),
          (e) => new Env.EnvError({ env: "strict_tools", phase: "step", detail: e.message })
        )
      const report = yield* check(toolEnv("strict_tools", [add.spec], failing))
      expect(toolFailure(report)).toBe(
        "a call of add with malformed JSON arguments failed the env (a bad call must be answered by a tool message): " +
          "env strict_tools: step failed: tool add (call check_call_0): MalformedArguments: the arguments are not JSON: " +
          "Unterminated string in JSON at position 2 (line 1 column 3)"
      )
    }))

  it.live("a step that does not answer the call with a tool message fails the check", () =>
    Effect.gen(function*() {
      const deaf = () => Effect.succeed<Env.StepResult>({ observation: "hm", reward: 0, done: false, info: {} })
      const report = yield* check(toolEnv("deaf_tools", [add.spec], deaf))
      expect(toolFailure(report)).toBe(
        "a call of add with arguments valid by its schema was not answered by one tool message with its tool_call_id " +
          "(step gave 0 tool message(s))"
      )
    }))

  it.live("a schema that the tool's own decoder disagrees with fails the round trip", () =>
    Effect.gen(function*() {
      const lying = { ...add.spec, parameters: { type: "object", properties: { a: { type: "string" }, b: { type: "string" } }, required: ["a", "b"] } }
      const report = yield* check(toolEnv("lying_schema", [lying], answeredBy(Tool.toolkit([add]))))
      expect(toolFailure(report)).toMatch(
        /^a call of add with arguments valid by its schema \(\{"a":"a","b":"a"\}\) was refused: Error: InvalidArguments: a: .* \(the schema and the tool's decoder disagree\)$/
      )
    }))

  it("exampleOf gives values valid by a schema; specProblem accepts Effect's JSON Schemas", () => {
    expect(exampleOf(add.spec.parameters)).toEqual({ a: -9007199254740991, b: -9007199254740991 })
    expect(exampleOf({ type: "object", properties: { op: { enum: ["x", "y"] }, n: { type: "number", minimum: 3 } }, required: ["op", "n"] }))
      .toEqual({ op: "x", n: 3 })
    expect(specProblem([add.spec])).toBeUndefined()
    expect(specProblem([add.spec, add.spec])).toBe("tools[1].name \"add\" is offered twice")
  })

  it.live("check-env calculator from the command line passes, tools included", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* cli("check-env", "calculator", "--json")
      expect(code).toBe(0)
      const report = JSON.parse(stdout)
      expect(report.ok).toBe(true)
      expect(report.passed).toContain("tools")
    }))
})
