/**
 * A tool call's arguments text read as its arguments object, with the checks every caller of a
 * tool makes first: the length limit, JSON, an object. Shared by `Tool.toolkit` and the OpenEnv
 * scheduler's MCP calls. Internal.
 */
import { describe } from "./lift.js"

/** Why a call's arguments were refused: the `ToolError` reason and its detail. */
export interface Refused {
  readonly reason: "TooLarge" | "MalformedArguments"
  readonly detail: string
}

/**
 * The arguments object of `text` (an empty text is no arguments: some parsers write "" for a call
 * without them), or why not. `parse` reads the JSON (`JSON.parse`, or a reader that keeps long
 * integers exact).
 */
export const readArguments = (
  text: string,
  maxLength: number,
  parse: (text: string) => unknown = JSON.parse
): { readonly args: Record<string, unknown> } | Refused => {
  if (text.length > maxLength) return { reason: "TooLarge", detail: `the arguments are ${text.length} characters; the limit is ${maxLength}` }
  let args: unknown
  try {
    args = text.trim() === "" ? {} : parse(text)
  } catch (cause) {
    return { reason: "MalformedArguments", detail: `the arguments are not JSON: ${describe(cause)}` }
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    return { reason: "MalformedArguments", detail: `the arguments must be a JSON object, got ${describe(args).slice(0, 100)}` }
  }
  return { args: args as Record<string, unknown> }
}
