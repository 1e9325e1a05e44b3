/**
 * The rollout server: a trainer (in any language) sends dataset rows over HTTP and gets trajectories
 * back, run by this process's schedulers and envs against its inference backend.
 *
 * - `GET /health`, `GET /info` (version, inference, registered names, defaults, limits).
 * - `POST /v1/rollouts`: a batch of rows, each expanded into its GRPO group. The answer is a JSON
 *   array of results in row order, or, with `Accept: application/x-ndjson`, one JSON line per
 *   trajectory written as each group completes (advantages need the whole group). A result is a
 *   `completions.jsonl` line plus the row's `uuid`.
 * - `POST /infer/`: the reference's rollout endpoint (`infer_requests` + `request_config` in, one
 *   `RolloutOutput`-shaped object per request out).
 *
 * The run itself is `Rollout.stream`, per request, with a `Rollout.Config` made of the server's
 * settings and the request's overrides; the scheduler instance is made once, in the server's scope,
 * so per-run limits of a scheduler (OpenEnv's sessions per server) hold across all requests.
 *
 * Safe by default: every request is authenticated first when a key is set (constant-time compare);
 * bodies are size-limited; the whole batch is decoded and every row's env and `env_config` checked
 * before anything runs (400 with the field's path); admission is decided before work starts against
 * a per-request and a global limit on trajectories in flight (413 / 429 with a retry hint, never a
 * queue). A client that goes away interrupts its request, which closes its envs. Shutdown stops
 * admitting, lets trajectories in flight finish for a grace period, then cuts them (their envs are
 * closed) and waits for the responses to be written.
 *
 * - `GET /dashboard`: a page with requests and trajectories in flight, rates and recent failures,
 *   fed by server-sent events (`GET /dashboard/events`); behind the same key (a browser may give it
 *   as the password of HTTP Basic authentication, which it asks for).
 *
 * The pieces: `internal/http.ts` (errors, bodies, auth), `internal/admission.ts` (the counts, the
 * admission decision, the shutdown's waits), `internal/planning.ts` (a request checked into a plan),
 * `internal/infer.ts` (the `/infer/` compatibility layer), the viewer's `Dashboard`; this module
 * wires them into routes.
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Net from "node:net"
import { Cause, Clock, Deferred, Duration, Effect, Option, Queue, type Redacted, type Result, type Scope, Stream } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerRespondable, HttpServerResponse } from "effect/http"
import type { HttpServerError } from "effect/http"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference } from "../Inference.js"
import type { SamplingParams, Service as InferenceService } from "../Inference.js"
import type * as SwiftRollout from "../inference/SwiftRollout.js"
import * as Json from "../internal/Json.js"
import * as Registry from "../Registry.js"
import type * as Reward from "../Reward.js"
import * as Rollout from "../Rollout.js"
import type { TrajectoryRecord } from "../Rollout.js"
import * as RunSpec from "../RunSpec.js"
import { wholeProblem } from "../internal/whole.js"
import * as Scheduler from "../Scheduler.js"
import { countPolicyVersions } from "../Summary.js"
import * as Dashboard from "../view/Dashboard.js"
import * as Api from "./Api.js"
import { admit, type BufferLimits, type Reservation, State, type Stats, waitUntil } from "./internal/admission.js"
import * as Outbox from "./internal/outbox.js"
import * as HttpGuard from "../http/HttpGuard.js"
import { ApiError, decodeBody, errorResponse, json, readBody, shuttingDown } from "./internal/http.js"
import { decodeInfer, inferOutputs, type OnFailure, planInfer, runInfer } from "./internal/infer.js"
import { type Plan, planBatch, type Planner, runGroups } from "./internal/planning.js"
import { formatOf, offering } from "./internal/tools.js"
import * as Swift from "./internal/swift.js"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  ApiError
} from "./internal/http.js"

export type {
  /**
   * @since 0.1.0
   * @category models
   */
  Stats
} from "./internal/admission.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly registry: Registry.Registry
  /** Made once, in the server's scope (default: the gym scheduler). */
  readonly scheduler?: Scheduler.Definition | undefined
  readonly schedulerOptions?: Readonly<Record<string, unknown>> | undefined
  /** The env of rows whose `env_config` has no `name`. */
  readonly defaultEnv?: string | undefined
  /** Reward functions scored for every trajectory, as columns before the env's (default: the env's reward only). */
  readonly rewards?: ReadonlyArray<Reward.Definition> | undefined
  /** One weight per reward column, the env's (`gym_reward`) last (default: 1 each). */
  readonly rewardWeights?: ReadonlyArray<number> | undefined
  /** Defaults of requests that do not say: 1 generation, 10 turns, seed 0, the backend's sampling. */
  readonly numGenerations?: number | undefined
  readonly maxTurns?: number | undefined
  readonly seed?: number | undefined
  readonly sampling?: SamplingParams | undefined
  /** Limits on each trajectory's phases, and retries of transient failures (as for `Rollout.Config`). */
  readonly timeouts?: Rollout.Timeouts | undefined
  readonly retries?: number | undefined
  /** Trajectories in flight over all requests (default 256). */
  readonly maxTrajectoriesInFlight?: number | undefined
  /** Trajectories one request may ask for (default: `maxTrajectoriesInFlight`). */
  readonly maxRequestTrajectories?: number | undefined
  /** Default 8 MiB. */
  readonly maxBodyBytes?: number | undefined
  /**
   * Bytes of one response's results that may wait for its client to read them (default 256 MiB): a
   * JSON batch is held whole until it is sent, so this is also the largest JSON batch (413 past it);
   * a stream past it is cut.
   */
  readonly maxResponseBytes?: number | undefined
  /**
   * Bytes of results that may wait for their clients over all responses (default 512 MiB): from half
   * of it new requests get 429, and a response that goes past it is cut.
   */
  readonly maxBufferedBytes?: number | undefined
  /** How long a client may read nothing while its results wait before its response is cut (default 60 s). */
  readonly writeTimeout?: Duration.Input | undefined
  /** When set, every request needs the key (`Authorization: Bearer <key>`; see `HttpGuard`). */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** The address the server is bound to (default 127.0.0.1): a loopback one checks `Host`. */
  readonly host?: string | undefined
  /** More `Host` names to answer to (`--allow-host`). */
  readonly allowHosts?: ReadonlyArray<string> | undefined
  /** Browser origins allowed cross-origin (`--cors-origin`); others are refused. */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  /** How long trajectories in flight may run on at shutdown before they are cut (default 30 s). */
  readonly shutdownGrace?: Duration.Input | undefined
  /** How long shutdown waits for cut responses to be written (default 5 s). */
  readonly closeTimeout?: Duration.Input | undefined
  /**
   * The backend's control side (`--mode swift-rollout`): the reference trainer's weight-sync and
   * cache endpoints are forwarded to it. Without it they answer 501 saying why.
   */
  readonly control?: SwiftRollout.Control | undefined
  /**
   * What `/infer/` does with failed trajectories: `retry` (default) runs transient failures again
   * with a fresh env, then fails the request (500, listing them) if some still failed;
   * `zero-reward` answers them as reward-0 outputs with the error in `rollout_infos.error`.
   */
  readonly onFailure?: OnFailure | undefined
  /** Retries of a transient failure under `onFailure: "retry"` (default 2). */
  readonly inferRetries?: number | undefined
  /** What `/info` says about this server. */
  readonly info?: {
    readonly version?: string | undefined
    readonly mode?: string | undefined
    readonly model?: string | undefined
  } | undefined
}

/**
 * The server as an HTTP app, before it is bound to a port, with its live counts and its shutdown.
 *
 * @since 0.1.0
 * @category models
 */
export interface RolloutServer {
  readonly app: Effect.Effect<
    HttpServerResponse.HttpServerResponse,
    never,
    HttpServerRequest.HttpServerRequest | Scope.Scope
  >
  readonly stats: Stats
  /**
   * Stops admitting (503), waits up to the grace period for trajectories in flight, cuts the rest
   * (their envs are closed, streamed responses end with a `server_error` line) and waits for the
   * responses to be written. Runs once; later calls wait for the first. Also run when the scope closes.
   */
  readonly shutdown: Effect.Effect<void>
}

/** The options with their defaults, checked. */
interface Settings {
  /** The run's settings (the requests' defaults: 1 generation, 10 turns, seed 0), checked as every run's are. */
  readonly spec: RunSpec.RunSpec
  readonly maxInFlight: number
  readonly maxRequest: number
  readonly maxBody: number
  readonly buffers: BufferLimits
  readonly grace: Duration.Duration
  readonly closeTimeout: Duration.Duration
}

const settingsOf = (options: Options): Effect.Effect<Settings, Rollout.RunConfigError> =>
  Effect.gen(function*() {
    const spec = yield* Effect.fromResult(RunSpec.decode({
      defaultEnv: options.defaultEnv,
      numGenerations: options.numGenerations ?? 1,
      maxTurns: options.maxTurns,
      seed: options.seed,
      // the trajectories in flight over all requests
      concurrency: options.maxTrajectoriesInFlight ?? 256,
      sampling: options.sampling,
      timeouts: options.timeouts,
      retries: options.retries,
      schedulerOptions: options.schedulerOptions,
      rewardWeights: options.rewardWeights
    }, "flags"))
    const maxInFlight = spec.concurrency
    const maxRequest = options.maxRequestTrajectories ?? maxInFlight
    const maxBody = options.maxBodyBytes ?? 8 * 1024 * 1024
    const maxResponseBytes = options.maxResponseBytes ?? 256 * 1024 * 1024
    const maxBufferedBytes = options.maxBufferedBytes ?? 512 * 1024 * 1024
    for (
      const [option, value] of [
        ["--max-request-trajectories", maxRequest],
        ["--max-body", maxBody],
        ["--max-response-bytes", maxResponseBytes],
        ["--max-buffered-bytes", maxBufferedBytes]
      ] as const
    ) {
      const detail = wholeProblem(value, 1)
      if (detail !== undefined) return yield* new Rollout.RunConfigError({ option, detail })
    }
    if (maxRequest > maxInFlight) {
      return yield* new Rollout.RunConfigError({
        option: "--max-request-trajectories",
        detail: `${maxRequest} is more than --concurrency (${maxInFlight}): such a request could never be admitted`
      })
    }
    const writeTimeout = Duration.fromInput(options.writeTimeout ?? "60 seconds")
    if (writeTimeout._tag === "None" || !(Duration.toMillis(writeTimeout.value) > 0)) {
      return yield* new Rollout.RunConfigError({ option: "--write-timeout", detail: "must be a positive duration" })
    }
    return {
      spec,
      maxInFlight,
      maxRequest,
      maxBody,
      buffers: { maxResponseBytes, maxBufferedBytes, writeTimeoutMs: Duration.toMillis(writeTimeout.value) },
      grace: Duration.fromInputUnsafe(options.shutdownGrace ?? "30 seconds"),
      closeTimeout: Duration.fromInputUnsafe(options.closeTimeout ?? "5 seconds")
    }
  })

/**
 * Checks the options as `make` does, without building anything (a front end can fail fast before
 * it starts what the server needs, e.g. env workers).
 *
 * @since 0.1.0
 * @category validation
 */
export const checkOptions = (options: Options): Effect.Effect<void, Rollout.RunConfigError> =>
  Effect.asVoid(settingsOf(options))

/** One server: its settings, counts, scheduler and backend, shared by the handlers. */
interface Server {
  readonly options: Options
  readonly settings: Settings
  /** The run every request's rows go through (its seed the batch's). */
  readonly config: Rollout.Config
  readonly planner: Planner
  readonly state: State
  readonly definition: Scheduler.Definition
  readonly inference: InferenceService
  readonly policy: Swift.PolicyVersion
  /** Failed by shutdown after the grace period: every request's run watches it. */
  readonly cancel: Deferred.Deferred<never, void>
  readonly dashboard: Dashboard.Dashboard
}

const encoder = new TextEncoder()
const decodeBatch = decodeBody(Api.RolloutBatch, { excess: "error" })

/** One result as the server sends it: its place in the batch, the record it was written from, its line. */
interface Sent {
  readonly row: number
  readonly generation: number
  /** The record as written: one whose line JSON cannot hold is its `EncodeError` record. */
  readonly record: TrajectoryRecord
  readonly uuid: string
  /** The result's JSON text (`uuid` last), without a newline. */
  readonly text: string
}

/**
 * The results of a plan, one array per finished group. Rows that run alike share one
 * `Rollout.streamPrepared` (one worker per trajectory: all of them were admitted at once). Each
 * line is encoded as its group completes, so that a line `JSON.stringify` cannot write (past V8's
 * stack or its longest string) is that trajectory's `EncodeError` result, not the whole response's
 * failure.
 */
const runPlan = (
  server: Server,
  plan: Plan,
  reservation: Pick<Reservation, "finished" | "remaining">
): Stream.Stream<Array<Sent>, ApiError> => {
  const uuids = new Map<number, string>()
  for (const planned of plan.rows) uuids.set(planned.row.index, planned.uuid)
  // (a group whose requests offer tools runs on the backend with them offered on every call)
  const streams = runGroups(plan, server.settings.spec.sampling).map(({ config, rows, toolChoice, tools, trajectories }) =>
    Rollout.streamPrepared({ ...config, concurrency: trajectories }, rows).pipe(
      Stream.provideService(Inference, tools === undefined ? server.inference : offering(server.inference, tools, toolChoice))
    )
  )
  const encoded = (item: Rollout.Group): Array<Sent> => {
    const uuid = uuids.get(item.row.index) ?? ""
    const uuidText = `,"uuid":${JSON.stringify(uuid)}}`
    const { group, lines } = CompletionsLog.encodeGroup(item)
    return group.records.map((record, i): Sent => {
      if (record.error !== undefined) {
        const { env, id } = record.result
        server.dashboard.failure({ id, uuid, env, tag: record.error._tag, message: record.error.message })
      }
      countPolicyVersions(server.policy.seen, record.result.turns)
      // (the line ends with "}\n": the uuid goes in as its last field)
      const line = lines[i]
      return { row: record.result.row, generation: record.result.generation, record, uuid, text: line.slice(0, -2) + uuidText }
    })
  }
  // Merging costs more than the run of a small request: only when rows run differently.
  const items = streams.length === 1 ? streams[0] : Stream.mergeAll(streams, { concurrency: "unbounded" })
  return items.pipe(
    Stream.mapEffect((item) => {
      if (item._tag === "RowFailure") {
        // Only prepared rows run: this cannot happen.
        return Effect.fail(
          new ApiError({ reason: "Internal", detail: `a checked row failed to start: ${item.error.message}` })
        )
      }
      reservation.finished(item.records.length)
      // (a turn of the event loop before each group's encoding: groups that finish together were
      // encoded in one go, and /health waited for all of them, seconds for a batch of 200 MB)
      return Effect.andThen(Effect.yieldNow, Effect.sync(() => encoded(item)))
    }),
    // Shutdown fails `cancel`: the run is interrupted (its envs are closed) and the stream fails.
    Stream.interruptWhen(Deferred.await(server.cancel)),
    Stream.catch((error) =>
      error === undefined
        ? Stream.fail(
          shuttingDown(
            `the server is shutting down: ${reservation.remaining} trajectories of this request were cut ` +
              `after the grace period`
          )
        )
        : Stream.fail(error)
    )
  )
}

/** The `server_error` line of a stream that could not go on, for a failure or a defect (logged). */
const errorLine = (cause: Cause.Cause<ApiError>): Effect.Effect<string, never, never> => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) return Effect.succeed(Json.stringify({ server_error: failure.value.toJson() }) + "\n")
  return Effect.as(
    Effect.logError("rollout server: unexpected error in a stream", cause),
    Json.stringify({
      server_error: new ApiError({ reason: "Internal", detail: "unexpected error (see the server's log)" }).toJson()
    }) + "\n"
  )
}

/** A group's lines as bytes: one chunk for a group that fits in one, else a chunk (or more) per line. */
const groupBytes = (texts: ReadonlyArray<string>): Array<Uint8Array> => {
  let length = 0
  for (const text of texts) length += text.length
  if (length <= Outbox.CHUNK_BYTES) return [encoder.encode(texts.join(""))]
  return texts.flatMap((text) => Outbox.chunks(encoder.encode(text)))
}

/**
 * A JSON array of texts already encoded, as a body of chunks of at most `Outbox.CHUNK_BYTES` (plus
 * one item), each taken by the writer once the last one was drained: nothing builds the whole
 * text at once (a 258 MB batch stalled `/health` for seconds while `JSON.stringify` built it).
 */
const arrayChunks = function*(items: ReadonlyArray<Uint8Array>): Generator<Uint8Array> {
  const open = encoder.encode("[")
  const comma = encoder.encode(",")
  const close = encoder.encode("]")
  let parts: Array<Uint8Array> = [open]
  let size = open.length
  for (let i = 0; i < items.length; i++) {
    if (i > 0) {
      parts.push(comma)
      size += comma.length
    }
    if (items[i].length >= Outbox.CHUNK_BYTES) {
      // (a large item goes as it is: copied into a chunk of its own it cost a second copy)
      yield Buffer.concat(parts, size)
      yield items[i]
      parts = []
      size = 0
      continue
    }
    parts.push(items[i])
    size += items[i].length
    if (size >= Outbox.CHUNK_BYTES) {
      yield Buffer.concat(parts, size)
      parts = []
      size = 0
    }
  }
  parts.push(close)
  yield Buffer.concat(parts, size + close.length)
}

/**
 * A JSON array response of items already encoded, through the request's outbox (each chunk
 * released as the writer takes it; a client that reads nothing is cut by the outbox's watchdog).
 */
const arrayResponse = (outbox: Outbox.Outbox, items: ReadonlyArray<Uint8Array>, headers: Record<string, string>) =>
  HttpServerResponse.stream(
    Stream.fromIterable(arrayChunks(items), { chunkSize: 1 }).pipe(
      Stream.mapEffect((chunk) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          outbox.taken(chunk.length, now)
          return chunk
        })
      )
    ),
    { contentType: "application/json", headers }
  )

/**
 * Holds a JSON response's items in its outbox until they are all there: past the response's limit
 * the request fails with 413 (split the batch, or stream it), past the server's with 429.
 */
const hold = (outbox: Outbox.Outbox, bytes: Uint8Array): Effect.Effect<void, ApiError> => {
  const problem = outbox.add(bytes.length)
  if (problem === undefined) return Effect.void
  const mine = outbox.pending > outbox.limits.maxResponseBytes
  return Effect.fail(
    mine
      ? new ApiError({
        reason: "ResponseTooLarge",
        detail: `the results of this request do not fit in one response: ${problem}; split the batch, or ask for ` +
          `NDJSON (accept: application/x-ndjson), which sends each group as it completes`
      })
      : new ApiError({ reason: "AtCapacity", detail: `${problem}: retry later`, retryAfterMs: 1000 })
  )
}

/** Counts the request as in flight until its response has been written. */
const tracked = <A, E, R>(server: Server, handler: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | Scope.Scope> =>
  Effect.andThen(
    Effect.acquireRelease(
      Effect.sync(() => void server.state.requestsInFlight++),
      () => Effect.sync(() => void server.state.requestsInFlight--)
    ),
    handler
  )

/**
 * The path every run request takes: read and decode the body, plan it (every row checked), admit its
 * trajectories for the request's scope. `undefined` for a request with nothing to run.
 */
const accept = <B>(
  server: Server,
  decode: (text: string) => Result.Result<B, ApiError>,
  planOf: (planner: Planner, body: B) => Result.Result<Plan, ApiError>
) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (server.state.draining) return yield* shuttingDown()
    const body = yield* Effect.flatMap(readBody(request, server.settings.maxBody), (text) => Effect.fromResult(decode(text)))
    const plan = yield* Effect.fromResult(planOf(server.planner, body))
    if (plan.trajectories === 0) return undefined
    const reservation = yield* admit(server.state, plan.trajectories)
    return { request, plan, reservation }
  })

/** `POST /v1/rollouts`: one JSON array in row order, or NDJSON lines as groups complete. */
const rollouts = (server: Server) =>
  tracked(
    server,
    Effect.gen(function*() {
      const accepted = yield* accept(server, decodeBatch, planBatch)
      if (accepted === undefined) {
        // No trajectory to run: an empty stream for a client that asked for one, else [].
        const request = yield* HttpServerRequest.HttpServerRequest
        const headers = { [Api.TRAJECTORIES_HEADER]: "0" }
        return (request.headers.accept ?? "").includes(Api.NDJSON)
          ? HttpServerResponse.text("", { contentType: Api.NDJSON, headers: { ...headers, "cache-control": "no-store" } })
          : json([], 200, headers)
      }
      const { plan, request, reservation } = accepted
      const results = runPlan(server, plan, reservation)
      const headers = { [Api.TRAJECTORIES_HEADER]: String(plan.trajectories) }
      const outbox = yield* Outbox.open(server.state, request)
      if ((request.headers.accept ?? "").includes(Api.NDJSON)) {
        // The run is pulled as it goes, its lines counted in the outbox until the client takes
        // them: a client that stops reading holds at most --max-response-bytes, for at most
        // --write-timeout, and what waits counts in admission.
        const queue = yield* Queue.unbounded<Uint8Array, Cause.Done>()
        const lines = results.pipe(
          Stream.map((group) => group.map((sent) => sent.text + "\n")),
          Stream.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause) ? Stream.failCause(cause) : Stream.fromEffect(Effect.map(errorLine(cause), (line) => [line]))
          )
        )
        const pump = Stream.runForEach(lines, (texts) =>
          Effect.suspend(() => {
            for (const chunk of groupBytes(texts)) {
              const problem = outbox.add(chunk.length)
              if (problem !== undefined) return Effect.andThen(Outbox.cut(outbox, server.state, problem), Effect.interrupt)
              Queue.offerUnsafe(queue, chunk)
            }
            return Effect.void
          }))
        yield* Effect.forkScoped(Effect.ensuring(pump, Queue.end(queue)))
        return HttpServerResponse.stream(Outbox.body(outbox, queue), {
          contentType: Api.NDJSON,
          headers: { ...headers, "cache-control": "no-store" }
        })
      }
      const all: Array<{ readonly row: number; readonly generation: number; readonly bytes: Uint8Array }> = []
      outbox.collecting = true
      yield* Stream.runForEach(results, (group) =>
        Effect.forEach(group, (sent) => {
          const bytes = encoder.encode(sent.text)
          all.push({ row: sent.row, generation: sent.generation, bytes })
          return hold(outbox, bytes)
        }, { discard: true }))
      outbox.collecting = false
      all.sort((a, b) => a.row - b.row || a.generation - b.generation)
      return arrayResponse(outbox, all.map((item) => item.bytes), headers)
    })
  )

/** `POST /infer/`: the reference's endpoint, one `RolloutOutput` per request. */
const infer = (server: Server) => {
  const model = server.options.info?.model ?? server.inference.name
  return tracked(
    server,
    Effect.gen(function*() {
      const accepted = yield* accept(server, decodeInfer, planInfer)
      if (accepted === undefined) return json([])
      const { plan, request, reservation } = accepted
      const outbox = yield* Outbox.open(server.state, request)
      const run = (retried: Plan) =>
        Effect.map(
          Stream.runCollect(runPlan(server, retried, reservation)),
          (groups) => groups.flat().map((sent): Api.RolloutResult => ({ ...CompletionsLog.toLine(sent.record), uuid: sent.uuid }))
        )
      const byRow = yield* runInfer(plan, run, {
        onFailure: server.options.onFailure ?? "retry",
        retries: server.options.inferRetries ?? 2,
        hasLogprobs: server.inference.scripted !== true
      })
      const outputs = inferOutputs(plan, byRow, {
        model,
        created: Math.floor(Date.now() / 1000),
        returnDetails: plan.returnDetails === true,
        callFormat: formatOf(server.inference)
      })
      // Each output written on its own (its record's line was written: it can be), the array sent
      // in chunks, as /v1/rollouts sends its own.
      const items: Array<Uint8Array> = []
      for (const output of outputs) {
        const bytes = encoder.encode(Json.stringify(output))
        items.push(bytes)
        yield* hold(outbox, bytes)
      }
      return arrayResponse(outbox, items, {})
    })
  )
}

const named = (map: ReadonlyMap<string, { readonly name: string; readonly description: string }>) =>
  [...map.values()].map((d) => ({ name: d.name, description: d.description }))

/** `GET /info`: what this server runs, its defaults, limits and counts. */
const info = (server: Server) =>
  Effect.sync(() => {
    const { options, settings, state } = server
    const body: Api.Info = {
      name: "effect-gym",
      version: options.info?.version ?? "0.1.0",
      inference: {
        mode: options.info?.mode ?? "custom",
        model: options.info?.model ?? null,
        backend: server.inference.name
      },
      scheduler: server.definition.name,
      default_env: options.defaultEnv ?? null,
      envs: named(options.registry.envs),
      schedulers: named(options.registry.schedulers),
      reward_functions: named(options.registry.rewards),
      reward_columns: server.config.columns.names.map((name, i) => ({ name, weight: server.config.columns.weights[i] })),
      defaults: {
        num_generations: server.config.numGenerations,
        max_turns: server.config.maxTurns,
        seed: server.config.seed,
        sampling: Object.fromEntries(Object.entries(settings.spec.sampling).filter(([, v]) => v !== undefined))
      },
      limits: {
        max_trajectories_in_flight: settings.maxInFlight,
        max_request_trajectories: settings.maxRequest,
        max_body_bytes: settings.maxBody,
        shutdown_grace_seconds: Duration.toSeconds(settings.grace),
        max_response_bytes: settings.buffers.maxResponseBytes,
        max_buffered_bytes: settings.buffers.maxBufferedBytes,
        write_timeout_seconds: settings.buffers.writeTimeoutMs / 1000
      },
      auth: options.apiKey !== undefined,
      policy: server.policy.toJson(),
      in_flight: {
        trajectories: state.trajectoriesInFlight,
        requests: state.requestsInFlight,
        buffered_bytes: state.bufferedBytes
      }
    }
    return json(body)
  })

const health = (state: State) =>
  Effect.sync(() =>
    json(
      { status: state.draining ? "draining" : "ok", trajectories_in_flight: state.trajectoriesInFlight },
      state.draining ? 503 : 200
    )
  )

/** What the control routes need of the server. */
const controlOf = (server: Server): Swift.ControlContext => ({
  control: server.options.control,
  policy: server.policy,
  maxBody: server.settings.maxBody,
  backend: { mode: server.options.info?.mode ?? "custom", name: server.inference.name }
})

const isPage = (pathname: string) => pathname === "/dashboard" || pathname.startsWith("/dashboard/")

/** A refusal of the guard (Host, Origin, key) in this server's error shape. */
const refusal = (refused: HttpGuard.Refusal) =>
  json(
    { error: { type: refused.type, message: refused.message } },
    refused.status,
    refused.status === 401 ? { "www-authenticate": "Bearer" } : {}
  )

/** The routes behind the guard (Host, Origin, key: `HttpGuard`), every error turned into its response. */
const appOf = (server: Server) =>
  Effect.gen(function*() {
    const routes = yield* HttpRouter.toHttpEffect(HttpRouter.addAll([
      HttpRouter.route("GET", "/health", health(server.state)),
      HttpRouter.route("GET", "/info", info(server)),
      HttpRouter.route("POST", "/v1/rollouts", rollouts(server)),
      // The router ignores a trailing slash: this is also POST /infer.
      HttpRouter.route("POST", "/infer/", infer(server)),
      ...Swift.routes(controlOf(server)),
      ...server.dashboard.routes
    ]))
    const app = routes.pipe(
      Effect.catchTags({
        ApiError: (error) => Effect.succeed(errorResponse(error)),
        HttpServerError: (error) =>
          error.reason._tag === "RouteNotFound"
            ? Effect.succeed(
              errorResponse(
                new ApiError({
                  reason: "NotFound",
                  detail: `no route ${error.request.method} ${error.request.url}: GET /health, GET /info, ` +
                    `POST /v1/rollouts, POST /infer/, ${Swift.PATHS.join(", ")}, GET /dashboard`
                })
              )
            )
            // Not raised by these routes (their bodies are read as ApiErrors): answered as the platform would.
            : HttpServerRespondable.toResponse(error)
      }),
      Effect.catchDefect((defect) =>
        Effect.as(
          Effect.logError("rollout server: unexpected error", Cause.die(defect)),
          errorResponse(new ApiError({ reason: "Internal", detail: "unexpected error (see the server's log)" }))
        )
      )
    )
    return HttpGuard.middleware({
      host: server.options.host ?? "127.0.0.1",
      allowHosts: server.options.allowHosts,
      corsOrigins: server.options.corsOrigins,
      apiKey: server.options.apiKey,
      // A browser page (the dashboard) cannot send a bearer token: there the key may come as the
      // password of HTTP Basic authentication, which the browser asks for and then sends by itself.
      // The API takes the key as a bearer token (or X-API-Key) only.
      basic: isPage,
      reject: (refused, pathname) =>
        refused.status === 401 && isPage(pathname)
          ? HttpServerResponse.text("the dashboard needs this server's key: give it as the password", {
            status: 401,
            headers: { "www-authenticate": "Basic realm=\"effect-gym dashboard\", charset=\"UTF-8\"" }
          })
          : refusal(refused)
    })(app)
  })

/** Drain, cut what outlives the grace period, then wait (bounded) for the responses. */
const shutdownOf = (server: Server): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { settings, state } = server
    state.draining = true
    const finished = yield* waitUntil(() => state.trajectoriesInFlight === 0, settings.grace)
    if (!finished) yield* Deferred.fail(server.cancel, undefined)
    yield* waitUntil(() => state.requestsInFlight === 0, settings.closeTimeout)
  })

/**
 * Builds the server in the current scope: the scheduler instance is made here and lives as long as
 * the server. Settings are checked first (a bad one fails with its option's name).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options
): Effect.Effect<
  RolloutServer,
  Rollout.RunConfigError | Registry.NotRegistered | Scheduler.SchedulerError | Reward.RewardConfigError,
  Inference | Scope.Scope
> =>
  Effect.gen(function*() {
    const settings = yield* settingsOf(options)
    const definition = options.scheduler ?? Scheduler.gym
    yield* Effect.fromResult(Registry.checkDefaultEnv(options.registry, definition, options.defaultEnv))
    // The run every request's rows go through (the scheduler's instance made once, for the server's life).
    const config = yield* Rollout.configOf(settings.spec, {
      registry: options.registry,
      scheduler: definition,
      rewards: options.rewards ?? []
    })
    const inference = yield* Inference
    const policy = new Swift.PolicyVersion(options.control !== undefined)
    const planner: Planner = {
      honours: inference.honours,
      backend: inference.name,
      registry: options.registry,
      numGenerations: config.numGenerations,
      maxTurns: config.maxTurns,
      seed: config.seed,
      baseConfig: (batchSeed) => ({ ...config, seed: batchSeed })
    }
    const state = new State(settings.maxInFlight, settings.maxRequest, settings.buffers)
    const server: Server = {
      options,
      settings,
      config,
      planner,
      state,
      definition,
      inference: Swift.stamped(inference, policy),
      policy,
      cancel: yield* Deferred.make<never, void>(),
      dashboard: yield* Dashboard.make({ counts: () => state, maxTrajectoriesInFlight: settings.maxInFlight })
    }
    const app = yield* appOf(server)
    const shutdown = yield* Effect.cached(shutdownOf(server))
    yield* Effect.addFinalizer(() => shutdown)
    return { app, stats: server.state, shutdown } satisfies RolloutServer
  })

/**
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options, HttpGuard.Limits {
  /** 0 picks a free port. */
  readonly port: number
}

/**
 * A running server.
 *
 * @since 0.1.0
 * @category models
 */
export interface Running {
  /** `http://host:port`. */
  readonly url: string
  readonly port: number
  readonly stats: Stats
  readonly shutdown: Effect.Effect<void>
}

/**
 * Serves until the scope closes. Closing it shuts down gracefully: the port stops accepting
 * connections, then {@link RolloutServer.shutdown} runs, then the remaining connections are closed.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: ServeOptions
): Effect.Effect<
  Running,
  Rollout.RunConfigError | Registry.NotRegistered | Scheduler.SchedulerError | Reward.RewardConfigError | HttpServerError.ServeError,
  Inference | Scope.Scope
> =>
  Effect.gen(function*() {
    const server = yield* make(options)
    const host = options.host ?? "127.0.0.1"
    const node = HttpGuard.createServer(options)
    const http = yield* NodeHttpServer.make(() => node, { host, port: options.port })
    yield* http.serve(server.app)
    // Added last, so it runs first when the scope closes: stop accepting, drain, then disconnect.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        // Stops listening, but keeps the idle keep-alive connections (http's own close() closes
        // them: a request a client sent on one just then was reset): their requests get 503
        // shutting_down during the drain.
        yield* Effect.sync(() => Net.Server.prototype.close.call(node))
        yield* server.shutdown
        yield* Effect.sync(() => {
          node.closeAllConnections()
          // (http's close: clears its timers; the port is closed already, which its callback says)
          node.close(() => {})
        })
      })
    )
    const port = http.address._tag === "UnixPathAddress" ? options.port : http.address.port
    const shown = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shown}:${port}`, port, stats: server.stats, shutdown: server.shutdown }
  })
