/**
 * The unit project's setup file (vitest.config.ts): a unit test needs no build and starts no child
 * process. Here every function of node:child_process that starts one throws, for the test file and
 * for all it imports (src/, libraries), and so does starting an env worker thread (src/isolation:
 * it runs the built dist/, or compiles the sources in the thread). Where the code under test catches
 * that error (a helper that turns it into an exit code, a pool that waits for its workers), the
 * test fails anyway, after it: the refusal is recorded and checked after each test. The message
 * names the way out: list the file in test/layers.ts's `integration`. test/UnitLayer.test.ts checks
 * that this is in force.
 *
 * (Not covered: what another thread starts. tsx, which loads a TypeScript plugin at run time, has
 * esbuild compile it in esbuild's own service process.)
 */
import { createRequire, syncBuiltinESMExports } from "node:module"
import * as path from "node:path"
import { afterEach } from "vitest"

export const BLOCKED = ["spawn", "spawnSync", "exec", "execSync", "execFile", "execFileSync", "fork"] as const

interface Guard {
  /** What was refused since the last check. */
  readonly refused: Array<string>
}
const key = Symbol.for("effect-gym/test/no-child-process")
const message = (what: string) =>
  `${what}: a unit test needs no build and starts no child process; a test file that does belongs in test/layers.ts's integration files`

/** Installs the guard once per process (the unit project's files share their processes). */
const install = (): Guard => {
  const guard: Guard = { refused: [] }
  const refuse = (what: string): never => {
    guard.refused.push(what)
    throw new Error(message(what))
  }
  const require = createRequire(import.meta.url)
  const childProcess = require("node:child_process") as Record<string, unknown>
  for (const name of BLOCKED) childProcess[name] = () => refuse(`child_process.${name}`)
  const workerThreads = require("node:worker_threads") as typeof import("node:worker_threads")
  const root = path.resolve(import.meta.dirname, "../..")
  const Worker = workerThreads.Worker
  workerThreads.Worker = class extends Worker {
    constructor(script: string | URL, options?: import("node:worker_threads").WorkerOptions) {
      const text = String(script)
      if (text.includes(path.join(root, "dist")) || text.includes("isolation/internal/worker")) {
        refuse(`an env worker thread (${text.slice(0, 120)})`)
      }
      super(script, options)
    }
  }
  // (the ES module view, `import { spawn } from "node:child_process"`, follows the CommonJS one)
  syncBuiltinESMExports()
  return guard
}

const global = globalThis as { [key]?: Guard }
const guard = (global[key] ??= install())

/** What the guard refused since the last check, taken (test/UnitLayer.test.ts). */
export const takeRefused = (): Array<string> => guard.refused.splice(0)

afterEach(() => {
  const refused = takeRefused()
  if (refused.length > 0) throw new Error(message(refused.join(", ")))
})
