/** Running the CLI in-process with a full argv, as a user would type it, and reading what it wrote. */
import { NodeServices } from "@effect/platform-node"
import { Console, Effect, Schema } from "effect"
import { execFile, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { main } from "../src/cli/Cli.js"
import { CompletionLine } from "../src/CompletionsLog.js"

/** Runs `effect-gym ...args`; returns the exit code and what it printed on stdout and stderr. */
export const cli = (...args: Array<string>) =>
  Effect.gen(function*() {
    const out: Array<string> = []
    const err: Array<string> = []
    const console: Console.Console = {
      ...globalThis.console,
      log: (...xs: ReadonlyArray<unknown>) => void out.push(xs.join(" ")),
      error: (...xs: ReadonlyArray<unknown>) => void err.push(xs.join(" "))
    }
    const code = yield* main(["node", "effect-gym", ...args]).pipe(Effect.provideService(Console.Console, console))
    return { code, stdout: out.join("\n"), stderr: err.join("\n") }
  }).pipe(Effect.provide(NodeServices.layer))

/** Polls until the server at `base` answers /health (it starts in a forked fiber or another process). */
export const healthy = (base: string, headers: Record<string, string> = {}, tries = 400) =>
  Effect.gen(function*() {
    for (let i = 0; i < tries; i++) {
      const ok = yield* Effect.promise(() => fetch(`${base}/health`, { headers }).then((r) => r.ok, () => false))
      if (ok) return
      yield* Effect.sleep("25 millis")
    }
    return yield* Effect.die(new Error("the server did not start"))
  })

const execBin = promisify(execFile)

/** Runs the built binary (`node bin/effect-gym.js ...args`) in `cwd`: its exit code and output. */
export const bin = (args: ReadonlyArray<string>, cwd: string) =>
  execBin(process.execPath, [path.resolve(import.meta.dirname, "../bin/effect-gym.js"), ...args], { cwd }).then(
    ({ stderr, stdout }) => ({ code: 0, stdout, stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr })
  )

/** A built CLI process that serves (serve, openenv serve): its URL, the child, its exit and its stderr so far. */
export interface Launched {
  readonly url: string
  readonly child: ReturnType<typeof spawn>
  readonly exit: Promise<[number | null, string | null]>
  readonly stderr: () => string
}

/**
 * Spawns the built binary (`node bin/effect-gym.js ...args`, in the package root); resolves once it
 * prints its http://127.0.0.1:PORT on stdout, rejects when it exits before that.
 */
export const launch = (args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  new Promise<Launched>((resolve, reject) => {
    const child = spawn(process.execPath, [path.resolve(import.meta.dirname, "../bin/effect-gym.js"), ...args], {
      cwd: path.resolve(import.meta.dirname, ".."),
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    const exit = new Promise<[number | null, string | null]>((done) => child.on("exit", (code, signal) => done([code, signal])))
    child.stderr.on("data", (chunk) => void (stderr += String(chunk)))
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk)
      const url = /http:\/\/127\.0\.0\.1:\d+/.exec(stdout)?.[0]
      if (url !== undefined) resolve({ url, child, exit, stderr: () => stderr })
    })
    void exit.then(([code]) => reject(new Error(`${args[0]} exited with ${code} before it started: ${stderr}`)))
  })

/** {@link launch} in the scope: the process is killed (SIGKILL) when the scope closes, if it still runs. */
export const launchScoped = (args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.promise(() => launch(args, env)),
    ({ child }) => Effect.sync(() => void (child.exitCode === null && child.kill("SIGKILL")))
  )

/** A fresh temporary directory. */
export const tmp = (prefix = "effect-gym-test-") => fs.mkdtempSync(path.join(os.tmpdir(), prefix))

/** The lines of a completions log, each decoded with the line schema. */
export const readLines = (file: string) =>
  fs.readFileSync(file, "utf8").trim().split("\n").map((line) => Schema.decodeUnknownSync(CompletionLine)(JSON.parse(line)))
