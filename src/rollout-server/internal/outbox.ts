/**
 * A response's results on their way to its client, bounded. Its bytes are counted from the moment
 * they are encoded until the response's writer takes them (the writer takes the next chunk only once
 * Node has drained the last one, so Node holds at most a chunk beyond its own buffer), per response
 * and in total (`State.bufferedBytes`, which admission reads). A response past its limit or the
 * total, or whose client has taken nothing for the write timeout while bytes wait, is cut: its
 * connection is closed, which interrupts its request, and its runs and envs with it.
 *
 * Before this, finished results no longer counted against `--concurrency`, and a client that
 * stopped reading held them all: six such clients took a server from 186 MB to 959 MB of memory.
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Clock, Effect, Queue, Schedule, type Scope, Stream } from "effect"
import type { Cause } from "effect"
import type { HttpServerRequest } from "effect/http"
import type { State } from "./admission.js"

/** The most bytes one chunk of a response holds (what Node may hold beyond its buffer). */
export const CHUNK_BYTES = 1024 * 1024

/** What the outbox needs of Node's response: whether it waits for a drain, its events, closing it. */
interface NodeResponse {
  readonly writableNeedDrain: boolean
  readonly destroyed: boolean
  on(event: "drain", listener: () => void): unknown
  off(event: "drain", listener: () => void): unknown
  destroy(): unknown
}

/**
 * One response's waiting bytes.
 */
export class Outbox {
  pending = 0
  lastProgress: number
  /** Node drained a write since the watchdog last looked (set from Node's event, timed by the watchdog's Clock). */
  drained = false
  /** Why the response was cut, once it was. */
  cutFor: string | undefined = undefined

  constructor(private readonly state: State, readonly node: NodeResponse | undefined, now: number) {
    this.lastProgress = now
  }

  get limits(): State["buffers"] {
    return this.state.buffers
  }

  /** Counts `n` more bytes; what is wrong when they do not fit (the response's limit, or the server's). */
  add(n: number): string | undefined {
    this.pending += n
    this.state.bufferedBytes += n
    const { maxBufferedBytes, maxResponseBytes } = this.state.buffers
    if (this.pending > maxResponseBytes) {
      return `its results waiting to be read reached ${this.pending} bytes, more than --max-response-bytes (${maxResponseBytes})`
    }
    if (this.state.bufferedBytes > maxBufferedBytes) {
      return `the results waiting for every client reached ${this.state.bufferedBytes} bytes, more than ` +
        `--max-buffered-bytes (${maxBufferedBytes})`
    }
    return undefined
  }

  /** `n` bytes were taken by the writer (so the client read what came before). */
  taken(n: number, now: number): void {
    const k = Math.min(n, this.pending)
    this.pending -= k
    this.state.bufferedBytes -= k
    this.lastProgress = now
  }

  /**
   * Set while a JSON batch is collected: its bytes are counted, but its client has nothing to read
   * until the batch is complete, so it is not timed.
   */
  collecting = false

  /** Whether bytes wait for the client: counted ones, or a write Node has not drained. */
  get waiting(): boolean {
    return !this.collecting && (this.pending > 0 || this.node?.writableNeedDrain === true)
  }

  release(): void {
    this.state.bufferedBytes -= this.pending
    this.pending = 0
  }
}

/**
 * Closes the response's connection (nothing more can reach a client that does not read), which
 * interrupts its request. Once.
 */
export const cut = (outbox: Outbox, state: State, reason: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (outbox.cutFor !== undefined) return Effect.void
    outbox.cutFor = reason
    state.cutResponses++
    return Effect.andThen(
      Effect.logWarning(`rollout server: a response was cut: ${reason}`),
      Effect.sync(() => {
        outbox.release()
        if (outbox.node !== undefined && !outbox.node.destroyed) outbox.node.destroy()
      })
    )
  })

/**
 * The outbox of the current request's response, for the request's scope: its bytes are released
 * when the request ends, and a watchdog cuts the response when its client takes nothing for the
 * write timeout while bytes wait.
 */
export const open = (
  state: State,
  request: HttpServerRequest.HttpServerRequest
): Effect.Effect<Outbox, never, Scope.Scope> =>
  Effect.gen(function*() {
    let node: NodeResponse | undefined
    try {
      node = NodeHttpServerRequest.toServerResponse(request) as unknown as NodeResponse
    } catch {
      // not a Node request (a test's in-memory server): no drain events, nothing to close
      node = undefined
    }
    const now = yield* Clock.currentTimeMillis
    const outbox = new Outbox(state, node, now)
    const drained = () => void (outbox.drained = true)
    yield* Effect.acquireRelease(
      Effect.sync(() => node?.on("drain", drained)),
      () =>
        Effect.sync(() => {
          node?.off("drain", drained)
          outbox.release()
        })
    )
    const timeout = state.buffers.writeTimeoutMs
    if (Number.isFinite(timeout) && timeout < Number.MAX_SAFE_INTEGER) {
      const check = Effect.gen(function*() {
        const at = yield* Clock.currentTimeMillis
        // (counted only while bytes wait: a client waiting for a long group to finish reads nothing
        // either, and its first group's bytes were cut at once after that long)
        if (outbox.drained || !outbox.waiting) {
          outbox.drained = false
          outbox.lastProgress = at
        } else if (at - outbox.lastProgress > timeout) {
          yield* cut(outbox, state, `its client read nothing for ${Math.round(timeout / 1000)} s (--write-timeout)`)
        }
      })
      yield* Effect.forkScoped(Effect.repeat(check, Schedule.spaced(`${Math.min(1000, Math.max(10, timeout / 4))} millis`)))
    }
    return outbox
  })

/**
 * The chunks of a queue as a response body: each chunk taken by the writer is released from the
 * outbox (the writer takes the next only once Node has drained the last one).
 */
export const body = (
  outbox: Outbox,
  queue: Queue.Dequeue<Uint8Array, Cause.Done>
): Stream.Stream<Uint8Array> =>
  Stream.fromEffectRepeat(
    Effect.flatMap(Queue.take(queue), (chunk) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        outbox.taken(chunk.length, now)
        return chunk
      }))
  )

/** Splits bytes into chunks of at most {@link CHUNK_BYTES}. */
export const chunks = (bytes: Uint8Array): Array<Uint8Array> => {
  if (bytes.length <= CHUNK_BYTES) return [bytes]
  const out: Array<Uint8Array> = []
  for (let i = 0; i < bytes.length; i += CHUNK_BYTES) out.push(bytes.subarray(i, i + CHUNK_BYTES))
  return out
}
