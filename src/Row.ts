/**
 * Dataset rows: one JSON object per JSONL line, decoded with a schema. `messages` (optional: the env
 * usually writes the prompt) and `env_config` are typed; every other column is kept as the row's
 * data and reaches the env as `dataDict` (which also holds `env_config`, as in the reference).
 *
 * Errors name the file, the line and the field.
 *
 * @since 0.1.0
 */
import { Either, ParseResult, Schema } from "effect"
import type { EnvConfig } from "./Env.js"
import * as Json from "./internal/Json.js"
import { Messages } from "./Message.js"
import type { Message } from "./Message.js"
import { errorMessage } from "./internal/lift.js"

/**
 * @since 0.1.0
 * @category schemas
 */
export const EnvConfigSchema = Schema.Struct(
  { name: Schema.optional(Schema.String.pipe(Schema.minLength(1))) },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/**
 * The typed part of a row; other columns pass through untouched.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RowSchema = Schema.Struct(
  {
    messages: Schema.optional(Messages),
    env_config: Schema.optional(EnvConfigSchema)
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
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
export class RowError extends Schema.TaggedError<RowError>("effect-gym/RowError")("RowError", {
  file: Schema.String,
  line: Schema.Number,
  path: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.file}:${this.line}: ${this.path === "" ? "" : `${this.path}: `}${this.detail}`
  }
}

const decodeRow = ParseResult.decodeUnknownEither(RowSchema, { errors: "first" })

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
export const decodeValue = (file: string, index: number, value: unknown): Either.Either<Row, RowError> => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return Either.left(
      new RowError({
        file,
        line: index + 1,
        path: "",
        detail: `expected a JSON object, got ${Array.isArray(value) ? "an array" : value === null ? "null" : typeof value}`
      })
    )
  }
  return Either.match(decodeRow(value), {
    onLeft: (issue) => {
      const first = ParseResult.ArrayFormatter.formatIssueSync(issue)[0]
      return Either.left(
        new RowError({
          file,
          line: index + 1,
          path: formatPath(first?.path ?? []),
          detail: first?.message ?? "does not match the row schema"
        })
      )
    },
    onRight: (decoded) => {
      const dataDict: Record<string, unknown> = {}
      for (const key of Object.keys(value)) {
        if (key !== "messages") dataDict[key] = (value as Record<string, unknown>)[key]
      }
      return Either.right<Row>({
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
): Either.Either<Row, RowError> | undefined => {
  const parsed = parseLine(file, index, text)
  return parsed === undefined ? undefined : Either.flatMap(parsed, (value) => decodeValue(file, index, value))
}

/**
 * Parses one JSONL line as JSON. Blank lines give `undefined`; malformed JSON is a `RowError` at
 * its line.
 *
 * @since 0.1.0
 * @category decoding
 */
export const parseLine = (file: string, index: number, text: string): Either.Either<unknown, RowError> | undefined => {
  if (text.trim() === "") return undefined
  try {
    return Either.right(Json.parse(text))
  } catch (error) {
    return Either.left(new RowError({ file, line: index + 1, path: "", detail: `malformed JSON: ${errorMessage(error)}` }))
  }
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
    yield [index, text.charCodeAt(end - 1) === 13 ? text.slice(start, end - 1) : text.slice(start, end)]
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
export function* decodeJsonl(file: string, text: string): Generator<Either.Either<Row, RowError>> {
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
