/**
 * JSON numbers as Python's `json` reads and writes them: what vLLM's tool parsers and transformers'
 * templates see of a call's arguments (`4.0` is a float and stays `4.0`; an int is exact past 2^53).
 * Shared by the chat template's renderer and the tool parsers. Internal.
 */

/**
 * Python's `repr` of a float (what `json.dumps` and `str` write): the shortest digits, as JavaScript's,
 * in fixed notation from 1e-4 up to 1e16 (`4.0`, `0.0001`), else in exponent notation with at least two
 * exponent digits (`1e-05`, `1e+16`).
 */
export const floatRepr = (value: number): string => {
  if (Number.isNaN(value)) return "NaN"
  if (!Number.isFinite(value)) return value > 0 ? "Infinity" : "-Infinity"
  if (Object.is(value, -0)) return "-0.0"
  const [mantissa, exponent] = value.toExponential().split("e")
  const e = Number(exponent)
  if (e < -4 || e >= 16) return `${mantissa}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`
  const fixed = String(value)
  return Number.isInteger(value) ? `${fixed}.0` : fixed
}

/**
 * A JSON number as Python's `json.loads` reads it: a float when written with a fraction or an exponent
 * (`4.0` stays a float, and is written `4.0`), an int otherwise, exact beyond 2^53. Boxed, so that the
 * chat template's renderer can give the template a float or an int, and JSON of it is Python's.
 */
export class PyNumber extends Number {
  constructor(value: number, readonly float: boolean, private readonly source: string) {
    super(value)
  }
  override toString(): string {
    return this.float ? floatRepr(this.valueOf()) : this.source
  }
  toJSON(): unknown {
    return rawJSON(this.toString())
  }
}

/** `JSON.rawJSON` (ES2025, Node 21+): a value `JSON.stringify` writes as the given text. */
const rawJSON = (JSON as unknown as { readonly rawJSON: (text: string) => unknown }).rawJSON

/** JSON text's value with its numbers as {@link PyNumber}s (`JSON.parse`'s reviver sees each number's source). */
export const parse = (text: string): unknown =>
  JSON.parse(text, (_key: string, value: unknown, context?: { readonly source?: string }) => {
    if (typeof value !== "number" || context?.source === undefined) return value
    const source = context.source
    const float = /[.eE]/.test(source)
    return float || !Number.isSafeInteger(value) ? new PyNumber(value, float, source) : value
  })

