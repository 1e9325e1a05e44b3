/**
 * Browser and network hygiene on both servers: Host (DNS rebinding) and Origin (cross-origin
 * browser requests) checks, CORS for allowed origins, the OpenEnv server's optional key (as Python
 * clients send it), a slow body cut off, the connection cap; and URL credentials in --base-url kept
 * out of every output.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Redacted } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { Sudoku } from "../../src/envs/Sudoku.js"
import * as OpenEnvServer from "../../src/openenv/OpenEnvServer.js"
import { cli, healthy, tmp } from "../cli.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"
import { freePort } from "../openenv/helpers.js"
import { request, start } from "./helpers.js"

/** A raw HTTP/1.1 request (fetch cannot set Host or Origin): status line and body. */
const raw = (port: number, lines: ReadonlyArray<string>, body = "") =>
  Effect.promise(() =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const socket = net.connect(port, "127.0.0.1", () => socket.end([...lines, `content-length: ${Buffer.byteLength(body)}`, "connection: close", "", body].join("\r\n")))
      let text = ""
      socket.on("data", (chunk) => (text += String(chunk)))
      socket.on("end", () => resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0), text }))
      socket.on("error", reject)
    })
  )

const servers = {
  rollout: (options: { allowHosts?: ReadonlyArray<string>; corsOrigins?: ReadonlyArray<string> } = {}) =>
    Effect.map(start(options), (s) => s.port),
  openenv: (options: { allowHosts?: ReadonlyArray<string>; corsOrigins?: ReadonlyArray<string> } = {}) =>
    Effect.map(OpenEnvServer.serve({ env: Sudoku, maxConcurrentEnvs: 2, port: 0, ...options }), (s) => s.port)
}

describe("Host and Origin, on both servers", () => {
  for (const [name, serve] of Object.entries(servers)) {
    it.live(`${name}: a Host that is not a loopback name is refused (DNS rebinding); --allow-host adds one`, () =>
      Effect.gen(function*() {
        const port = yield* serve()
        for (const host of ["localhost", `127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]) {
          expect((yield* raw(port, ["GET /health HTTP/1.1", `host: ${host}`])).status, host).toBe(200)
        }
        const rebound = yield* raw(port, ["GET /health HTTP/1.1", `host: attacker.example:${port}`])
        expect(rebound.status).toBe(403)
        expect(rebound.text).toContain("forbidden_host")
        expect((yield* raw(port, ["GET /health HTTP/1.1", "host: 10.0.0.1"])).status).toBe(403)
        // loopback names in other spellings are loopback; names that only contain one are not
        for (const host of ["[::1]", "LOCALHOST", `localhost.:${port}`, "127.1.2.3", "app.localhost"]) {
          expect((yield* raw(port, ["GET /health HTTP/1.1", `host: ${host}`])).status, host).toBe(200)
        }
        for (
          const host of [
            "[::1].attacker.example",
            `127.0.0.1.nip.io:${port}`,
            "localhost.attacker.example",
            `[::1]:${port}@attacker.example`,
            `127.0.0.1:${port}, attacker.example`,
            "[::1]:notaport",
            ""
          ]
        ) {
          expect((yield* raw(port, ["GET /health HTTP/1.1", `host: ${host}`])).status, JSON.stringify(host)).not.toBe(200)
        }
        const allowed = yield* serve({ allowHosts: ["rollouts.internal"] })
        expect((yield* raw(allowed, ["GET /health HTTP/1.1", "host: rollouts.internal:8000"])).status).toBe(200)
        expect((yield* raw(allowed, ["GET /health HTTP/1.1", "host: other.internal"])).status).toBe(403)
      }))

    it.live(`${name}: cross-origin browser requests are refused, --cors-origin allows one (with its CORS headers)`, () =>
      Effect.gen(function*() {
        const port = yield* serve()
        const host = `host: 127.0.0.1:${port}`
        // the text/plain POST a page can send without a preflight
        const post = name === "rollout" ? "POST /v1/rollouts HTTP/1.1" : "POST /reset HTTP/1.1"
        const refused = yield* raw(port, [post, host, "origin: https://evil.example", "content-type: text/plain"], "{}")
        expect(refused.status).toBe(403)
        expect(refused.text).toContain("forbidden_origin")
        expect((yield* raw(port, ["GET /health HTTP/1.1", host, "origin: null"])).status).toBe(403)
        // same-origin is fine
        expect((yield* raw(port, ["GET /health HTTP/1.1", host, `origin: http://127.0.0.1:${port}`])).status).toBe(200)
        const open = yield* serve({ corsOrigins: ["https://app.example"] })
        const ok = yield* raw(open, ["GET /health HTTP/1.1", `host: 127.0.0.1:${open}`, "origin: https://app.example"])
        expect(ok.status).toBe(200)
        expect(ok.text.toLowerCase()).toContain("access-control-allow-origin: https://app.example")
        const preflight = yield* raw(open, [
          "OPTIONS /health HTTP/1.1", `host: 127.0.0.1:${open}`, "origin: https://app.example",
          "access-control-request-method: POST"
        ])
        expect(preflight.status).toBe(204)
        expect((yield* raw(open, ["GET /health HTTP/1.1", `host: 127.0.0.1:${open}`, "origin: https://evil.example"])).status).toBe(403)
        // a page's WebSocket (cross-site WebSocket hijacking): the upgrade is refused before it happens
        const upgrade = (origin: string) =>
          raw(port, [
            "GET /ws HTTP/1.1", host, `origin: ${origin}`, "upgrade: websocket", "connection: Upgrade",
            "sec-websocket-version: 13", "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ=="
          ])
        if (name === "openenv") {
          expect((yield* upgrade("https://evil.example")).status).toBe(403)
          expect((yield* upgrade(`http://127.0.0.1:${port}`)).status).toBe(101)
        }
      }))
  }

  it.live("openenv: --api-key-env: Bearer, X-API-Key, or Basic with the key as password (a Python client's http://user:key@host)", () =>
    Effect.gen(function*() {
      const server = yield* OpenEnvServer.serve({ env: Sudoku, maxConcurrentEnvs: 2, port: 0, apiKey: Redacted.make("s3cret") })
      const status = (headers: Record<string, string>) => Effect.map(request(`${server.url}/health`, { headers }), (r) => r.status)
      expect(yield* status({})).toBe(401)
      expect(yield* status({ authorization: "Bearer wrong" })).toBe(401)
      expect(yield* status({ authorization: "Bearer s3cret" })).toBe(200)
      expect(yield* status({ "x-api-key": "s3cret" })).toBe(200)
      expect(yield* status({ authorization: `Basic ${Buffer.from("user:s3cret").toString("base64")}` })).toBe(200)
      expect(yield* status({ authorization: `Basic ${Buffer.from("s3cret:nope").toString("base64")}` })).toBe(401)
    }))
})

describe("slow clients and connection limits", () => {
  it.live("a body dribbled slowly is cut off at the body timeout; the server stays healthy", () =>
    Effect.gen(function*() {
      const server = yield* start({ headerTimeout: "1 second", bodyTimeout: "1 second" })
      const started = Date.now()
      const closed = yield* Effect.promise(() =>
        new Promise<number>((resolve) => {
          const socket = net.connect(server.port, "127.0.0.1", () => {
            socket.write(`POST /v1/rollouts HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000\r\n\r\n`)
            const timer = setInterval(() => socket.write("{"), 300)
            socket.on("close", () => {
              clearInterval(timer)
              resolve(Date.now() - started)
            })
          })
          socket.on("error", () => undefined)
          // a server that never cuts it: the test fails below instead of hanging
          setTimeout(() => socket.destroy(), 20_000)
        })
      )
      expect(closed).toBeLessThan(15_000)
      expect((yield* request(`${server.url}/health`)).status).toBe(200)
    }))

  it.live("--max-connections: connections over the cap are dropped; the others are served", () =>
    Effect.gen(function*() {
      const server = yield* start({ maxConnections: 2 })
      const sockets = yield* Effect.promise(() =>
        Promise.all([0, 1].map(() => new Promise<net.Socket>((resolve) => {
          const s = net.connect(server.port, "127.0.0.1", () => resolve(s))
        })))
      )
      const third = yield* Effect.promise(() =>
        new Promise<string>((resolve) => {
          const s = net.connect(server.port, "127.0.0.1", () => s.write("GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"))
          s.on("data", () => resolve("served"))
          s.on("close", () => resolve("dropped"))
          s.on("error", () => resolve("dropped"))
        })
      )
      expect(third).toBe("dropped")
      for (const s of sockets) s.destroy()
      yield* Effect.sleep("200 millis")
      expect((yield* request(`${server.url}/health`)).status).toBe(200)
    }))
})

describe("credentials in --base-url never show", () => {
  it.live("user:pass@ and ?token= go nowhere: not /info, not error bodies, not completions.jsonl, not stderr; user:pass is sent as Basic auth", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeOpenAi.make
      const secretUser = "alice-hidden-user"
      const secretPass = "p4ss-hidden-word"
      const secretToken = "tok-hidden-value"
      const withCreds = upstream.baseUrl.replace("http://", `http://${secretUser}:${secretPass}@`)
      // a run against a server that is not there: the errors (with the URL) reach the log and stderr
      const dead = `http://${secretUser}:${secretPass}@127.0.0.1:9/v1?token=${secretToken}`
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `${JSON.stringify({ env_config: { seed: 1 } })}\n`)
      const failedRun = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "server", "--base-url", dead, "--model", "m",
        "--num-generations", "1", "--retries", "0", "--output", path.join(dir, "never.jsonl")
      )
      expect(failedRun.code).toBe(2)
      expect(failedRun.stderr).toContain("127.0.0.1:9")
      // a run that reaches the server through a URL with credentials and a token: its log and the
      // run's identity next to it (out.jsonl.run.json) are written
      const output = path.join(dir, "out.jsonl")
      const run = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--mode", "server", "--base-url",
        `${withCreds}?token=${secretToken}`, "--model", "m", "--num-generations", "1", "--max-tokens", "8", "--output", output
      )
      expect(run.code, run.stderr).toBe(0)
      // the token went as a query parameter after the path, the user and password as Basic auth
      const sent = upstream.state.requests[0]
      expect(sent.url).toMatch(new RegExp(`/chat/completions\\?token=${secretToken}$`))
      expect(sent.headers.authorization).toBe(`Basic ${Buffer.from(`${secretUser}:${secretPass}`).toString("base64")}`)
      upstream.state.requests.length = 0
      const port = yield* Effect.promise(freePort)
      const base = `http://127.0.0.1:${port}`
      const served = yield* Effect.forkChild(cli(
        "serve", "--port", String(port), "--env", "frozen_lake", "--mode", "server", "--base-url", withCreds,
        "--model", "tiny", "--in-process-envs", "--max-tokens", "8"
      ))
      yield* healthy(base)
      const info = (yield* request(`${base}/info`)).text
      const rollouts = (yield* request(`${base}/v1/rollouts`, { body: { requests: [{ env_config: { seed: 2 } }] } })).text
      const bad = yield* cli("serve", "--port", "0", "--mode", "server", "--base-url", "ftp://" + secretUser + ":" + secretPass + "@x", "--model", "m")
      // swift-rollout mode: the same URL handling (here a server that is not there)
      const swift = yield* cli("serve", "--port", "0", "--mode", "swift-rollout", "--base-url", dead)
      expect(swift.code).not.toBe(0)
      const outputs = {
        failedRunStderr: failedRun.stderr,
        runStdout: run.stdout,
        runStderr: run.stderr,
        log: fs.readFileSync(output, "utf8"),
        identity: fs.readFileSync(`${output}.run.json`, "utf8"),
        info,
        rollouts,
        badStderr: bad.stderr,
        swiftStderr: swift.stderr
      }
      for (const [where, text] of Object.entries(outputs)) {
        for (const secret of [secretUser, secretPass, secretToken]) expect(text, `${where} shows ${secret}`).not.toContain(secret)
      }
      // the errors are there, with the URL redacted
      expect(outputs.swiftStderr).toContain("127.0.0.1:9")
      expect(JSON.parse(outputs.identity)).toMatchObject({ base_url: `${upstream.baseUrl}?token=***` })
      expect(JSON.parse(info).inference.backend).toBe(`server ${upstream.baseUrl} model tiny`)
      // the credentials were used: the upstream server saw them as Basic auth
      const seen = upstream.state.requests[0]
      expect(seen, JSON.stringify(JSON.parse(rollouts)[0].error)).toBeDefined()
      expect(seen.headers.authorization).toBe(`Basic ${Buffer.from(`${secretUser}:${secretPass}`).toString("base64")}`)
      yield* Fiber.interrupt(served)
    }).pipe(Effect.scoped))
})
