/**
 * The parts of JSON Schema that tool parameters use, checked: shared by the env checker's tools check
 * and the rollout server's request `tools`. Internal.
 */
import { isRecord } from "./inspect.js"

const TYPES = new Set(["string", "number", "integer", "boolean", "object", "array", "null"])

/** What is wrong with a JSON Schema (the parts tools use), at `path`: the message starts with the path. */
export const schemaProblem = (schema: unknown, path: string): string | undefined => {
  if (typeof schema === "boolean") return undefined
  if (!isRecord(schema)) return `${path} must be a JSON Schema object`
  const type = schema.type
  if (type !== undefined) {
    const types = Array.isArray(type) ? type : [type]
    const bad = types.find((t) => typeof t !== "string" || !TYPES.has(t))
    if (bad !== undefined || types.length === 0) return `${path}.type ${JSON.stringify(type)} is not a JSON Schema type`
  }
  const properties = schema.properties
  if (properties !== undefined) {
    if (!isRecord(properties)) return `${path}.properties must be an object`
    for (const [key, value] of Object.entries(properties)) {
      const problem = schemaProblem(value, `${path}.properties.${key}`)
      if (problem !== undefined) return problem
    }
  }
  const required = schema.required
  if (required !== undefined) {
    if (!Array.isArray(required) || required.some((r) => typeof r !== "string")) return `${path}.required must be a list of names`
    const missing = required.find((r) => !isRecord(properties) || !(r in properties))
    if (missing !== undefined) return `${path}.required names ${JSON.stringify(missing)}, which is not in its properties`
  }
  if (schema.items !== undefined) return schemaProblem(schema.items, `${path}.items`)
  for (const key of ["anyOf", "oneOf", "allOf"] as const) {
    const list = schema[key]
    if (list === undefined) continue
    if (!Array.isArray(list) || list.length === 0) return `${path}.${key} must be a non-empty list of schemas`
    for (let i = 0; i < list.length; i++) {
      const problem = schemaProblem(list[i], `${path}.${key}[${i}]`)
      if (problem !== undefined) return problem
    }
  }
  if (schema.enum !== undefined && (!Array.isArray(schema.enum) || schema.enum.length === 0)) {
    return `${path}.enum must be a non-empty list`
  }
  return undefined
}
