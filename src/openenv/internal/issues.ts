/**
 * Schema errors as the OpenEnv protocol reports them: pydantic-style validation problems (`type`,
 * `loc`, `msg`, `input`), as the Python server's `VALIDATION_ERROR` frames and FastAPI's 422 bodies
 * carry them.
 */
import { type Schema, SchemaIssue } from "effect"
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
