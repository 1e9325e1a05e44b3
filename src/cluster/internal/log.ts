/**
 * A runner's log while its database is away. `effect/cluster` logs every failed storage read
 * (every `entityMessagePollInterval`, 0.5 s) and lock refresh as a WARN or ERROR with the driver's
 * whole stack: dozens of lines a second for one outage. Those are condensed to one line when the
 * database goes, a reminder every 30 s, and one line when it is back ("Shard lock storage has
 * recovered"); every other log goes on as before.
 */
import { Cause, Logger, LogLevel } from "effect"
import { rootMessage } from "../Cluster.js"

const problem = (message: string, cause: Cause.Cause<unknown>): boolean => {
  if (/storage/i.test(message)) return true
  if (cause.reasons.length === 0) return false
  return /PersistenceError|SqlError|ECONNREFUSED|Connection terminated/.test(Cause.pretty(cause))
}

const text = (message: unknown): string =>
  Array.isArray(message) ? message.map((part) => (typeof part === "string" ? part : String(part))).join(" ") : String(message)

/**
 * The runner's logger: `write` gets each line (stderr); `scrub` masks the connection string's
 * secrets; `name` is the runner's address. `downSince` tells since when (`Date.now()`) the database
 * has not answered, as the cluster's logs say, or `undefined` while it answers.
 */
export const condensed = (
  name: string,
  write: (line: string) => void,
  scrub: (text: string) => string
): { readonly logger: Logger.Logger<unknown, void>; readonly downSince: () => number | undefined } => {
  const plain = Logger.formatLogFmt
  let downSince: number | undefined
  let reminded = 0
  const logger = Logger.make((options) => {
    const message = text(options.message)
    if (message.includes("storage has recovered") || message.includes("storage is healthy")) {
      if (downSince !== undefined) {
        write(`runner ${name}: the database answers again (after ${((Date.now() - downSince) / 1000).toFixed(1)} s)`)
        downSince = undefined
      }
      return
    }
    if (LogLevel.isGreaterThanOrEqualTo(options.logLevel, "Warn") && problem(message, options.cause)) {
      const now = Date.now()
      if (downSince === undefined) {
        downSince = now
        reminded = now
        const why = options.cause.reasons.length === 0 ? message : rootMessage(options.cause)
        write(scrub(`runner ${name}: the database does not answer (${why}): retrying; the groups running go on`))
      } else if (now - reminded >= 30_000) {
        reminded = now
        write(`runner ${name}: still waiting for the database (${Math.round((now - downSince) / 1000)} s)`)
      }
      return
    }
    write(scrub(plain.log(options)))
  })
  return { logger, downSince: () => downSince }
}
