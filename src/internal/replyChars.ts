/**
 * The completion length in characters, as the run's summary and the viewer count it when there are
 * no token ids: what the model wrote, its text and its tool calls.
 */
import { isRecord } from "./inspect.js"

/**
 * The characters the model wrote in one message: an assistant's text and each of its tool calls'
 * name and arguments (0 for any other message). Text alone counted a reply of tool calls as 0: the
 * kv_store solver's 1,048 calls showed "0.0 characters per trajectory".
 */
export const replyChars = (message: unknown): number => {
  if (!isRecord(message) || message.role !== "assistant") return 0
  let chars = typeof message.content === "string" ? message.content.length : 0
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      const f = isRecord(call) && isRecord(call.function) ? call.function : undefined
      if (f === undefined) continue
      chars += (typeof f.name === "string" ? f.name.length : 0) + (typeof f.arguments === "string" ? f.arguments.length : 0)
    }
  }
  return chars
}
