/**
 * A runner's log while its database is away. `effect/cluster` logs every failed storage read
 * (every `entityMessagePollInterval`, 0.5 s) and lock refresh as a WARN or ERROR with the driver's
 * whole stack: dozens of lines a second for one outage. Those are condensed to one line when the
 * database goes, a reminder every 30 s, and one line when it is back ("Shard lock storage has
 * recovered"); every other log goes on as before.
 *
 * The database is taken as gone when its problems go on for a second (a lone warning, such as a
 * shard release that timed out as the lock connection came back after an outage, is not one), and
 * a peer's connection that broke (a coordinator or runner that stopped: a read error in the socket
 * server) is not an error of this runner's.
 *
 * effect/cluster says "recovered" only of shard locks it found unhealthy: after a short outage (a
 * database restart of a second or two, its locks never found lost) it says nothing, and the runner
 * said the database was away for good. So the runner also asks the database itself once the
 * cluster has logged no problem for a few seconds (`waiting`), and says it is back when it answers
 * (`answered`).
 */
import { Cause, Logger, LogLevel } from "effect"
import * as Socket from "effect/socket/Socket"
import { rootMessage } from "../Cluster.js"

const problem = (message: string, cause: Cause.Cause<unknown>): boolean => {
  // (shards whose release or acquisition waits on the database: the tail of an outage)
  if (/storage|shard release|release shards|acquire\/release shards|shard lock/i.test(message)) return true
  if (cause.reasons.length === 0) return false
  return /PersistenceError|SqlError|ECONNREFUSED|Connection terminated/.test(Cause.pretty(cause))
}

/** A connection of the runner's socket server that broke: its peer went away. */
const peerGone = (message: string, cause: Cause.Cause<unknown>): boolean => {
  if (!message.includes("SocketServer")) return false
  const error = Cause.squash(cause)
  return Socket.isSocketError(error) && error.reason._tag === "SocketReadError"
}

const text = (message: unknown): string =>
  Array.isArray(message) ? message.map((part) => (typeof part === "string" ? part : String(part))).join(" ") : String(message)

/** How long problems must go on before the database is said to be gone. */
const CONFIRM_MS = 1_000
/** A problem after this long without one starts a new run of problems. */
const QUIET_MS = 10_000
/** How long without a problem before the database is asked whether it is back. */
const ASK_AFTER_MS = 5_000

/**
 * The runner's logger: `write` gets each line (stderr); `scrub` masks the connection string's
 * secrets; `name` is the runner's address. `downSince` tells since when (`Date.now()`) the database
 * has not answered, as the cluster's logs say, or `undefined` while it answers.
 */
export const condensed = (
  name: string,
  write: (line: string) => void,
  scrub: (text: string) => string
): {
  readonly logger: Logger.Logger<unknown, void>
  readonly downSince: () => number | undefined
  /** Whether the database should be asked if it is back: said away, and no problem for a while. */
  readonly waiting: () => boolean
  /** The database answered (asked because `waiting`): said back, if it was said away. */
  readonly answered: () => void
} => {
  const plain = Logger.formatLogFmt
  let downSince: number | undefined
  let reminded = 0
  /** The first problem of the current run of problems, before the database is said to be gone. */
  let pending: { readonly at: number; readonly why: string } | undefined
  let lastProblem = 0
  /** Says the database is back; `until`: when it was last seen away. */
  const back = (until: number) => {
    pending = undefined
    if (downSince !== undefined) {
      write(`runner ${name}: the database answers again (after ${((until - downSince) / 1000).toFixed(1)} s)`)
      downSince = undefined
    }
  }
  const logger = Logger.make((options) => {
    const message = text(options.message)
    if (message.includes("storage has recovered") || message.includes("storage is healthy")) {
      back(Date.now())
      return
    }
    if (LogLevel.isGreaterThanOrEqualTo(options.logLevel, "Warn") && peerGone(message, options.cause)) return
    if (LogLevel.isGreaterThanOrEqualTo(options.logLevel, "Warn") && problem(message, options.cause)) {
      const now = Date.now()
      if (downSince === undefined) {
        if (pending === undefined || now - lastProblem > QUIET_MS) {
          pending = { at: now, why: options.cause.reasons.length === 0 ? message : rootMessage(options.cause) }
        }
        lastProblem = now
        if (now - pending.at >= CONFIRM_MS) {
          downSince = pending.at
          reminded = now
          write(scrub(`runner ${name}: the database does not answer (${pending.why}): retrying; the groups running go on`))
          pending = undefined
        }
      } else {
        lastProblem = now
        if (now - reminded >= 30_000) {
          reminded = now
          write(`runner ${name}: still waiting for the database (${Math.round((now - downSince) / 1000)} s)`)
        }
      }
      return
    }
    write(scrub(plain.log(options)))
  })
  return {
    logger,
    downSince: () => downSince,
    waiting: () => downSince !== undefined && Date.now() - lastProblem >= ASK_AFTER_MS,
    answered: () => {
      // (a problem logged while the question was on its way: not back yet)
      // (asked only after ASK_AFTER_MS without a problem: away until the last one)
      if (downSince !== undefined && Date.now() - lastProblem >= ASK_AFTER_MS) back(lastProblem)
    }
  }
}
