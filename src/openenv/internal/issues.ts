/**
 * Schema errors as the OpenEnv protocol reports them: pydantic-style validation problems (`type`,
 * `loc`, `msg`, `input`), as the Python server's `VALIDATION_ERROR` frames and FastAPI's 422 bodies
 * carry them.
 */
import { Result, type Schema, SchemaIssue } from "effect"
import * as Json from "../../internal/Json.js"
import { errorMessage } from "../../internal/lift.js"
import type * as OpenEnvProtocol from "../OpenEnvProtocol.js"

/** One leaf of a schema issue, with the path it was found at. */
interface Leaf {
  readonly path: ReadonlyArray<PropertyKey>
  readonly issue: SchemaIssue.Issue
}

/** The leaves of a schema issue, in the order `SchemaIssue`'s Standard Schema formatter lists them. */
const leaves = (issue: SchemaIssue.Issue, path: ReadonlyArray<PropertyKey> = []): Array<Leaf> => {
  switch (issue._tag) {
    case "Filter":
    case "Encoding":
      return leaves(issue.issue, path)
    case "Pointer":
      return leaves(issue.issue, [...path, ...issue.path])
    case "Composite":
    case "AnyOf":
      return issue._tag === "Composite" || issue.issues.length > 0
        ? issue.issues.flatMap((inner) => leaves(inner, path))
        : [{ path, issue }]
    default:
      return [{ path, issue }]
  }
}

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** The pydantic-style problems of a schema error (declared fields first, then extra ones). */
export const validationIssues = (
  error: Schema.SchemaError,
  input: unknown,
  prefix: ReadonlyArray<string | number> = []
): Array<OpenEnvProtocol.ValidationIssue> => {
  // the same walk as `leaves`: one message per leaf, in the same order
  const messages = formatter(error.issue).issues
  return leaves(error.issue).map((leaf, index): OpenEnvProtocol.ValidationIssue => {
    const at = (path: ReadonlyArray<PropertyKey>) =>
      path.reduce<unknown>(
        (value, key) =>
          typeof value === "object" && value !== null ? (value as Record<PropertyKey, unknown>)[key] : undefined,
        input
      )
    const loc = [...prefix, ...leaf.path.map((key) => (typeof key === "number" ? key : String(key)))]
    switch (leaf.issue._tag) {
      case "MissingKey":
        return { type: "missing", loc, msg: "Field required", input: at(leaf.path.slice(0, -1)) }
      case "UnexpectedKey":
        return { type: "extra_forbidden", loc, msg: "Extra inputs are not permitted", input: at(leaf.path) }
      default:
        return { type: "type_error", loc, msg: messages[index]?.message ?? "invalid", input: at(leaf.path) }
    }
  }).sort((a, b) => Number(a.type === "extra_forbidden") - Number(b.type === "extra_forbidden"))
}

/** A string pydantic's lax `int` takes: digits (single `_` between them), an optional `.0…`, spaces around. */
const INT_STRING = /^\s*[+-]?\d+(?:_\d+)*(?:\.0+)?\s*$/

/**
 * An HTTP `/reset` body as OpenEnv's `ResetRequest` (pydantic, lax mode) reads it: `seed` an
 * integer >= 0 (an integral float, a bool or a string of digits is taken, and passed on as the
 * integer), `episode_id` a string of at most 255 characters; both may be null. Other keys are the
 * env's kwargs, passed on as they are. The problems carry pydantic's own types and messages.
 */
export const resetRequest = (
  body: OpenEnvProtocol.JsonObject
): Result.Result<OpenEnvProtocol.JsonObject, Array<OpenEnvProtocol.ValidationIssue>> => {
  const issues: Array<OpenEnvProtocol.ValidationIssue> = []
  const seed = body.seed
  let value: unknown = seed
  if (typeof seed === "boolean") value = Number(seed)
  else if (typeof seed === "string") {
    value = INT_STRING.test(seed) ? Number(seed.trim().replace(/_/g, "")) : undefined
    if (value === undefined) {
      issues.push({ type: "int_parsing", loc: ["seed"], msg: "Input should be a valid integer, unable to parse string as an integer", input: seed })
    }
  }
  if (seed !== undefined && seed !== null && issues.length === 0) {
    if (typeof value === "bigint") {
      if (value < 0n) issues.push({ type: "greater_than_equal", loc: ["seed"], msg: "Input should be greater than or equal to 0", input: seed, ctx: { ge: 0 } })
    } else if (typeof value !== "number") {
      issues.push({ type: "int_type", loc: ["seed"], msg: "Input should be a valid integer", input: seed })
    } else if (!Number.isFinite(value)) {
      issues.push({ type: "finite_number", loc: ["seed"], msg: "Input should be a finite number", input: seed })
    } else if (!Number.isInteger(value)) {
      issues.push({ type: "int_from_float", loc: ["seed"], msg: "Input should be a valid integer, got a number with a fractional part", input: seed })
    } else if (value < 0) {
      issues.push({ type: "greater_than_equal", loc: ["seed"], msg: "Input should be greater than or equal to 0", input: seed, ctx: { ge: 0 } })
    }
  }
  const episodeId = body.episode_id
  if (episodeId !== undefined && episodeId !== null) {
    if (typeof episodeId !== "string") {
      issues.push({ type: "string_type", loc: ["episode_id"], msg: "Input should be a valid string", input: episodeId })
    } else if (episodeId.length > 255) {
      issues.push({ type: "string_too_long", loc: ["episode_id"], msg: "String should have at most 255 characters", input: episodeId, ctx: { max_length: 255 } })
    }
  }
  if (issues.length > 0) return Result.fail(issues)
  return Result.succeed(seed === undefined || seed === null || value === seed ? body : { ...body, seed: value as number })
}

/** How deep a client's JSON may nest (Python's `json` gives up near its recursion limit, 1000). */
export const MAX_DEPTH = 1000

const TOO_DEEP = `nested deeper than ${MAX_DEPTH} levels`

/** Whether a parsed JSON value nests deeper than `limit` arrays and objects (no recursion: any depth is safe). */
export const tooDeep = (value: unknown, limit = MAX_DEPTH): boolean => {
  if (typeof value !== "object" || value === null) return false
  const stack: Array<[unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!
    if (depth > limit) return true
    for (const child of Array.isArray(node) ? node : Object.values(node as object)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1])
    }
  }
  return false
}

/**
 * A client's JSON text, parsed, or why not: a syntax error's message, or that it nests deeper than
 * `MAX_DEPTH` (the exact parser, which reads long integers and places syntax errors, recurses: a
 * deep enough text overflows its stack, which is said as that, not as a `RangeError`).
 */
export const parseClientJson = (text: string): Result.Result<unknown, string> => {
  let parsed: unknown
  try {
    parsed = Json.parse(text)
  } catch (e) {
    return Result.fail(e instanceof RangeError ? TOO_DEEP : errorMessage(e))
  }
  return tooDeep(parsed) ? Result.fail(TOO_DEEP) : Result.succeed(parsed)
}
