/**
 * The OpenEnv client against this project's server (and against scripted misbehaving servers),
 * over real sockets on loopback. Every test ends with no session open at the server.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Redacted, Result, Schedule, Scope } from "effect"
import * as net from "node:net"
import * as Sudoku from "../../src/envs/Sudoku.js"
import { FrozenLake } from "../../src/envs/FrozenLake.js"
import {
  delayedServer,
  drained,
  echoAfter,
  echoObservation,
  freePort,
  OpenEnvClient,
  provideSockets,
  RawPeer,
  scriptedServer,
  serve,
  settled,
  wsUrl
} from "./helpers.js"

const content = (observation: Readonly<Record<string, unknown>>) =>
  ((observation.messages as Array<{ content: string }>)[0]).content

describe("OpenEnv client", () => {
  it.live("plays a whole Sudoku episode: reset with a seed, every move, state, close", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 2 })
      const { puzzle, solution } = Sudoku.generate(2024)
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        const reset = yield* session.reset({ seed: 2024, episode_id: "ep-7" })
        expect(reset).toMatchObject({ reward: 0, done: false })
        expect(content(reset.observation)).toContain(Sudoku.renderBoard(puzzle))
        const cells = puzzle.flatMap((row, r) => row.flatMap((d, c) => (d === 0 ? [[r + 1, c + 1]] : [])))
        let last = reset
        for (const [r, c] of cells) {
          expect(last.done).toBe(false)
          last = yield* session.step({ message: `[${r} ${c} ${solution[r - 1][c - 1]}]` })
        }
        expect(last).toMatchObject({ reward: 1, done: true })
        expect(content(last.observation)).toContain(`[GAME] Board state: \n${Sudoku.renderBoard(solution)}`)
        const state = yield* session.state
        expect(state).toMatchObject({ episode_id: "ep-7", step_count: cells.length, turn: cells.length })
        expect(server.sessions.active).toBe(1)
      }))
      // closing waits for the server's close: the slot is already free when close returns
      expect(server.sessions.active).toBe(0)
    }).pipe(provideSockets))

  it.live("a key in the base URL (http://user:KEY@host) goes as Basic auth to a server that wants one; a bad URL's key is not printed", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake, maxConcurrentEnvs: 2, apiKey: Redacted.make("s3cret-key") })
      const withKey = server.url.replace("http://", "http://trainer:s3cret-key@")
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(withKey)
        expect((yield* session.reset({ seed: 1 })).done).toBe(false)
        expect(session.url).not.toContain("s3cret")
      }))
      const refused = yield* Effect.flip(Effect.scoped(OpenEnvClient.connect(server.url.replace("http://", "http://trainer:wrong@"))))
      expect(refused.reason).toBe("ConnectFailed")
      const bad = yield* Effect.flip(Effect.scoped(OpenEnvClient.connect("ftp://user:S3CRET@host:1")))
      expect(bad.reason).toBe("InvalidUrl")
      expect(bad.message).not.toContain("S3CRET")
    }).pipe(provideSockets))

  it.live("validation and execution errors are typed and keep the session usable", () =>
    Effect.gen(function*() {
      // --require-reset: a step before reset is an execution error (by default it is played, as Python does)
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 1, requireReset: true })
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        const early = yield* Effect.flip(session.step({ message: "[1 1 1]" }))
        expect(early).toMatchObject({ reason: "ExecutionError", code: "EXECUTION_ERROR", detail: "no episode: send reset before step" })
        const bad = yield* Effect.flip(session.step({ text: "[1 1 1]" }))
        expect(bad.reason).toBe("ValidationError")
        expect(bad.errors).toEqual([
          { type: "missing", loc: ["message"], msg: "Field required", input: { text: "[1 1 1]" } },
          { type: "extra_forbidden", loc: ["text"], msg: "Extra inputs are not permitted", input: "[1 1 1]" }
        ])
        const badConfig = yield* Effect.flip(session.reset({ clues: 200 }))
        expect(badConfig).toMatchObject({ reason: "ValidationError", errors: [{ loc: ["clues"] }] })
        expect(session.isOpen()).toBe(true)
        expect((yield* session.reset({ seed: 1 })).done).toBe(false)
      }))
      expect(server.sessions.active).toBe(0)
    }).pipe(provideSockets))

  it.live("capacity is reached at N+1 sessions; a slot frees when a session closes; retry reconnects", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 2 })
      const first = yield* Scope.make()
      const a = yield* Scope.provide(OpenEnvClient.connect(server.url), first)
      yield* a.reset({})
      const b = yield* OpenEnvClient.connect(server.url)
      yield* b.reset({})
      // the third connection's handshake works; the reset meets the server's CAPACITY_REACHED
      const full = yield* Effect.flip(Effect.scoped(Effect.flatMap(OpenEnvClient.connect(server.url), (c) => c.reset({}))))
      expect(full).toMatchObject({ reason: "CapacityReached", code: "CAPACITY_REACHED", activeSessions: 2, maxSessions: 2 })
      expect(server.sessions).toMatchObject({ active: 2, rejected: 1 })

      // with a retry schedule, the attempt waits for a slot: the first session closes meanwhile
      let firstClosed = false
      const waiting = yield* Effect.forkChild(Effect.scoped(
        Effect.map(
          OpenEnvClient.connectAndReset(server.url, { seed: 3 }, { retry: Schedule.max([Schedule.spaced("40 millis"), Schedule.recurs(50)]) }),
          ({ observation }) => ({ done: observation.done, afterFirstClosed: firstClosed })
        )
      ))
      // close the first session only after the waiting attempt has met CAPACITY_REACHED at least once
      // (polling the server's count, not a fixed sleep: a loaded machine delays the attempt)
      while (server.sessions.rejected < 2) yield* Effect.sleep("10 millis")
      firstClosed = true
      yield* Scope.close(first, Exit.void)
      // it got its slot only once the first session had closed (not a wall-clock bound: a loaded machine only delays)
      expect(yield* Fiber.join(waiting)).toEqual({ done: false, afterFirstClosed: true })
      expect(server.sessions.rejected).toBeGreaterThanOrEqual(2)
      expect(server.sessions.maxSeen).toBe(2)
      yield* b.close
      expect(yield* settled(server.sessions)).toBe(0)
    }).pipe(provideSockets))

  it.live("malformed frames are typed errors and drop the session (no later call reads a stray reply)", () =>
    Effect.gen(function*() {
      const replies: Record<string, string | Buffer> = {
        text: "this is not json",
        binary: Buffer.from([1, 2, 3]),
        shape: JSON.stringify({ type: "observation", data: { observation: {}, reward: 0 } }), // no done
        unknown: JSON.stringify({ type: "surprise", data: {} }),
        rewardText: JSON.stringify({ type: "observation", data: { observation: {}, reward: "1", done: false } }),
        observationText: JSON.stringify({ type: "observation", data: { observation: "board", reward: 0, done: false } }),
        wrongType: JSON.stringify({ type: "state", data: { episode_id: "x", step_count: 0 } }), // to a reset
        errorCode: JSON.stringify({ type: "error", data: { message: "m", code: "NO_SUCH_CODE" } })
      }
      for (const [name, reply] of Object.entries(replies)) {
        const server = yield* scriptedServer(() => reply)
        yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* OpenEnvClient.connect(server.url)
          const error = yield* Effect.flip(session.reset({}))
          expect(error.reason, name).toBe("MalformedFrame")
          expect(session.isOpen()).toBe(false)
          expect((yield* Effect.flip(session.state)).reason, name).toBe("Closed")
        }))
        expect(yield* drained(server.open), name).toBe(0)
      }
    }).pipe(provideSockets))

  it.live("a reply that never comes: ReplyTimeout, the session is dropped and its connection closed", () =>
    Effect.gen(function*() {
      const server = yield* scriptedServer(() => undefined)
      const started = Date.now()
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url, { replyTimeout: "250 millis" })
        expect(server.open()).toBe(1)
        const error = yield* Effect.flip(session.reset({}))
        expect(error.reason).toBe("ReplyTimeout")
        expect((yield* Effect.flip(session.step({ message: "late?" }))).reason).toBe("Closed")
      }))
      // not before the timeout (the reason above shows it fired; no upper bound: a loaded machine only delays)
      expect(Date.now() - started).toBeGreaterThanOrEqual(250)
      expect(yield* drained(server.open)).toBe(0)
    }).pipe(provideSockets))

  it.live("connecting: ConnectFailed when nothing listens, ConnectTimeout when the handshake never completes", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const refused = yield* Effect.flip(Effect.scoped(OpenEnvClient.connect(`http://127.0.0.1:${port}`)))
      expect(refused.reason).toBe("ConnectFailed")
      // a TCP server that accepts and never answers the HTTP upgrade
      const sockets: Array<net.Socket> = []
      const silent = yield* Effect.acquireRelease(
        Effect.callback<net.Server>((resume) => {
          const s = net.createServer((socket) => void sockets.push(socket))
          s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
        }),
        (s) => Effect.callback<void>((resume) => {
          for (const socket of sockets) socket.destroy()
          s.close(() => resume(Effect.void))
        })
      )
      const silentPort = (silent.address() as net.AddressInfo).port
      // the reason shows the connect timeout cut the handshake short (no wall-clock bound)
      const timedOut = yield* Effect.flip(Effect.scoped(OpenEnvClient.connect(`http://127.0.0.1:${silentPort}`, { connectTimeout: "200 millis" })))
      expect(timedOut.reason).toBe("ConnectTimeout")
      expect((yield* Effect.flip(Effect.scoped(OpenEnvClient.connect("not a url")))).reason).toBe("InvalidUrl")
    }).pipe(provideSockets))

  it.live("interruption mid-request closes the session at the server", () =>
    Effect.gen(function*() {
      const server = yield* scriptedServer((frame) => (frame.includes("reset") ? undefined : "{}"))
      const fiber = yield* Effect.forkChild(Effect.scoped(Effect.flatMap(OpenEnvClient.connect(server.url), (s) => s.reset({}))))
      yield* Effect.sleep("100 millis")
      expect(server.open()).toBe(1)
      yield* Fiber.interrupt(fiber)
      expect(yield* drained(server.open)).toBe(0)
    }).pipe(provideSockets))

  it.live("idle sessions are reaped with SESSION_ERROR; the slot comes back", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: Sudoku.Sudoku, maxConcurrentEnvs: 1, idleTimeout: Duration.millis(200) })
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        yield* session.reset({})
        yield* Effect.sleep("500 millis")
        expect(server.sessions).toMatchObject({ active: 0, reaped: 1 })
        const error = yield* Effect.flip(session.state)
        expect(["SessionError", "ConnectionLost"]).toContain(error.reason)
      }))
      const again = yield* Effect.scoped(Effect.flatMap(OpenEnvClient.connect(server.url), (s) => Effect.result(s.reset({}))))
      expect(Result.isSuccess(again)).toBe(true)
      expect(yield* settled(server.sessions)).toBe(0)
    }).pipe(provideSockets))

  it.live("observation replies: a missing reward is null, extra fields are kept", () =>
    Effect.gen(function*() {
      const server = yield* delayedServer((frame, index) => ({
        text: echoObservation(frame, index, { extra: 1 })!,
        delayMs: 0
      }))
      const reply = yield* Effect.scoped(Effect.flatMap(OpenEnvClient.connect(server.url), (s) => s.step({ message: "hi" })))
      expect(reply).toEqual({
        observation: { index: 0, frame: { type: "step", data: { message: "hi" } } },
        reward: null,
        done: false,
        extra: 1
      })
    }).pipe(provideSockets))

  it.live("a server that ignores the close request: the session still closes after closeTimeout", () =>
    Effect.gen(function*() {
      // answers everything, `close` included, and never closes the connection itself
      const server = yield* scriptedServer((_frame, index) =>
        JSON.stringify({ type: "observation", data: { observation: { index }, done: false } })
      )
      const started = Date.now()
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url, { closeTimeout: "200 millis" })
        yield* session.step({ message: "hi" })
      }))
      // it waited for the close reply up to closeTimeout, then closed anyway (reaching here: it did not hang)
      expect(Date.now() - started).toBeGreaterThanOrEqual(200)
      expect(yield* drained(server.open)).toBe(0)
    }).pipe(provideSockets))

  it.live("concurrent calls on one session go out one at a time, in call order, each with its own reply", () =>
    Effect.gen(function*() {
      const server = yield* delayedServer(echoAfter(() => 5))
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        const replies = yield* Effect.forEach(
          [0, 1, 2, 3, 4, 5],
          (i) => session.step({ message: `m${i}` }),
          { concurrency: "unbounded" }
        )
        expect(replies.map((r) => (r.observation.frame as { data: { message: string } }).data.message)).toEqual([
          "m0",
          "m1",
          "m2",
          "m3",
          "m4",
          "m5"
        ])
        expect(replies.map((r) => r.observation.index)).toEqual([0, 1, 2, 3, 4, 5])
        expect(server.maxInFlight()).toBe(1)
        expect(session.isOpen()).toBe(true)
      }))
    }).pipe(provideSockets))

  it.live("interrupting a call that waits its turn keeps the session; interrupting one in flight drops it", () =>
    Effect.gen(function*() {
      const server = yield* delayedServer(echoAfter(() => 100))
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url)
        const first = yield* Effect.forkChild(session.step({ message: "first" }))
        const second = yield* Effect.forkChild(session.step({ message: "second" }))
        yield* Effect.sleep("20 millis")
        yield* Fiber.interrupt(second) // never sent
        expect((yield* Fiber.join(first)).observation.index).toBe(0)
        expect(session.isOpen()).toBe(true)
        expect((yield* session.step({ message: "third" })).observation.index).toBe(1)
        const fourth = yield* Effect.forkChild(session.step({ message: "fourth" }))
        yield* Effect.sleep("20 millis")
        yield* Fiber.interrupt(fourth) // sent: its reply would answer the next call
        expect(session.isOpen()).toBe(false)
        expect((yield* Effect.flip(session.state)).reason).toBe("Closed")
      }))
    }).pipe(provideSockets))

  it.live("reply timeouts count from each request: idle time between requests is not a timeout", () =>
    Effect.gen(function*() {
      // frames 0-1 at once, 2-3 after 150 ms (under the 300 ms timeout), 4 never
      const server = yield* delayedServer((frame, index) => {
        const text = index >= 4 ? undefined : echoObservation(frame, index)
        return text === undefined ? undefined : { text, delayMs: index >= 2 ? 150 : 0 }
      })
      yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* OpenEnvClient.connect(server.url, { replyTimeout: "300 millis" })
        yield* session.step({ message: "a" })
        yield* session.step({ message: "b" })
        yield* Effect.sleep("700 millis") // longer than the reply timeout, with nothing in flight
        expect((yield* session.step({ message: "c" })).observation.index).toBe(2)
        expect((yield* session.step({ message: "d" })).observation.index).toBe(3)
        const started = Date.now()
        const error = yield* Effect.flip(session.step({ message: "e" })).pipe(
          Effect.timeoutOrElse({
            duration: "30 seconds",
            orElse: () => Effect.fail(new Error("the reply timeout never fired"))
          })
        )
        expect(error.reason).toBe("ReplyTimeout")
        // not before the timeout, counted from this call (no upper bound: a loaded machine only delays)
        expect(Date.now() - started).toBeGreaterThanOrEqual(290)
        expect((yield* Effect.flip(session.step({ message: "f" }))).reason).toBe("Closed")
      }))
    }).pipe(provideSockets))

  it.live("a session that keeps talking is not reaped: idleness counts from its last frame", () =>
    Effect.gen(function*() {
      const server = yield* serve({ env: FrozenLake, maxConcurrentEnvs: 1, idleTimeout: Duration.millis(300) })
      const peer = yield* Effect.promise(() => RawPeer.open(wsUrl(server.url)))
      expect(yield* Effect.promise(() => peer.request("{\"type\":\"reset\",\"data\":{\"seed\":1}}"))).toMatchObject({
        type: "observation"
      })
      for (let i = 0; i < 6; i++) {
        yield* Effect.sleep("150 millis")
        expect(yield* Effect.promise(() => peer.request("{\"type\":\"state\"}"))).toMatchObject({ type: "state" })
      }
      expect(server.sessions).toMatchObject({ active: 1, reaped: 0 })
      const quietFrom = Date.now()
      expect(yield* Effect.promise(() => peer.waitClose(3000))).toBe(1000)
      expect(Date.now() - quietFrom).toBeGreaterThanOrEqual(250)
      expect(JSON.parse(peer.frames[peer.frames.length - 1])).toMatchObject({ data: { code: "SESSION_ERROR" } })
      expect(server.sessions).toMatchObject({ active: 0, reaped: 1 })
    }))
})
