/**
 * Checks of a run's dataset before anything runs, for the mistakes a new user makes in the first
 * hour (issue 29): rows that name no env with no `--env`, and an OpenEnv server that is not
 * there. Each is one error of the invocation (exit 2) that says what to do, where the run gave one
 * bad row per line, or retried each row's connection for minutes. Only the first row is looked at:
 * the run reports the others as it meets them (a later row's server that drops is retried).
 */
import { Effect, FileSystem, Option, Result, Stream } from "effect"
import * as NodeHttp from "node:http"
import * as NodeHttps from "node:https"
import * as Redact from "../internal/redact.js"
import * as Row from "../Row.js"
import { FileError, fileProblem, OptionError } from "./common.js"

/** How many of the dataset's lines are looked at for its first row. */
const LOOK_AT = 1_000

/**
 * The dataset's first row, when the dataset is a regular file and one of its first lines is a row (a pipe
 * is read once, by the run; lines before it that are not rows are left to the run, which reports them).
 */
export const firstRow = (file: string): Effect.Effect<Row.Row | undefined, FileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const info = yield* fs.stat(file)
    if (info.type !== "File") return undefined
    // (the first line that is a row: a first line of bad JSON skipped the checks, and forgetting
    // --env gave one bad row per line again; at most the first LOOK_AT lines are read)
    const first = yield* Stream.runHead(
      Row.decodeStream(file, fs.stream(file, { chunkSize: 64 * 1024 })).pipe(
        Stream.take(LOOK_AT),
        Stream.filter(Result.isSuccess)
      )
    )
    return Option.isNone(first) ? undefined : first.value.success
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

/** How long the first row's OpenEnv server has to answer an HTTP request. */
const REACH_TIMEOUT_MS = 3_000

/**
 * Whether an HTTP server answers `GET /health` at `url`'s origin within the timeout (any status:
 * a 401 or a 404 is a server that is there); the problem's text if not. A TCP connection alone
 * was not enough: something that accepts connections and never speaks (a black-holing proxy, the
 * wrong service's port) passed, and the run then retried each row for minutes.
 */
const answers = (url: URL, secure: boolean): Effect.Effect<string | undefined> =>
  Effect.callback<string | undefined>((resume) => {
    let finished = false
    const port = url.port === "" ? (secure ? 443 : 80) : Number(url.port)
    const options = {
      host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port,
      path: "/health",
      method: "GET",
      // (only whether a server is there: no credentials are sent, and a self-signed certificate is one)
      rejectUnauthorized: false,
      agent: false as const
    }
    const request = (secure ? NodeHttps : NodeHttp).request(options)
    const done = (problem: string | undefined) => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      request.destroy()
      resume(Effect.succeed(problem))
    }
    const timer = setTimeout(() => done(`no answer in ${REACH_TIMEOUT_MS / 1000} s`), REACH_TIMEOUT_MS)
    request.once("response", (response) => {
      response.resume()
      done(undefined)
    })
    request.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? error.message))
    request.end()
    return Effect.sync(() => {
      finished = true
      clearTimeout(timer)
      request.destroy()
    })
  })

/**
 * The first row's OpenEnv server (its `env_config.base_url`; the row's env is OpenEnv's scheduler's) must
 * answer at start, or the run is refused naming the URL (without its credentials), in seconds: it retried each
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
    const problem = yield* answers(url, secure)
    if (problem === undefined) return
    return yield* new OptionError({
      option: "--dataset",
      detail: `${row.file}:${row.index + 1}: env_config.base_url ${Redact.url(base)}: no OpenEnv server answers there (${problem}): ` +
        "start it (e.g. `effect-gym openenv serve --env NAME --port PORT`), or fix base_url"
    })
  })

/**
 * Both checks of a run's first row: the env it names (none with no `--env`: refused), and its OpenEnv
 * server (when its env is the scheduler's `openenv` and this process connects: not on a cluster).
 */
export const checkFirstRow = (
  row: Row.Row,
  context: { readonly defaultEnv: string | undefined; readonly openEnvBrought: boolean; readonly connects: boolean }
): Effect.Effect<void, OptionError> =>
  Effect.gen(function*() {
    if (context.defaultEnv === undefined) yield* rowNamesAnEnv(row)
    const env = typeof row.envConfig.name === "string" ? row.envConfig.name : context.defaultEnv
    if (env === "openenv" && context.openEnvBrought && context.connects) yield* openEnvReachable(row)
  })

/**
 * A piped dataset (read once, by the run) gets the same checks on its first row as it comes, before
 * that row starts: without them, forgetting `--env` with `--dataset /dev/stdin` gave one bad row per
 * line and exit 1 (a file's first row is checked before the run).
 */
export const checkFirstOfStream = <E, R>(
  rows: Stream.Stream<Result.Result<Row.Row, Row.RowError>, E, R>,
  check: (row: Row.Row) => Effect.Effect<void, OptionError>
): Stream.Stream<Result.Result<Row.Row, Row.RowError>, E | OptionError, R> => {
  let checked = false
  return Stream.tap(rows, (item) => {
    if (checked || !Result.isSuccess(item)) return Effect.void
    checked = true
    return check(item.success)
  })
}

