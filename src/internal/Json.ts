/**
 * JSON for dataset lines and logs: integers beyond 2^53 (seeds, ids) are kept exact as `bigint`
 * instead of being rounded by `JSON.parse`, and written back as plain JSON integers.
 */

const LONG_DIGITS = /\d{16,}/

/** The position of a JSON syntax error, as a 0-based offset into the text. */
export class JsonSyntaxError extends Error {
  constructor(message: string, readonly offset: number) {
    super(message)
  }
}

/**
 * Parses one JSON text. Uses `JSON.parse` unless the text holds a run of 16+ digits, in which case
 * a small exact parser keeps unsafe integers as `bigint`.
 */
export const parse = (text: string): unknown => {
  if (!LONG_DIGITS.test(text)) {
    try {
      return JSON.parse(text)
    } catch (error) {
      // Re-parse with our parser to get a precise offset for the error message.
      new ExactParser(text).parseDocument()
      throw error
    }
  }
  return new ExactParser(text).parseDocument()
}

class ExactParser {
  private i = 0
  constructor(private readonly s: string) {}

  parseDocument(): unknown {
    this.ws()
    const value = this.value()
    this.ws()
    if (this.i < this.s.length) this.fail("Unexpected data after JSON value")
    return value
  }

  private fail(message: string): never {
    throw new JsonSyntaxError(`${message} at position ${this.i}`, this.i)
  }

  private ws(): void {
    const s = this.s
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i)
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.i++
      else break
    }
  }

  private value(): unknown {
    const c = this.s[this.i]
    switch (c) {
      case "{":
        return this.object()
      case "[":
        return this.array()
      case "\"":
        return this.string()
      case "t":
        return this.literal("true", true)
      case "f":
        return this.literal("false", false)
      case "n":
        return this.literal("null", null)
      default:
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number()
        return this.fail(c === undefined ? "Unexpected end of JSON input" : `Unexpected token ${JSON.stringify(c)}`)
    }
  }

  private literal<A>(word: string, value: A): A {
    if (this.s.startsWith(word, this.i)) {
      this.i += word.length
      return value
    }
    return this.fail("Unexpected token")
  }

  private object(): Record<string, unknown> {
    const out: Record<string, unknown> = {}
    this.i++
    this.ws()
    if (this.s[this.i] === "}") {
      this.i++
      return out
    }
    for (;;) {
      this.ws()
      if (this.s[this.i] !== "\"") this.fail("Expected a string key")
      const key = this.string()
      this.ws()
      if (this.s[this.i] !== ":") this.fail("Expected ':'")
      this.i++
      this.ws()
      Object.defineProperty(out, key, { value: this.value(), enumerable: true, writable: true, configurable: true })
      this.ws()
      const c = this.s[this.i++]
      if (c === "}") return out
      if (c !== ",") {
        this.i--
        this.fail("Expected ',' or '}'")
      }
    }
  }

  private array(): Array<unknown> {
    const out: Array<unknown> = []
    this.i++
    this.ws()
    if (this.s[this.i] === "]") {
      this.i++
      return out
    }
    for (;;) {
      this.ws()
      out.push(this.value())
      this.ws()
      const c = this.s[this.i++]
      if (c === "]") return out
      if (c !== ",") {
        this.i--
        this.fail("Expected ',' or ']'")
      }
    }
  }

  private string(): string {
    const start = this.i
    this.i++
    const s = this.s
    for (;;) {
      const c = s.charCodeAt(this.i)
      if (Number.isNaN(c)) this.fail("Unterminated string")
      if (c === 0x22) break
      if (c < 0x20) this.fail("Bad control character in string")
      if (c === 0x5c) this.i++
      this.i++
    }
    this.i++
    return JSON.parse(s.slice(start, this.i)) as string
  }

  private number(): number | bigint {
    const match = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i, this.i + 400))
    if (match === null) return this.fail("Bad number")
    this.i += match[0].length
    const text = match[0]
    if (match[1] === undefined && match[2] === undefined) {
      const n = Number(text)
      return Number.isSafeInteger(n) ? n : BigInt(text)
    }
    return Number(text)
  }
}

/**
 * `JSON.rawJSON` (Node 21 and later, so every Node the package supports: `engines` is >= 24; not in
 * TypeScript's ES2022 library): a text JSON.stringify writes as it is.
 */
const rawJSON = (JSON as unknown as { readonly rawJSON: (text: string) => unknown }).rawJSON

/**
 * `JSON.stringify` that writes `bigint` values as plain JSON integers: where it throws on one, written
 * again with each `bigint` as its digits (`JSON.rawJSON`). A string marker in its place, taken out of
 * the text with a regular expression afterwards, took 3.4 times as long (34 against 10 us a line
 * of 20 messages with a bigint seed: a log line stringified whole, not field by field, pays it for
 * the whole line); it was kept for Node 20, which the command line no longer runs on (it starts
 * again on Node 24, or refuses).
 */
export const stringify = (value: unknown): string => {
  try {
    return JSON.stringify(value)
  } catch (error) {
    // JSON.stringify throws a TypeError on bigint; anything else (cycles) is the caller's bug.
    if (!(error instanceof TypeError) || !/BigInt/i.test(error.message)) throw error
  }
  return JSON.stringify(value, (_key, v) => typeof v === "bigint" ? rawJSON(v.toString()) : v)
}

/** `maxSteps` as `max_steps`: the `--json` outputs' keys, as the completions log names its own. */
export const snakeCase = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)
