/**
 * docs/python.md's snippets, run as the page shows them (issue 29, item 7): its `sh` commands with the
 * built binary, its Python blocks with `python3` (standard library) or, for those that import OpenEnv,
 * a Python that has `openenv-core` (`EFFECT_GYM_OPENENV_PYTHON`, else `python3`; skipped with a
 * notice where neither has it), against servers started here on loopback: the page's port 8000
 * (`127.0.0.1:8000`, `port=8000`) becomes theirs.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { promisify } from "node:util"
import { bin, healthy, launchScoped, tmp } from "./cli.js"
import { freePort } from "./openenv/helpers.js"

const root = path.resolve(import.meta.dirname, "..")
const page = fs.readFileSync(path.join(root, "docs/python.md"), "utf8")
const run = promisify(execFile)

interface Block {
  readonly lang: string
  readonly role: string | undefined
  readonly code: string
}

/** The page's fenced blocks, in order, with their info string (` ```python server`: lang python, role server). */
const blocks: ReadonlyArray<Block> = [...page.matchAll(/^```(\w+)(?: (\w+))?\n([\s\S]*?)^```$/gm)].map((m) => ({
  lang: m[1],
  role: m[2],
  code: m[3]
}))
const python = blocks.filter((b) => b.lang === "python")
const stdlib = python.filter((b) => !/^(from|import) openenv/m.test(b.code))
const openenv = python.filter((b) => /^(from|import) openenv/m.test(b.code))
/** An `sh` block's effect-gym command as arguments of the binary (continuation lines joined). */
const commands = blocks.filter((b) => b.lang === "sh").map((b) =>
  b.code.replace(/\\\n/g, " ").trim().split(/\s+/).filter((w, i) => !(i < 2 && (w === "node" || w === "bin/effect-gym.js")))
)
const at = (code: string, port: number) =>
  code.replaceAll("127.0.0.1:8000", `127.0.0.1:${port}`).replaceAll("port=8000", `port=${port}`)
const withPort = (args: ReadonlyArray<string>, port: number) => args.map((a) => (a === "8000" ? String(port) : at(a, port)))

const hasPython = spawnSync("python3", ["--version"]).status === 0
const openenvPython = process.env.EFFECT_GYM_OPENENV_PYTHON ?? "python3"
const hasOpenEnv = spawnSync(openenvPython, ["-c", "import openenv.core, uvicorn, websockets"]).status === 0
if (!hasOpenEnv) {
  console.warn(
    `NOTICE: docs/python.md's OpenEnv snippets are SKIPPED: ${openenvPython} cannot import openenv.core, uvicorn and ` +
      "websockets (set EFFECT_GYM_OPENENV_PYTHON to a Python that has openenv-core)"
  )
}

const runPython = (interpreter: string, code: string) =>
  Effect.promise(() =>
    run(interpreter, ["-c", code], { timeout: 60_000 }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr })
    )
  )

/** The page's `openenv serve` command on a free port, for the scope. */
const openenvServe = Effect.gen(function*() {
  const port = yield* Effect.promise(freePort)
  const served = yield* launchScoped(withPort(commands[0], port))
  return { port, url: served.url }
})

describe("docs/python.md", () => {
  it("has the snippets this test runs", () => {
    expect(commands.map((c) => c.slice(0, 2))).toEqual([["openenv", "serve"], ["run", "--dataset"]])
    expect(stdlib).toHaveLength(1)
    expect(openenv.map((b) => b.role)).toEqual([undefined, "server"])
    expect(blocks.filter((b) => b.lang === "json")).toHaveLength(1)
  })

  it.live.skipIf(!hasPython)("the standard-library snippet plays FrozenLake over /mcp against openenv serve", () =>
    Effect.gen(function*() {
      const { port } = yield* openenvServe
      const out = yield* runPython("python3", at(stdlib[0].code, port))
      expect(out.stderr).toBe("")
      expect(out.code).toBe(0)
      expect(out.stdout).toContain("FrozenLake 4x4:")
      expect(out.stdout).toContain("up -> ok reward 0 done False")
      expect(out.stdout.trim().split("\n").at(-1)).toBe("left -> goal reward 1 done True")
    }).pipe(Effect.scoped), 60_000)

  it.live.skipIf(!hasOpenEnv)("OpenEnv's GenericEnvClient snippet plays a step against openenv serve", () =>
    Effect.gen(function*() {
      const { port } = yield* openenvServe
      const out = yield* runPython(openenvPython, at(openenv[0].code, port))
      expect(out.code, out.stderr).toBe(0)
      expect(out.stdout).toContain("You are at row 1, col 3. Output your first move.")
      expect(out.stdout.trim().split("\n").at(-1)).toBe("Output your next move. 0 False")
    }).pipe(Effect.scoped), 60_000)

  it.live.skipIf(!hasOpenEnv)("effect-gym plays the page's Python OpenEnv env with --scheduler openenv", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      yield* Effect.acquireRelease(
        Effect.sync(() => spawn(openenvPython, ["-c", at(openenv[1].code, port)], { stdio: "ignore" })),
        (child) => Effect.sync(() => void child.kill("SIGKILL"))
      )
      yield* healthy(`http://127.0.0.1:${port}`, {}, 2400) // up to a minute: FastAPI and OpenEnv import slowly
      const dir = tmp()
      fs.writeFileSync(path.join(dir, "compass.jsonl"), at(blocks.find((b) => b.lang === "json")!.code, port))
      const out = yield* Effect.promise(() => bin(withPort(commands[1], port), dir))
      expect(out.code, out.stderr).toBe(0)
      const lines = fs.readFileSync(path.join(dir, "compass-out.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
      expect(lines).toHaveLength(4)
      for (const line of lines) {
        expect(line.error).toBe(null)
        expect(line.env).toBe("openenv")
        expect([0, 1]).toContain(line.reward)
        // each reply is a move; the env ends the episode at the secret or after 4 tries
        expect(line.messages.filter((m: { role: string }) => m.role === "assistant").length).toBeLessThanOrEqual(4)
        expect(line.end_reason === "done" || line.end_reason === "max_turns").toBe(true)
      }
      // one group, one seed: every generation hunts the same secret, so some find it
      expect(lines.some((l) => l.reward === 1)).toBe(true)
    }).pipe(Effect.scoped), 90_000)
})
