/**
 * Checks of a run's dataset before anything runs, for the mistakes a new user makes in the first
 * hour (issue 29): rows that name no env with no `--env`, and an OpenEnv server that is not
 * there. Each is one error of the invocation (exit 2) that says what to do, where the run gave one
 * bad row per line, or retried each row's connection for minutes. Only the first row is looked at:
 * the run reports the others as it meets them (a later row's server that drops is retried).
 */
import { Effect, FileSystem, Option, Result, Stream } from "effect"
import * as NodeCrypto from "node:crypto"
import * as NodeHttp from "node:http"
import * as NodeHttps from "node:https"
import * as Redact from "../internal/redact.js"
import * as OpenEnvProtocol from "../openenv/OpenEnvProtocol.js"
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

/** What came back of one request: its status (101 for an upgrade to a WebSocket), or the problem's text. */
type Answer = { readonly status: number } | { readonly problem: string }

/**
 * One request to `url` (`GET`; with `upgrade`, a WebSocket opening handshake) within the timeout.
 * Only whether and how a server answers is read: a self-signed certificate is accepted, and an
 * upgraded connection is closed at once. `authorization`: the base_url's credentials, if any.
 */
const ask = (url: URL, upgrade: boolean, authorization?: string): Effect.Effect<Answer> =>
  Effect.callback<Answer>((resume) => {
    let finished = false
    const secure = url.protocol === "https:" || url.protocol === "wss:"
    const options = {
      host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: url.port === "" ? (secure ? 443 : 80) : Number(url.port),
      path: url.pathname,
      method: "GET",
      rejectUnauthorized: false,
      agent: false as const,
      headers: {
        ...(authorization === undefined ? {} : { Authorization: authorization }),
        ...(upgrade
          ? {
            Connection: "Upgrade",
            Upgrade: "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": NodeCrypto.randomBytes(16).toString("base64")
          }
          : {})
      }
    }
    const request = (secure ? NodeHttps : NodeHttp).request(options)
    const done = (answer: Answer) => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      request.destroy()
      resume(Effect.succeed(answer))
    }
    const timer = setTimeout(() => done({ problem: `no answer in ${REACH_TIMEOUT_MS / 1000} s` }), REACH_TIMEOUT_MS)
    request.once("response", (response) => {
      response.resume()
      done({ status: response.statusCode ?? 0 })
    })
    request.once("upgrade", (_response, socket) => {
      socket.destroy()
      done({ status: 101 })
    })
    request.once("error", (error: NodeJS.ErrnoException) => done({ problem: error.code ?? error.message }))
    request.end()
    return Effect.sync(() => {
      finished = true
      clearTimeout(timer)
      request.destroy()
    })
  })


/**
 * Whether an OpenEnv server answers at `ws` (its `/ws` URL, as the scheduler connects): `/ws` takes
 * a WebSocket (the connection is closed at once; with the base_url's credentials, if any); the
 * problem's text if not (a 401 or 403: the server wants a key). `GET /health` beside it is asked
 * first, for the problem of a server that is not there. Any HTTP answer was taken as a server: a web server that is not
 * OpenEnv's (a 404 for `/ws`, effect-gym's own rollout server on the same port 8000, a proxy that
 * answers every address) passed, and the run then retried each row's connection (66 s for 2
 * trajectories).
 */
const openEnvAnswers = (ws: URL, authorization: string | undefined): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    const http = new URL(ws.href)
    http.protocol = ws.protocol === "wss:" ? "https:" : "http:"
    const health = new URL(http.href)
    health.pathname = `${http.pathname.replace(/\/ws$/, "")}/health`
    const first = yield* ask(health, false)
    if ("problem" in first) return first.problem
    const second = yield* ask(http, true, authorization)
    if ("problem" in second) return second.problem
    if (second.status === 101) return undefined
    if (second.status === 401 || second.status === 403) {
      return `HTTP ${second.status} for a WebSocket at ${http.pathname}: the server wants a key${
        authorization === undefined ? "" : ", and refuses this base_url's"
      }`
    }
    return `HTTP ${first.status} for ${health.pathname}, HTTP ${second.status} for a WebSocket at ${http.pathname}: ` +
      "a web server, but not an OpenEnv one"
  })

/** A URL's percent-encoded part, decoded (as it is when it is not valid percent-encoding). */
const decoded = (text: string): string => {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}

/**
 * The first row's OpenEnv server (its `env_config.base_url`; the row's env is OpenEnv's scheduler's) must
 * answer at start, or the run is refused naming the URL (without its credentials), in seconds: it retried each
 * row's connection for its retry budget and ended with one `ConnectFailed` per trajectory (258 s,
 * 256 of them, exit 1). A base_url that is missing or not an OpenEnv URL is refused as well: each
 * trajectory failed on it, one error line each (exit 1).
 */
export const openEnvReachable = (row: Row.Row): Effect.Effect<void, OptionError> =>
  Effect.gen(function*() {
    const base = row.envConfig.base_url
    const at = `${row.file}:${row.index + 1}: env_config.base_url`
    const refuse = (detail: string) => new OptionError({ option: "--dataset", detail: `${at}${detail}` })
    if (typeof base !== "string") {
      return yield* refuse(
        `${base === undefined ? " is missing" : `: ${JSON.stringify(base)} is not a string`}: the OpenEnv scheduler ` +
          "needs its server's URL (e.g. http://127.0.0.1:8000)"
      )
    }
    // (the scheduler's own reading of it: the row would fail there, one trajectory at a time)
    const ws = OpenEnvProtocol.toWebSocketUrl(base)
    if (ws === undefined) {
      return yield* refuse(
        ` ${JSON.stringify(Redact.url(base))}: not an http(s):// or ws(s):// URL with a host and no query ` +
          "(e.g. http://127.0.0.1:8000)"
      )
    }
    // (its user name and password, as a Python client sends them: Basic)
    const parsed = new URL(base)
    const authorization = parsed.username === "" && parsed.password === ""
      ? undefined
      : `Basic ${Buffer.from(`${decoded(parsed.username)}:${decoded(parsed.password)}`).toString("base64")}`
    const problem = yield* openEnvAnswers(new URL(ws), authorization)
    if (problem === undefined) return
    return yield* refuse(
      ` ${Redact.url(base)}: no OpenEnv server answers there (${problem}): ` +
        "start it (e.g. `effect-gym openenv serve --env NAME --port PORT`), or fix base_url"
    )
  })

/**
 * The checks of a run's first row: the env it names (none with no `--env`, or one that is not
 * registered: refused), and its OpenEnv server (when its env is the scheduler's `openenv` and this
 * process connects: not on a cluster). `unknownEnv` says why a name is not an env of this run
 * (`undefined`: it is one); on a cluster the runners' plugins decide, and it is not given.
 */
export const checkFirstRow = (
  row: Row.Row,
  context: {
    readonly defaultEnv: string | undefined
    readonly openEnvBrought: boolean
    readonly connects: boolean
    readonly unknownEnv?: ((name: string) => string | undefined) | undefined
  }
): Effect.Effect<void, OptionError> =>
  Effect.gen(function*() {
    if (context.defaultEnv === undefined) yield* rowNamesAnEnv(row)
    // (a mistyped name, or a plugin's env without --plugin: one bad row per line and exit 1, as
    // forgetting --env was)
    const named = typeof row.envConfig.name === "string" ? row.envConfig.name : undefined
    const unknown = named === undefined ? undefined : context.unknownEnv?.(named)
    if (unknown !== undefined) {
      return yield* new OptionError({
        option: "--dataset",
        detail: `${row.file}:${row.index + 1}: env_config.name: ${unknown} (a plugin's env needs its --plugin FILE)`
      })
    }
    const env = named ?? context.defaultEnv
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

