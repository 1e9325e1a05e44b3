/**
 * Issue 29 ("the first hour") under a fourth hostile user, 2026-12-04: the repros of the defects
 * found, each failing before its fix. Unit layer: the command line runs in-process, no child process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as path from "node:path"
import * as LogIndex from "../../src/view/LogIndex.js"
import * as Model from "../../src/view/Model.js"
import { cli, tmp } from "../cli.js"

/**
 * A web server that is not OpenEnv's: 404 for everything (`python3 -m http.server`, a proxy that
 * answers every address), or with `health`, 200 for `/health` (effect-gym's rollout server).
 */
const webServer = (health = false) => Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ readonly server: http.Server; readonly port: number; readonly paths: Array<string> }>((resolve) => {
      const paths: Array<string> = []
      const server = http.createServer((request, response) => {
        paths.push(request.url ?? "")
        if (health && request.url === "/health") response.writeHead(200, { "content-type": "application/json" }).end("{\"status\":\"ok\"}")
        else response.writeHead(404).end()
      })
      server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as net.AddressInfo).port, paths }))
    })
  ),
  ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
)

const openEnvRows = (dir: string, envConfig: Record<string, unknown>, rows = 4): string => {
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, `${JSON.stringify({ messages: [{ role: "user", content: "Play" }], env_config: { name: "openenv", ...envConfig } })}\n`.repeat(rows))
  return dataset
}

describe("issue 29, hostile 4 (2026-12-04): the run's preflight of an OpenEnv row", () => {
  it.live("a web server that is not OpenEnv's (404 for /health and /ws) is refused in seconds, exit 2 (it passed, and the run retried: 66 s for 2 trajectories, exit 1)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { paths, port } = yield* webServer()
      const dir = tmp()
      const base = `http://127.0.0.1:${port}`
      const dataset = openEnvRows(dir, { base_url: base })
      const output = path.join(dir, "out.jsonl")
      const started = Date.now()
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", output, "--num-generations", "2")
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toContain(
        `env_config.base_url ${base}: no OpenEnv server answers there (HTTP 404 for /health, HTTP 404 for a WebSocket at /ws: ` +
          "a web server, but not an OpenEnv one)"
      )
      expect(Date.now() - started).toBeLessThan(10_000)
      expect(fs.existsSync(output)).toBe(false)
      expect(paths).toEqual(["/health", "/ws"])
    })), 30_000)

  it.live("a web server whose /health answers 200 but that takes no WebSocket at /ws (effect-gym serve on the same port 8000): refused, exit 2 (it passed, and the run retried)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { paths, port } = yield* webServer(true)
      const dir = tmp()
      const base = `http://127.0.0.1:${port}`
      const run = yield* cli("run", "--dataset", openEnvRows(dir, { base_url: base }), "--scheduler", "openenv", "--output", path.join(dir, "out.jsonl"))
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toContain(`${base}: no OpenEnv server answers there (HTTP 200 for /health, HTTP 404 for a WebSocket at /ws`)
      expect(paths).toEqual(["/health", "/ws"])
    })), 30_000)

  it.live("a server that refuses the WebSocket without a key (401): refused, exit 2, the key sent as a Python client sends it (Basic) and never printed", () =>
    Effect.scoped(Effect.gen(function*() {
      const seen: Array<string | undefined> = []
      const { port } = yield* Effect.acquireRelease(
        Effect.promise(() =>
          new Promise<{ readonly server: http.Server; readonly port: number }>((resolve) => {
            const server = http.createServer((request, response) => {
              if (request.url === "/ws") seen.push(request.headers.authorization)
              response.writeHead(request.url === "/health" ? 200 : 401).end()
            })
            server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as net.AddressInfo).port }))
          })
        ),
        ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      )
      for (const [base, expected] of [
        [`http://127.0.0.1:${port}`, "HTTP 401 for a WebSocket at /ws: the server wants a key)"],
        [`http://any:s3cr3t@127.0.0.1:${port}`, "HTTP 401 for a WebSocket at /ws: the server wants a key, and refuses this base_url's)"]
      ] as const) {
        const dir = tmp()
        const run = yield* cli("run", "--dataset", openEnvRows(dir, { base_url: base }), "--scheduler", "openenv", "--output", path.join(dir, "out.jsonl"))
        expect(run.code, run.stderr).toBe(2)
        expect(run.stderr).toContain(expected)
        expect(run.stderr).not.toContain("s3cr3t")
      }
      expect(seen).toEqual([undefined, `Basic ${Buffer.from("any:s3cr3t").toString("base64")}`])
    })), 30_000)

  it.live("a base_url with a path: /health and /ws are looked for under it, as the scheduler connects (the check asked the origin's /health)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { paths, port } = yield* webServer()
      const dir = tmp()
      const dataset = openEnvRows(dir, { base_url: `http://127.0.0.1:${port}/sudoku/` })
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", path.join(dir, "out.jsonl"))
      expect(run.code, run.stderr).toBe(2)
      expect(paths).toEqual(["/sudoku/health", "/sudoku/ws"])
    })), 30_000)

  it.effect("a base_url that is not an OpenEnv URL (ftp://, no scheme, a query, empty) or is missing: one error, exit 2 (each trajectory failed on it, exit 1)", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ base_url: "ftp://127.0.0.1:8000" }, `env_config.base_url "ftp://127.0.0.1:8000": not an http(s):// or ws(s):// URL`],
        [{ base_url: "127.0.0.1:8000" }, `env_config.base_url "127.0.0.1:8000": not an http(s):// or ws(s):// URL`],
        [{ base_url: "" }, `env_config.base_url "": not an http(s):// or ws(s):// URL`],
        [{ base_url: "http://127.0.0.1:8000/?key=s3cr3t" }, `env_config.base_url "http://127.0.0.1:8000/?key=***": not an http(s)`],
        [{}, "env_config.base_url is missing: the OpenEnv scheduler needs its server's URL"],
        [{ base_url: 8000 }, "env_config.base_url: 8000 is not a string"]
      ]
      for (const [envConfig, expected] of cases) {
        const dir = tmp()
        const dataset = openEnvRows(dir, envConfig)
        const output = path.join(dir, "out.jsonl")
        const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", output)
        expect(run.code, `${JSON.stringify(envConfig)}: ${run.stderr}`).toBe(2)
        expect(run.stderr).toContain(`${dataset}:1: ${expected}`)
        expect(run.stderr).not.toContain("s3cr3t")
        expect(fs.existsSync(output)).toBe(false)
      }
    }))
})

/** The help line of `flag` in a command's help (its description may go on the next line). */
const helpLine = (help: string, flag: string): string => {
  const lines = help.split("\n")
  const at = lines.findIndex((line) => line.startsWith(`  ${flag} `) || line.startsWith(`  ${flag},`))
  expect(at, `${flag} in help`).toBeGreaterThanOrEqual(0)
  return /\s{2}\S/.test(lines[at].slice(2)) ? lines[at] : `${lines[at]} ${lines[at + 1].trim()}`
}

describe("issue 29, hostile 4 (2026-12-04): help", () => {
  it.effect("--cors-origin, repeatable and optional, is not marked required (serve and openenv serve said '(repeatable; * for any) (required)')", () =>
    Effect.gen(function*() {
      for (const command of [["serve"], ["openenv", "serve"]]) {
        const help = yield* cli(...command, "--help")
        expect(help.code).toBe(0)
        expect(helpLine(help.stdout, "--cors-origin")).toContain("(repeatable; * for any)")
        expect(helpLine(help.stdout, "--cors-origin")).not.toContain("(required)")
        expect(helpLine(help.stdout, "--allow-host")).not.toContain("(required)")
      }
    }))

  it.effect("every option says its default, and numbers and seconds say so (--temperature was a 'string' with no default; --max-concurrent-envs had none; --top-k said >= 1 but takes -1)", () =>
    Effect.gen(function*() {
      const run = (yield* cli("run", "--help")).stdout
      for (const flag of ["--temperature", "--top-p", "--top-k", "--max-tokens", "--presence-penalty", "--frequency-penalty"]) {
        expect(helpLine(run, flag)).toContain("(default: the server's; colocate ")
      }
      expect(helpLine(run, "--temperature")).toMatch(/^ {2}--temperature number /)
      expect(helpLine(run, "--top-k")).toContain("or -1 for no limit")
      expect(helpLine(run, "--max-concurrent-envs")).toContain("(default: the scheduler's, 4 for openenv)")
      expect(helpLine(run, "--request-timeout")).toMatch(/^ {2}--request-timeout seconds /)
      const serve = (yield* cli("serve", "--help")).stdout
      for (const flag of ["--header-timeout", "--body-timeout", "--write-timeout", "--shutdown-grace", "--env-timeout"]) {
        expect(helpLine(serve, flag)).toMatch(new RegExp(`^ {2}${flag} seconds `))
      }
      expect(helpLine((yield* cli("check-env", "--help")).stdout, "--timeout")).toMatch(/^ {2}--timeout seconds /)
      expect(helpLine((yield* cli("openenv", "serve", "--help")).stdout, "--idle-timeout")).toMatch(/^ {2}--idle-timeout seconds /)
    }))

  it.effect("a mistyped global option gets a did-you-mean at every level (--hlp, run --hlp, --verison, envs --log-levl: 'Received unknown argument'); run --max-sessions gets --max-concurrent-envs (nothing), --gym_env gets --env (it got the old --gym-env)", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["--hlp"], "--help"],
        [["run", "--hlp"], "--help"],
        [["openenv", "serve", "--hlp"], "--help"],
        [["--verison"], "--version"],
        [["envs", "--log-levl", "debug"], "--log-level"],
        [["envs", "--no-colr"], "--no-color"]
      ]
      for (const [args, meant] of cases) {
        const typed = yield* cli(...args)
        expect(typed.code, args.join(" ")).toBe(2)
        expect(typed.stderr).toContain(`The flag '${args.find((a) => a.startsWith("--"))}' is not recognized. Did you mean '${meant}'?`)
      }
      // another command's word: its name here; an old name's near-miss: the new name
      const sessions = yield* cli("run", "--dataset", "x.jsonl", "--max-sessions", "8")
      expect(sessions.stderr).toContain("The flag '--max-sessions' is not recognized. Did you mean '--max-concurrent-envs'? (--max-sessions is openenv serve's cap")
      expect((yield* cli("serve", "--max-sessions", "8")).stderr).toContain("Did you mean '--max-concurrent-envs'?")
      expect((yield* cli("run", "--dataset", "x.jsonl", "--gym_env", "frozen_lake")).stderr).toContain("Did you mean '--env'?")
      expect((yield* cli("run", "--dataset", "x.jsonl", "--api_key_env", "K")).stderr).toContain("Did you mean '--model-api-key-env'?")
      // (on serve --api-key-env is the server's own key, not an old name)
      expect((yield* cli("serve", "--api_key_env", "K")).stderr).toContain("Did you mean '--api-key-env'?")
      expect((yield* cli("openenv", "serve", "--env", "frozen_lake", "--max_concurrent_envs", "3")).stderr).toContain("Did you mean '--max-sessions'?")
      // (nothing near: as before)
      expect((yield* cli("envs", "--xyz")).stderr).toBe("Received unknown argument: '--xyz'")
    }))
})

describe("issue 29, hostile 4 (2026-12-04): honest figures", () => {
  it.effect("the summary calls any positive env reward 'positive reward', not 'success rate' (Sudoku's 93.8% 'success rate' beside 42.2% solved still read as solved)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const run = yield* cli(
        "run", "--dataset", path.resolve(import.meta.dirname, "../../examples/frozen_lake.jsonl"), "--env", "frozen_lake",
        "--policy", "random", "--num-generations", "2", "--output", path.join(dir, "out.jsonl")
      )
      expect(run.code, run.stderr).toBe(0)
      expect(run.stdout).toMatch(/^positive reward \d+\.\d% \(\d+ ended done with a positive env reward\)$/m)
      expect(run.stdout).toMatch(/^solved {9}\d+\.\d% /m)
      expect(run.stdout).not.toContain("success rate")
    }))
})

describe("issue 29, hostile 4 (2026-12-04): one vocabulary", () => {
  it.effect("check-env takes the env as --env NAME too, as every other command (it was 'Received unknown argument: --env')", () =>
    Effect.gen(function*() {
      const byFlag = yield* cli("check-env", "--env", "frozen_lake", "--seeds", "1", "--runs", "1", "--json")
      expect(byFlag.code, byFlag.stderr).toBe(0)
      const byName = yield* cli("check-env", "frozen_lake", "--seeds", "1", "--runs", "1", "--json")
      expect(JSON.parse(byFlag.stdout).env).toBe("frozen_lake")
      expect(JSON.parse(byFlag.stdout).ok).toBe(JSON.parse(byName.stdout).ok)
      const both = yield* cli("check-env", "frozen_lake", "--env", "sudoku")
      expect(both.code).toBe(2)
      expect(both.stderr).toContain("--env: sudoku and NAME frozen_lake disagree: give the env once")
      const none = yield* cli("check-env")
      expect(none.code).toBe(2)
      expect(none.stderr).toContain("the env to check (effect-gym check-env NAME, or --env NAME)")
    }))
})

describe("issue 29, hostile 4 (2026-12-04): completion length of replies that call tools", () => {
  it.effect("a reply of tool calls counts its calls' names and arguments, in the summary and in the viewer (kv_store's solver showed 0.0 characters per trajectory)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const output = path.join(dir, "kv.jsonl")
      const run = yield* cli(
        "run", "--dataset", path.resolve(import.meta.dirname, "../../examples/kv_store.jsonl"), "--env", "kv_store",
        "--policy", "kv-store-solver", "--num-generations", "1", "--max-turns", "8", "--output", output, "--json"
      )
      expect(run.code, run.stderr).toBe(0)
      const summary = JSON.parse(run.stdout) as { mean_completion_chars: number; trajectories: number }
      // what the model wrote: the calls (its text is empty)
      let chars = 0
      for (const line of fs.readFileSync(output, "utf8").split("\n").filter((l) => l.startsWith("{\"row\""))) {
        for (const m of (JSON.parse(line) as { messages: ReadonlyArray<{ role: string; content: string; tool_calls?: ReadonlyArray<{ function: { name: string; arguments: string } }> }> }).messages) {
          if (m.role !== "assistant") continue
          chars += m.content.length + (m.tool_calls ?? []).reduce((n, c) => n + c.function.name.length + c.function.arguments.length, 0)
        }
      }
      expect(chars).toBeGreaterThan(0)
      expect(summary.mean_completion_chars).toBeCloseTo(chars / summary.trajectories, 10)
      const log = yield* LogIndex.make({ file: output })
      yield* log.update
      expect(Model.overview(log.summaries).completion.meanChars).toBeCloseTo(summary.mean_completion_chars, 10)
    }))
})

describe("issue 29, hostile 4 (2026-12-04): rows that name an env that is not there", () => {
  it.effect("a first row naming an unknown env (a typo, a plugin's env without --plugin): one error, exit 2 (it gave 128 bad-row lines and exit 1)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{"name":"frozn_lake"}}\n`.repeat(128))
      const output = path.join(dir, "out.jsonl")
      const run = yield* cli("run", "--dataset", dataset, "--output", output)
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toBe(
        `error: --dataset: ${dataset}:1: env_config.name: unknown env "frozn_lake"; registered: calculator, frozen_lake, ` +
          "kv_store, sudoku (a plugin's env needs its --plugin FILE)"
      )
      expect(fs.existsSync(output)).toBe(false)
      // the plugin's env, with its plugin: it runs
      const plugin = path.resolve(import.meta.dirname, "../fixtures/plugins/async_noop.mjs")
      fs.writeFileSync(dataset, `{"env_config":{"name":"async_noop"}}\n`)
      const withPlugin = yield* cli("run", "--dataset", dataset, "--plugin", plugin, "--output", output, "--num-generations", "2")
      expect(withPlugin.code, withPlugin.stderr).toBe(0)
    }))
})

describe("issue 29, hostile 4 (2026-12-04): npm ci in a fresh clone", () => {
  it("every dependency with an install script is approved in package.json's allowScripts (npm 11.19 warned of 3 'not yet covered', and its docs say unapproved ones are blocked by default: node@24's preinstall is the clone's Node 24)", () => {
    const root = path.resolve(import.meta.dirname, "../..")
    const lock = JSON.parse(fs.readFileSync(path.join(root, "package-lock.json"), "utf8")) as {
      packages: Record<string, { hasInstallScript?: boolean }>
    }
    const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { allowScripts?: Record<string, boolean> }
    const withScripts = Object.entries(lock.packages)
      .filter(([, entry]) => entry.hasInstallScript === true)
      .map(([at]) => at.replace(/^.*node_modules\//, ""))
    expect(withScripts).toContain("node")
    for (const name of withScripts) expect(pkg.allowScripts?.[name], name).toBe(true)
  })
})
