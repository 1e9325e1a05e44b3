/**
 * A third hostile pass on issue 30 (tool calls): adversarial text for the tool parsers, odd
 * `tool_calls` from a server, and tools that misbehave.
 */
import { describe, expect, it } from "@effect/vitest"
import * as ToolParsers from "../../src/inference/ToolParsers.js"

const MB = 1_000_000

describe("tool parsers on adversarial text", () => {
  it("5 MB replies that defeat a rescan from every '{' (llama3_json took 78 s on 200 KB) parse in linear time", () => {
    // (V8's own JSON.parse takes about 3 s on 5 MB of `[`: hence the loose bound; quadratic was hours)
    const texts = {
      braces: "{".repeat(5 * MB),
      nestedInvalid: "{".repeat(2.5 * MB) + "}".repeat(2.5 * MB),
      unclosedStrings: "{\"".repeat(2.5 * MB),
      names: "{ \"name\"".repeat(MB / 1.6),
      tags: "<tool_call>".repeat(MB / 2.2),
      unclosedTag: "<tool_call>" + "[".repeat(5 * MB),
      mistral: "[TOOL_CALLS]".repeat(MB / 2.4),
      mistralSpace: "[TOOL_CALLS]" + " ".repeat(5 * MB) + "x"
    }
    for (const parser of ToolParsers.names) {
      for (const [label, text] of Object.entries(texts)) {
        const started = performance.now()
        const parsed = ToolParsers.parse(parser, text)
        const ms = performance.now() - started
        expect([parser, label, parsed.toolCalls.length, parsed.content?.length, ms < 15_000]).toEqual([parser, label, 0, text.length, true])
      }
    }
  }, 120_000)

  it("llama3_json still reads the calls of a reply with many braces in prose before them", () => {
    const text = "{".repeat(1000) + " {\"name\": \"add\", \"parameters\": {\"a\": 1}}"
    expect(ToolParsers.parse("llama3_json", text).toolCalls.map((c) => c.function)).toEqual([{ name: "add", arguments: "{\"a\": 1}" }])
  })
})
