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
 * message`). The arguments' numbers are read as Python's `json.loads` reads them (`4.0` stays a float,
 * and `tojson` and `{{ }}` write it `4.0`; an int beyond 2^53 stays exact), and every float is written
 * as Python writes it (`1e-05`, `1e+16`).
 *
 * @since 0.2.0
 */
import { Environment, Template } from "@huggingface/jinja"
import { Data, Result } from "effect"
import type { Message, ToolCall } from "../Message.js"
import * as Tool from "../Tool.js"
import * as PyJson from "./internal/pyJson.js"
import { PyNumber } from "./internal/pyJson.js"

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

interface RuntimeValue {
  readonly type: string
  readonly value: unknown
}

type RuntimeClass<V> = (new(value: V) => RuntimeValue) & { readonly prototype: { toString(): string } }

/** `@huggingface/jinja`'s value classes (not exported), from variables set in an environment. */
const Values = (() => {
  const environment = new Environment()
  const classOf = <V>(name: string, value: unknown) => {
    environment.set(name, value)
    return environment.lookupVariable(name).constructor as RuntimeClass<V>
  }
  return {
    Boolean: classOf<boolean>("b", true),
    Integer: classOf<number>("i", 1),
    Float: classOf<number>("f", 1.5),
    String: classOf<string>("s", ""),
    Null: classOf<undefined>("n", null),
    Array: classOf<Array<RuntimeValue>>("a", []),
    Object: classOf<Map<string, RuntimeValue>>("o", {})
  }
})()
const BooleanValue = Values.Boolean

/**
 * A value as the library converts it, except that a {@link PyNumber} is a float or an int as Python
 * has it (the library makes every whole JavaScript number an int).
 */
const toRuntime = (value: unknown, convert: (leaf: unknown) => RuntimeValue): RuntimeValue => {
  // The common leaves made here as the library makes them (a scratch environment per leaf costs).
  if (typeof value === "string") return new Values.String(value)
  if (typeof value === "boolean") return new Values.Boolean(value)
  if (value === null) return new Values.Null(undefined)
  if (typeof value === "number") return Number.isInteger(value) ? new Values.Integer(value) : new Values.Float(value)
  if (value instanceof PyNumber) return value.float ? new Values.Float(value as unknown as number) : new Values.Integer(value as unknown as number)
  if (Array.isArray(value)) return new Values.Array(value.map((v) => toRuntime(v, convert)))
  if (typeof value === "object" && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    return new Values.Object(new Map(Object.entries(value).map(([k, v]) => [k, toRuntime(v, convert)])))
  }
  return convert(value)
}

/** The variables whose values may hold {@link PyNumber}s (call arguments). */
const PYTHON_VALUED = new Set(["messages"])

/** Python's `str` of a float: `{{ x }}` of a float the library writes `1e-7` where Python writes `1e-07`. */
function pyFloat(this: { readonly value: number }): string {
  return pyFloatRepr(Number(this.value))
}

/** Python's `str(True)`: what `{{ flag }}` writes. */
function pyBool(this: { readonly value: boolean }): string {
  return this.value ? "True" : "False"
}

/** Sets `key` of `target` to `value` and returns how to put back what was there. */
const patch = (target: object, key: string, value: unknown): () => void => {
  const own = Object.getOwnPropertyDescriptor(target, key)
  Object.defineProperty(target, key, { value, configurable: true, writable: true })
  return () => {
    if (own === undefined) delete (target as Record<string, unknown>)[key]
    else Object.defineProperty(target, key, own)
  }
}

/**
 * Runs `render` with values as Python has them: booleans written `True` (the library writes `true`),
 * floats written as Python's `str` writes them, and the numbers of call arguments floats or ints as
 * `json.loads` read them (see {@link PyNumber}). The library's classes are patched for the
 * (synchronous) render only, so other users of the library see no change.
 */
const withPythonValues = <A>(render: () => A): A => {
  const set = Environment.prototype.set
  const restores = [
    patch(BooleanValue.prototype, "toString", pyBool),
    patch(Values.Float.prototype, "toString", pyFloat),
    patch(Environment.prototype, "set", function(this: Environment, name: string, value: unknown) {
      if (!PYTHON_VALUED.has(name)) return set.call(this, name, value)
      const converted = toRuntime(value, (leaf) => {
        const scratch = new Environment()
        set.call(scratch, "leaf", leaf)
        return scratch.lookupVariable("leaf") as unknown as RuntimeValue
      })
      return (this as unknown as { declareVariable(name: string, value: RuntimeValue): unknown }).declareVariable(name, converted)
    })
  ]
  try {
    return render()
  } finally {
    for (const restore of restores.reverse()) restore()
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

/**
 * Python's `repr` of a float (see `internal/pyJson`).
 *
 * @since 0.3.0
 * @category rendering
 */
export const pyFloatRepr = PyJson.floatRepr

/** A call's arguments as vLLM gives them to a template: the JSON text's value (`""`: `{}`), or the text when it is not JSON. */
const callArguments = (text: string): unknown => {
  if (text === "") return {}
  try {
    return PyJson.parse(text)
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
      return Result.succeed(withPythonValues(() =>
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
