/**
 * Schema decoding problems as effect-gym reports them: the first problem, with its path (the field,
 * `env_config.size`, `messages[2].content`) and a message. Messages are Schema's own
 * (`Expected string, got 7`, a check's or transformation's message), except that a missing key
 * "is missing" and an excess key "is unexpected", as they have always read in dataset, env_config,
 * option and request errors.
 */
import type { SchemaAST } from "effect"
import { SchemaIssue } from "effect"

/**
 * How the project decodes what it is given: stop at the first problem, and keep the rejected value
 * in the issue, so that the message says what was found (`Expected string, got 7`).
 */
export const parseOptions: SchemaAST.ParseOptions = { errors: "first", reportInput: true }

const leafHook: SchemaIssue.LeafHook = (issue) => {
  switch (issue._tag) {
    case "MissingKey": {
      const message = issue.annotations?.messageMissingKey
      return typeof message === "string" ? message : "is missing"
    }
    case "UnexpectedKey": {
      const message = issue.ast.annotations?.messageUnexpectedKey
      return typeof message === "string" ? message : "is unexpected"
    }
    default:
      return SchemaIssue.defaultLeafHook(issue)
  }
}

const formatter = SchemaIssue.makeFormatterStandardSchemaV1({ leafHook })

/** One problem of a decoding: where (`path`, empty for the whole value) and what. */
export interface Problem {
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

/** The first problem of a decoding issue. */
export const first = (issue: SchemaIssue.Issue): Problem => {
  const found = formatter(issue).issues[0]
  return found === undefined ? { path: [], message: String(issue) } : { path: (found.path ?? []).map(keyOf), message: found.message }
}

/** Every problem of a decoding issue (decoded with `errors: "all"`). */
export const all = (issue: SchemaIssue.Issue): Array<Problem> =>
  formatter(issue).issues.map((found) => ({ path: (found.path ?? []).map(keyOf), message: found.message }))

/** (Standard Schema paths may hold `{ key }` segments; Schema's hold the keys themselves.) */
const keyOf = (segment: PropertyKey | { readonly key: PropertyKey }): PropertyKey =>
  typeof segment === "object" ? segment.key : segment
