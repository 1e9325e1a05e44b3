/**
 * Live pages: server-sent events fed by a `Stream`, and the progress of a run in progress as the
 * viewer shows it (`effect-gym run --view`).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule, Stream } from "effect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as Summary from "../Summary.js"
import * as Json from "../internal/Json.js"
import type { RunProgress } from "./Protocol.js"

export type {
  /**
   * @since 0.1.0
   * @category models
   */
  RunProgress
} from "./Protocol.js"

/**
 * One server-sent event: its name and its JSON data.
 *
 * @since 0.1.0
 * @category models
 */
export interface Event {
  readonly event: string
  readonly data: unknown
}

const encoder = new TextEncoder()

let open = 0

/**
 * Event streams open in this process (a client that goes away closes its stream: tests check it).
 *
 * @since 0.1.0
 * @category observability
 */
export const openStreams = (): number => open

/**
 * The text of one event (`event: NAME`, one `data:` line, a blank line). JSON has no raw newline,
 * so one data line always holds it.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encode = (event: Event): string => `event: ${event.event}\ndata: ${Json.stringify(event.data)}\n\n`

/**
 * A `text/event-stream` response of a stream of events, with a comment every `heartbeat` (15 s by
 * default) so that proxies and the browser keep the connection open. The stream is interrupted
 * when the client goes away.
 *
 * @since 0.1.0
 * @category responses
 */
export const response = <E>(
  events: Stream.Stream<Event, E>,
  options: { readonly heartbeat?: Duration.Input | undefined } = {}
): HttpServerResponse.HttpServerResponse => {
  const heartbeat = Stream.fromEffectSchedule(
    Effect.succeed(": keep-alive\n\n"),
    Schedule.spaced(options.heartbeat ?? "15 seconds")
  ).pipe(Stream.drop(1))
  const body = Stream.merge(Stream.map(events, encode), heartbeat, { haltStrategy: "left" }).pipe(
    Stream.map((text) => encoder.encode(text)),
    Stream.catchCause(() => Stream.empty),
    Stream.ensuring(Effect.sync(() => void open--)),
    Stream.onStart(Effect.sync(() => void open++))
  )
  return HttpServerResponse.stream(body, {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-store", "x-accel-buffering": "no" }
  })
}

/**
 * The progress of a run from its summary so far.
 *
 * @since 0.1.0
 * @category constructors
 */
export const progress = (summary: Summary.Summary, total: number | undefined, finished: boolean): RunProgress => ({
  done: summary.trajectories,
  total: total ?? null,
  trajectoriesPerSecond: summary.trajectoriesPerSecond,
  turnsPerSecond: summary.turnsPerSecond,
  meanReward: summary.meanReward,
  successRate: summary.successRate,
  failures: summary.failures,
  badRows: summary.badRows,
  elapsedMs: summary.elapsedMs,
  finished
})
