/**
 * Arbitraries (`effect/Arbitrary`) for property-testing envs: assistant replies (well-formed actions, junk,
 * blank, very long and unusual Unicode text) and env configs from a schema.
 *
 * They are re-exported by `EnvCheck`, so a property reads:
 *
 * ```ts
 * it.effect.prop("my env is deterministic", [EnvCheck.config(MyConfig), EnvCheck.replies], ([config, replies]) =>
 *   Effect.gen(function*() {
 *     const first = yield* EnvCheck.transcript(myEnv, config, replies)
 *     expect(yield* EnvCheck.transcript(myEnv, config, replies)).toEqual(first)
 *   }))
 * ```
 *
 * @since 0.1.0
 */
import { Arbitrary, Schema, SchemaParser } from "effect"

const join = (parts: ReadonlyArray<string>): string => parts.join("")

/** One of the given strings. */
const constantFrom = (values: ReadonlyArray<string>): Arbitrary.Arbitrary<string> =>
  Arbitrary.schema(Schema.Literals(values))

/** A whole number in [min, max]. */
const integer = (min: number, max: number): Arbitrary.Arbitrary<number> =>
  Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: min, maximum: max })))

/** A code point in [min, max] as text. */
const codePoint = (min: number, max: number): Arbitrary.Arbitrary<string> =>
  integer(min, max).pipe(Arbitrary.map((cp) => String.fromCodePoint(cp)))

/**
 * One of several arbitraries, each drawn in proportion to its weight. (`effect/Arbitrary` has no
 * choice among arbitraries: a weighted index picks one; shrinking goes towards the first.)
 */
const oneOf = <A>(
  ...choices: ReadonlyArray<Arbitrary.Arbitrary<A> | readonly [weight: number, Arbitrary.Arbitrary<A>]>
): Arbitrary.Arbitrary<A> => {
  const weighted = choices.map((c) => Arbitrary.isArbitrary(c) ? [1, c] as const : c)
  const total = weighted.reduce((sum, [weight]) => sum + weight, 0)
  return integer(0, total - 1).pipe(
    Arbitrary.flatMap((n) => {
      for (const [weight, arbitrary] of weighted) {
        if (n < weight) return arbitrary
        n -= weight
      }
      return weighted[weighted.length - 1][1]
    })
  )
}

/** Text of printable ASCII characters, of `min` to `max` characters. */
const ascii = (min: number, max: number): Arbitrary.Arbitrary<string> =>
  Arbitrary.schema(Schema.String.check(Schema.isPattern(new RegExp(`^[ -~]{${min},${max}}$`))))

/**
 * The shortest string {@link long} produces.
 *
 * @since 0.1.0
 * @category constants
 */
export const LONG_MIN_LENGTH = 4096

/**
 * The characters {@link blank} builds from: whitespace (ASCII and Unicode) and invisible format
 * characters that tokenizers and `trim()` treat differently.
 *
 * @since 0.1.0
 * @category constants
 */
export const BLANK_CHARACTERS: ReadonlyArray<string> = [
  " ",
  "\t",
  "\n",
  "\r\n",
  "\u00a0", // no-break space
  "\u2003", // em space
  "\u3000", // ideographic space
  "\u2028", // line separator
  "\u200b", // zero width space (not whitespace for trim())
  "\ufeff" // byte order mark
]

/**
 * Empty replies: `""`, or only whitespace and invisible characters.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const blank: Arbitrary.Arbitrary<string> = oneOf(
  Arbitrary.Constant(""),
  Arbitrary.array(constantFrom(BLANK_CHARACTERS), { minLength: 1, maxLength: 8 }).pipe(Arbitrary.map(join))
)

const MARKUP: ReadonlyArray<string> = [
  "<action>",
  "</action>",
  "<answer>",
  "</answer>",
  "<think>",
  "</think>",
  "<",
  ">",
  "/",
  "{",
  "}",
  "[",
  "]",
  "\"",
  "'",
  "```",
  "\\",
  "null",
  "undefined",
  "NaN",
  "\n",
  "\t",
  "\u0000"
]

/** Words of lorem ipsum, for prose that means nothing. */
const LOREM: ReadonlyArray<string> = [
  "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor",
  "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis",
  "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat"
]

/**
 * Text that is not an action: random printable ASCII, lorem ipsum prose, fragments of markup (tags,
 * braces, fences, escapes) and JSON documents.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const junk: Arbitrary.Arbitrary<string> = oneOf(
  ascii(0, 80),
  Arbitrary.array(constantFrom(LOREM), { maxLength: 12 }).pipe(Arbitrary.map((words) => words.join(" "))),
  Arbitrary.array(oneOf(constantFrom(MARKUP), ascii(0, 6)), { maxLength: 16 }).pipe(Arbitrary.map(join)),
  Arbitrary.schema(Schema.Json).pipe(Arbitrary.map((json) => JSON.stringify(json)))
)

const ASTRAL: ReadonlyArray<string> = [
  "😀",
  "👩‍👩‍👧", // a ZWJ sequence
  "🇫🇷", // a flag: two regional indicators
  "🏳️‍🌈",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
  "𝟙𝟚𝟛",
  "𠜎𠜱",
  "🂡"
]

const RTL: ReadonlyArray<string> = [
  "שלום",
  "מעלה",
  "مرحبا",
  "يمين",
  "\u200f", // right-to-left mark
  "\u202e", // right-to-left override
  "\u2067", // right-to-left isolate
  "\u2069", // pop directional isolate
  "\u061c" // Arabic letter mark
]

/** One astral code point (outside the Basic Multilingual Plane: a surrogate pair in UTF-16). */
const astralCodePoint = codePoint(0x10000, 0x10ffff)

/** A letter followed by 1 to 4 combining marks (diacritics, enclosing marks). */
const combining = Arbitrary.all([
  constantFrom(["a", "e", "o", "u", "n", "Z", "i"]),
  Arbitrary.array(oneOf(codePoint(0x300, 0x36f), codePoint(0x20d0, 0x20f0)), { minLength: 1, maxLength: 4 })
]).pipe(Arbitrary.map(([letter, marks]) => letter + join(marks)))

const unusual = oneOf(
  constantFrom(ASTRAL),
  astralCodePoint,
  combining,
  constantFrom(RTL),
  constantFrom(BLANK_CHARACTERS.filter((c) => c.charCodeAt(0) > 0x7f))
)

/**
 * Up to 4 characters of some scripts (Latin, Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai,
 * kana, CJK, Hangul, symbols): every one a whole code point of the Basic Multilingual Plane.
 */
const scripts = Arbitrary.schema(
  Schema.String.check(
    Schema.isPattern(
      /^[ -~\u00a1-\u024f\u0370-\u03ff\u0400-\u04ff\u05d0-\u05ea\u0620-\u064a\u0905-\u0939\u0e01-\u0e30\u3041-\u30ff\u4e00-\u9fff\uac00-\ud7a3\u2190-\u21ff\u2600-\u26ff]{0,4}$/
    )
  )
)

/**
 * Well-formed Unicode text that always contains at least one unusual piece: astral characters
 * (emoji, ZWJ sequences, flags, mathematical letters, any code point above U+FFFF), combining
 * marks, right-to-left scripts and bidi controls, or non-ASCII whitespace; mixed with graphemes of
 * any script. Never a lone surrogate.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const unicode: Arbitrary.Arbitrary<string> = Arbitrary.all([
  Arbitrary.array(oneOf(unusual, scripts), { maxLength: 6 }),
  unusual,
  Arbitrary.array(oneOf(unusual, scripts), { maxLength: 6 })
]).pipe(Arbitrary.map(([before, piece, after]) => join(before) + piece + join(after)))

/**
 * Very long replies: a piece of junk or Unicode text repeated to {@link LONG_MIN_LENGTH} to 32768
 * UTF-16 units (a model that rambles up to its token limit). Pieces are repeated whole, so the text
 * stays well-formed.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const long: Arbitrary.Arbitrary<string> = Arbitrary.all([
  oneOf(junk, unicode).pipe(Arbitrary.filter((piece) => piece.length > 0)),
  integer(LONG_MIN_LENGTH, 32768)
]).pipe(Arbitrary.map(([piece, length]) => piece.repeat(Math.ceil(length / piece.length))))

/**
 * Words that many text envs take as actions (directions, yes/no, letters, digits).
 *
 * @since 0.1.0
 * @category constants
 */
export const COMMON_ACTION_WORDS: ReadonlyArray<string> = [
  "up",
  "down",
  "left",
  "right",
  "north",
  "south",
  "east",
  "west",
  "yes",
  "no",
  "A",
  "B",
  "C",
  "D",
  "0",
  "1",
  "2",
  "3",
  "4",
  "5",
  "6",
  "7",
  "8",
  "9",
  "stop",
  "look",
  "help"
]

/**
 * Action-like replies for an env whose actions are unknown: a common action word, bare or in the
 * usual formats (`<action>…</action>`, `<answer>…</answer>` after a `<think>` block, a sentence, a
 * JSON object).
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const commonAction: Arbitrary.Arbitrary<string> = Arbitrary.all([
  constantFrom(COMMON_ACTION_WORDS),
  constantFrom(["bare", "action", "answer", "sentence", "json"])
]).pipe(Arbitrary.map(([word, format]) => {
  switch (format) {
    case "action":
      return `<action>${word}</action>`
    case "answer":
      return `<think>I will pick ${word}.</think>\n<answer>${word}</answer>`
    case "sentence":
      return `I think the best move is ${word}.`
    case "json":
      return JSON.stringify({ action: word })
    default:
      return word
  }
}))

/**
 * Well-formed actions: each value is one of the given strings, or a string matching one of the
 * given patterns (generated from `Schema.isPattern`; anchor a pattern with `^…$` to get only the
 * matching text). An empty list gives {@link commonAction}.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const actions = (list: ReadonlyArray<string | RegExp>): Arbitrary.Arbitrary<string> => {
  const strings = list.filter((a): a is string => typeof a === "string")
  const patterns = list.filter((a): a is RegExp => a instanceof RegExp)
  const arbitraries: Array<Arbitrary.Arbitrary<string>> = patterns.map((pattern) =>
    Arbitrary.schema(Schema.String.check(Schema.isPattern(pattern)))
  )
  if (strings.length > 0) arbitraries.unshift(constantFrom(strings))
  return arbitraries.length === 0 ? commonAction : oneOf(...arbitraries)
}

/**
 * One assistant reply from the default mix: action-like replies, junk, blank, very long and unusual
 * Unicode text.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const reply: Arbitrary.Arbitrary<string> = oneOf(
  [4, commonAction],
  [3, junk],
  [1, blank],
  [1, long],
  [2, unicode]
)

/**
 * One assistant reply for an env with known actions: mostly well-formed actions (so episodes go
 * somewhere), the rest from {@link reply}.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const replyFor = (list: ReadonlyArray<string | RegExp>): Arbitrary.Arbitrary<string> =>
  oneOf([3, actions(list)], [2, reply])

/**
 * @since 0.1.0
 * @category models
 */
export interface RepliesOptions {
  readonly minLength?: number | undefined
  readonly maxLength?: number | undefined
}

/**
 * The replies of one conversation (1 to 10 by default) from the default mix.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const replies: Arbitrary.Arbitrary<ReadonlyArray<string>> = Arbitrary.array(reply, { minLength: 1, maxLength: 10 })

/**
 * The replies of one conversation, mostly well-formed actions from `list`.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const repliesFor = (
  list: ReadonlyArray<string | RegExp>,
  options: RepliesOptions = {}
): Arbitrary.Arbitrary<ReadonlyArray<string>> =>
  Arbitrary.array(replyFor(list), { minLength: options.minLength ?? 1, maxLength: options.maxLength ?? 10 })

/**
 * Env configs from a schema: values are drawn with `Arbitrary.schema(schema)` (so the schema's
 * checks apply) and encoded, giving what a dataset row's
 * `env_config` holds. Use the env's own config schema, or a narrower one that describes the configs
 * worth testing.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const config = <A, I>(schema: Schema.Codec<A, I>): Arbitrary.Arbitrary<I> =>
  Arbitrary.schema(schema).pipe(Arbitrary.filterMap(SchemaParser.encodeUnknownResult(schema)))
