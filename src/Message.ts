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
 * One chat message. Content is text: the env renders observations as text and the model answers
 * in text.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Message = Schema.Struct({
  role: Role,
  content: Schema.String
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
export const assistant = (content: string): Message => ({ role: "assistant", content })

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
