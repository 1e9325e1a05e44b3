/**
 * Tool calls as servers send them in a reply (OpenAI's `tool_calls`, ms-swift's
 * `ChatCompletionMessageToolCall`), read into the conversation's calls. Shared by server mode and
 * swift-rollout mode. Internal.
 */
import { Schema } from "effect"
import type { ToolCall } from "../../Message.js"
import { MAX_JSON_DEPTH, nestsDeeper } from "../../internal/inspect.js"

/**
 * A tool call as servers send it: `arguments` JSON text (some send an object; any other JSON value is
 * kept as its JSON text, which the env's toolkit answers as malformed arguments rather than the whole
 * reply failing), `id` sometimes missing or empty.
 */
export const WireToolCall = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.optional(Schema.Unknown)
  })
})

/**
 * A wire call's arguments as JSON text. Arguments nested past any real ones become text that is
 * not JSON (the toolkit answers it as malformed): JSON.stringify overflowed the stack on 10,000
 * levels, and the trajectory ended with an UnexpectedError.
 */
const argumentsText = (args: unknown): string =>
  typeof args === "string"
    ? args
    : nestsDeeper(args)
    ? `(arguments nested deeper than ${MAX_JSON_DEPTH} levels)`
    : JSON.stringify(args ?? {})

/**
 * The calls with an id each (`<idPrefix>_<i>` when the server gave none, or an empty one: a tool
 * message's tool_call_id "" would match any other empty one) and their arguments as JSON text.
 */
export const toolCallsOf = (calls: ReadonlyArray<typeof WireToolCall.Type>, idPrefix: string): Array<ToolCall> =>
  calls.map((call, i): ToolCall => ({
    id: call.id == null || call.id === "" ? `${idPrefix}_${i}` : call.id,
    type: "function",
    function: { name: call.function.name, arguments: argumentsText(call.function.arguments) }
  }))
