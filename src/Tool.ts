/**
 * Tools an env offers the model: their specs (name, description, parameters as JSON Schema, as
 * OpenAI's `tools` field takes them) and an Effect-native way to write and run them.
 *
 * A tool is a Schema for its arguments and an Effect for the call ({@link make}). A
 * {@link Toolkit} answers an assistant message's `tool_calls` with one `tool` message per call, in
 * order: the arguments are parsed and decoded with the tool's Schema before the tool runs, and a bad
 * call (unknown tool, malformed JSON, arguments the Schema refuses, arguments over the size limit, a
 * tool that fails, throws or takes longer than the timeout) becomes a tool message saying what is
 * wrong, or a typed {@link ToolError} when the toolkit is made with `onBadCall: "fail"`. It never
 * crashes the trajectory.
 *
 * @since 0.3.0
 */
import { Duration, Effect, Schema, SchemaParser } from "effect"
import { isRecord } from "./internal/inspect.js"
import * as Issue from "./internal/issue.js"
import { describe, hasTag, liftMaybe } from "./internal/lift.js"
import type { MaybeEffect } from "./internal/lift.js"
import { readArguments } from "./internal/toolArguments.js"
import * as Message from "./Message.js"

/**
 * A tool as the model sees it. `parameters` is a JSON Schema of the arguments object.
 *
 * @since 0.3.0
 * @category models
 */
export interface Spec {
  readonly name: string
  readonly description: string
  readonly parameters: Readonly<Record<string, unknown>>
}

/**
 * A spec in OpenAI's `tools` format: `{ type: "function", function: { name, description, parameters } }`.
 *
 * @since 0.3.0
 * @category encoding
 */
export const toOpenAi = (spec: Spec): {
  readonly type: "function"
  readonly function: Spec
} => ({ type: "function", function: { name: spec.name, description: spec.description, parameters: spec.parameters } })

/**
 * How the model may use the tools (OpenAI's `tool_choice`): `auto` (the default when tools are
 * offered), `none`, `required`, or one tool by name.
 *
 * @since 0.3.0
 * @category models
 */
export type Choice = "auto" | "none" | "required" | { readonly name: string }

/**
 * @since 0.3.0
 * @category encoding
 */
export const choiceToOpenAi = (choice: Choice): string | { readonly type: "function"; readonly function: { readonly name: string } } =>
  typeof choice === "string" ? choice : { type: "function", function: { name: choice.name } }

/**
 * A tool call that could not be answered.
 *
 * - `UnknownTool`: no tool of that name is offered.
 * - `MalformedArguments`: the arguments are not a JSON object.
 * - `InvalidArguments`: the tool's Schema refused them (`detail` names the field).
 * - `TooLarge`: the arguments, or the tool's result, are longer than the toolkit's limit.
 * - `Failed`: the tool failed or threw.
 * - `Timeout`: the tool took longer than the toolkit's timeout.
 *
 * @since 0.3.0
 * @category errors
 */
export class ToolError extends Schema.TaggedError<ToolError>()("ToolError", {
  tool: Schema.String,
  toolCallId: Schema.String,
  reason: Schema.Literals(["UnknownTool", "MalformedArguments", "InvalidArguments", "TooLarge", "Failed", "Timeout"]),
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `tool ${this.tool} (call ${this.toolCallId}): ${this.reason}: ${this.detail}`
  }
}

/**
 * A tool: its spec and its call, which takes the raw arguments (JSON text), decodes them and runs.
 *
 * @since 0.3.0
 * @category models
 */
export interface Tool<R = never> {
  readonly spec: Spec
  /** Runs the tool on decoded arguments (JSON already parsed); fails with `InvalidArguments` or `Failed`. */
  readonly run: (args: unknown, toolCallId: string) => Effect.Effect<string, ToolError, R>
}

/**
 * A tool's result as the content of its message: text as it is, anything else as JSON (NaN is
 * `null`, as JSON has it: `{"a":NaN}` was sent before), or as text when JSON cannot write it.
 */
const contentOf = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    const json = JSON.stringify(value)
    if (json !== undefined) return json
  } catch {
    // a BigInt or a cycle: described below
  }
  return describe(value)
}

/**
 * The JSON Schema of a Schema, with its definitions (if any) inlined as `$defs`. An empty
 * `Schema.Struct({})` (a tool without arguments) is written `{ not: { type: "null" } }` by Effect,
 * as TypeScript's `{}` takes any value but null; a tool's arguments are always an object, and
 * OpenAI's API and `check-env` need `type: "object"`, so it becomes an object of no properties.
 */
const parametersOf = (schema: Schema.Top): Readonly<Record<string, unknown>> => {
  const document = Schema.toJsonSchemaDocument(schema)
  const written = document.schema as Record<string, unknown>
  const { not, ...rest } = written
  const root = written.type === undefined && isRecord(not) && not.type === "null" && Object.keys(not).length === 1
    ? { type: "object", properties: {}, ...rest }
    : written
  return Object.keys(document.definitions).length === 0 ? root : { ...root, $defs: document.definitions }
}

const TOOL_ERROR = new Set(["ToolError"])

/** A tool's failure as text: its message, or for a tagged error without one, its tag and fields. */
const failureText = (cause: unknown): string => {
  const text = describe(cause)
  if (text !== "" || typeof cause !== "object" || cause === null) return text
  const fields: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(cause)) if (key !== "stack" && key !== "cause") fields[key] = value
  const tag = (cause as { readonly _tag?: unknown })._tag
  return `${typeof tag === "string" ? tag : "failure"} ${describe(fields)}`
}

/**
 * A tool from a Schema for its arguments and a function of the decoded arguments, which may return
 * a value, a Promise or an Effect (text as it is; anything else is sent as JSON). The spec's
 * `parameters` is the Schema's JSON Schema.
 *
 * @example
 * const add = Tool.make({
 *   name: "add",
 *   description: "Adds two numbers",
 *   parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
 *   run: ({ a, b }) => Effect.succeed(a + b)
 * })
 *
 * @since 0.3.0
 * @category constructors
 */
export const make = <A, I, RD = never, R = never>(options: {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Codec<A, I, RD>
  readonly run: (args: A) => MaybeEffect<unknown> | Effect.Effect<unknown, unknown, R>
}): Tool<R | RD> => {
  const decode = SchemaParser.decodeUnknownEffect(options.parameters, Issue.parseOptions)
  const name = options.name
  return {
    spec: { name, description: options.description, parameters: parametersOf(options.parameters) },
    run: (args, toolCallId) =>
      decode(args).pipe(
        Effect.mapError((error) => {
          const problem = Issue.first(error)
          const where = problem.path.length === 0 ? "" : `${problem.path.map(String).join(".")}: `
          return new ToolError({ tool: name, toolCallId, reason: "InvalidArguments", detail: `${where}${problem.message}` })
        }),
        Effect.flatMap((decoded) =>
          liftMaybe(
            () => options.run(decoded) as MaybeEffect<unknown>,
            (cause) =>
              hasTag(cause, TOOL_ERROR)
                ? cause as ToolError
                : new ToolError({ tool: name, toolCallId, reason: "Failed", detail: failureText(cause), cause })
          ) as Effect.Effect<unknown, ToolError, R>
        ),
        Effect.map(contentOf)
      )
  }
}

/**
 * What a toolkit made of one assistant message: the tool messages (one per call, in order) and the
 * calls that went wrong (each also answered by a message saying so).
 *
 * @since 0.3.0
 * @category models
 */
export interface Handled {
  readonly messages: ReadonlyArray<Message.Message>
  readonly errors: ReadonlyArray<ToolError>
}

/**
 * The longest tool-call arguments text taken by default, in characters: `Tool.toolkit`'s, and the
 * OpenEnv scheduler's for the calls it sends to an MCP server.
 *
 * @since 0.3.0
 * @category constants
 */
export const MAX_ARGUMENTS_LENGTH = 65_536

/**
 * @since 0.3.0
 * @category models
 */
export interface ToolkitOptions {
  /** A bad call answered by a tool message saying what is wrong (`message`, the default) or a failure. */
  readonly onBadCall?: "message" | "fail" | undefined
  /** Each call's limit (default 30 seconds). */
  readonly timeout?: Duration.Input | undefined
  /** The longest arguments text taken, in characters (default 65,536). */
  readonly maxArgumentsLength?: number | undefined
  /**
   * The longest result sent back, in characters (default 1,048,576): a longer one is answered
   * `TooLarge`, as it would be the model's next prompt (a tool that returned 100 MB was sent whole).
   */
  readonly maxResultLength?: number | undefined
}

/**
 * Tools offered together.
 *
 * @since 0.3.0
 * @category models
 */
export interface Toolkit<R = never, E extends ToolError = never> {
  readonly tools: ReadonlyArray<Tool<R>>
  readonly specs: ReadonlyArray<Spec>
  /** Answers one call. */
  readonly call: (call: Message.ToolCall) => Effect.Effect<Message.Message, ToolError, R>
  /**
   * Answers an assistant message's calls in order (a message without calls gives none). With
   * `onBadCall: "message"` (the default) it never fails (`E` is `never`): a bad call is answered by a
   * message; with `"fail"` it fails with the first bad call's `ToolError`.
   */
  readonly handle: (message: Message.Message) => Effect.Effect<Handled, E, R>
}

/** The content of the tool message that answers a bad call. */
export const errorContent = (error: ToolError): string => `Error: ${error.reason}: ${error.detail}`

/**
 * A toolkit of `tools`. Calls of one message run one after another, in order (tools may share
 * state). A name offered twice is answered by the first tool of that name.
 *
 * @since 0.3.0
 * @category constructors
 */
export const toolkit: {
  <R>(tools: ReadonlyArray<Tool<R>>, options: ToolkitOptions & { readonly onBadCall: "fail" }): Toolkit<R, ToolError>
  <R>(tools: ReadonlyArray<Tool<R>>, options?: ToolkitOptions & { readonly onBadCall?: "message" | undefined }): Toolkit<R>
} = (<R>(tools: ReadonlyArray<Tool<R>>, options: ToolkitOptions = {}): Toolkit<R, ToolError> => {
  const byName = new Map<string, Tool<R>>()
  for (const tool of tools) if (!byName.has(tool.spec.name)) byName.set(tool.spec.name, tool)
  const timeout = Duration.fromInputUnsafe(options.timeout ?? "30 seconds")
  const maxLength = options.maxArgumentsLength ?? MAX_ARGUMENTS_LENGTH
  const maxResult = options.maxResultLength ?? 1_048_576
  const failWith = options.onBadCall === "fail"
  const names = [...byName.keys()].join(", ")

  const call = (toolCall: Message.ToolCall): Effect.Effect<Message.Message, ToolError, R> => {
    const id = toolCall.id
    const name = toolCall.function.name
    const bad = (reason: ToolError["reason"], detail: string) =>
      Effect.fail(new ToolError({ tool: name, toolCallId: id, reason, detail }))
    const tool = byName.get(name)
    if (tool === undefined) {
      return bad("UnknownTool", `no tool ${JSON.stringify(name)}; the tools are ${names === "" ? "none" : names}`)
    }
    const read = readArguments(toolCall.function.arguments, maxLength)
    if (!("args" in read)) return bad(read.reason, read.detail)
    return tool.run(read.args, id).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => bad("Timeout", `no answer within ${Duration.format(timeout)}`)
      }),
      Effect.flatMap((content) =>
        content.length > maxResult
          ? bad("TooLarge", `the result is ${content.length} characters; the limit is ${maxResult}`)
          : Effect.succeed(Message.tool(id, name, content))
      )
    )
  }

  const handle = (message: Message.Message): Effect.Effect<Handled, ToolError, R> => {
    const calls = message.tool_calls ?? []
    const errors: Array<ToolError> = []
    return Effect.map(
      Effect.forEach(calls, (toolCall) =>
        failWith ? call(toolCall) : Effect.catch(call(toolCall), (error) => {
          errors.push(error)
          return Effect.succeed(Message.tool(toolCall.id, toolCall.function.name, errorContent(error)))
        })),
      (messages) => ({ messages, errors })
    )
  }

  return { tools, specs: [...byName.values()].map((tool) => tool.spec), call, handle }
  // (one implementation; the overloads say that only onBadCall: "fail" makes `handle` fail)
}) as typeof toolkit
