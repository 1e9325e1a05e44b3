/**
 * Issue 27 under a fourth hostile user, 2026-12-04: the latest speed changes (the log line in one
 * JSON.stringify, the writer's lines without newlines, `run` started again with V8 semi-spaces of
 * 8 MB). Unit layer: no child process (the built command line's cases are in
 * Issue27Hostile4Node.test.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { youngGenerationArgv } from "../../src/cli/launch.js"

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
})
