/**
 * The layers of the suite (test/layers.ts, vitest.config.ts) stay what they say: in the unit
 * project, starting a child process or an env worker thread fails (test/setup/no-child-process.ts),
 * whichever way it is imported; the integration files listed exist.
 */
import { describe, expect, it } from "@effect/vitest"
import * as childProcess from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { Worker } from "node:worker_threads"
import { BLOCKED, takeRefused } from "./setup/no-child-process.js"
import { heavy, integration } from "./layers.js"

const root = path.resolve(import.meta.dirname, "..")

describe("the unit layer", () => {
  it("every function of node:child_process that starts a process throws, imported as an ES module or required", () => {
    const required = createRequire(import.meta.url)("node:child_process") as Record<string, (...args: Array<unknown>) => unknown>
    for (const name of BLOCKED) {
      expect(() => (childProcess[name] as (...args: Array<unknown>) => unknown)(process.execPath, ["-e", "0"]), name).toThrow(/a unit test needs no build and starts no child process/)
      expect(() => required[name](process.execPath, ["-e", "0"]), name).toThrow(/test\/layers\.ts/)
    }
    // recorded too, so that a test fails even where the code under test catches the error
    expect(takeRefused()).toEqual(BLOCKED.flatMap((name) => [`child_process.${name}`, `child_process.${name}`]))
  })

  it("an env worker thread (the built one, or the sources') is refused", () => {
    for (const script of [new URL(`file://${path.join(root, "dist/isolation/internal/worker.js")}`), path.join(root, "src/isolation/internal/worker.ts")]) {
      expect(() => new Worker(script)).toThrow(/a unit test needs no build/)
    }
    expect(takeRefused()).toHaveLength(2)
  })
})

describe("the integration layer", () => {
  it("lists files that exist, once each; so does the list of heavy files (unit or integration)", () => {
    for (const file of integration) expect(fs.existsSync(path.join(root, file)), file).toBe(true)
    expect(new Set(integration).size).toBe(integration.length)
    for (const file of heavy) expect(fs.existsSync(path.join(root, file)), file).toBe(true)
    expect(new Set(heavy).size).toBe(heavy.length)
  })
})
