/**
 * A temporary PostgreSQL for the cluster tests and benchmarks: `initdb` in a fresh directory, the
 * server on a free loopback port, run as an unprivileged user (PostgreSQL refuses to run as root:
 * as root, the files are given to `nobody` and the binaries run through `runuser`), stopped after.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../openenv/helpers.js"

const BIN = process.env.PG_BIN ?? "/usr/lib/postgresql/15/bin"

/**
 * A running temporary server: its URL; `halt` stops the server (its data kept) and `restart` starts
 * it again on the same port (a database outage); `stop` shuts it down and removes its directory.
 */
export interface TempPostgres {
  readonly url: string
  readonly port: number
  readonly halt: () => Promise<void>
  readonly restart: () => Promise<void>
  readonly stop: () => Promise<void>
}

export { freePort }

const asRoot = typeof process.getuid === "function" && process.getuid() === 0
const command = (bin: string, args: ReadonlyArray<string>): [string, Array<string>] =>
  asRoot ? ["runuser", ["-u", "nobody", "--", path.join(BIN, bin), ...args]] : [path.join(BIN, bin), [...args]]

/** PostgreSQL's client, beside the server's binaries (Debian installs both). */
export const psql = path.join(BIN, "psql")

/**
 * Why the cluster tests cannot run here, or undefined: PostgreSQL's binaries are not installed
 * (their folder: `PG_BIN`, default /usr/lib/postgresql/15/bin), or `EFFECT_GYM_SKIP_POSTGRES=1`
 * says to leave them out. They are then skipped with a notice, or fail with
 * `EFFECT_GYM_REQUIRE_SERVICES=1` (CI: `.ci/run` installs PostgreSQL); see test/services.ts.
 */
export const missing = (): string | undefined => {
  if (process.env.EFFECT_GYM_SKIP_POSTGRES === "1") return "EFFECT_GYM_SKIP_POSTGRES=1 leaves them out"
  const absent = ["postgres", "initdb", "psql"].filter((bin) => !fs.existsSync(path.join(BIN, bin)))
  return absent.length === 0
    ? undefined
    : `PostgreSQL's ${absent.join(", ")} missing from ${BIN} (apt-get install -y postgresql, or PG_BIN=folder)`
}

/** Whether the PostgreSQL server binaries are installed. */
export const available = (): boolean => fs.existsSync(path.join(BIN, "postgres"))

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/** Starts the server of `data` on `port`; gives a stop (fast shutdown, by the server's own pid). */
const launch = async (dir: string, data: string, port: number): Promise<() => Promise<void>> => {
  const [postgres, args] = command("postgres", [
    "-D", data, "-h", "127.0.0.1", "-p", String(port), "-k", dir,
    "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200"
  ])
  // (cwd: the temporary folder, which the server's user can enter; a clone's may be private)
  const child: ChildProcess = spawn(postgres, args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"], detached: false })
  let log = ""
  child.stderr?.on("data", (chunk: Buffer) => void (log = (log + chunk.toString()).slice(-4000)))
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`postgres exited at start: ${log}`)
    if (await accepts(port)) break
    if (i > 300) throw new Error(`postgres did not start in 30 s: ${log}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  // accepting connections may come a moment before it is ready for them
  await new Promise((r) => setTimeout(r, 300))
  return async () => {
    // The server's own pid (runuser does not always pass signals on): SIGINT is a fast shutdown.
    const pidFile = path.join(data, "postmaster.pid")
    const pid = fs.existsSync(pidFile) ? Number(fs.readFileSync(pidFile, "utf8").split("\n")[0]) : 0
    const alive = () => {
      try {
        process.kill(pid, 0)
        return true
      } catch {
        return false
      }
    }
    if (pid > 0 && alive()) {
      process.kill(pid, "SIGINT")
      for (let i = 0; i < 100 && alive(); i++) await new Promise((r) => setTimeout(r, 100))
      if (alive()) process.kill(pid, "SIGKILL")
    }
    if (child.exitCode === null) child.kill("SIGKILL")
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2_000))])
  }
}

/** Starts a temporary server (about a second or two), on `port` if given (else a free one). */
export const start = async (at?: number): Promise<TempPostgres> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-pg-"))
  fs.chmodSync(dir, 0o755)
  const data = path.join(dir, "data")
  fs.mkdirSync(data, { mode: 0o700 })
  if (asRoot) execFileSync("chown", ["-R", "nobody", dir])
  const [initdb, initArgs] = command("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
  execFileSync(initdb, initArgs, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] })
  const port = at ?? await freePort()
  let stopServer: (() => Promise<void>) | undefined = await launch(dir, data, port)
  const halt = async () => {
    const stopping = stopServer
    stopServer = undefined
    await stopping?.()
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    halt,
    restart: async () => {
      await halt()
      stopServer = await launch(dir, data, port)
    },
    stop: async () => {
      await halt()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

/**
 * A proxy between a runner and the server that cuts one connection at the worst moment for
 * effect/cluster's message claims: the runner's storage read (`UPDATE cluster_messages SET
 * last_read = NOW() ... RETURNING ...`, one statement, committed on its own) has marked its
 * messages read, and the rows are held back: the connection is closed before the runner gets
 * them. (A database restart can do this to a read in flight, by chance; here it is done on
 * purpose, once, to the first read that claims messages after `arm()`.) The server's messages are
 * parsed (type byte, 4-byte length) so that only whole answers are held: a read's answer is held
 * until its ReadyForQuery ('Z'), sent once the statement is committed; when it had rows ('D') the
 * connection is cut, else the answer goes on to the runner. Given another `marker`, the first
 * statement after `arm()` that contains it and answers with rows is cut the same way (e.g. the
 * runner's record of a group's start).
 */
export interface ClaimCutter {
  /** The URL to give the runner: the database's (`url`), through the proxy's port. */
  readonly url: string
  /** Cuts the next read that claims messages. */
  readonly arm: () => void
  /** The rows a cut read claimed (0 until one is cut). */
  readonly cutRows: () => number
  readonly close: () => Promise<void>
}

const CLAIM_READ = Buffer.from("RETURNING ids.*", "latin1")

export const claimCutter = async (
  server: TempPostgres,
  url: string,
  /** What the statement to cut contains (by default the storage's read of its messages). */
  marker: Buffer = CLAIM_READ
): Promise<ClaimCutter> => {
  let armed = false
  let cut = 0
  const sockets = new Set<net.Socket>()
  const proxy = net.createServer((client) => {
    const upstream = net.connect(server.port, "127.0.0.1")
    sockets.add(client)
    sockets.add(upstream)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on("error", end).on("close", end)
    upstream.on("error", end).on("close", end)
    // (the first client message may be an SSLRequest, answered by one byte, 'N' or 'S')
    let first = true
    let sslRequest = false
    let watching = false
    let pending = Buffer.alloc(0)
    let held: Array<Buffer> = []
    let heldRows = 0
    client.on("data", (chunk: Buffer) => {
      if (first) {
        first = false
        sslRequest = chunk.length >= 8 && chunk.readUInt32BE(0) === 8 && chunk.readUInt32BE(4) === 80877103
      }
      if (armed && chunk.includes(marker)) watching = true
      upstream.write(chunk)
    })
    upstream.on("data", (chunk: Buffer) => {
      if (sslRequest && pending.length === 0 && held.length === 0 && (chunk[0] === 0x4e || chunk[0] === 0x53)) {
        sslRequest = false
        client.write(chunk.subarray(0, 1))
        chunk = chunk.subarray(1)
      }
      pending = Buffer.concat([pending, chunk])
      while (pending.length >= 5) {
        const size = 1 + pending.readUInt32BE(1)
        if (pending.length < size) break
        const message = pending.subarray(0, size)
        pending = pending.subarray(size)
        if (!watching) {
          client.write(message)
          continue
        }
        held.push(message)
        if (message[0] === 0x44) heldRows++
        if (message[0] !== 0x5a) continue
        // the read is committed (its ReadyForQuery): its rows are claimed
        if (heldRows > 0 && armed) {
          armed = false
          cut = heldRows
          end()
          return
        }
        for (const m of held) client.write(m)
        held = []
        heldRows = 0
        watching = false
      }
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve))
  const port = (proxy.address() as net.AddressInfo).port
  return {
    url: url.replace(`:${server.port}/`, `:${port}/`),
    arm: () => void (armed = true),
    cutRows: () => cut,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => proxy.close(() => resolve()))
    }
  }
}
