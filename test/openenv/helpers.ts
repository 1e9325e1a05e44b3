import { Effect } from "effect"
import * as crypto from "node:crypto"
import * as net from "node:net"
import { WebSocket, WebSocketServer } from "ws"
import * as OpenEnvClient from "../../src/openenv/OpenEnvClient.js"
import * as OpenEnvServer from "../../src/openenv/OpenEnvServer.js"
import { eventually } from "../helpers.js"

export { OpenEnvClient, OpenEnvServer }

/** An HTTP request to a server under test: its status, its body as text and as JSON (when it is), its content type. */
export const call = (url: string, init?: RequestInit) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    const text = await response.text()
    let json: any
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: response.status, json, text, type: response.headers.get("content-type") }
  })

/** A JSON POST ({@link call}); a string body is sent as it is. */
export const post = (url: string, body: unknown) =>
  call(url, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) })

/** Serves an env on a free loopback port for the current scope. */
export const serve = (options: Omit<OpenEnvServer.ServeOptions, "port"> & { readonly port?: number }) =>
  OpenEnvServer.serve({ port: 0, ...options })

/**
 * Waits (up to `ms`) until the server has at most `target` open sessions (closing is asynchronous
 * on the server's side); returns the count it ended with.
 */
export const settled = (sessions: OpenEnvServer.Sessions, ms = 3000, target = 0) =>
  Effect.map(eventually(() => sessions.active <= target, ms, "10 millis"), () => sessions.active)

/** The WebSocket endpoint of a server's `http://host:port` URL. */
export const wsUrl = (base: string) => `${base.replace(/^http/, "ws")}/ws`

/** A free TCP port on loopback (closed again before it is returned). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/**
 * A raw WebSocket peer for protocol conformance: sends exact text, records every frame and the
 * close code.
 */
export class RawPeer {
  readonly frames: Array<string> = []
  closeCode: number | undefined
  private waiters: Array<() => void> = []
  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data, isBinary) => {
      this.frames.push(isBinary ? `<binary ${(data as Buffer).length}>` : data.toString())
      this.wake()
    })
    ws.on("close", (code) => {
      this.closeCode = code
      this.wake()
    })
  }

  private wake() {
    const waiters = this.waiters
    this.waiters = []
    for (const w of waiters) w()
  }

  static open(url: string): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url)
      const peer = new RawPeer(ws)
      ws.once("open", () => resolve(peer))
      ws.once("error", reject)
    })
  }

  /** Waits until `n` frames arrived, or the connection closed, or `ms` passed. */
  async waitFrames(n: number, ms = 3000): Promise<Array<string>> {
    const deadline = Date.now() + ms
    while (this.frames.length < n && this.closeCode === undefined && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()))
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
    return this.frames
  }

  async waitClose(ms = 3000): Promise<number | undefined> {
    const deadline = Date.now() + ms
    while (this.closeCode === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5))
    return this.closeCode
  }

  /** Sends a text frame and waits for the next reply. */
  async request(text: string): Promise<unknown> {
    const before = this.frames.length
    this.ws.send(text)
    const frames = await this.waitFrames(before + 1)
    return frames.length > before ? JSON.parse(frames[before]) : undefined
  }

  close() {
    this.ws.close(1000)
  }
}

/**
 * A scripted WebSocket server (not OpenEnv): answers each text frame with `reply(frame, index)`
 * (`undefined` = never answer). Counts open connections.
 */
export const scriptedServer = (reply: (frame: string, index: number) => string | Buffer | undefined) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly open: () => number; readonly server: WebSocketServer }>((resume) => {
      const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
      let open = 0
      server.on("connection", (ws) => {
        open++
        let index = 0
        ws.on("message", (data) => {
          const out = reply(data.toString(), index++)
          if (out !== undefined) ws.send(out)
        })
        ws.on("close", () => open--)
      })
      server.on("listening", () => {
        const port = (server.address() as net.AddressInfo).port
        resume(Effect.succeed({ url: `http://127.0.0.1:${port}`, open: () => open, server }))
      })
    }),
    ({ server }) =>
      Effect.callback<void>((resume) => {
        for (const client of server.clients) client.terminate()
        server.close(() => resume(Effect.void))
      })
  )

/** Waits (up to `ms`) until a scripted server has no open connection. */
export const drained = (open: () => number, ms = 3000) =>
  Effect.map(eventually(() => open() <= 0, ms, "10 millis"), () => open())

export const provideSockets = Effect.provide(OpenEnvClient.layerWebSocketConstructor)

/**
 * A scripted WebSocket server whose replies go out after a delay: `reply(frame, index)` gives the
 * text and the delay (`undefined` = never answer). `{"type":"close"}` closes the connection (1000),
 * as OpenEnv servers do. Records the most requests any connection had waiting for a reply at once.
 */
export const delayedServer = (
  reply: (frame: string, index: number) => { readonly text: string; readonly delayMs: number } | undefined
) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly maxInFlight: () => number; readonly server: WebSocketServer }>(
      (resume) => {
        const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
        let maxInFlight = 0
        server.on("connection", (ws) => {
          let index = 0
          let inFlight = 0
          ws.on("message", (data) => {
            if (data.toString() === "{\"type\":\"close\"}") return ws.close(1000)
            const out = reply(data.toString(), index++)
            inFlight++
            maxInFlight = Math.max(maxInFlight, inFlight)
            if (out === undefined) return
            setTimeout(() => {
              inFlight--
              ws.send(out.text)
            }, out.delayMs)
          })
        })
        server.on("listening", () => {
          const port = (server.address() as net.AddressInfo).port
          resume(Effect.succeed({ url: `http://127.0.0.1:${port}`, maxInFlight: () => maxInFlight, server }))
        })
      }
    ),
    ({ server }) =>
      Effect.callback<void>((resume) => {
        for (const client of server.clients) client.terminate()
        server.close(() => resume(Effect.void))
      })
  )

/** An observation frame whose observation echoes what it answers (no reply to `close`, as OpenEnv). */
export const echoObservation = (frame: string, index: number, extra: Record<string, unknown> = {}) =>
  JSON.parse(frame).type === "close"
    ? undefined
    : JSON.stringify({
      type: "observation",
      data: { observation: { index, frame: JSON.parse(frame) }, done: false, ...extra }
    })

/** A `delayedServer` script: every frame echoed (see {@link echoObservation}) after `delayMs(index)`. */
export const echoAfter = (delayMs: (index: number) => number) => (frame: string, index: number) => {
  const text = echoObservation(frame, index)
  return text === undefined ? undefined : { text, delayMs: delayMs(index) }
}

/** A WebSocket client that completes the handshake and then never reads or answers anything. */
export const deafClient = (url: string) =>
  new Promise<net.Socket>((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const socket = net.connect(Number(port), hostname, () => {
      socket.write(
        `GET /ws HTTP/1.1\r\nhost: ${hostname}:${port}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n` +
          `sec-websocket-key: ${crypto.randomBytes(16).toString("base64")}\r\nsec-websocket-version: 13\r\n\r\n`
      )
    })
    socket.once("data", (chunk) => {
      if (String(chunk).startsWith("HTTP/1.1 101")) resolve(socket)
      else reject(new Error(String(chunk)))
    })
    socket.on("error", () => undefined)
  })
