/**
 * The checker's `tools` check, for envs that offer tools at reset: every spec is a valid tool
 * (name, description, parameters a JSON Schema object), every tool makes a round trip (a call with
 * arguments valid by its schema, in an assistant message, is answered by a tool message with its
 * `tool_call_id`, and the arguments are not refused, nor the call answered `Timeout` or `TooLarge`), and bad calls (malformed JSON, arguments of the
 * wrong shape, an unknown tool) are answered the same way, not by a failed or crashed step. Each
 * call is made on a fresh env, right after reset. Internal.
 */
import { Duration, Effect, Exit, Result } from "effect"
import type { Scope } from "effect"
import type * as Env from "../../Env.js"
import { describe } from "../../internal/lift.js"
import { isRecord } from "../../internal/inspect.js"
import { schemaProblem } from "../../internal/jsonSchema.js"
import type * as Message from "../../Message.js"
import * as Scheduler from "../../Scheduler.js"
import type { Scenario, Settings } from "./lifecycle.js"
import type { Collector } from "./inspection.js"

const NAME = /^[a-zA-Z0-9_-]{1,64}$/

/**
 * What is wrong with an env's tool specs, or `undefined`.
 *
 * @internal
 */
export const specProblem = (tools: ReadonlyArray<unknown>): string | undefined => {
  const names = new Set<string>()
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i]
    const at = `tools[${i}]`
    if (!isRecord(t)) return `${at} must be an object`
    if (typeof t.name !== "string" || !NAME.test(t.name)) {
      return `${at}.name ${JSON.stringify(t.name)} must be 1 to 64 letters, digits, _ or - (as OpenAI's API takes it)`
    }
    if (names.has(t.name)) return `${at}.name ${JSON.stringify(t.name)} is offered twice`
    names.add(t.name)
    if (typeof t.description !== "string") return `${at} (${t.name}).description must be a string`
    const parameters = t.parameters
    if (!isRecord(parameters)) return `${at} (${t.name}).parameters must be a JSON Schema object`
    if (parameters.type !== "object") {
      return `${at} (${t.name}).parameters.type must be "object" (a tool's arguments are an object), got ${JSON.stringify(parameters.type)}`
    }
    const problem = schemaProblem(parameters, `${at} (${t.name}).parameters`)
    if (problem !== undefined) return problem
  }
  return undefined
}

/** A value valid by a JSON Schema (the parts tools use): its example, default, const or enum, else one of its type. */
export const exampleOf = (schema: unknown): unknown => {
  if (!isRecord(schema)) return {}
  if (Array.isArray(schema.examples) && schema.examples.length > 0) return schema.examples[0]
  if (schema.default !== undefined) return schema.default
  if (schema.const !== undefined) return schema.const
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  for (const key of ["anyOf", "oneOf"] as const) {
    const list = schema[key]
    if (Array.isArray(list) && list.length > 0) return exampleOf(list[0])
  }
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type
  const bounded = (fallback: number) =>
    typeof schema.minimum === "number" ? schema.minimum : typeof schema.maximum === "number" ? Math.min(fallback, schema.maximum) : fallback
  switch (type) {
    case "string":
      return "a".repeat(typeof schema.minLength === "number" ? Math.max(1, schema.minLength) : 1)
    case "integer":
      return Math.ceil(bounded(1))
    case "number":
      return bounded(1)
    case "boolean":
      return true
    case "null":
      return null
    case "array":
      return typeof schema.minItems === "number" && schema.minItems > 0
        ? Array.from({ length: schema.minItems }, () => exampleOf(schema.items))
        : []
    default: {
      const out: Record<string, unknown> = {}
      const properties = isRecord(schema.properties) ? schema.properties : {}
      const required = Array.isArray(schema.required) ? schema.required : []
      for (const key of required) if (typeof key === "string") out[key] = exampleOf(properties[key])
      return out
    }
  }
}

interface Case {
  readonly what: string
  readonly name: string
  readonly arguments: string
  readonly valid: boolean
}

const casesOf = (specs: ReadonlyArray<{ readonly name: string; readonly parameters: unknown }>): Array<Case> => [
  ...specs.flatMap((spec): Array<Case> => [
    { what: `${spec.name} with arguments valid by its schema`, name: spec.name, arguments: JSON.stringify(exampleOf(spec.parameters)), valid: true },
    { what: `${spec.name} with malformed JSON arguments`, name: spec.name, arguments: "{\"", valid: false },
    { what: `${spec.name} with arguments of the wrong shape (a list)`, name: spec.name, arguments: "[1, 2]", valid: false }
  ]),
  { what: "a tool the env does not offer", name: "no_such_tool_xyz", arguments: "{}", valid: false }
]

/** Runs one call on a fresh env: what is wrong, or `undefined` when it was answered well. */
const tryCase = (
  create: Effect.Effect<Env.Env, Env.EnvError, Scope.Scope>,
  scenario: Scenario,
  timeout: Duration.Duration,
  testCase: Case
): Effect.Effect<{ readonly problem?: string; readonly output?: unknown }> => {
  const callId = "check_call_0"
  const call: Message.ToolCall = { id: callId, type: "function", function: { name: testCase.name, arguments: testCase.arguments } }
  return Effect.scoped(Effect.gen(function*() {
    const env = yield* create
    const reset = yield* env.reset(scenario.request)
    const given = Scheduler.withReply(Scheduler.opening(reset), "", [call])
    return yield* env.step(given)
  })).pipe(
    Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.fail("timeout" as const) }),
    Effect.exit,
    Effect.map((exit) => {
      if (Exit.isFailure(exit)) {
        const squashed = exit.cause.reasons[0]
        const error = squashed?._tag === "Fail" ? squashed.error : squashed?._tag === "Die" ? squashed.defect : undefined
        if (error === "timeout") return { problem: `a call of ${testCase.what} was not answered within ${Duration.format(timeout)}` }
        const crashed = squashed?._tag === "Die" ? "crashed" : "failed"
        return { problem: `a call of ${testCase.what} ${crashed} the env (a bad call must be answered by a tool message): ${describe(error)}` }
      }
      const result = exit.value
      const answers = (result.toolMessages ?? []).filter((m) => m.tool_call_id === callId)
      if (answers.length !== 1) {
        return {
          problem: `a call of ${testCase.what} was not answered by one tool message with its tool_call_id ` +
            `(step gave ${(result.toolMessages ?? []).length} tool message(s))`,
          output: result
        }
      }
      const content = answers[0].content
      if (testCase.valid && /^Error: (InvalidArguments|MalformedArguments)/.test(content)) {
        return { problem: `a call of ${testCase.what} (${testCase.arguments}) was refused: ${content} (the schema and the tool's decoder disagree)` }
      }
      // a tool that hangs, or answers more than a prompt can hold, passed the round trip before:
      // Tool.toolkit answered it, with an error that is the tool's own fault
      if (testCase.valid && /^Error: (Timeout|TooLarge):/.test(content)) {
        return { problem: `a call of ${testCase.what} (${testCase.arguments}) was answered ${content.slice(0, 200)}` }
      }
      return {}
    })
  )
}

/**
 * Checks the tools a scenario's reset offered.
 *
 * @internal
 */
export const checkTools = (
  settings: Settings,
  collector: Collector,
  scenario: Scenario,
  tools: ReadonlyArray<unknown>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    collector.ran("tools")
    const problem = specProblem(tools)
    if (problem !== undefined) {
      collector.fail("tools", scenario, `the tools offered at reset: ${problem}`, [], tools)
      return
    }
    if (!Result.isSuccess(scenario.prepared)) return
    const create = scenario.prepared.success
    const specs = tools as ReadonlyArray<{ readonly name: string; readonly parameters: unknown }>
    for (const testCase of casesOf(specs)) {
      const outcome = yield* tryCase(create, scenario, settings.timeout, testCase)
      if (outcome.problem !== undefined) {
        collector.fail("tools", scenario, outcome.problem, [], outcome.output)
        return
      }
    }
  })
