/**
 * A model's own chat template (the Jinja source from `tokenizer_config.json`, `chat_template.jinja`
 * or a GGUF's `tokenizer.chat_template`), rendered as Hugging Face's
 * `apply_chat_template(messages, add_generation_prompt=...)` renders it.
 *
 * Rendering uses `@huggingface/jinja` (pinned), whose output matches Python's jinja2 on chat
 * templates except for one thing: its string methods `strip`, `lstrip` and `rstrip` ignore their
 * argument (`x.lstrip('\n')` strips every kind of whitespace), and Qwen3's template relies on the
 * argument to keep the model's own spacing. The parsed template is therefore rewritten once, at
 * load: every `VALUE.strip(...)`, `.lstrip(...)`, `.rstrip(...)` call becomes a call to a helper
 * with Python's `str.strip` semantics (whitespace as `str.isspace` defines it, or exactly the
 * characters given).
 *
 * The render context is Hugging Face's: `messages`, `add_generation_prompt`, `tools` and `documents`
 * (`None` unless given: templates test `tools is not none`), the tokenizer's special
 * tokens (`bos_token`, `eos_token`, ...), then the chat-template kwargs (`enable_thinking`, ...), and
 * the `raise_exception` and `strftime_now` globals. Booleans are written as Python writes them
 * (`True`, `False`) in output (`{{ flag }}`) and in `~`; `flag|string` still gives `true` (the
 * library's filter spells it out), and `{{ none }}` writes nothing where jinja2 writes `None`.
 *
 * Tools are passed as transformers passes them (`tools=[{"type": "function", "function": {name,
 * description, parameters}}]`), and messages as vLLM hands them to transformers: an assistant
 * message's `tool_calls` as `[{id, type, function: {name, arguments}}]` with `arguments` parsed from
 * its JSON text into an object (templates expect a dict: Llama 3.1's writes `arguments | tojson`;
 * `""` is `{}`, text that is not JSON stays text), a tool message with its `tool_call_id` and `name`.
 * Keys a message does not have are absent, not null (Llama 3.1's template tests `'tool_calls' in
 * message`). One difference remains: JSON numbers are JavaScript's, so an argument written `4.0`
 * renders `4` where Python renders `4.0`.
 *
 * @since 0.2.0
 */
import { Environment, Template } from "@huggingface/jinja"
import { Data, Result } from "effect"
import type { Message, ToolCall } from "../Message.js"
import * as Tool from "../Tool.js"

/**
 * @since 0.2.0
 * @category errors
 */
export class ChatTemplateError extends Data.TaggedError("ChatTemplateError")<{
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return this.detail
  }
}

/**
 * @since 0.2.0
 * @category models
 */
export interface RenderOptions {
  /** Append the template's generation prompt (what the model continues from). */
  readonly addGenerationPrompt: boolean
  /** The chat-template kwargs (`{"enable_thinking": false}`): variables of the template. */
  readonly kwargs?: Readonly<Record<string, unknown>> | undefined
  /** The tools offered (the template's `tools`; absent or empty: `None`). */
  readonly tools?: ReadonlyArray<Tool.Spec> | undefined
}

/**
 * @since 0.2.0
 * @category models
 */
export interface ChatTemplate {
  readonly source: string
  readonly render: (
    messages: ReadonlyArray<Message>,
    options: RenderOptions
  ) => Result.Result<string, ChatTemplateError>
}

/** Kwargs that the renderer sets itself; a user's kwargs cannot replace them (HF raises too). */
export const RESERVED_KWARGS: ReadonlyArray<string> = ["messages", "add_generation_prompt"]

// Python's str.isspace() characters (Unicode White_Space plus the ASCII separators \x1c-\x1f).
const PY_SPACE = new Set(
  [
    0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003,
    0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000
  ].map((c) => String.fromCharCode(c))
)

/** Python's `str.strip` family: `chars` null/undefined strips whitespace, otherwise exactly those characters. */
export const pyStrip = (value: string, chars: string | null | undefined, side: "both" | "left" | "right"): string => {
  const strip = chars === null || chars === undefined ? (c: string) => PY_SPACE.has(c) : (c: string) => chars.includes(c)
  // Code points, so that a character outside the BMP given in `chars` is matched whole.
  const points = Array.from(value)
  let start = 0
  let end = points.length
  if (side !== "right") while (start < end && strip(points[start])) start++
  if (side !== "left") while (end > start && strip(points[end - 1])) end--
  return start === 0 && end === points.length ? value : points.slice(start, end).join("")
}

const HELPER = "__effect_gym_pystr"
const STRIPS: Readonly<Record<string, "both" | "left" | "right">> = { strip: "both", lstrip: "left", rstrip: "right" }

interface Node {
  type?: unknown
  [key: string]: unknown
}

const isNode = (value: unknown): value is Node =>
  typeof value === "object" && value !== null && typeof (value as Node).type === "string"

/** The parser's own node classes (not exported), taken from a parsed call `h.f(a)`. */
const Nodes = (() => {
  const call = (new Template("{{ h.f(a) }}").parsed as unknown as { body: ReadonlyArray<Node> }).body[0]
  const member = call.callee as Node
  return {
    Call: call.constructor as new(callee: Node, args: ReadonlyArray<unknown>) => Node,
    Member: member.constructor as new(object: Node, property: Node, computed: boolean) => Node,
    Identifier: (member.object as Node).constructor as new(value: string) => Node
  }
})()

const helperCall = (method: string, args: ReadonlyArray<unknown>): Node =>
  new Nodes.Call(new Nodes.Member(new Nodes.Identifier(HELPER), new Nodes.Identifier(method), false), args)

/**
 * Rewrites, in place, `X.strip(args)` (and lstrip/rstrip) to `__effect_gym_pystr.strip(X, args)` and
 * `A ~ B` to `__effect_gym_pystr.concat(A, B)`. Returns how many were rewritten.
 */
const rewrite = (root: unknown): number => {
  let count = 0
  const seen = new Set<unknown>()
  const visit = (value: unknown): unknown => {
    if (typeof value !== "object" || value === null || seen.has(value)) return value
    seen.add(value)
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) value[i] = visit(value[i])
      return value
    }
    const node = value as Node
    for (const key of Object.keys(node)) node[key] = visit(node[key])
    if (node.type === "BinaryExpression" && (node.operator as { value?: unknown } | undefined)?.value === "~") {
      count++
      return helperCall("concat", [node.left, node.right])
    }
    if (node.type !== "CallExpression") return node
    const callee = node.callee
    if (!isNode(callee) || callee.type !== "MemberExpression" || callee.computed === true) return node
    const property = callee.property
    if (!isNode(property) || property.type !== "Identifier" || typeof property.value !== "string") return node
    if (!(property.value in STRIPS) || !Array.isArray(node.args)) return node
    count++
    return helperCall(property.value, [callee.object, ...node.args])
  }
  visit(root)
  return count
}

/**
 * A side of `~`: a boolean as Python writes it, the rest as `@huggingface/jinja` does (a none or
 * undefined value, which reach a helper alike, fails as it fails there).
 */
const concatSide = (value: unknown): string => {
  if (typeof value === "boolean") return value ? "True" : "False"
  if (value === undefined || value === null) throw new Error("Cannot perform operation ~ on undefined or none values")
  return String(value)
}

/** `@huggingface/jinja`'s boolean value class (not exported), from a variable set in an environment. */
const BooleanValue = (() => {
  const environment = new Environment()
  environment.set("b", true)
  return environment.lookupVariable("b").constructor as { prototype: { toString(): string } }
})()

/** Python's `str(True)`: what `{{ flag }}` writes. */
function pyBool(this: { readonly value: boolean }): string {
  return this.value ? "True" : "False"
}

/**
 * Runs `render` with booleans written as Python writes them. The library writes `true`; its boolean
 * class is patched for the (synchronous) render only, so other users of the library see no change.
 */
const withPythonBooleans = <A>(render: () => A): A => {
  const prototype = BooleanValue.prototype
  const own = Object.getOwnPropertyDescriptor(prototype, "toString")
  Object.defineProperty(prototype, "toString", { value: pyBool, configurable: true, writable: true })
  try {
    return render()
  } finally {
    if (own === undefined) delete (prototype as { toString?: unknown }).toString
    else Object.defineProperty(prototype, "toString", own)
  }
}

const helper = {
  strip: (value: unknown, chars?: unknown) => stripValue(value, chars, "both"),
  lstrip: (value: unknown, chars?: unknown) => stripValue(value, chars, "left"),
  rstrip: (value: unknown, chars?: unknown) => stripValue(value, chars, "right"),
  concat: (left: unknown, right: unknown) => concatSide(left) + concatSide(right)
}

const stripValue = (value: unknown, chars: unknown, side: "both" | "left" | "right"): string => {
  if (typeof value !== "string") throw new Error(`${STRIP_NAME[side]}() is a string method, called on ${typeof value}`)
  if (chars !== undefined && chars !== null && typeof chars !== "string") {
    throw new Error(`${STRIP_NAME[side]}() arg must be None or str`)
  }
  return pyStrip(value, chars as string | null | undefined, side)
}

const STRIP_NAME = { both: "strip", left: "lstrip", right: "rstrip" } as const

/** A call's arguments as vLLM gives them to a template: the JSON text's value (`""`: `{}`), or the text when it is not JSON. */
const callArguments = (text: string): unknown => {
  if (text === "") return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const templateCall = (call: ToolCall) => ({
  id: call.id,
  type: call.type,
  function: { name: call.function.name, arguments: callArguments(call.function.arguments) }
})

/**
 * A message as the template sees it: role and content, then only the tool fields it has (an empty
 * `tool_calls` is left out, as the chat API leaves it out).
 *
 * @since 0.3.0
 * @category rendering
 */
export const templateMessage = (m: Message): Record<string, unknown> => {
  const out: Record<string, unknown> = { role: m.role, content: m.content }
  if (m.tool_calls !== undefined && m.tool_calls.length > 0) out.tool_calls = m.tool_calls.map(templateCall)
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id
  if (m.name !== undefined) out.name = m.name
  return out
}

/**
 * Parses a chat template. `specialTokens` are the tokenizer's (`bos_token`, `eos_token`, ...), as
 * strings; they are variables of every render.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (
  source: string,
  specialTokens: Readonly<Record<string, unknown>> = {}
): Result.Result<ChatTemplate, ChatTemplateError> => {
  let template: Template
  try {
    template = new Template(source)
  } catch (cause) {
    return Result.fail(
      new ChatTemplateError({ detail: `the chat template does not parse: ${(cause as Error).message ?? cause}`, cause })
    )
  }
  rewrite(template.parsed)
  const render = (
    messages: ReadonlyArray<Message>,
    options: RenderOptions
  ): Result.Result<string, ChatTemplateError> => {
    try {
      return Result.succeed(withPythonBooleans(() =>
        template.render({
          ...specialTokens,
          // transformers' apply_chat_template passes both, None unless given.
          tools: null,
          documents: null,
          ...options.kwargs,
          ...(options.tools === undefined || options.tools.length === 0 ? {} : { tools: options.tools.map(Tool.toOpenAi) }),
          [HELPER]: helper,
          messages: messages.map(templateMessage),
          add_generation_prompt: options.addGenerationPrompt
        })
      ))
    } catch (cause) {
      return Result.fail(
        new ChatTemplateError({ detail: `the chat template failed: ${(cause as Error).message ?? cause}`, cause })
      )
    }
  }
  return Result.succeed({ source, render })
}
