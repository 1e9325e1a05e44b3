import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Ref } from "effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as fs from "node:fs"
import * as Http from "node:http"
import * as path from "node:path"
import * as Dashboard from "../../src/view/Dashboard.js"
import * as Live from "../../src/view/Live.js"
import type { DashboardSnapshot, Meta, RunProgress } from "../../src/view/Protocol.js"
import * as Server from "../../src/view/Server.js"
import * as Viewer from "../../src/view/Viewer.js"
import { eventually } from "../helpers.js"
import * as Logs from "./logs.js"

const get = (url: string, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, { headers })
    return { status: response.status, type: response.headers.get("content-type"), body: await response.text() }
  })

/** Reads server-sent events from `url` until `until` says stop; then closes the connection. */
const events = <A>(url: string, name: string, until: (data: A, all: ReadonlyArray<A>) => boolean) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const response = await fetch(url, { signal: controller.signal })
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    const seen: Array<A> = []
    let buffer = ""
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      buffer += decoder.decode(value, { stream: true })
      let end: number
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const event = /^event: (.*)$/m.exec(block)?.[1]
        const data = /^data: (.*)$/m.exec(block)?.[1]
        if (event !== name || data === undefined) continue
        seen.push(JSON.parse(data) as A)
        if (until(seen[seen.length - 1], seen)) {
          controller.abort()
          return { contentType: response.headers.get("content-type"), seen }
        }
      }
    }
    return { contentType: response.headers.get("content-type"), seen }
  })

describe("the viewer's server", () => {
  const dir = Logs.tmp()

  it.live("answers the page and its API on 127.0.0.1; refuses other Host names; says what it does not know", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.mixed(dir)
      const viewer = yield* Viewer.make({ files: [file] })
      const { url } = yield* Server.serve({ viewer, port: 0 })
      yield* viewer.update
      const page = yield* get(url)
      expect(page.status).toBe(200)
      expect(page.type).toBe("text/html; charset=utf-8")
      expect(page.body).toContain("<script type=\"application/json\" id=\"effect-gym-config\">{\"mode\":\"server\",\"api\":\"api\"}</script>")
      const meta = JSON.parse((yield* get(`${url}api/meta`)).body) as Meta
      expect(meta.logs[0]).toMatchObject({ trajectories: 48, indexing: false, problemCount: 0 })
      expect(meta.renderers).toEqual(["frozen_lake", "sudoku"])
      const trajectories = JSON.parse((yield* get(`${url}api/trajectories?end=error&limit=3`)).body)
      expect(trajectories.items.length).toBe(3)
      expect(trajectories.items.every((s: { endReason: string }) => s.endReason === "error")).toBe(true)
      const detail = JSON.parse((yield* get(`${url}api/trajectory?line=2`)).body)
      expect(detail.summary.line).toBe(2)
      expect((yield* get(`${url}api/trajectory?line=0`)).status).toBe(400)
      expect(JSON.parse((yield* get(`${url}api/trajectory?line=999`)).body).error.type).toBe("NotFound")
      expect(JSON.parse((yield* get(`${url}api/compare`)).body).error.message).toBe("comparing needs two logs: effect-gym view A.jsonl B.jsonl")
      expect((yield* get(`${url}api/overview?log=7`)).status).toBe(404)
      expect((yield* get(`${url}nope`)).status).toBe(404)
      // DNS rebinding: a page on another origin that resolves to 127.0.0.1 sends its own Host
      // (node:http: fetch does not let a caller set Host)
      const rebound = yield* Effect.promise(() =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = Http.get(`${url}api/meta`, { headers: { host: "attacker.example" } }, (response) => {
            let body = ""
            response.on("data", (chunk: Buffer) => void (body += chunk.toString()))
            response.on("end", () => resolve({ status: response.statusCode ?? 0, body }))
          })
          request.on("error", reject)
        })
      )
      expect(rebound.status).toBe(403)
      expect(JSON.parse(rebound.body).error.type).toBe("forbidden_host")
      expect((yield* get(`${url}api/meta`.replace("127.0.0.1", "localhost"))).status).toBe(200)
      // clients of the event stream that go away leave nothing behind
      const before = Live.openStreams()
      let peak = before
      yield* Effect.forEach([1, 2, 3], () =>
        events(`${url}api/events`, "state", () => {
          peak = Math.max(peak, Live.openStreams())
          return true
        }), { concurrency: "unbounded" })
      expect(peak).toBeGreaterThan(before)
      expect(yield* eventually(() => Live.openStreams() === before)).toBe(true)
    }))

  it.live("a run in progress: the log is re-read as it grows and the progress pushed by server-sent events", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 4, policy: "random" })
      const lines = fs.readFileSync(file, "utf8").trim().split("\n")
      const live = path.join(dir, "live.jsonl")
      fs.writeFileSync(live, "")
      const progress = yield* Ref.make<RunProgress>({
        done: 0, total: lines.length, trajectoriesPerSecond: 0, turnsPerSecond: 0, meanReward: 0, successRate: 0, failures: 0, badRows: 0, elapsedMs: 0, finished: false
      })
      const running = yield* Server.serveRun({ file: live, port: 0, progress: Ref.get(progress), interval: "50 millis" })
      // A writer appends a group at a time, the last one in two writes.
      const writer = Effect.gen(function*() {
        for (let i = 0; i < lines.length; i += 4) {
          yield* Effect.sleep("100 millis")
          const group = lines.slice(i, i + 4).join("\n") + "\n"
          fs.appendFileSync(live, group.slice(0, 30))
          yield* Effect.sleep("30 millis")
          fs.appendFileSync(live, group.slice(30))
          yield* Ref.update(progress, (p) => ({ ...p, done: i + 4, elapsedMs: p.elapsedMs + 100 }))
        }
        yield* Ref.update(progress, (p) => ({ ...p, finished: true }))
        yield* running.finish
      })
      yield* Effect.forkChild(writer)
      type State = { versions: Array<number>; indexing: boolean; progress: RunProgress }
      const { contentType, seen } = yield* events<State>(`${running.url}api/events`, "state", (s) => s.progress.finished && !s.indexing)
      expect(contentType).toBe("text/event-stream")
      const done = seen.map((s) => s.progress.done)
      expect(done).toEqual([...done].sort((a, b) => a - b))
      expect(new Set(done).size).toBeGreaterThan(2)
      const versions = seen.map((s) => s.versions[0])
      expect(versions).toEqual([...versions].sort((a, b) => a - b))
      const meta = JSON.parse((yield* get(`${running.url}api/meta`)).body) as Meta
      expect(meta.live).toBe(true)
      expect(meta.logs[0]).toMatchObject({ trajectories: lines.length, problemCount: 0, indexing: false })
      expect(meta.progress?.finished).toBe(true)
    }))
})

describe("a rollout server's dashboard", () => {
  it.live("pushes counts, rates and recent failures once a second (faster here), to every client", () =>
    Effect.gen(function*() {
      const counts = { requestsInFlight: 1, trajectoriesInFlight: 8, admitted: 8, completed: 0, cancelled: 0, rejected: 0, draining: false }
      const dashboard = yield* Dashboard.make({ counts: () => counts, maxTrajectoriesInFlight: 64, interval: "50 millis", keep: 2 })
      const app = yield* HttpRouter.toHttpEffect(HttpRouter.addAll(dashboard.routes))
      const http = yield* NodeHttpServer.make(() => Http.createServer(), { host: "127.0.0.1", port: 0 })
      yield* http.serve(app)
      const url = `http://127.0.0.1:${(http.address as { port: number }).port}`
      const page = yield* get(`${url}/dashboard`)
      expect(page.body).toContain("\"mode\":\"dashboard\",\"events\":\"/dashboard/events\"")
      yield* Effect.forkChild(Effect.gen(function*() {
        for (let i = 1; i <= 5; i++) {
          yield* Effect.sleep("60 millis")
          counts.completed += 8
          counts.admitted += 8
          dashboard.failure({ id: `r${i}-g0`, uuid: `u${i}`, env: "frozen_lake", tag: "EnvError", message: `boom ${i}` })
        }
      }))
      const { seen } = yield* events<DashboardSnapshot>(`${url}/dashboard/events`, "snapshot", (s) => s.failed === 5)
      const last = seen[seen.length - 1]
      expect(last).toMatchObject({ completed: 40, failed: 5, trajectoriesInFlight: 8, requestsInFlight: 1, maxTrajectoriesInFlight: 64 })
      expect(last.completedPerSecond).toBeGreaterThan(0)
      expect(last.recentFailures.map((f) => f.id)).toEqual(["r5-g0", "r4-g0"])
    }))
})
