/**
 * Issue 27 under a fourth hostile user, 2026-12-04: the latest speed changes (the log line in one
 * JSON.stringify, the writer's lines without newlines, `run` started again with V8 semi-spaces of
 * 8 MB). Unit layer: no child process (the built command line's cases are in
 * Issue27Hostile4Node.test.ts).
 */
import { NodeFileSystem } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { constants } from "node:buffer"
import * as fs from "node:fs"
import * as path from "node:path"
import { vi } from "vitest"
import { youngGenerationArgv } from "../../src/cli/launch.js"
import * as CompletionsLog from "../../src/CompletionsLog.js"
import * as Json from "../../src/internal/Json.js"
import type * as Rollout from "../../src/Rollout.js"
import { tmp } from "../cli.js"
import { oneTurnRecord } from "../helpers.js"

const argv = (...args: Array<string>) => ["/usr/bin/node", "/x/bin/effect-gym.js", ...args]

describe("run's young generation: the user's own choices are kept", () => {
  it("a semi-space size in NODE_OPTIONS in double quotes (as Node reads it) is the user's: not started again over it", () => {
    // Node takes `"--max-semi-space-size=2"` (quotes and backslash escapes) as the flag; the flag of
    // the new command line came after NODE_OPTIONS and won: the user's 2 MB became 8 MB.
    for (
      const options of [
        '"--max-semi-space-size=2"',
        '--enable-source-maps "--min-semi-space-size=4"',
        '"--max-semi-space-size" 2',
        // (a backslash in quotes escapes the next character)
        '"--max\\-semi-space-size=2"'
      ]
    ) {
      expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: options }), options).toBeUndefined()
    }
  })

  it("a heap size of the user's (--max-heap-size) is kept: V8 refuses it with a semi-space size and an old space size (a fatal error at start)", () => {
    // `NODE_OPTIONS="--max-heap-size=2048 --max-old-space-size=1024" effect-gym run ...` died at its
    // start with "Check failed: v8_flags.max_heap_size > 0 implies v8_flags.max_semi_space_size == 0
    // || v8_flags.max_old_space_size == 0" (exit 133) once the semi-space flags were added.
    expect(youngGenerationArgv(argv("run"), ["--max-heap-size=2048", "--max-old-space-size=1024"], {})).toBeUndefined()
    expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: "--max-heap-size=2048 --max-old-space-size=1024" })).toBeUndefined()
    expect(youngGenerationArgv(argv("run"), ["--max_heap_size=2048"], {})).toBeUndefined()
    // (an old space size alone still gets the young generation)
    expect(youngGenerationArgv(argv("run"), ["--max-old-space-size=1024"], {})).toBeDefined()
  })

  it("a run under a debugger (--inspect, --inspect-brk, --inspect-wait) is not started again (a second session, a second wait)", () => {
    // Started again, `node --inspect-brk bin/effect-gym.js run ...` waited for a debugger, and once
    // the user had attached and resumed, started again and waited at another address.
    for (const flag of ["--inspect", "--inspect=0", "--inspect-brk", "--inspect-brk=127.0.0.1:9230", "--inspect-wait=0"]) {
      expect(youngGenerationArgv(argv("run"), [flag], {}), flag).toBeUndefined()
      expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: flag }), flag).toBeUndefined()
    }
    expect(youngGenerationArgv(argv("run"), ["--inspect-port=9230"], {})).toBeDefined()
  })

  it("a run with code preloaded (--require, -r, --import, --loader) is not started again (the preload ran twice in the process)", () => {
    for (const flags of [["--require", "./banner.cjs"], ["-r", "./banner.cjs"], ["--require=./banner.cjs"], ["--import", "tsx"], ["--import=tsx"], ["--loader", "x.mjs"], ["--experimental-loader=x.mjs"]]) {
      expect(youngGenerationArgv(argv("run"), flags, {}), flags.join(" ")).toBeUndefined()
      expect(youngGenerationArgv(argv("run"), [], { NODE_OPTIONS: flags.join(" ") }), flags.join(" ")).toBeUndefined()
    }
    // (a flag that only starts with those letters is another flag)
    expect(youngGenerationArgv(argv("run"), ["--redirect-warnings=w.txt"], {})).toBeDefined()
  })
})

describe("a line of exactly the longest string V8 holds", () => {
  it("is its trajectory's EncodeError line, never an exception out of encodeGroup (its newline could not be added)", () => {
    // JSON.stringify writes a text of 2^29 - 24 characters; `text + "\n"` (EncodedGroup.lines)
    // threw "RangeError: Invalid string length" out of encodeGroup: the run stopped, internal error.
    const at = (content: string, generation = 0) => oneTurnRecord({ generation }, { messages: [{ role: "user", content }] })
    const base = CompletionsLog.encodeLine(at("")).length
    const longest = constants.MAX_STRING_LENGTH - base
    // Each "a" of the content is one character of the line, so the huge line is exactly the longest
    // string (checked on a short content: stringifying the huge one once more took 6 of this test's 19 s)
    expect(CompletionsLog.encodeLine(at("a".repeat(1000))).length).toBe(base + 1000)
    const huge = at("a".repeat(longest))
    const group: Rollout.Group = { _tag: "Group", row: huge.row, records: [huge, at("fine", 1)] }
    const encoded = CompletionsLog.encodeGroup(group)
    expect(encoded.texts).toHaveLength(2)
    expect(encoded.lines.map((line) => line.length)).toEqual(encoded.texts.map((text) => text.length + 1))
    const [first, second] = encoded.texts.map((text) => JSON.parse(text) as CompletionsLog.CompletionLine)
    expect(first.error).toMatchObject({ _tag: "EncodeError", path: "messages" })
    expect(String(first.error?.message)).toContain("longer than the longest text")
    expect(second.messages).toEqual([{ role: "user", content: "fine" }])
    expect(second.error).toBeNull()
  }, 120_000)
})

describe("the writer's buffer past what it keeps (REUSED_BYTES, 16 MB)", () => {
  it.effect("a write of many lines past 16 MB allocates in proportion to its bytes, not to their square", () =>
    Effect.gen(function*() {
      // Past 16 MB the buffer grew to exactly what each line needed, and then by one byte for its
      // newline: every line copied the whole buffer twice (24 lines of 20 MB: 35 s, 20 s as
      // lines with their newlines). Counted here: the bytes of the Uint8Arrays the writer makes.
      let allocated = 0
      class Counted extends Uint8Array {
        // (subarray makes its views through this constructor too: a buffer and its range)
        constructor(...args: [length: number] | [buffer: ArrayBuffer, byteOffset?: number, length?: number]) {
          super(...(args as unknown as [ArrayBuffer, number, number]))
          if (typeof args[0] === "number") allocated += args[0]
        }
      }
      const texts = ["a".repeat(16 * 1024 * 1024), ...Array.from({ length: 200 }, (_, i) => `${i}:${"b".repeat(100_000)}`)]
      const file = path.join(tmp("h27-4-grow"), "log.jsonl")
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* CompletionsLog.open(file)
        allocated = 0
        vi.stubGlobal("Uint8Array", Counted)
        yield* Effect.ensuring(writer.writeJsonLines(texts), Effect.sync(() => vi.unstubAllGlobals()))
      }))
      const written = fs.statSync(file).size
      expect(written).toBe(texts.reduce((sum, text) => sum + text.length + 1, 0))
      expect(allocated).toBeLessThan(4 * written)
    }).pipe(Effect.provide(NodeFileSystem.layer)), 120_000)
})

describe("Json.stringify's bigints (written as JSON.rawJSON: a guard, it passed before as well)", () => {
  it("every bigint exact, wherever it is: top level, nested, negative, zero, from a toJSON, huge; the rest as JSON.stringify writes it", () => {
    const huge = 10n ** 400n + 7n
    const value = {
      a: [1n, -(2n ** 80n), { b: 0n }],
      c: { toJSON: () => 2n ** 64n },
      s: "\u0000bigint:abc:12",
      n: [-0, NaN, undefined, () => 1],
      huge
    }
    expect(Json.stringify(value)).toBe(
      `{"a":[1,-1208925819614629174706176,{"b":0}],"c":18446744073709551616,"s":"\\u0000bigint:abc:12","n":[0,null,null,null],"huge":${huge}}`
    )
    expect(Json.stringify(5n)).toBe("5")
    expect(Json.parse(Json.stringify({ x: 10n ** 100n }))).toEqual({ x: 10n ** 100n })
    // (a cycle is still the caller's: thrown)
    const cyclic: Record<string, unknown> = { big: 1n }
    cyclic.self = cyclic
    expect(() => Json.stringify(cyclic)).toThrow(TypeError)
  })
})
