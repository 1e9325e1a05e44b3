/**
 * One writer per `--output`: a run holds its log's lock from before it looks at the file until it
 * ends, and a second run on the same log (plain, `--overwrite` or `--resume`) is refused. Two runs on
 * one log wrote torn lines and duplicated trajectories, and both exited 0.
 *
 * The lock is a Unix socket listening at a name made from the log's real path. On Linux it is in
 * the abstract namespace: the kernel binds a name once (a second `listen` fails with EADDRINUSE)
 * and frees it when the socket closes, which it does when its process ends in any way, `kill -9`
 * included, so a lock is never stale. Elsewhere the socket is a file in the temporary folder: a
 * file nobody listens at (connecting is refused: its process is gone) is a dead run's, removed and
 * taken. The holder answers a connection with its pid, for the message.
 */
import { Effect, type Scope } from "effect"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { OptionError } from "./common.js"

/** The log's real path: the file's, or (a log not written yet) its folder's and its name. */
const realPath = (output: string): string => {
  const absolute = path.resolve(output)
  try {
    return fs.realpathSync(absolute)
  } catch {
    try {
      return path.join(fs.realpathSync(path.dirname(absolute)), path.basename(absolute))
    } catch {
      return absolute
    }
  }
}

const socketPath = (output: string): string => {
  const digest = crypto.createHash("sha256").update(realPath(output)).digest("hex").slice(0, 32)
  return process.platform === "linux"
    ? `\0effect-gym/output/${digest}`
    : path.join(os.tmpdir(), `effect-gym-output-${digest}.sock`)
}

type Listened = { readonly server: net.Server } | { readonly inUse: true } | { readonly error: Error }

const listen = (at: string): Promise<Listened> =>
  new Promise((resolve) => {
    const server = net.createServer((socket) => {
      socket.on("error", () => {})
      socket.end(String(process.pid))
    })
    server.once("error", (error: NodeJS.ErrnoException) =>
      resolve(error.code === "EADDRINUSE" ? { inUse: true } : { error })
    )
    server.listen({ path: at, exclusive: true }, () => {
      // (the lock must not keep a finished run's process alive)
      server.unref()
      resolve({ server })
    })
  })

/** What the holder says: its pid, `"gone"` when nobody listens (a file socket of a dead run), or undefined. */
const ask = (at: string): Promise<string | undefined> =>
  new Promise((resolve) => {
    let answer = ""
    const socket = net.connect({ path: at })
    const timer = setTimeout(() => {
      socket.destroy()
      resolve(undefined)
    }, 1000)
    socket.on("data", (chunk) => void (answer += String(chunk)))
    socket.on("end", () => {
      clearTimeout(timer)
      resolve(/^\d+$/.test(answer) ? answer : undefined)
    })
    socket.on("error", (error: NodeJS.ErrnoException) => {
      clearTimeout(timer)
      resolve(error.code === "ECONNREFUSED" || error.code === "ENOENT" ? "gone" : undefined)
    })
  })

const take = async (output: string): Promise<net.Server | OptionError> => {
  const at = socketPath(output)
  for (let attempt = 0; attempt < 2; attempt++) {
    const listened = await listen(at)
    if ("server" in listened) return listened.server
    if ("error" in listened) {
      return new OptionError({ option: "--output", detail: `cannot lock ${output} for this run: ${listened.error.message}` })
    }
    const holder = await ask(at)
    if (holder === "gone" && !at.startsWith("\0") && attempt === 0) {
      // a file socket left by a run that was killed
      fs.rmSync(at, { force: true })
      continue
    }
    const who = holder !== undefined && holder !== "gone" ? ` (process ${holder})` : ""
    return new OptionError({
      option: "--output",
      detail: `${output} is being written by another run${who}: one run writes a log at a time (wait for it to ` +
        `end, or choose another --output)`
    })
  }
  return new OptionError({ option: "--output", detail: `cannot lock ${output} for this run` })
}

/**
 * Holds `output`'s lock for the scope, or fails with an {@link OptionError} naming the output when
 * another run holds it.
 */
export const hold = (output: string): Effect.Effect<void, OptionError, Scope.Scope> =>
  Effect.suspend(() => notAFile(output) ? Effect.void : locked(output))

/** A pipe, a device or a FIFO (`/dev/stdout`, `/dev/null`) is written to as it is: nothing to keep whole. */
const notAFile = (output: string): boolean => {
  try {
    return !fs.statSync(output).isFile()
  } catch {
    return false
  }
}

const locked = (output: string): Effect.Effect<void, OptionError, Scope.Scope> =>
  Effect.asVoid(Effect.acquireRelease(
    Effect.flatMap(Effect.promise(() => take(output)), (taken) => taken instanceof OptionError ? Effect.fail(taken) : Effect.succeed(taken)),
    (server) =>
      Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
  ))
