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
 * @since 0.1.0
 */
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as HttpRouter from "@effect/platform/HttpRouter"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Cause, Chunk, Deferred, Duration, Effect, Either, Option, ParseResult, Redacted, Schema, Stream } from "effect"
import type * as Scope from "effect/Scope"
import { createHash, randomUUID, timingSafeEqual } from "node:crypto"
import * as Http from "node:http"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference } from "../Inference.js"
import type { SamplingParams } from "../Inference.js"
import * as Sampling from "../inference/Sampling.js"
import * as Json from "../internal/Json.js"
import * as Registry from "../Registry.js"
import type * as Reward from "../Reward.js"
import * as Rollout from "../Rollout.js"
import * as Row from "../Row.js"
import * as Scheduler from "../Scheduler.js"
import * as Api from "./Api.js"
import { errorMessage } from "../internal/lift.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

const STATUS = {
  Unauthorized: 401,
  NotFound: 404,
  BodyTooLarge: 413,
  MalformedJson: 400,
  InvalidBody: 400,
  TooManyTrajectories: 413,
  AtCapacity: 429,
  ShuttingDown: 503,
  Internal: 500
} as const

const TYPE: Record<keyof typeof STATUS, string> = {
  Unauthorized: "unauthorized",
  NotFound: "not_found",
  BodyTooLarge: "body_too_large",
  MalformedJson: "invalid_json",
  InvalidBody: "invalid_request",
  TooManyTrajectories: "too_many_trajectories",
  AtCapacity: "at_capacity",
  ShuttingDown: "shutting_down",
  Internal: "internal_error"
}

/**
 * A request the server turns away (or, for `ShuttingDown`, cuts), with its HTTP status. The body
 * sent is `{"error": {"type", "message", "path"?, "retry_after_ms"?, "registered_envs"?}}`.
 *
 * @since 0.1.0
 * @category errors
 */
export class ApiError extends Schema.TaggedError<ApiError>("effect-gym/server/ApiError")("ApiError", {
  reason: Schema.Literal(
    "Unauthorized",
    "NotFound",
    "BodyTooLarge",
    "MalformedJson",
    "InvalidBody",
    "TooManyTrajectories",
    "AtCapacity",
    "ShuttingDown",
    "Internal"
  ),
  detail: Schema.String,
  /** The offending field of the body, e.g. `requests[2].env_config.size`. */
  path: Schema.optional(Schema.String),
  retryAfterMs: Schema.optional(Schema.Number),
  registeredEnvs: Schema.optional(Schema.Array(Schema.String)),
  /** The connection is gone (the body could not be read to its end): nothing can be sent back. */
  dropped: Schema.optional(Schema.Boolean),
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return this.path === undefined ? this.detail : `${this.path}: ${this.detail}`
  }

  get status(): number {
    return STATUS[this.reason]
  }

  /** The error as the body's `error` object. */
  toJson(): typeof Api.ErrorDetail.Type {
    const out: Record<string, unknown> = { type: TYPE[this.reason], message: this.message }
    if (this.path !== undefined) out.path = this.path
    if (this.retryAfterMs !== undefined) out.retry_after_ms = this.retryAfterMs
    if (this.registeredEnvs !== undefined) out.registered_envs = this.registeredEnvs
    return out as typeof Api.ErrorDetail.Type
  }
}

const encoder = new TextEncoder()

const json = (value: unknown, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(Json.stringify(value), { status, contentType: "application/json", headers })

const errorResponse = (error: ApiError): HttpServerResponse.HttpServerResponse => {
  // @effect/platform-node waits for a body's `end` callback, which never comes on a destroyed
  // socket: an empty response is ended without waiting.
  if (error.dropped === true) return HttpServerResponse.empty({ status: error.status })
  const headers: Record<string, string> = {}
  if (error.reason === "Unauthorized") headers["www-authenticate"] = "Bearer"
  if (error.retryAfterMs !== undefined) {
    headers["retry-after"] = String(Math.max(1, Math.ceil(error.retryAfterMs / 1000)))
  }
  // The rest of an oversized body is not read: the connection cannot be reused.
  if (error.reason === "BodyTooLarge" || error.reason === "ShuttingDown") headers.connection = "close"
  return json({ error: error.toJson() }, error.status, headers)
}

// ---------------------------------------------------------------------------------------------
// Options and state
// ---------------------------------------------------------------------------------------------

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
  /** Reward columns scored for every trajectory (default: the env's reward only). */
  readonly columns: Reward.Columns
  /** Defaults of requests that do not say: 1 generation, 10 turns, seed 0, the backend's sampling. */
  readonly numGenerations?: number | undefined
  readonly maxTurns?: number | undefined
  readonly seed?: number | undefined
  readonly sampling?: SamplingParams | undefined
  /** Trajectories in flight over all requests (default 256). */
  readonly maxTrajectoriesInFlight?: number | undefined
  /** Trajectories one request may ask for (default: `maxTrajectoriesInFlight`). */
  readonly maxRequestTrajectories?: number | undefined
  /** Default 8 MiB. */
  readonly maxBodyBytes?: number | undefined
  /** When set, every request needs `Authorization: Bearer <key>`. */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** How long trajectories in flight may run on at shutdown before they are cut (default 30 s). */
  readonly shutdownGrace?: Duration.DurationInput | undefined
  /** How long shutdown waits for cut responses to be written (default 5 s). */
  readonly closeTimeout?: Duration.DurationInput | undefined
  /** What `/info` says about this server. */
  readonly info?: {
    readonly version?: string | undefined
    readonly mode?: string | undefined
    readonly model?: string | undefined
  } | undefined
}

/**
 * Live counts, for `/info`, tests and monitoring.
 *
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  readonly trajectoriesInFlight: number
  /** Requests being handled (until their response is written). */
  readonly requestsInFlight: number
  readonly admitted: number
  readonly completed: number
  /** Trajectories interrupted before they finished: their client left, or shutdown cut them. */
  readonly cancelled: number
  /** Requests turned away for capacity (429). */
  readonly rejected: number
  readonly draining: boolean
}

class State implements Stats {
  trajectoriesInFlight = 0
  requestsInFlight = 0
  admitted = 0
  completed = 0
  cancelled = 0
  rejected = 0
  draining = false
  /** A moving average of how long a group takes, for the 429 retry hint. */
  groupMs = 1000

  constructor(readonly maxInFlight: number, readonly maxRequest: number) {}

  /** Admission: decided in one synchronous step, before any work starts. */
  admit(n: number): Either.Either<Reservation, ApiError> {
    if (this.draining) return Either.left(shuttingDown())
    if (n > this.maxRequest) {
      return Either.left(
        new ApiError({
          reason: "TooManyTrajectories",
          detail: `the request asks for ${n} trajectories; this server takes at most ${this.maxRequest} per request ` +
            `(--max-request-trajectories): split the batch`
        })
      )
    }
    if (this.trajectoriesInFlight + n > this.maxInFlight) {
      this.rejected++
      const retryAfterMs = Math.max(100, Math.round(this.groupMs))
      return Either.left(
        new ApiError({
          reason: "AtCapacity",
          detail: `${this.trajectoriesInFlight} of ${this.maxInFlight} trajectories in flight; ${n} more do not fit: ` +
            `retry later`,
          retryAfterMs
        })
      )
    }
    this.trajectoriesInFlight += n
    this.admitted += n
    return Either.right(new Reservation(this, n, performance.now()))
  }
}

/** A request's admitted trajectories: released group by group, the rest when the request ends. */
class Reservation {
  constructor(private readonly state: State, public remaining: number, private readonly started: number) {}

  finished(n: number): void {
    const k = Math.min(n, this.remaining)
    this.remaining -= k
    this.state.trajectoriesInFlight -= k
    this.state.completed += k
    this.state.groupMs = 0.8 * this.state.groupMs + 0.2 * (performance.now() - this.started)
  }

  close(): void {
    this.state.trajectoriesInFlight -= this.remaining
    this.state.cancelled += this.remaining
    this.remaining = 0
  }
}

const shuttingDown = (detail = "the server is shutting down") => new ApiError({ reason: "ShuttingDown", detail })

// ---------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------

const tooLarge = (max: number) =>
  ({ reason: "BodyTooLarge", detail: `the body is larger than this server's limit of ${max} bytes` }) as const

/**
 * Reads the body, at most `max` bytes: a declared length over the limit is refused unread; a body
 * that grows past it (chunked) is cut off, and with it the connection.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, max: number): Effect.Effect<string, ApiError> => {
  const declared = Number(request.headers["content-length"])
  if (Number.isFinite(declared) && declared > max) return Effect.fail(new ApiError(tooLarge(max)))
  return request.arrayBuffer.pipe(
    HttpIncomingMessage.withMaxBodySize(Option.some(max)),
    Effect.mapError((cause) =>
      cause.cause instanceof Error && cause.cause.message === "maxBytes exceeded"
        ? new ApiError({ ...tooLarge(max), dropped: true, cause })
        : new ApiError({ reason: "InvalidBody", detail: "the body could not be read", dropped: true, cause })
    ),
    Effect.flatMap((buffer) =>
      Effect.try({
        try: () => new TextDecoder("utf-8", { fatal: true }).decode(buffer),
        catch: () => new ApiError({ reason: "MalformedJson", detail: "the body is not UTF-8 text" })
      })
    )
  )
}

/** Parses and decodes a JSON body; errors name the field. */
const decodeBody = <A, I>(schema: Schema.Schema<A, I>, options: { readonly excess: "error" | "ignore" }) => {
  const decode = ParseResult.decodeUnknownEither(schema, { errors: "first", onExcessProperty: options.excess })
  return (text: string): Either.Either<A, ApiError> => {
    if (text.trim() === "") return Either.left(new ApiError({ reason: "MalformedJson", detail: "the body is empty" }))
    const parsed = Either.try({
      try: () => Json.parse(text),
      catch: (error) =>
        new ApiError({
          reason: "MalformedJson",
          detail: `malformed JSON: ${errorMessage(error)}`
        })
    })
    return Either.flatMap(parsed, (value) =>
      Either.mapLeft(decode(value), (error) => {
        const issue = ParseResult.ArrayFormatter.formatIssueSync(error)[0]
        const path = Row.formatPath(issue?.path ?? [])
        return new ApiError({
          reason: "InvalidBody",
          detail: issue?.message ?? "does not match the schema",
          path: path === "" ? "(body)" : path
        })
      }))
  }
}

const decodeBatch = decodeBody(Api.RolloutBatch, { excess: "error" })
// The reference's clients send fields this server has no use for (metrics, template, ...).
const decodeInfer = decodeBody(Api.InferBody, { excess: "ignore" })

// ---------------------------------------------------------------------------------------------
// Planning a request: every row checked before anything runs
// ---------------------------------------------------------------------------------------------

/** One row of a request, checked, with how it runs. */
interface PlannedRow {
  readonly row: Row.Row
  /** The row checked against the batch's config, run as it is. */
  readonly prepared: Rollout.PreparedRow
  readonly uuid: string
  readonly numGenerations: number
  readonly maxTurns: number
  readonly sampling: SamplingParams | undefined
}

interface Plan {
  readonly rows: ReadonlyArray<PlannedRow>
  /** The config the rows were prepared with (the batch's seed). */
  readonly config: Rollout.Config
  readonly trajectories: number
}

/** What a request gives about one row, in the server's terms. */
interface RowInput {
  readonly prefix: string
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string }> | null | undefined
  readonly envConfig: Readonly<Record<string, unknown>> | null | undefined
  readonly dataDict: Readonly<Record<string, unknown>> | null | undefined
  readonly uuid: string | null | undefined
  readonly numGenerations: number | null | undefined
  readonly maxTurns: number | null | undefined
}

const samplingProblem = (path: string, overrides: SamplingParams): ApiError | undefined => {
  const problem = Sampling.problems(overrides)[0]
  if (problem === undefined) return undefined
  return new ApiError({
    reason: "InvalidBody",
    path: `${path}.${Api.SAMPLING_FIELDS[problem.option] ?? problem.option}`,
    detail: problem.detail
  })
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

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
  Rollout.RunConfigError | Registry.NotRegistered | Scheduler.SchedulerError,
  Inference | Scope.Scope
> =>
  Effect.gen(function*() {
    const numGenerations = options.numGenerations ?? 1
    const maxTurns = options.maxTurns ?? 10
    const seed = options.seed ?? 0
    const maxInFlight = options.maxTrajectoriesInFlight ?? 256
    const maxRequest = options.maxRequestTrajectories ?? maxInFlight
    const maxBody = options.maxBodyBytes ?? 8 * 1024 * 1024
    const grace = Duration.decode(options.shutdownGrace ?? "30 seconds")
    const closeTimeout = Duration.decode(options.closeTimeout ?? "5 seconds")
    const serverSampling = options.sampling ?? {}

    yield* Rollout.validate({ numGenerations, maxTurns, concurrency: maxInFlight, seed })
    yield* Rollout.positiveInteger("--max-request-trajectories", maxRequest)
    yield* Rollout.positiveInteger("--max-body", maxBody)
    if (maxRequest > maxInFlight) {
      return yield* new Rollout.RunConfigError({
        option: "--max-request-trajectories",
        detail: `${maxRequest} is more than --concurrency (${maxInFlight}): such a request could never be admitted`
      })
    }
    const problem = Sampling.problems(serverSampling)[0]
    if (problem !== undefined) return yield* new Rollout.RunConfigError(problem)

    const definition = options.scheduler ?? Scheduler.gym
    if (options.defaultEnv !== undefined && definition.usesRegistryEnvs) {
      yield* Registry.env(options.registry, options.defaultEnv)
    }
    const instance = yield* definition.make({ options: options.schedulerOptions ?? {} })
    const inference = yield* Inference
    const state = new State(maxInFlight, maxRequest)
    const cancel = yield* Deferred.make<never, void>()

    const baseConfig = (batchSeed: number): Rollout.Config => ({
      registry: options.registry,
      scheduler: { definition, instance },
      defaultEnv: options.defaultEnv,
      numGenerations,
      maxTurns,
      concurrency: maxInFlight,
      seed: batchSeed,
      columns: options.columns
    })

    // --- planning -----------------------------------------------------------------------------

    const planRow = (config: Rollout.Config, index: number, input: RowInput): Either.Either<PlannedRow, ApiError> => {
      const invalid = (path: string, detail: string, registeredEnvs?: ReadonlyArray<string>) =>
        Either.left(new ApiError({ reason: "InvalidBody", path: `${input.prefix}${path}`, detail, registeredEnvs }))
      const dataDict = input.dataDict ?? {}
      const fromData = input.envConfig === null || input.envConfig === undefined
      if (!fromData && Object.prototype.hasOwnProperty.call(dataDict, "env_config")) {
        return invalid(".env_config", "give env_config or data_dict.env_config, not both")
      }
      const value: Record<string, unknown> = { ...dataDict }
      if (!fromData) value.env_config = input.envConfig
      if (input.messages !== null && input.messages !== undefined) value.messages = input.messages
      // Where env_config came from, for the paths of its errors.
      const at = (path: string) =>
        path === "" ? "" : `.${fromData && path.startsWith("env_config") ? `data_dict.${path}` : path}`
      const decoded = Row.decodeValue("request", index, value)
      if (Either.isLeft(decoded)) return invalid(at(decoded.left.path), decoded.left.detail)
      const prepared = Rollout.prepareRow(config, decoded.right)
      if (Either.isLeft(prepared)) {
        const error = prepared.left
        const unknownEnv = error.path === "--gym-env" || error.path === "env_config.name"
        return invalid(
          at(unknownEnv ? "env_config.name" : error.path),
          error.detail,
          unknownEnv ? [...options.registry.envs.keys()].sort() : undefined
        )
      }
      return Either.right({
        row: decoded.right,
        prepared: prepared.right,
        uuid: input.uuid ?? randomUUID(),
        numGenerations: input.numGenerations ?? numGenerations,
        maxTurns: input.maxTurns ?? maxTurns,
        sampling: undefined
      })
    }

    const planBatch = (batch: Api.RolloutBatch): Either.Either<Plan, ApiError> => {
      const batchSeed = batch.seed ?? seed
      const config = baseConfig(batchSeed)
      const batchSampling = Api.toSamplingParams(batch.sampling)
      const bad = samplingProblem("sampling", batchSampling)
      if (bad !== undefined) return Either.left(bad)
      const rows: Array<PlannedRow> = []
      let trajectories = 0
      for (let i = 0; i < batch.requests.length; i++) {
        const r = batch.requests[i]
        const planned = planRow(config, i, {
          prefix: `requests[${i}]`,
          messages: r.messages,
          envConfig: r.env_config,
          dataDict: r.data_dict,
          uuid: r.uuid,
          numGenerations: r.num_generations,
          maxTurns: r.max_turns
        })
        if (Either.isLeft(planned)) return Either.left(planned.left)
        const rowSampling = Api.toSamplingParams(r.sampling)
        const badRow = samplingProblem(`requests[${i}].sampling`, rowSampling)
        if (badRow !== undefined) return Either.left(badRow)
        rows.push({ ...planned.right, sampling: Sampling.merge(batchSampling, rowSampling) })
        trajectories += planned.right.numGenerations
      }
      return Either.right({ rows, config, trajectories })
    }

    const planInfer = (body: Api.InferBody): Either.Either<Plan, ApiError> => {
      const rc = body.request_config ?? undefined
      const batchSeed = rc?.seed ?? seed
      const config = baseConfig(batchSeed)
      const sampling = Api.toSamplingParams(rc)
      const bad = samplingProblem("request_config", sampling)
      if (bad !== undefined) return Either.left(bad)
      const rows: Array<PlannedRow> = []
      for (let i = 0; i < body.infer_requests.length; i++) {
        const r = body.infer_requests[i]
        const planned = planRow(config, i, {
          prefix: `infer_requests[${i}]`,
          messages: r.messages,
          envConfig: undefined,
          dataDict: r.data_dict,
          uuid: r.uuid,
          numGenerations: 1,
          maxTurns: undefined
        })
        if (Either.isLeft(planned)) return Either.left(planned.left)
        rows.push({ ...planned.right, sampling })
      }
      return Either.right({ rows, config, trajectories: rows.length })
    }

    // --- running ------------------------------------------------------------------------------

    const admit = (n: number): Effect.Effect<Reservation, ApiError, Scope.Scope> =>
      Effect.acquireRelease(
        Effect.suspend(() => state.admit(n)),
        (reservation) => Effect.sync(() => reservation.close())
      )

    /**
     * The results of a plan, one array per finished group. Rows that run alike share one
     * `Rollout.stream` (one worker per trajectory: all of them were admitted at once).
     */
    const run = (plan: Plan, reservation: Reservation): Stream.Stream<Array<Api.RolloutResult>, ApiError> => {
      const buckets = new Map<
        string,
        { config: Rollout.Config; rows: Array<Either.Either<Rollout.PreparedRow, Row.RowError>>; trajectories: number }
      >()
      const uuids = new Map<number, string>()
      for (const planned of plan.rows) {
        uuids.set(planned.row.index, planned.uuid)
        const sampling = Sampling.merge(serverSampling, planned.sampling ?? {})
        const key = `${planned.numGenerations}|${planned.maxTurns}|${Json.stringify(sampling)}`
        let bucket = buckets.get(key)
        if (bucket === undefined) {
          bucket = {
            config: {
              ...plan.config,
              numGenerations: planned.numGenerations,
              maxTurns: planned.maxTurns,
              sampling: Sampling.isEmpty(sampling) ? undefined : sampling
            },
            rows: [],
            trajectories: 0
          }
          buckets.set(key, bucket)
        }
        bucket.rows.push(Either.right(planned.prepared))
        bucket.trajectories += planned.numGenerations
      }
      // One worker per trajectory: all of them were admitted at once.
      const streams = [...buckets.values()].map(({ config, rows, trajectories }) =>
        Rollout.streamPrepared({ ...config, concurrency: trajectories }, rows)
      )
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
          const uuid = uuids.get(item.row.index) ?? ""
          return Effect.succeed(item.records.map((record) => ({ ...CompletionsLog.toLine(record), uuid })))
        }),
        // Shutdown fails `cancel`: the run is interrupted (its envs are closed) and the stream fails.
        Stream.interruptWhenDeferred(cancel),
        Stream.catchAll((error) =>
          error === undefined
            ? Stream.fail(
              shuttingDown(
                `the server is shutting down: ${reservation.remaining} trajectories of this request were cut ` +
                  `after the grace period`
              )
            )
            : Stream.fail(error)
        ),
        Stream.provideService(Inference, inference)
      )
    }

    /** Counts the request as in flight until its response has been written. */
    const tracked = <A, E, R>(handler: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | Scope.Scope> =>
      Effect.zipRight(
        Effect.acquireRelease(
          Effect.sync(() => void state.requestsInFlight++),
          () => Effect.sync(() => void state.requestsInFlight--)
        ),
        handler
      )

    const rollouts = tracked(Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (state.draining) return yield* shuttingDown()
      const batch = yield* Effect.flatMap(readBody(request, maxBody), decodeBatch)
      const plan = yield* planBatch(batch)
      if (plan.trajectories === 0) return json([])
      const reservation = yield* admit(plan.trajectories)
      const results = run(plan, reservation)
      const headers = { [Api.TRAJECTORIES_HEADER]: String(plan.trajectories) }
      if ((request.headers.accept ?? "").includes(Api.NDJSON)) {
        const lines = results.pipe(
          Stream.map((group) => encoder.encode(group.map((line) => Json.stringify(line) + "\n").join(""))),
          Stream.catchAll((error) =>
            Stream.succeed(encoder.encode(Json.stringify({ server_error: error.toJson() }) + "\n"))
          )
        )
        return HttpServerResponse.stream(lines, {
          contentType: Api.NDJSON,
          headers: { ...headers, "cache-control": "no-store" }
        })
      }
      const groups = yield* Stream.runCollect(results)
      const all = Chunk.toReadonlyArray(groups).flat().sort((a, b) => a.row - b.row || a.generation - b.generation)
      return json(all, 200, headers)
    }))

    const model = options.info?.model ?? inference.name
    const infer = tracked(Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (state.draining) return yield* shuttingDown()
      const body = yield* Effect.flatMap(readBody(request, maxBody), decodeInfer)
      const plan = yield* planInfer(body)
      if (plan.trajectories === 0) return json([])
      const reservation = yield* admit(plan.trajectories)
      const groups = yield* Stream.runCollect(run(plan, reservation))
      const byRow = new Map<number, Api.RolloutResult>()
      for (const group of groups) for (const line of group) byRow.set(line.row, line)
      const created = Math.floor(Date.now() / 1000)
      return json(plan.rows.map((planned) => toInferOutput(byRow.get(planned.row.index)!, model, created)))
    }))

    const named = (map: ReadonlyMap<string, { readonly name: string; readonly description: string }>) =>
      [...map.values()].map((d) => ({ name: d.name, description: d.description }))
    const info = Effect.sync(() => {
      const body: Api.Info = {
        name: "effect-gym",
        version: options.info?.version ?? "0.1.0",
        inference: {
          mode: options.info?.mode ?? "custom",
          model: options.info?.model ?? null,
          backend: inference.name
        },
        scheduler: definition.name,
        default_env: options.defaultEnv ?? null,
        envs: named(options.registry.envs),
        schedulers: named(options.registry.schedulers),
        reward_functions: named(options.registry.rewards),
        reward_columns: options.columns.names.map((name, i) => ({ name, weight: options.columns.weights[i] })),
        defaults: {
          num_generations: numGenerations,
          max_turns: maxTurns,
          seed,
          sampling: Object.fromEntries(Object.entries(serverSampling).filter(([, v]) => v !== undefined))
        },
        limits: {
          max_trajectories_in_flight: maxInFlight,
          max_request_trajectories: maxRequest,
          max_body_bytes: maxBody,
          shutdown_grace_seconds: Duration.toSeconds(grace)
        },
        auth: options.apiKey !== undefined,
        in_flight: { trajectories: state.trajectoriesInFlight, requests: state.requestsInFlight }
      }
      return json(body)
    })
    const health = Effect.sync(() =>
      json(
        { status: state.draining ? "draining" : "ok", trajectories_in_flight: state.trajectoriesInFlight },
        state.draining ? 503 : 200
      )
    )

    const router = HttpRouter.empty.pipe(
      HttpRouter.get("/health", health),
      HttpRouter.get("/info", info),
      HttpRouter.post("/v1/rollouts", rollouts),
      // The router ignores a trailing slash: this is also POST /infer.
      HttpRouter.post("/infer/", infer)
    )
    const routes = yield* HttpRouter.toHttpApp(router)

    const authorized = authorizer(options.apiKey)
    const app = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (!authorized(request.headers.authorization)) {
        return yield* new ApiError({
          reason: "Unauthorized",
          detail: "missing or wrong bearer token (Authorization: Bearer <key>)"
        })
      }
      return yield* routes
    }).pipe(
      Effect.catchTags({
        ApiError: (error) => Effect.succeed(errorResponse(error)),
        RouteNotFound: (error) =>
          Effect.succeed(
            errorResponse(
              new ApiError({
                reason: "NotFound",
                detail: `no route ${error.request.method} ${error.request.url}: GET /health, GET /info, ` +
                  `POST /v1/rollouts, POST /infer/`
              })
            )
          )
      }),
      Effect.catchAllDefect((defect) =>
        Effect.as(
          Effect.logError("rollout server: unexpected error", Cause.die(defect)),
          errorResponse(new ApiError({ reason: "Internal", detail: "unexpected error (see the server's log)" }))
        )
      )
    )

    // Polls with a deadline rather than `Effect.timeout`: shutdown runs in finalizers, which cannot
    // be interrupted, so a timeout could not stop the wait.
    const waitUntil = (done: () => boolean, within: Duration.Duration): Effect.Effect<boolean> => {
      const deadline = Date.now() + Duration.toMillis(within)
      const loop: Effect.Effect<boolean> = Effect.suspend(() =>
        done() ? Effect.succeed(true) : Date.now() >= deadline ? Effect.succeed(false) : Effect.zipRight(
          Effect.sleep("10 millis"),
          loop
        )
      )
      return loop
    }

    const shutdown = yield* Effect.cached(Effect.gen(function*() {
      state.draining = true
      const finished = yield* waitUntil(() => state.trajectoriesInFlight === 0, grace)
      if (!finished) yield* Deferred.fail(cancel, undefined)
      yield* waitUntil(() => state.requestsInFlight === 0, closeTimeout)
    }))
    yield* Effect.addFinalizer(() => shutdown)

    return { app, stats: state, shutdown } satisfies RolloutServer
  })

/** Constant-time check of `Authorization: Bearer <key>` (digests, so lengths never leak). */
const authorizer = (apiKey: Redacted.Redacted<string> | undefined) => {
  if (apiKey === undefined) return (_header: string | undefined) => true
  const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()
  const expected = digest(Redacted.value(apiKey))
  return (header: string | undefined): boolean => {
    const match = header === undefined ? null : /^Bearer +(\S+) *$/i.exec(header)
    // A missing header is compared too, so every request costs the same.
    return timingSafeEqual(digest(match?.[1] ?? ""), expected) && match !== null
  }
}

/** A result in the reference's `RolloutOutput` shape. */
const toInferOutput = (line: Api.RolloutResult, model: string, created: number): Api.InferOutput => {
  const turns = line.finish_reasons.length
  const complete = <A>(lists: ReadonlyArray<ReadonlyArray<A> | null> | undefined): Array<ReadonlyArray<A>> =>
    lists !== undefined && lists.length === turns && lists.every((l) => l !== null)
      ? lists as Array<ReadonlyArray<A>>
      : []
  const lastIds = turns === 0 ? null : line.response_token_ids?.[turns - 1] ?? null
  let reply = ""
  for (let i = line.messages.length - 1; i >= 0; i--) {
    if (line.messages[i].role === "assistant") {
      reply = line.messages[i].content
      break
    }
  }
  const finish = turns === 0 ? undefined : line.finish_reasons[turns - 1]
  const completionTokens = lastIds?.length ?? 0
  return {
    response: {
      id: `chatcmpl-${line.uuid}`,
      object: "chat.completion",
      created,
      model,
      choices: [{
        index: 0,
        message: { role: "assistant", content: reply },
        finish_reason: finish === "stop" || finish === "length" ? finish : null,
        logprobs: null,
        token_ids: lastIds
      }],
      usage: { prompt_tokens: 0, completion_tokens: completionTokens, total_tokens: completionTokens }
    },
    messages: line.messages,
    response_token_ids: complete(line.response_token_ids),
    response_loss_mask: complete(line.response_loss_mask),
    rollout_infos: { ...line.rollout_infos, end_reason: line.end_reason, error: line.error },
    rollout_logprobs: complete(line.rollout_logprobs),
    uuid: line.uuid
  }
}

// ---------------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------------

/**
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1 (this machine only). */
  readonly host?: string | undefined
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
  Rollout.RunConfigError | Registry.NotRegistered | Scheduler.SchedulerError | HttpServerError.ServeError,
  Inference | Scope.Scope
> =>
  Effect.gen(function*() {
    const server = yield* make(options)
    const host = options.host ?? "127.0.0.1"
    const node = Http.createServer()
    const http = yield* NodeHttpServer.make(() => node, { host, port: options.port })
    yield* http.serve(server.app)
    // Added last, so it runs first when the scope closes: stop accepting, drain, then disconnect.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Effect.sync(() => {
          node.close()
          node.closeIdleConnections()
        })
        yield* server.shutdown
        yield* Effect.sync(() => node.closeAllConnections())
      })
    )
    const port = http.address._tag === "TcpAddress" ? http.address.port : options.port
    const shown = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shown}:${port}`, port, stats: server.stats, shutdown: server.shutdown }
  })
