/**
 * The streaming dataset reader: bytes in chunks of any size give the rows the whole text gives, a
 * line that is not UTF-8 is a row error at its line, and counting needs no whole file.
 */
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Effect, Result, Schema, Stream } from "effect"
import * as Row from "../src/Row.js"

const encoder = new TextEncoder()

/** `bytes` cut at the given offsets: chunks as a file read would give them (a cut may split a character). */
const chunked = (bytes: Uint8Array, cuts: ReadonlyArray<number>): Stream.Stream<Uint8Array> => {
  const offsets = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)
  const chunks: Array<Uint8Array> = []
  let start = 0
  for (const offset of [...offsets, bytes.length]) {
    if (offset > start) chunks.push(bytes.slice(start, offset))
    start = Math.max(start, offset)
  }
  return Stream.fromIterable(chunks)
}

const show = (rows: ReadonlyArray<Result.Result<Row.Row, Row.RowError>>) =>
  rows.map((r) => Result.match(r, { onFailure: (e) => `error ${e.message}`, onSuccess: (row) => JSON.stringify(row) }))

/** Text of characters of 1 to 4 UTF-8 bytes, and graphemes of several code points (a cut may split any of them). */
const GRAPHEMES = ["a", " ", "\"", "\\", "\n", "é", "ß", "€", "中", "😀", "👩‍👩‍👧", "🇫🇷", "e\u0301", "\u0000"] as const

const note = Arbitrary.array(Arbitrary.schema(Schema.Literals(GRAPHEMES)), { maxLength: 12 }).pipe(
  Arbitrary.map((parts) => parts.join(""))
)

const line = Arbitrary.schema(Schema.Boolean).pipe(
  Arbitrary.flatMap((row) =>
    row
      ? Arbitrary.all({ env_config: Arbitrary.all({ seed: Arbitrary.schema(Schema.Int) }), note }).pipe(
        Arbitrary.map((row) => JSON.stringify(row))
      )
      : Arbitrary.schema(Schema.Literals(["", "   ", "{not json", "[1,2]", "{\"env_config\":{\"seed\":\"é€😀\"}}", "\t"]))
  )
)

describe("Row.decodeStream", () => {
  it.effect.prop(
    "any chunking of the bytes gives the rows of the whole text, line numbers included",
    [
      Arbitrary.array(line, { maxLength: 25 }),
      Schema.Boolean,
      Arbitrary.array(Arbitrary.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))), { maxLength: 12 })
    ],
    ([lines, crlf, cuts]) =>
      Effect.gen(function*() {
        const text = lines.join(crlf ? "\r\n" : "\n")
        const bytes = encoder.encode(text)
        const streamed = yield* Stream.runCollect(Row.decodeStream("d.jsonl", chunked(bytes, cuts)))
        expect(show(streamed)).toEqual(show([...Row.decodeJsonl("d.jsonl", text)]))
        expect(yield* Row.countStream(chunked(bytes, cuts))).toBe(Row.countRows(text))
      }),
    { arbitrary: { runs: 200 } }
  )

  it.effect("a line that is not UTF-8 is a row error at its line, wherever the chunks are cut", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array([
        ...encoder.encode("{\"a\":\"é\"}\n{\"b\":\""),
        0xff,
        ...encoder.encode("\"}\n{\"c\":\""),
        0xe2,
        0x82,
        ...encoder.encode("\"}\n{\"d\":1}")
      ])
      for (let cut = 0; cut <= bytes.length; cut++) {
        const rows = yield* Stream.runCollect(Row.decodeStream("d.jsonl", chunked(bytes, [cut, cut + 3])))
        expect(show(rows), `cut at ${cut}`).toEqual([
          JSON.stringify({ file: "d.jsonl", index: 0, messages: [], envConfig: {}, dataDict: { a: "é" } }),
          "error d.jsonl:2: invalid UTF-8 (byte 7 of the line)",
          "error d.jsonl:3: invalid UTF-8 (byte 7 of the line)",
          JSON.stringify({ file: "d.jsonl", index: 3, messages: [], envConfig: {}, dataDict: { d: 1 } })
        ])
      }
    }))

  it.effect("skip leaves lines undecoded (a resumed run's finished rows)", () =>
    Effect.gen(function*() {
      const text = ["{\"i\":0}", "{oops", "{\"i\":2}", "{\"i\":3}"].join("\n")
      const rows = yield* Stream.runCollect(Row.decodeStream("d", chunked(encoder.encode(text), [5]), { skip: (i) => i < 2 }))
      expect(rows.map((r) => Result.getOrThrow(r).index)).toEqual([2, 3])
    }))

  it("a number too large for a double is an error at its field, not a silent Infinity", () => {
    expect(show([Row.decodeLine("d", 0, "{\"env_config\":{\"seed\":1e400}}")!])).toEqual([
      "error d:1: env_config.seed: the number is too large (beyond ±1.8e308, it would be Infinity)"
    ])
    expect(show([Row.decodeLine("d", 4, "{\"xs\":[1,-2e999]}")!])).toEqual([
      "error d:5: xs[1]: the number is too large (beyond ±1.8e308, it would be -Infinity)"
    ])
    // big integers stay exact, small exponents are fine
    const ok = Result.getOrThrow(Row.decodeLine("d", 0, "{\"env_config\":{\"seed\":123456789012345678901234567890,\"p\":1e-300}}")!)
    expect(ok.envConfig).toEqual({ seed: 123456789012345678901234567890n, p: 1e-300 })
  })
})

describe("Row.streamLines: a line longer than the limit (a file without newlines grew memory without bound)", () => {
  const lines = (text: string, cuts: ReadonlyArray<number>, maxLineBytes: number) =>
    Effect.runPromise(Stream.runCollect(Row.streamLines(chunked(encoder.encode(text), cuts), { maxLineBytes }))).then((c) =>
      c.map(([index, text, invalid]) => (invalid === undefined ? `${index}:${text}` : `${index}:! ${invalid}`))
    )
  const tooLong = "the line is longer than 10 bytes (the longest a dataset's line may be)"

  it("is reported at its index and skipped, with the lines around it kept, however the bytes are cut", async () => {
    const text = `abc\n${"x".repeat(25)}\nok\n${"y".repeat(10)}\n${"z".repeat(11)}`
    const expected = ["0:abc", `1:! ${tooLong}`, "2:ok", `3:${"y".repeat(10)}`, `4:! ${tooLong}`]
    // every cut of the text in two, then in chunks of every size
    for (let cut = 0; cut <= text.length; cut++) expect(await lines(text, [cut], 10)).toEqual(expected)
    for (let size = 1; size <= text.length; size++) {
      const cuts = Array.from({ length: Math.ceil(text.length / size) }, (_, i) => i * size)
      expect(await lines(text, cuts, 10), `chunks of ${size}`).toEqual(expected)
    }
  })

  it("the default limit is 256 MiB: a 64 MB line is a line", () => {
    expect(Row.MAX_LINE_BYTES).toBe(256 * 1024 * 1024)
  })
})
