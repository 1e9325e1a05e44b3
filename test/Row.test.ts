import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import * as Json from "../src/internal/Json.js"
import * as Row from "../src/Row.js"

const decode = (line: string) => Row.decodeLine("d.jsonl", 9, line)

describe("Row", () => {
  it("keeps extra columns as the row's data (env_config included), messages optional", () => {
    const row = Result.getOrThrow(decode(JSON.stringify({ env_config: { seed: 3 }, solution: "42" }))!)
    expect(row.index).toBe(9)
    expect(row.messages).toEqual([])
    expect(row.envConfig).toEqual({ seed: 3 })
    expect(row.dataDict).toEqual({ env_config: { seed: 3 }, solution: "42" })
  })

  it("names the file, line and field of what is wrong", () => {
    const error = (line: string) => Result.flip(decode(line)!).pipe(Result.getOrThrow).message
    expect(error("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}")).toMatch(/^d\.jsonl:10: messages\[0\]\.role: /)
    expect(error("{\"messages\": [{\"role\": \"user\"}]}")).toMatch(/^d\.jsonl:10: messages\[0\]\.content: /)
    expect(error("{\"env_config\": 5}")).toMatch(/^d\.jsonl:10: env_config: /)
    expect(error("{\"env_config\": {\"name\": 7}}")).toMatch(/^d\.jsonl:10: env_config\.name: /)
    expect(error("[1]")).toBe("d.jsonl:10: expected a JSON object, got an array")
    expect(error("{\"a\": 1,}")).toMatch(/^d\.jsonl:10: malformed JSON: /)
  })

  it("skips blank lines and keeps file line numbers", () => {
    const rows = [...Row.decodeJsonl("d.jsonl", "{}\n\n  \r\n{\"x\":1}\r\n")]
    expect(rows.map((r) => Result.getOrThrow(r).index)).toEqual([0, 3])
    expect(Row.countRows("{}\n\n  \r\n{\"x\":1}\r\n")).toBe(2)
  })

  it("keeps integers beyond 2^53 exact", () => {
    const row = Result.getOrThrow(decode("{\"env_config\": {\"seed\": 123456789012345678901}}")!)
    expect(row.envConfig.seed).toBe(123456789012345678901n)
    expect(Json.stringify(row.envConfig)).toBe("{\"seed\":123456789012345678901}")
  })
})

describe("Json", () => {
  it("parses like JSON.parse except for unsafe integers", () => {
    const text = "{\"a\":[1,2.5,-3e2,true,null,\"x\\\"y\\u00e9\"],\"b\":{\"c\":-9007199254740993}}"
    expect(Json.parse(text)).toEqual({ a: [1, 2.5, -300, true, null, "x\"yé"], b: { c: -9007199254740993n } })
    expect(() => Json.parse("{\"a\": 12345678901234567890,}")).toThrow(/position/)
  })

  it("stringify writes bigints as integers and leaves look-alike strings alone", () => {
    expect(Json.stringify({ n: 2n ** 70n, s: "\u0000bigint:5" })).toBe(
      "{\"n\":1180591620717411303424,\"s\":\"\\u0000bigint:5\"}"
    )
  })
})
