/**
 * Checks of a run's dataset before anything runs, for the mistakes a new user makes in the first
 * hour (issue 29): rows that name no env with no `--env`, and an OpenEnv server that is not
 * there. Each is one error of the invocation (exit 2) that says what to do, where the run gave one
 * bad row per line, or retried each row's connection for minutes. Only the first row is looked at:
 * the run reports the others as it meets them (a later row's server that drops is retried).
 */
import { Effect, FileSystem, Option, Result, Stream } from "effect"
import * as NodeNet from "node:net"
import * as Row from "../Row.js"
import { FileError, fileProblem, OptionError } from "./common.js"

/**
 * The dataset's first row, when the dataset is a regular file and its first line is a row (a pipe
 * is read once, by the run; a first line that is not a row is left to the run, which reports it).
 */
export const firstRow = (file: string): Effect.Effect<Row.Row | undefined, FileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const info = yield* fs.stat(file)
    if (info.type !== "File") return undefined
    const first = yield* Stream.runHead(Row.decodeStream(file, fs.stream(file, { chunkSize: 64 * 1024 })))
    return Option.isNone(first) || Result.isFailure(first.value) ? undefined : first.value.success
  }).pipe(
    Effect.catchTag("PlatformError", (error) => new FileError({ option: "--dataset", file, detail: fileProblem(error) }))
  )

/**
 * With no env for rows that name none (no `--env`, no env the scheduler brings), a dataset whose
 * first row names no env is refused: forgetting `--env` gave one bad row per line and exit 1.
 */
export const rowNamesAnEnv = (row: Row.Row): Effect.Effect<void, OptionError> =>
  typeof row.envConfig.name === "string"
    ? Effect.void
    : Effect.fail(
      new OptionError({
        option: "--env",
        detail: `not given, and the dataset's rows name no env (${row.file}:${row.index + 1} has no env_config.name): ` +
          "pass --env NAME (`effect-gym envs` lists them), or set env_config.name in each row"
      })
    )

/** How long the first row's OpenEnv server has to accept a connection. */
const REACH_TIMEOUT_MS = 3_000

/** Whether something accepts TCP connections at `host:port` within the timeout; the error's text if not. */
const connects = (host: string, port: number): Effect.Effect<string | undefined> =>
  Effect.callback<string | undefined>((resume) => {
    const socket = NodeNet.connect({ host, port })
    const done = (problem: string | undefined) => {
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.succeed(problem))
    }
    const timer = setTimeout(() => done(`no answer in ${REACH_TIMEOUT_MS / 1000} s`), REACH_TIMEOUT_MS)
    socket.once("connect", () => done(undefined))
    socket.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? error.message))
    return Effect.sync(() => {
      clearTimeout(timer)
      socket.destroy()
    })
  })

/**
 * The first row's OpenEnv server (its `env_config.base_url`; the row's env is OpenEnv's scheduler's) must
 * accept a connection at start, or the run is refused naming the URL, in seconds: it retried each
 * row's connection for its retry budget and ended with one `ConnectFailed` per trajectory (258 s,
 * 256 of them, exit 1). A bad URL is left to the row's own check.
 */
export const openEnvReachable = (row: Row.Row): Effect.Effect<void, OptionError> =>
  Effect.gen(function*() {
    const base = row.envConfig.base_url
    if (typeof base !== "string") return
    let url: URL
    try {
      url = new URL(base)
    } catch {
      return
    }
    const secure = url.protocol === "https:" || url.protocol === "wss:"
    if (!secure && url.protocol !== "http:" && url.protocol !== "ws:") return
    const port = url.port === "" ? (secure ? 443 : 80) : Number(url.port)
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
    const problem = yield* connects(host, port)
    if (problem === undefined) return
    return yield* new OptionError({
      option: "--dataset",
      detail: `${row.file}:${row.index + 1}: env_config.base_url ${base}: no OpenEnv server answers there (${problem}): ` +
        "start it (e.g. `effect-gym openenv serve --env NAME --port PORT`), or fix base_url"
    })
  })
