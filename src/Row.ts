/**
 * Dataset rows: one JSON object per JSONL line, decoded with a schema. `messages` (optional: the env
 * usually writes the prompt) and `env_config` are typed; every other column is kept as the row's
 * data and reaches the env as `dataDict` (which also holds `env_config`, as in the reference).
 *
 * Errors name the file, the line and the field.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema, SchemaParser, Stream } from "effect"
import type { EnvConfig } from "./Env.js"
import * as Issue from "./internal/issue.js"
import * as Json from "./internal/Json.js"
import { Messages } from "./Message.js"
import type { Message } from "./Message.js"
import { errorMessage } from "./internal/lift.js"

/**
 * (Rows are JSON: their optional fields are absent, never `undefined`.)
 *
 * @since 0.1.0
 * @category schemas
 */
export const EnvConfigSchema = Schema.StructWithRest(
  Schema.Struct({
    name: Schema.optionalKey(Schema.String.check(Schema.isMinLength(1, { expected: "a string at least 1 character(s) long" })))
  }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

/**
 * The typed part of a row; other columns pass through untouched.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RowSchema = Schema.StructWithRest(
  Schema.Struct({
    messages: Schema.optionalKey(Messages),
    env_config: Schema.optionalKey(EnvConfigSchema)
  }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

/**
 * A decoded row.
 *
 * @since 0.1.0
 * @category models
 */
export interface Row {
  /** The file the row comes from (for error messages). */
  readonly file: string
  /** 0-based index of the row's line in its file (the `row` of completions lines). */
  readonly index: number
  readonly messages: ReadonlyArray<Message>
  readonly envConfig: EnvConfig
  /** Every column except `messages` (so `env_config` too). */
  readonly dataDict: Readonly<Record<string, unknown>>
}

/**
 * A line of a dataset that cannot be used. `line` is 1-based; `path` is the field (`env_config.size`)
 * or empty when the whole line is at fault.
 *
 * @since 0.1.0
 * @category errors
 */
export class RowError extends Schema.TaggedError<RowError>()("RowError", {
  file: Schema.String,
  line: Schema.Number,
  path: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.file}:${this.line}: ${this.path === "" ? "" : `${this.path}: `}${this.detail}`
  }
}

const decodeRow = SchemaParser.decodeUnknownResult(RowSchema, Issue.parseOptions)

/**
 * A schema issue's path as written in errors: `env_config.size`, `messages[2].content`.
 *
 * @since 0.1.0
 * @category errors
 */
export const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`)).join("")

/**
 * Decodes an already parsed JSON value as the row at `index` (0-based) of `file`.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeValue = (file: string, index: number, value: unknown): Result.Result<Row, RowError> => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return Result.fail(
      new RowError({
        file,
        line: index + 1,
        path: "",
        detail: `expected a JSON object, got ${Array.isArray(value) ? "an array" : value === null ? "null" : typeof value}`
      })
    )
  }
  return Result.match(decodeRow(value), {
    onFailure: (issue) => {
      const first = Issue.first(issue)
      return Result.fail(
        new RowError({
          file,
          line: index + 1,
          path: formatPath(first.path),
          detail: first.message
        })
      )
    },
    onSuccess: (decoded) => {
      const dataDict: Record<string, unknown> = {}
      for (const key of Object.keys(value)) {
        if (key !== "messages") dataDict[key] = (value as Record<string, unknown>)[key]
      }
      return Result.succeed<Row>({
        file,
        index,
        messages: decoded.messages ?? [],
        envConfig: (decoded.env_config ?? {}) as EnvConfig,
        dataDict
      })
    }
  })
}

/**
 * Parses and decodes one JSONL line. Blank lines give `undefined` (they are skipped, and line
 * numbers stay those of the file).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeLine = (
  file: string,
  index: number,
  text: string
): Result.Result<Row, RowError> | undefined => {
  const parsed = parseLine(file, index, text)
  return parsed === undefined ? undefined : Result.flatMap(parsed, (value) => decodeValue(file, index, value))
}

/**
 * Parses one JSONL line as JSON. Blank lines give `undefined`; malformed JSON is a `RowError` at
 * its line.
 *
 * @since 0.1.0
 * @category decoding
 */
export const parseLine = (file: string, index: number, text: string): Result.Result<unknown, RowError> | undefined => {
  if (text.trim() === "") return undefined
  let value: unknown
  try {
    value = Json.parse(text)
  } catch (error) {
    return Result.fail(new RowError({ file, line: index + 1, path: "", detail: `malformed JSON: ${errorMessage(error)}` }))
  }
  // A number literal too large for a double (1e400) parses as Infinity: say so where it is.
  if (HUGE_NUMBER.test(text)) {
    const where = nonFinite(value, [])
    if (where !== undefined) {
      return Result.fail(
        new RowError({
          file,
          line: index + 1,
          path: formatPath(where.path),
          detail: `the number is too large (beyond ±1.8e308, it would be ${where.value})`
        })
      )
    }
  }
  return Result.succeed(value)
}

/** A number with an exponent of 3+ digits, or 300+ digits in a row: the ones that may overflow. */
const HUGE_NUMBER = /\d[eE]\+?\d{3}|\d{300}/

const nonFinite = (
  value: unknown,
  path: Array<PropertyKey>
): { readonly path: ReadonlyArray<PropertyKey>; readonly value: number } | undefined => {
  if (typeof value === "number") return Number.isFinite(value) ? undefined : { path, value }
  if (typeof value !== "object" || value === null) return undefined
  for (const [key, child] of Object.entries(value)) {
    const found = nonFinite(child, [...path, Array.isArray(value) ? Number(key) : key])
    if (found !== undefined) return found
  }
  return undefined
}

/**
 * The lines of a text (split on `\n`, a trailing `\r` removed) with their 0-based indexes.
 *
 * @since 0.1.0
 * @category decoding
 */
export function* lines(text: string): Generator<readonly [index: number, line: string]> {
  let start = 0
  let index = 0
  while (start <= text.length) {
    let end = text.indexOf("\n", start)
    if (end === -1) end = text.length
    const line = text.charCodeAt(end - 1) === 13 ? text.slice(start, end - 1) : text.slice(start, end)
    yield [index, index === 0 ? stripBom(line) : line]
    index++
    start = end + 1
  }
}

/**
 * Decodes a whole JSONL text lazily, line by line.
 *
 * @since 0.1.0
 * @category decoding
 */
export function* decodeJsonl(file: string, text: string): Generator<Result.Result<Row, RowError>> {
  for (const [index, line] of lines(text)) {
    const decoded = decodeLine(file, index, line)
    if (decoded !== undefined) yield decoded
  }
}

/**
 * The number of non-blank lines of a JSONL text (the rows a run will see).
 *
 * @since 0.1.0
 * @category decoding
 */
export const countRows = (text: string): number => {
  let count = 0
  for (const [, line] of lines(text)) if (line.trim() !== "") count++
  return count
}

/**
 * A line of a byte stream: its 0-based index, and its text, or the reason its bytes are not text.
 *
 * @since 0.1.0
 * @category decoding
 */
export type Line = readonly [index: number, text: string, invalid?: string]

const NEWLINE = 0x0a

/**
 * The longest line a byte stream may have: 256 MiB. A longer one (a file without newlines,
 * `/dev/zero`) is reported as a bad line and skipped to its end, holding no more than this much
 * memory (it grew without bound, and a string cannot hold more than ~512 M characters anyway).
 *
 * @since 0.1.0
 * @category decoding
 */
export const MAX_LINE_BYTES = 256 * 1024 * 1024

/**
 * Splits bytes into lines as they come (`\n`, a trailing `\r` removed), decoding UTF-8 strictly:
 * a line that is not valid UTF-8 is reported with its line, not replaced with U+FFFD. Only the
 * bytes after the last newline are held between chunks (at most {@link MAX_LINE_BYTES}).
 */
class LineSplitter {
  // The bytes after the last newline, as the chunks they came in: joined once, when their line
  // ends (joining at every chunk made a 100 MB line cost minutes of copying).
  private carry: Array<Uint8Array> = []
  /** The bytes in `carry`. */
  private carried = 0
  /** In a line longer than the limit: its bytes are dropped up to its newline. */
  private skipping = false
  private index = 0
  private readonly decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })

  constructor(private readonly maxLineBytes: number) {}

  push(chunk: Uint8Array): Array<Line> {
    let rest = chunk
    let skipped: Line | undefined
    if (this.skipping || this.carried > 0) {
      const newline = rest.indexOf(NEWLINE)
      const over = this.skipping || this.carried + (newline < 0 ? rest.length : newline) > this.maxLineBytes
      if (over) {
        this.carry = []
        this.carried = 0
        this.skipping = newline < 0
        if (newline < 0) return []
        skipped = this.tooLong()
        rest = rest.subarray(newline + 1)
      }
    }
    const last = rest.lastIndexOf(NEWLINE)
    let out: Array<Line>
    if (last < 0) {
      if (rest.length > 0) {
        this.carry.push(rest)
        this.carried += rest.length
      }
      out = []
    } else {
      const data = this.take(rest.subarray(0, last))
      if (last + 1 < rest.length) {
        const tail = rest.slice(last + 1)
        this.carry.push(tail)
        this.carried = tail.length
      }
      out = this.lines(data)
    }
    if (skipped !== undefined) out.unshift(skipped)
    return out
  }

  /** The line being skipped, reported (it takes its index). */
  private tooLong(): Line {
    return [this.index++, "", `the line is longer than ${this.maxLineBytes} bytes (the longest a dataset's line may be)`]
  }

  end(): Array<Line> {
    if (this.skipping) {
      this.skipping = false
      return [this.tooLong()]
    }
    return this.lines(this.take(new Uint8Array(0)))
  }

  /** The carried bytes followed by `tail`, in one array; the carry is emptied. */
  private take(tail: Uint8Array): Uint8Array {
    if (this.carry.length === 0) return tail
    let length = tail.length
    for (const part of this.carry) length += part.length
    const data = new Uint8Array(length)
    let offset = 0
    for (const part of this.carry) {
      data.set(part, offset)
      offset += part.length
    }
    data.set(tail, offset)
    this.carry = []
    this.carried = 0
    return data
  }

  /** The lines of `bytes` (whole lines, the last without its newline). */
  private lines(bytes: Uint8Array): Array<Line> {
    let text: string | undefined
    // (bytes within the limit hold no line past it; else each line is measured below)
    if (bytes.length <= this.maxLineBytes) {
      try {
        text = this.decoder.decode(bytes)
      } catch {
        text = undefined
      }
    }
    const out: Array<Line> = []
    if (text !== undefined) {
      for (const [, line] of lines(text)) {
        out.push([this.index, this.index === 0 ? stripBom(line) : line])
        this.index++
      }
      return out
    }
    // Some line is not UTF-8, or may be too long: line by line, to find which.
    let start = 0
    for (;;) {
      let end = bytes.indexOf(NEWLINE, start)
      if (end < 0) end = bytes.length
      const lineBytes = bytes.subarray(start, end > start && bytes[end - 1] === 13 ? end - 1 : end)
      if (end - start > this.maxLineBytes) {
        out.push(this.tooLong())
        if (end >= bytes.length) break
        start = end + 1
        continue
      }
      try {
        const line = this.decoder.decode(lineBytes)
        out.push([this.index, this.index === 0 ? stripBom(line) : line])
      } catch {
        const at = firstInvalidUtf8(lineBytes)
        out.push([this.index, "", `invalid UTF-8 (byte ${at + 1} of the line)`])
      }
      this.index++
      if (end >= bytes.length) break
      start = end + 1
    }
    return out
  }
}

/** The first line without a byte order mark (editors on Windows write one; it is not JSON). */
const stripBom = (line: string): string => (line.charCodeAt(0) === 0xfeff ? line.slice(1) : line)

/** The offset of the first byte where `bytes` stops being valid UTF-8. */
const firstInvalidUtf8 = (bytes: Uint8Array): number => {
  const decoder = new TextDecoder("utf-8", { fatal: true })
  let low = 0
  let high = bytes.length
  // the longest valid prefix (ignoring a character cut at the end of the prefix)
  while (low < high) {
    const mid = (low + high + 1) >> 1
    try {
      decoder.decode(bytes.subarray(0, mid), { stream: true })
      decoder.decode()
      low = mid
    } catch {
      high = mid - 1
    }
  }
  return low
}

/**
 * The lines of a byte stream (a file read in chunks), decoded as UTF-8; memory holds one chunk and
 * the line being read, whatever the size of the whole. A line longer than `maxLineBytes` (default
 * {@link MAX_LINE_BYTES}) is reported as not readable, at its index, and skipped.
 *
 * @since 0.1.0
 * @category decoding
 */
export const streamLines = <E, R>(
  bytes: Stream.Stream<Uint8Array, E, R>,
  options: { readonly maxLineBytes?: number | undefined } = {}
): Stream.Stream<Line, E, R> =>
  Stream.suspend(() => {
    const splitter = new LineSplitter(options.maxLineBytes ?? MAX_LINE_BYTES)
    return Stream.concat(
      mapArrays(bytes, (chunks) => {
        const out: Array<Line> = []
        for (const chunk of chunks) for (const line of splitter.push(chunk)) out.push(line)
        return out
      }),
      // (the last line once the bytes have ended, not after a failure to read them)
      Stream.suspend(() => Stream.fromIterable(splitter.end()))
    )
  })

/**
 * Each array of a stream's elements mapped to an array of others, which may be empty (lines are
 * made of chunks of bytes: a chunk may end no line). `Stream.mapArray` must give a non-empty array.
 */
const mapArrays = <A, B, E, R>(
  self: Stream.Stream<A, E, R>,
  f: (as: ReadonlyArray<A>) => ReadonlyArray<B>
): Stream.Stream<B, E, R> => Stream.mapAccumArray(self, () => undefined, (state, as) => [state, f(as)])

/**
 * Decodes a JSONL byte stream (a dataset read from disk) into rows, line by line, with bounded
 * memory. Lines for which `skip(index)` holds are not decoded (a resumed run's finished rows).
 * A line that is not UTF-8 is a `RowError` at its line.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeStream = <E, R>(
  file: string,
  bytes: Stream.Stream<Uint8Array, E, R>,
  options: { readonly skip?: ((index: number) => boolean) | undefined } = {}
): Stream.Stream<Result.Result<Row, RowError>, E, R> => {
  const skip = options.skip
  return mapArrays(streamLines(bytes), (lines) => {
    const out: Array<Result.Result<Row, RowError>> = []
    for (const [index, text, invalid] of lines) {
      if (skip !== undefined && skip(index)) continue
      if (invalid !== undefined) {
        out.push(Result.fail(new RowError({ file, line: index + 1, path: "", detail: invalid })))
        continue
      }
      const decoded = decodeLine(file, index, text)
      if (decoded !== undefined) out.push(decoded)
    }
    return out
  })
}

/**
 * The rows of a JSONL byte stream (its non-blank lines, as {@link decodeStream} sees them), counted
 * without holding the stream.
 *
 * @since 0.1.0
 * @category decoding
 */
export const countStream = <E, R>(bytes: Stream.Stream<Uint8Array, E, R>): Effect.Effect<number, E, R> =>
  Stream.runFold(Stream.chunks(streamLines(bytes)), () => 0, (total, lines) => {
    for (const [, text, invalid] of lines) if (invalid !== undefined || text.trim() !== "") total++
    return total
  })
