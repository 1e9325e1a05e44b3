/**
 * Looking at values an env returned, without trusting them: whether they are JSON (with the path of
 * the first problem), an exact canonical text for comparing runs, and a short readable rendering for
 * reports. None of these throw, whatever the value (cycles, throwing getters, proxies).
 */
import * as Json from "./Json.js"
import { errorMessage } from "./lift.js"

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/

const child = (path: string, key: string | number): string =>
  typeof key === "number" ? `${path}[${key}]` : IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`

const LOSSY_CLASSES = new Set(["Map", "Set", "WeakMap", "WeakSet", "Promise", "RegExp", "Error"])

const classOf = (value: object): string => {
  const tag = Object.prototype.toString.call(value).slice(8, -1)
  if (tag !== "Object") return tag
  const proto = Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null
  return proto === null || proto === Object.prototype ? "Object" : String(proto.constructor?.name ?? "Object")
}

const hasToJson = (value: object): boolean => typeof (value as { toJSON?: unknown }).toJSON === "function"

/** Where a value stops being faithful JSON and why: `path` (`info.board[2]`) and `detail` (`is NaN, ...`). */
export interface JsonIssue {
  readonly path: string
  readonly detail: string
}

/**
 * The deepest nesting of arrays and objects a JSON value may have here. `JSON.stringify` recurses,
 * so how deep it can go depends on the stack left where it is called (measured on Node 24: 4,000
 * levels of arrays at the top of the stack, not 5,000): a value that passed a check at one depth
 * failed to be written at another, and the `RangeError` stopped the whole run. A fixed limit, well
 * below the stack's, makes "can this be written" the same answer everywhere.
 */
export const MAX_JSON_DEPTH = 1000

/**
 * Whether parsed JSON nests deeper than `max` arrays and objects; walked without recursion, so
 * that it answers for any depth `JSON.parse` returns (a body 100,000 levels deep made the
 * recursive code after the parse throw a `RangeError`, a 500).
 */
export const nestsDeeper = (value: unknown, max: number = MAX_JSON_DEPTH): boolean => {
  const stack: Array<readonly [unknown, number]> = [[value, 0]]
  // each object once: a cycle or a shared object (an env's own data) is walked in linear time
  const seen = new Set<object>()
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!
    // (a typed array holds no objects: not walked element by element)
    if (typeof v !== "object" || v === null || seen.has(v) || ArrayBuffer.isView(v)) continue
    seen.add(v)
    if (depth >= max) return true
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1])
    }
  }
  return false
}

/**
 * The first place where `value` is not faithful JSON, or `undefined`, without writing it out.
 * Bigints are fine (the completions log writes them exactly); `undefined` object fields are fine
 * (omitted); NaN, Infinity, functions, symbols, cycles, Maps/Sets (written as `{}`) and nesting
 * deeper than {@link MAX_JSON_DEPTH} are not. A getter or `toJSON` that throws is reported at its path.
 */
export const jsonIssue = (value: unknown, path: string): JsonIssue | undefined => {
  const ancestors: Array<{ readonly value: object; readonly path: string }> = []
  const visit = (v: unknown, p: string, inArray: boolean): JsonIssue | undefined => {
    switch (typeof v) {
      case "string":
      case "boolean":
      case "bigint":
        return undefined
      case "number":
        return Number.isFinite(v) ? undefined : { path: p, detail: `is ${v}, which JSON cannot hold (it is written as null)` }
      case "undefined":
        return inArray ? { path: p, detail: "is undefined, which JSON writes as null" } : undefined
      case "function":
        return { path: p, detail: `is a function, which JSON ${inArray ? "writes as null" : "drops"}` }
      case "symbol":
        return { path: p, detail: `is a symbol, which JSON ${inArray ? "writes as null" : "drops"}` }
      case "object": {
        if (v === null) return undefined
        const cycle = ancestors.find((a) => a.value === v)
        if (cycle !== undefined) return { path: p, detail: `refers back to ${cycle.path} (a cycle)` }
        const cls = classOf(v)
        if (LOSSY_CLASSES.has(cls)) return { path: p, detail: `is a ${cls}, which JSON writes as {}` }
        if (ancestors.length >= MAX_JSON_DEPTH) {
          return { path: p, detail: `nests more than ${MAX_JSON_DEPTH} levels deep, deeper than a log line may hold` }
        }
        ancestors.push({ value: v, path: p })
        try {
          if (hasToJson(v)) return visit((v as { toJSON: () => unknown }).toJSON(), p, inArray)
          if (Array.isArray(v)) {
            for (let i = 0; i < v.length; i++) {
              const problem = visit(v[i], child(p, i), true)
              if (problem !== undefined) return problem
            }
            return undefined
          }
          for (const key of Object.keys(v)) {
            const problem = visit((v as Record<string, unknown>)[key], child(p, key), false)
            if (problem !== undefined) return problem
          }
          return undefined
        } catch (error) {
          return { path: p, detail: `cannot be written as JSON: ${errorMessage(error)}` }
        } finally {
          ancestors.pop()
        }
      }
    }
  }
  return visit(value, path, false)
}

/**
 * A quick check that `value` is plain JSON data (plain objects and arrays of strings, finite
 * numbers, booleans, bigints, null): the common case, about 5x cheaper than {@link jsonIssue}.
 * `false` means "look closer": `jsonIssue` then finds the problem, if there is one (a structure
 * deeper than 32 levels, or a class with `toJSON`, may still be fine). May throw (a getter).
 */
export const plainJson = (value: unknown, depth = 0): boolean => {
  switch (typeof value) {
    case "string":
    case "boolean":
    case "bigint":
    case "undefined":
      return true
    case "number":
      return Number.isFinite(value)
    case "object": {
      if (value === null) return true
      if (depth > 32) return false
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i]
          if (item === undefined || !plainJson(item, depth + 1)) return false
        }
        return true
      }
      const proto: unknown = Object.getPrototypeOf(value)
      if (proto !== Object.prototype && proto !== null) return false
      // (a plain object's prototype has no enumerable keys: for-in sees its own, without allocating)
      for (const key in value) {
        if (key === "toJSON" || !plainJson((value as Record<string, unknown>)[key], depth + 1)) return false
      }
      return true
    }
    default:
      return false
  }
}

/**
 * The first reason `value` is not faithful JSON, with its path (`info.board[2]`), or `undefined`
 * (see {@link jsonIssue}); the value is also written out once, to catch what a walk cannot see.
 */
export const jsonProblem = (value: unknown, path: string): string | undefined => {
  try {
    const issue = jsonIssue(value, path)
    if (issue !== undefined) {
      return issue.detail.startsWith("cannot be written") ? `${path} ${issue.detail}` : `${issue.path} ${issue.detail}`
    }
    Json.stringify(value)
    return undefined
  } catch (error) {
    return `${path} cannot be written as JSON: ${errorMessage(error)}`
  }
}

/** Whether `value` is a plain record (what reset and step infos must be). */
export const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The type of a value, for messages: `number NaN`, `string "yes"`, `an array`, `null`. */
export const typeName = (value: unknown): string => {
  if (value === null) return "null"
  if (Array.isArray(value)) return "an array"
  switch (typeof value) {
    case "string":
      return `string ${show(value, 40)}`
    case "number":
    case "bigint":
    case "boolean":
      return `${typeof value} ${show(value)}`
    case "undefined":
      return "undefined"
    case "object":
      return `an object (${classOf(value)})`
    default:
      return typeof value
  }
}

const NON_FINITE = "\u0000number:"

/**
 * An exact text of a value for comparing two runs: object keys sorted, non-JSON values marked
 * (NaN, functions, cycles) instead of lost, nothing truncated.
 */
export const canonical = (value: unknown): string => {
  const seen: Array<object> = []
  const walk = (v: unknown): unknown => {
    switch (typeof v) {
      case "number":
        return Number.isFinite(v) ? v : `${NON_FINITE}${v}`
      case "undefined":
        return "\u0000undefined"
      case "function":
        return `\u0000function:${v.name}`
      case "symbol":
        return `\u0000symbol:${String(v.description)}`
      case "object": {
        if (v === null) return null
        if (seen.includes(v)) return "\u0000cycle"
        seen.push(v)
        try {
          if (v instanceof Map) return { "\u0000Map": [...v.entries()].map(([k, x]) => [walk(k), walk(x)]) }
          if (v instanceof Set) return { "\u0000Set": [...v.values()].map(walk) }
          if (hasToJson(v)) return walk((v as { toJSON: () => unknown }).toJSON())
          if (Array.isArray(v)) return v.map(walk)
          const out: Record<string, unknown> = {}
          for (const key of Object.keys(v).sort()) out[key] = walk((v as Record<string, unknown>)[key])
          return out
        } finally {
          seen.pop()
        }
      }
      default:
        return v
    }
  }
  try {
    return Json.stringify(walk(value)) ?? "\u0000undefined"
  } catch (error) {
    return `\u0000unreadable:${errorMessage(error)}`
  }
}

/** `text` cut to `max` UTF-16 units on a code point boundary, saying how much was cut. */
export const truncate = (text: string, max: number): string => {
  if (text.length <= max) return text
  // Cut on a code point boundary so that the preview stays well-formed text.
  let end = max
  const code = text.charCodeAt(end - 1)
  if (code >= 0xd800 && code <= 0xdbff) end--
  return `${text.slice(0, end)}…(+${text.length - end} chars)`
}

/**
 * A short, readable, JSON-like rendering for reports: strings quoted and cut at `maxString`, NaN and
 * Infinity bare, functions, cycles and Maps shown for what they are.
 */
export const show = (value: unknown, maxString = 200): string => {
  const seen: Array<object> = []
  const walk = (v: unknown, depth: number): string => {
    switch (typeof v) {
      case "string":
        return JSON.stringify(truncate(v, maxString))
      case "number":
      case "boolean":
        return String(v)
      case "bigint":
        return v.toString()
      case "undefined":
        return "undefined"
      case "function":
        return `[function ${v.name || "anonymous"}]`
      case "symbol":
        return String(v)
      case "object": {
        if (v === null) return "null"
        if (seen.includes(v)) return "[cycle]"
        if (depth > 6) return "[…]"
        seen.push(v)
        try {
          if (v instanceof Map) {
            const entries = [...v.entries()].slice(0, 20).map(([k, x]) => `${walk(k, depth + 1)} => ${walk(x, depth + 1)}`)
            return `Map {${entries.join(", ")}}`
          }
          if (v instanceof Set) return `Set {${[...v.values()].slice(0, 20).map((x) => walk(x, depth + 1)).join(", ")}}`
          if (hasToJson(v)) return walk((v as { toJSON: () => unknown }).toJSON(), depth)
          if (Array.isArray(v)) {
            const items = v.slice(0, 50).map((x) => walk(x, depth + 1))
            if (v.length > 50) items.push(`…(+${v.length - 50} items)`)
            return `[${items.join(",")}]`
          }
          const keys = Object.keys(v)
          const fields = keys.slice(0, 50).map((key) =>
            `${JSON.stringify(key)}:${walk((v as Record<string, unknown>)[key], depth + 1)}`
          )
          if (keys.length > 50) fields.push(`…(+${keys.length - 50} fields)`)
          return `{${fields.join(",")}}`
        } finally {
          seen.pop()
        }
      }
    }
  }
  try {
    return walk(value, 0)
  } catch (error) {
    return `[unreadable: ${errorMessage(error)}]`
  }
}

/**
 * A JSON-safe copy of a value (for reports written as JSON): non-JSON values become descriptive
 * strings, long strings are cut.
 */
export const toJsonSafe = (value: unknown, maxString = 2000): unknown => {
  const seen: Array<object> = []
  const walk = (v: unknown, depth: number): unknown => {
    switch (typeof v) {
      case "string":
        return truncate(v, maxString)
      case "boolean":
      case "bigint":
        return v
      case "number":
        return Number.isFinite(v) ? v : String(v)
      case "object": {
        if (v === null) return null
        if (seen.includes(v) || depth > 12) return "[cycle]"
        seen.push(v)
        try {
          if (v instanceof Map || v instanceof Set) return show(v, maxString)
          if (hasToJson(v)) return walk((v as { toJSON: () => unknown }).toJSON(), depth)
          if (Array.isArray(v)) return v.map((x) => walk(x, depth + 1))
          const out: Record<string, unknown> = {}
          for (const key of Object.keys(v)) out[key] = walk((v as Record<string, unknown>)[key], depth + 1)
          return out
        } finally {
          seen.pop()
        }
      }
      default:
        return show(v)
    }
  }
  try {
    return walk(value, 0)
  } catch (error) {
    return `[unreadable: ${errorMessage(error)}]`
  }
}
