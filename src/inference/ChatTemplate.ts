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
 * The render context is Hugging Face's: `messages`, `add_generation_prompt`, the tokenizer's special
 * tokens (`bos_token`, `eos_token`, ...), then the chat-template kwargs (`enable_thinking`, ...), and
 * the `raise_exception` and `strftime_now` globals.
 *
 * @since 0.2.0
 */
import { Template } from "@huggingface/jinja"
import { Data, Result } from "effect"
import type { Message } from "../Message.js"

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

/**
 * Rewrites `X.strip(args)` (and lstrip/rstrip) to `__effect_gym_pystr.strip(X, args)`, in place.
 * Identifier nodes are made with the parser's own Identifier class (taken from the method name).
 * Returns how many calls were rewritten.
 */
const rewriteStrips = (root: unknown): number => {
  let count = 0
  const seen = new Set<unknown>()
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null || seen.has(value)) return
    seen.add(value)
    if (Array.isArray(value)) {
      for (const item of value) visit(item)
      return
    }
    const node = value as Node
    for (const key of Object.keys(node)) visit(node[key])
    if (node.type !== "CallExpression") return
    const callee = node.callee
    if (!isNode(callee) || callee.type !== "MemberExpression" || callee.computed === true) return
    const property = callee.property
    if (!isNode(property) || property.type !== "Identifier" || typeof property.value !== "string") return
    if (!(property.value in STRIPS) || !Array.isArray(node.args)) return
    const Identifier = property.constructor as new(value: string) => Node
    const target = callee.object
    callee.object = new Identifier(HELPER)
    node.args = [target, ...node.args]
    count++
  }
  visit(root)
  return count
}

const helper = {
  strip: (value: unknown, chars?: unknown) => stripValue(value, chars, "both"),
  lstrip: (value: unknown, chars?: unknown) => stripValue(value, chars, "left"),
  rstrip: (value: unknown, chars?: unknown) => stripValue(value, chars, "right")
}

const stripValue = (value: unknown, chars: unknown, side: "both" | "left" | "right"): string => {
  if (typeof value !== "string") throw new Error(`${STRIP_NAME[side]}() is a string method, called on ${typeof value}`)
  if (chars !== undefined && chars !== null && typeof chars !== "string") {
    throw new Error(`${STRIP_NAME[side]}() arg must be None or str`)
  }
  return pyStrip(value, chars as string | null | undefined, side)
}

const STRIP_NAME = { both: "strip", left: "lstrip", right: "rstrip" } as const

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
  rewriteStrips(template.parsed)
  const render = (
    messages: ReadonlyArray<Message>,
    options: RenderOptions
  ): Result.Result<string, ChatTemplateError> => {
    try {
      return Result.succeed(template.render({
        ...specialTokens,
        ...options.kwargs,
        [HELPER]: helper,
        messages: messages.map((m) => ({ role: m.role, content: m.content })),
        add_generation_prompt: options.addGenerationPrompt
      }))
    } catch (cause) {
      return Result.fail(
        new ChatTemplateError({ detail: `the chat template failed: ${(cause as Error).message ?? cause}`, cause })
      )
    }
  }
  return Result.succeed({ source, render })
}
