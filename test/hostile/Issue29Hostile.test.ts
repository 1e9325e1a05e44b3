/**
 * Issue 29 (help, launcher, preflight, renamed options, summary figures) under a hostile user,
 * 2026-12-04: the repros of the defects found, each failing before its fix. Unit layer: the
 * command line runs in-process, no child process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { cli, tmp } from "../cli.js"

/** A TCP server that accepts connections and never says anything (a black hole, the wrong port's service). */
const silentServer = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ readonly server: net.Server; readonly port: number; readonly sockets: Set<net.Socket> }>((resolve) => {
      const sockets = new Set<net.Socket>()
      const server = net.createServer((socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as net.AddressInfo).port, sockets }))
    })
  ),
  ({ server, sockets }) =>
    Effect.promise(() =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
    )
)

const openEnvRows = (dir: string, base: string, rows = 4): string => {
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, `{"messages":[{"role":"user","content":"Play"}],"env_config":{"name":"openenv","base_url":"${base}"}}\n`.repeat(rows))
  return dataset
}

describe("issue 29, hostile (2026-12-04): the run's preflight", () => {
  it.live("a first row's server that accepts TCP but never answers is refused in seconds (it passed the check, and the run hung retrying)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { port } = yield* silentServer
      const dir = tmp()
      const base = `http://127.0.0.1:${port}`
      const dataset = openEnvRows(dir, base)
      const output = path.join(dir, "out.jsonl")
      const started = Date.now()
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", output, "--policy", "random")
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toContain(`env_config.base_url ${base}: no OpenEnv server answers there (no answer in 3 s)`)
      expect(Date.now() - started).toBeLessThan(15_000)
      expect(fs.existsSync(output)).toBe(false)
    })), 30_000)

  it.live("a base_url's user name and password (an API key) are not printed (the error showed http://any:KEY@host)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      // a port nothing listens on: bind one, take its number, close it
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => {
          const server = net.createServer().listen(0, "127.0.0.1", () => {
            const p = (server.address() as net.AddressInfo).port
            server.close(() => resolve(p))
          })
        })
      )
      const dataset = openEnvRows(dir, `http://any:s3cr3t-key@127.0.0.1:${port}`)
      const run = yield* cli("run", "--dataset", dataset, "--scheduler", "openenv", "--output", path.join(dir, "out.jsonl"))
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toContain("no OpenEnv server answers there")
      expect(run.stderr).not.toContain("s3cr3t-key")
      // (shown as every base_url is shown: Redact.url, credentials and query values out)
      expect(run.stderr).toContain(`env_config.base_url http://127.0.0.1:${port}/: no OpenEnv server answers there`)
    }))
})

describe("issue 29, hostile (2026-12-04): renamed options are named by their new names in errors", () => {
  it.effect("run/serve/openenv serve name --model-api-key-env and --max-sessions (they said --api-key-env, --inference-api-key-env, --max-concurrent-envs: old names, and on serve --api-key-env is another option)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"prompt":"p"}\n`)
      const unset = "EFFECT_GYM_HOSTILE29_UNSET_KEY"
      const server = ["--mode", "server", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
      const run = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "o.jsonl"), ...server, "--model-api-key-env", unset)
      expect(run.code).toBe(2)
      expect(run.stderr).toContain(`--model-api-key-env: the environment variable ${unset} is not set`)
      const scripted = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "o2.jsonl"), "--model-api-key-env", unset)
      expect(scripted.code).toBe(2)
      expect(scripted.stderr).toContain("--model-api-key-env: only with --mode server")
      const serve = yield* cli("serve", "--env", "frozen_lake", "--port", "0", ...server, "--model-api-key-env", unset)
      expect(serve.code).toBe(2)
      expect(serve.stderr).toContain(`--model-api-key-env: the environment variable ${unset} is not set`)
      const openenv = yield* cli("openenv", "serve", "--env", "frozen_lake", "--port", "0", "--max-sessions", "0")
      expect(openenv.code).toBe(2)
      expect(openenv.stderr).toContain("--max-sessions: must be >= 1, got 0")
    }))
})

describe("issue 29, hostile (2026-12-04): rows that name no env", () => {
  it.effect("a first line of bad JSON does not skip the check: one error, exit 2, naming the first row (it gave one bad row per line, exit 1)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{bad\n\n${`{"prompt":"p"}\n`.repeat(50)}`)
      const output = path.join(dir, "out.jsonl")
      const run = yield* cli("run", "--dataset", dataset, "--output", output)
      expect(run.code, run.stderr).toBe(2)
      expect(run.stderr).toContain(`--env: not given, and the dataset's rows name no env (${dataset}:3 has no env_config.name)`)
      expect(run.stderr).not.toContain("bad row")
      expect(fs.existsSync(output)).toBe(false)
    }))
})

describe("issue 29, hostile (2026-12-04): an option and its old name both given", () => {
  it.effect("--env with --gym-env: one error that names the repeat and the old name (it read 'Invalid value for flag --env: \"2 occurrences\"')", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"prompt":"p"}\n`)
      const both = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--gym-env", "sudoku", "--output", path.join(dir, "o.jsonl"))
      expect(both.code).toBe(2)
      expect(both.stderr).toContain("--env: given 2 times (counting its old name --gym-env); it takes one value (give it once)")
      expect(both.stderr).not.toContain("occurrences")
      const twice = yield* cli("openenv", "serve", "--env", "frozen_lake", "--max-sessions", "2", "--max-concurrent-envs=3")
      expect(twice.code).toBe(2)
      expect(twice.stderr).toContain("--max-sessions: given 2 times (counting its old name --max-concurrent-envs)")
      const seed = yield* cli("run", "--dataset", dataset, "--env", "frozen_lake", "--seed", "1", "--seed", "2", "--output", path.join(dir, "o2.jsonl"))
      expect(seed.code).toBe(2)
      expect(seed.stderr).toContain("--seed: given 2 times; it takes one value")
    }))
})

describe("issue 29, hostile (2026-12-04): help's groups", () => {
  it.effect("serve --help: --api-key-env (this server's own key) is not among the INFERENCE options (the model server's); --model-api-key-env is", () =>
    Effect.gen(function*() {
      const help = yield* cli("serve", "--help")
      expect(help.code).toBe(0)
      const sectionOf = (flag: string): string | undefined => {
        let section: string | undefined
        for (const line of help.stdout.split("\n")) {
          if (/^[A-Z][A-Z ]+OPTIONS$/.test(line)) section = line
          if (line.startsWith(`  ${flag} `) || line.startsWith(`  ${flag},`)) return section
        }
        return undefined
      }
      expect(sectionOf("--model-api-key-env")).toBe("INFERENCE OPTIONS")
      expect(sectionOf("--api-key-env")).toBeDefined()
      expect(sectionOf("--api-key-env")).not.toBe("INFERENCE OPTIONS")
    }))
})

describe("issue 29, hostile (2026-12-04): did you mean", () => {
  it.effect("a command typed in capitals gets its suggestion (RUN had none: three letters off)", () =>
    Effect.gen(function*() {
      const typed = yield* cli("RUN")
      expect(typed.code).toBe(2)
      expect(typed.stderr).toContain("Did you mean 'run'?")
      const check = yield* cli("Check-Env")
      expect(check.stderr).toContain("Did you mean 'check-env'?")
    }))
})

describe("issue 29, hostile (2026-12-04): colour", () => {
  it.effect("help on a terminal with TERM=dumb is plain (it had escapes: 12 lines of `envs --help` under `TERM=dumb script`)", () =>
    Effect.gen(function*() {
      const was = { tty: process.stdout.isTTY, term: process.env.TERM, noColor: process.env.NO_COLOR }
      const help = yield* Effect.acquireUseRelease(
        Effect.sync(() => {
          process.stdout.isTTY = true
          delete process.env.NO_COLOR
        }),
        () =>
          Effect.gen(function*() {
            process.env.TERM = "xterm-256color"
            const colored = yield* cli("envs", "--help")
            process.env.TERM = "dumb"
            const dumb = yield* cli("envs", "--help")
            return { colored: colored.stdout, dumb: dumb.stdout }
          }),
        () =>
          Effect.sync(() => {
            process.stdout.isTTY = was.tty
            if (was.term === undefined) delete process.env.TERM
            else process.env.TERM = was.term
            if (was.noColor !== undefined) process.env.NO_COLOR = was.noColor
          })
      )
      expect(help.colored).toContain("\x1b[")
      expect(help.dumb).not.toContain("\x1b[")
    }))
})

describe("issue 29, hostile (2026-12-04): old names after a flag between command and subcommand", () => {
  it("openenv --log-level debug serve --max-concurrent-envs 2 warns as openenv serve does (it said nothing)", async () => {
    const { renamedOptions } = await import("../../src/cli/argv.js")
    expect(renamedOptions(["openenv", "--log-level", "debug", "serve", "--max-concurrent-envs", "2"])).toEqual([
      "warning: --max-concurrent-envs is an old name: use --max-sessions (--max-concurrent-envs will be removed in a later release)"
    ])
    expect(renamedOptions(["openenv", "--log-level=debug", "serve", "--max-concurrent-envs=2"])).toHaveLength(1)
    expect(renamedOptions(["openenv", "serve", "--max-sessions", "2"])).toEqual([])
  })
})
