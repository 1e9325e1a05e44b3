/**
 * `FastCheck` arbitraries for property-testing envs: assistant replies (well-formed actions, junk,
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
import { Arbitrary, Either, FastCheck, ParseResult } from "effect"
import type { Schema } from "effect"

const fc = FastCheck

const join = (parts: ReadonlyArray<string>): string => parts.join("")

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
export const blank: FastCheck.Arbitrary<string> = fc.oneof(
  fc.constant(""),
  fc.array(fc.constantFrom(...BLANK_CHARACTERS), { minLength: 1, maxLength: 8 }).map(join)
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

/**
 * Text that is not an action: random printable ASCII, lorem ipsum prose, fragments of markup (tags,
 * braces, fences, escapes) and JSON documents.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const junk: FastCheck.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 80 }),
  fc.lorem({ maxCount: 12 }),
  fc.array(fc.oneof(fc.constantFrom(...MARKUP), fc.string({ maxLength: 6 })), { maxLength: 16 }).map(join),
  fc.json({ maxDepth: 2 })
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
const astralCodePoint = fc.integer({ min: 0x10000, max: 0x10ffff }).map((cp) => String.fromCodePoint(cp))

/** A letter followed by 1 to 4 combining marks (diacritics, enclosing marks). */
const combining = fc.tuple(
  fc.constantFrom("a", "e", "o", "u", "n", "Z", "i"),
  fc.array(
    fc.oneof(fc.integer({ min: 0x300, max: 0x36f }), fc.integer({ min: 0x20d0, max: 0x20f0 })).map((cp) =>
      String.fromCodePoint(cp)
    ),
    { minLength: 1, maxLength: 4 }
  )
).map(([letter, marks]) => letter + join(marks))

const unusual = fc.oneof(
  fc.constantFrom(...ASTRAL),
  astralCodePoint,
  combining,
  fc.constantFrom(...RTL),
  fc.constantFrom(...BLANK_CHARACTERS.filter((c) => c.charCodeAt(0) > 0x7f))
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
export const unicode: FastCheck.Arbitrary<string> = fc.tuple(
  fc.array(fc.oneof(unusual, fc.string({ unit: "grapheme", maxLength: 4 })), { maxLength: 6 }),
  unusual,
  fc.array(fc.oneof(unusual, fc.string({ unit: "grapheme", maxLength: 4 })), { maxLength: 6 })
).map(([before, piece, after]) => join(before) + piece + join(after))

/**
 * Very long replies: a piece of junk or Unicode text repeated to {@link LONG_MIN_LENGTH} to 32768
 * UTF-16 units (a model that rambles up to its token limit). Pieces are repeated whole, so the text
 * stays well-formed.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const long: FastCheck.Arbitrary<string> = fc.tuple(
  fc.oneof(junk, unicode).filter((piece) => piece.length > 0),
  fc.integer({ min: LONG_MIN_LENGTH, max: 32768 })
).map(([piece, length]) => piece.repeat(Math.ceil(length / piece.length)))

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
export const commonAction: FastCheck.Arbitrary<string> = fc.tuple(
  fc.constantFrom(...COMMON_ACTION_WORDS),
  fc.constantFrom("bare", "action", "answer", "sentence", "json")
).map(([word, format]) => {
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
})

/**
 * Well-formed actions: each value is one of the given strings, or a string matching one of the
 * given patterns (generated by `FastCheck.stringMatching`; anchor a pattern with `^…$` to get only
 * the matching text). An empty list gives {@link commonAction}.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const actions = (list: ReadonlyArray<string | RegExp>): FastCheck.Arbitrary<string> => {
  const strings = list.filter((a): a is string => typeof a === "string")
  const patterns = list.filter((a): a is RegExp => a instanceof RegExp)
  const arbitraries: Array<FastCheck.Arbitrary<string>> = patterns.map((pattern) => fc.stringMatching(pattern))
  if (strings.length > 0) arbitraries.unshift(fc.constantFrom(...strings))
  return arbitraries.length === 0 ? commonAction : fc.oneof(...arbitraries)
}

/**
 * One assistant reply from the default mix: action-like replies, junk, blank, very long and unusual
 * Unicode text.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const reply: FastCheck.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: commonAction },
  { weight: 3, arbitrary: junk },
  { weight: 1, arbitrary: blank },
  { weight: 1, arbitrary: long },
  { weight: 2, arbitrary: unicode }
)

/**
 * One assistant reply for an env with known actions: mostly well-formed actions (so episodes go
 * somewhere), the rest from {@link reply}.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const replyFor = (list: ReadonlyArray<string | RegExp>): FastCheck.Arbitrary<string> =>
  fc.oneof({ weight: 3, arbitrary: actions(list) }, { weight: 2, arbitrary: reply })

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
export const replies: FastCheck.Arbitrary<ReadonlyArray<string>> = fc.array(reply, { minLength: 1, maxLength: 10 })

/**
 * The replies of one conversation, mostly well-formed actions from `list`.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const repliesFor = (
  list: ReadonlyArray<string | RegExp>,
  options: RepliesOptions = {}
): FastCheck.Arbitrary<ReadonlyArray<string>> =>
  fc.array(replyFor(list), { minLength: options.minLength ?? 1, maxLength: options.maxLength ?? 10 })

/**
 * Env configs from a schema: values are drawn with `Arbitrary.make(schema)` (so the schema's
 * filters and `arbitrary` annotations apply) and encoded, giving what a dataset row's
 * `env_config` holds. Use the env's own config schema, or a narrower one that describes the configs
 * worth testing.
 *
 * @since 0.1.0
 * @category arbitraries
 */
export const config = <A, I>(schema: Schema.Schema<A, I, never>): FastCheck.Arbitrary<I> => {
  const encode = ParseResult.encodeEither(schema)
  return Arbitrary.make(schema)
    .map((value) => encode(value))
    .filter((encoded): encoded is Either.Right<ParseResult.ParseIssue, I> => Either.isRight(encoded))
    .map((encoded) => encoded.right)
}
