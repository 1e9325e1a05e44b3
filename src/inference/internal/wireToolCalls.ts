/**
 * Tool calls as servers send them in a reply (OpenAI's `tool_calls`, ms-swift's
 * `ChatCompletionMessageToolCall`), read into the conversation's calls. Shared by server mode and
 * swift-rollout mode. Internal.
 */
import { Schema } from "effect"
import type { ToolCall } from "../../Message.js"

/** A tool call as servers send it: `arguments` JSON text (some send an object), `id` sometimes missing. */
export const WireToolCall = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.optional(Schema.NullOr(Schema.Union([Schema.String, Schema.Record(Schema.String, Schema.Unknown)])))
  })
})

/** The calls with an id each (`<idPrefix>_<i>` when the server gave none) and their arguments as JSON text. */
export const toolCallsOf = (calls: ReadonlyArray<typeof WireToolCall.Type>, idPrefix: string): Array<ToolCall> =>
  calls.map((call, i): ToolCall => ({
    id: call.id ?? `${idPrefix}_${i}`,
    type: "function",
    function: {
      name: call.function.name,
      arguments: typeof call.function.arguments === "string" ? call.function.arguments : JSON.stringify(call.function.arguments ?? {})
    }
  }))
