/**
 * Chat messages: the conversation a trajectory builds, turn by turn.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * @since 0.1.0
 * @category schemas
 */
export const Role = Schema.Literals(["system", "user", "assistant", "tool"])

/**
 * @since 0.1.0
 * @category models
 */
export type Role = typeof Role.Type

/**
 * A tool call of an assistant message, in OpenAI's format: `arguments` is the JSON text the model
 * wrote (decoded and checked by the tool, see `Tool`).
 *
 * @since 0.3.0
 * @category schemas
 */
export const ToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

/**
 * @since 0.3.0
 * @category models
 */
export interface ToolCall extends Schema.Schema.Type<typeof ToolCall> {}

/**
 * One chat message, in OpenAI's format. Content is text: the env renders observations as text and
 * the model answers in text. An assistant message may carry `tool_calls`; a `tool` message answers
 * one of them (`tool_call_id`, and the tool's `name`). Text conversations have neither.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Message = Schema.Struct({
  role: Role,
  content: Schema.String,
  tool_calls: Schema.optionalKey(Schema.Array(ToolCall)),
  tool_call_id: Schema.optionalKey(Schema.String),
  name: Schema.optionalKey(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export interface Message extends Schema.Schema.Type<typeof Message> {}

/**
 * @since 0.1.0
 * @category schemas
 */
export const Messages = Schema.Array(Message)

/**
 * @since 0.1.0
 * @category constructors
 */
export const system = (content: string): Message => ({ role: "system", content })

/**
 * @since 0.1.0
 * @category constructors
 */
export const user = (content: string): Message => ({ role: "user", content })

/**
 * @since 0.1.0
 * @category constructors
 */
export const assistant = (content: string, toolCalls?: ReadonlyArray<ToolCall> | undefined): Message =>
  toolCalls === undefined || toolCalls.length === 0
    ? { role: "assistant", content }
    : { role: "assistant", content, tool_calls: toolCalls }

/**
 * A tool's answer to the call `toolCallId` (of the tool `name`).
 *
 * @since 0.3.0
 * @category constructors
 */
export const tool = (toolCallId: string, name: string, content: string): Message => ({
  role: "tool",
  content,
  tool_call_id: toolCallId,
  name
})

/**
 * The content of the last message with the given role, or `undefined` when there is none.
 *
 * @since 0.1.0
 * @category getters
 */
export const lastOf = (messages: ReadonlyArray<Message>, role: Role): string | undefined => {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === role) return messages[i].content
  }
  return undefined
}
