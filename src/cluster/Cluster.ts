/**
 * The cluster's plumbing, all from `effect/cluster`: runners talk over sockets
 * (`NodeClusterSocket`), messages and runner registrations live in PostgreSQL
 * (`SqlMessageStorage`, `SqlRunnerStorage` on `@effect/sql-pg`), shards are leased in the same
 * database and move to live runners when one stops refreshing its leases, and a runner that does
 * not answer pings is marked unhealthy (`RunnerHealth.layerPing`).
 *
 * @since 0.3.0
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Cause, Context, Duration, Effect, Exit, Layer, Option, Redacted, Schedule, Schema, Scope } from "effect"
import {
  MessageStorage,
  RunnerAddress,
  RunnerHealth,
  Runners,
  RunnerStorage,
  type Sharding,
  ShardingConfig,
  type ShardId,
  SocketRunner,
  SqlMessageStorage,
  SqlRunnerStorage
} from "effect/cluster"
import { RpcSerialization } from "effect/rpc"
import type { SqlClient } from "effect/sql"
import * as Redact from "../internal/redact.js"

/**
 * The cluster cannot be used: a connection string that is not a PostgreSQL URL, a database that
 * cannot be reached, a runner port that is taken.
 *
 * @since 0.3.0
 * @category errors
 */
export class ClusterStartError extends Schema.TaggedError<ClusterStartError>("effect-gym/ClusterStartError")(
  "ClusterStartError",
  { option: Schema.String, detail: Schema.String }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * The cluster's database stopped answering during a run, for longer than the coordinator waits
 * (`EFFECT_GYM_CLUSTER_DB_WAIT` seconds, default 60): the run stops, what finished is written,
 * `--resume` completes it once the database is back.
 *
 * @since 0.3.0
 * @category errors
 */
export class DatabaseDown extends Schema.TaggedError<DatabaseDown>("effect-gym/DatabaseDown")("DatabaseDown", {
  url: Schema.String,
  seconds: Schema.Number,
  detail: Schema.String
}) {
  override get message(): string {
    return `the cluster's database ${this.url} has not answered for ${this.seconds} s (${this.detail}); ` +
      `once it is back, --resume completes the run (EFFECT_GYM_CLUSTER_DB_WAIT sets the wait)`
  }
}

/**
 * The cluster's database answers but refuses to store the run's messages (the user of `--cluster`
 * may not write the cluster's tables, a read-only database): waiting does not help, the run stops.
 *
 * @since 0.3.0
 * @category errors
 */
export class StorageRefused extends Schema.TaggedError<StorageRefused>("effect-gym/StorageRefused")("StorageRefused", {
  url: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `the cluster's database ${this.url} refuses to store the run's messages (${this.detail}): the user of --cluster ` +
      `must be able to read and write the cluster_* and effect_gym_* tables of a database that is not read-only; ` +
      `--resume continues the run once it can`
  }
}

/** A database error that waiting does not mend (permissions, a read-only database). */
export const isRefusedWrite = (message: string): boolean =>
  /permission denied|read-only transaction|must be owner of|read only/i.test(message)

/**
 * The run's coordinator lost its run id to another coordinator (while the database was down).
 *
 * @since 0.3.0
 * @category errors
 */
export class RunTaken extends Schema.TaggedError<RunTaken>("effect-gym/RunTaken")("RunTaken", {
  runId: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId} was taken by another coordinator while the database was down: this one stops`
  }
}

/**
 * The innermost message of a failure (a driver's error is wrapped in a `SqlError`, in a
 * `PersistenceError`...), one line.
 *
 * @since 0.3.0
 */
export const rootMessage = (cause: Cause.Cause<unknown>): string => {
  let error: unknown = Cause.squash(cause)
  for (let i = 0; i < 10; i++) {
    const inner = (error as { cause?: unknown } | null)?.cause
    if (inner === undefined || inner === null || inner === error) break
    error = inner
  }
  const text = error instanceof Error ? error.message : String(error)
  return text.split("\n")[0]
}

/**
 * The connection string as it may be shown: its password and query values (`?password=...`,
 * `?sslkey=...`) masked; the user, host, port and database kept (they say which cluster).
 *
 * @since 0.3.0
 */
export const redact = (url: string): string => Redact.url(url, { keepUser: true })

/**
 * A message with the connection string's secrets masked.
 *
 * @since 0.3.0
 */
export const scrub = (url: string, text: string): string => Redact.scrub(text, Redact.secretsOf(url, { keepUser: true }))

/**
 * Checks the shape of a `--cluster` connection string (`postgres://user@host:port/database`).
 *
 * @since 0.3.0
 * @category constructors
 */
export const parseUrl = (url: string): Effect.Effect<string, ClusterStartError> =>
  Effect.suspend(() => {
    let parsed: URL
    try {
      parsed = new URL(url)
    } catch {
      return Effect.fail(
        new ClusterStartError({
          option: "--cluster",
          detail: `${JSON.stringify(redact(url))} is not a connection string; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`
        })
      )
    }
    if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
      return Effect.fail(
        new ClusterStartError({
          option: "--cluster",
          detail: `${JSON.stringify(redact(url))}: the cluster keeps its state in PostgreSQL; expected a postgres:// URL, ` +
            `got ${parsed.protocol}//`
        })
      )
    }
    if (parsed.hostname === "") {
      return Effect.fail(new ClusterStartError({ option: "--cluster", detail: `${redact(url)}: no host` }))
    }
    return Effect.succeed(url)
  })

/**
 * Timings of the cluster, shorter than `effect/cluster`'s defaults so that a dead runner's groups
 * move within seconds: shard leases expire 10 s after their last refresh (every 3 s); runners are
 * pinged every 2 s; new shard assignments are read every second.
 *
 * The refresh interval is also effect/cluster 4's deadline for every shard-lock query: a runner
 * confirms its shard's lock before it stores each reply, over its one lock connection, one query
 * at a time (two per confirmation, one confirmation at a time per shard), gives the reply up when
 * the confirmation takes longer (the group runs again from scratch), and drops all its shards when
 * a periodic refresh does. The confirmations queue on that connection: on a loaded machine (2 cores,
 * load average 14 to 17; event-loop delay 30 ms at the median) they took 0.65 to 0.9 s at the
 * median and 2.2 to 2.9 s at most. With 2 s, the coordinator-killed test found rows run twice in 7
 * of 8 tries; with 3 s, in none of 4 at load 14 and 2 of 4 at load 17. (Effect caps the interval
 * at a third of the lease: 3.3 s.)
 *
 * @since 0.3.0
 * @category models
 */
export const shardingConfig: Partial<ShardingConfig.ShardingConfig["Service"]> = {
  shardsPerGroup: 60,
  shardLockRefreshInterval: Duration.seconds(3),
  shardLockExpiration: Duration.seconds(10),
  shardLockDisableAdvisory: true,
  runnerHealthCheckInterval: Duration.seconds(2),
  refreshAssignmentsInterval: Duration.seconds(1),
  entityMessagePollInterval: Duration.millis(500),
  entityReplyPollInterval: Duration.millis(200),
  entityMaxIdleTime: Duration.seconds(10),
  sendRetryInterval: Duration.millis(100),
  entityTerminationTimeout: Duration.seconds(5),
  entityMailboxCapacity: "unbounded"
}

/**
 * Where a runner listens, and the address it gives the others.
 *
 * @since 0.3.0
 * @category models
 */
export interface RunnerAddressOptions {
  readonly host: string
  readonly port: number
  readonly listenHost?: string | undefined
}

/** A failure's own message, then its innermost cause's (the driver's: `connect ECONNREFUSED ...`). */
const describe = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  const outer = failure instanceof Error ? failure.message : String(failure)
  const root = rootMessage(cause)
  return root === outer || outer.endsWith(`: ${root}`) ? outer : `${outer}: ${root}`
}

/**
 * How long the cluster's processes wait for a database that does not answer: a coordinator during
 * a run, a runner at start (`EFFECT_GYM_CLUSTER_DB_WAIT` seconds, default 60).
 *
 * @since 0.3.0
 */
export const databaseWait = (): number => secondsFromEnv("EFFECT_GYM_CLUSTER_DB_WAIT", 60)

/**
 * How long a stopping runner waits for a database that does not answer to hand its shards back
 * (`EFFECT_GYM_RUNNER_STOP_LIMIT` seconds, default 30). Past it the runner leaves without: the
 * hand-over waited for the database forever, and a runner stopped by SIGHUP (its terminal closed: no
 * one left to send a second signal) stayed behind, holding its port. A runner that leaves so is one
 * that died: the cluster takes its shards back once their leases run out.
 *
 * @since 0.3.0
 */
export const runnerStopLimit = (): number => secondsFromEnv("EFFECT_GYM_RUNNER_STOP_LIMIT", 30)

/** A number of seconds > 0 from the environment variable `name`, else `fallback`. */
const secondsFromEnv = (name: string, fallback: number): number => {
  const text = process.env[name]
  const value = text === undefined ? NaN : Number(text)
  return Number.isFinite(value) && value > 0 ? value : fallback
}

/** How long the first `SELECT 1` may take before the database is taken as unreachable. */
export const PROBE_TIMEOUT = Duration.seconds(15)

/**
 * The database connection. Building it runs `SELECT 1` (limited to {@link PROBE_TIMEOUT}): a wrong
 * URL, a database that does not exist or cannot be reached fails here, at start, with the URL's
 * secrets masked.
 *
 * @since 0.3.0
 * @category layers
 */
export const database = (
  url: string,
  options: {
    readonly maxConnections?: number | undefined
    /**
     * A database that does not answer yet (refused, timed out, starting up) is waited for, up to
     * `seconds`; `onWait` is called once, with why. Without it, the first failure is the error.
     */
    readonly wait?: { readonly seconds: number; readonly onWait: (why: string) => Effect.Effect<void> } | undefined
    /**
     * The database ends a session left idle inside a transaction this long (a runner's). A runner
     * frozen (SIGSTOP, a paused VM) between the statements of one of effect/cluster's storage
     * transactions would hold those message rows' locks for good. The new owner of its shards
     * resets their unprocessed messages with `SELECT ... FOR UPDATE` under a 3 s limit and ignores a
     * failure, and a message read less than 10 minutes ago is not read again: the run would wait.
     * A likely cause, read in effect/cluster's code and not reproduced, of Cluster.test's "runner
     * frozen" timing out with 62 and 68 of 80 lines, twice in about 8 full runs.
     */
    readonly idleInTransaction?: Duration.Duration | undefined
  } = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, ClusterStartError> =>
  Layer.unwrap(Effect.map(parseUrl(url), (url) => {
    const failed = (cause: Cause.Cause<unknown>) =>
      new ClusterStartError({
        option: "--cluster",
        detail: `cannot connect to ${redact(url)}: ${scrub(url, describe(cause))}`
      })
    // The pool connects at its first query: the probe is that query.
    const connect = Effect.tap(
      PgClient.make({
        url: Redacted.make(url),
        connectTimeout: PROBE_TIMEOUT,
        maxConnections: options.maxConnections ?? 8,
        applicationName: "effect-gym",
        ...(options.idleInTransaction === undefined
          ? {}
          : { startupParameters: { idle_in_transaction_session_timeout: `${Duration.toMillis(options.idleInTransaction)}` } }),
        // a stored group carries its dataset row: as large as PostgreSQL takes a value (1 GiB), not
        // the driver's 16 MiB
        maxMessageSize: 1024 * 1024 * 1024
      }),
      (client) =>
        client`SELECT 1`.pipe(
          Effect.timeoutOrElse({
            duration: PROBE_TIMEOUT,
            orElse: () => Effect.fail(new Error(`no answer to SELECT 1 in ${Duration.format(PROBE_TIMEOUT)}`))
          })
        )
    )
    const wait = options.wait
    if (wait === undefined) return PgClient.layerFrom(Effect.mapError(Effect.sandbox(connect), failed))
    // each try in a scope of its own, closed when it fails
    const attempt = Effect.flatMap(Effect.scope, (scope) =>
      Effect.flatMap(Scope.fork(scope), (child) =>
        connect.pipe(
          Scope.provide(child),
          Effect.sandbox,
          Effect.tapError((cause) => Scope.close(child, Exit.failCause(cause)))
        )))
    let said = false
    return PgClient.layerFrom(
      Effect.retry(attempt, {
        schedule: Schedule.spaced("1 second").pipe(Schedule.upTo({ duration: Duration.seconds(wait.seconds) })),
        while: (cause) => {
          if (!unreachable(rootMessage(cause))) return Effect.succeed(false)
          if (said) return Effect.succeed(true)
          said = true
          return Effect.as(wait.onWait(scrub(url, rootMessage(cause))), true)
        }
      }).pipe(Effect.mapError(failed))
    )
  }))

/** A database that may answer in a moment (down, restarting, starting up), not a wrong URL. */
const unreachable = (message: string): boolean =>
  /ECONNREFUSED|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ECONNRESET|timed out|starting up|shutting down|terminated/i.test(message)

/**
 * How the setup of a table (`CREATE TABLE IF NOT EXISTS`, the cluster's and ours) is tried again:
 * runners and coordinators started together race to make it.
 *
 * @since 0.3.0
 */
export const setupRetry = Schedule.max([Schedule.exponential("200 millis"), Schedule.recurs(6)])

/**
 * A layer whose failure is `f`'s error. (Effect 4's `Layer` has no `mapError`: the layer is built
 * inside the one made here, and its build's error mapped.)
 */
const mapLayerError = <A, E, R, E2>(layer: Layer.Layer<A, E, R>, f: (error: E) => E2): Layer.Layer<A, E2, R> =>
  Layer.effectContext(Effect.mapError(Layer.build(layer), f))

/**
 * Builds `layer`, again while its build fails (with any cause, a defect too: the storages' own
 * setup dies when it fails) and `schedule` goes on, each try in a scope of its own, closed when the
 * try fails; fails with the last try's cause. (Effect 3's `Layer.retry`; Effect 4's `Layer` has
 * none.)
 */
const buildRetrying = <A, E, R, X>(
  layer: Layer.Layer<A, E, R>,
  schedule: Schedule.Schedule<X, Cause.Cause<E>>
): Effect.Effect<Context.Context<A>, Cause.Cause<E>, R | Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) =>
    Effect.retry(
      Effect.flatMap(Scope.fork(scope), (child) =>
        Layer.buildWithScope(layer, child).pipe(
          Effect.sandbox,
          Effect.tapError((cause) => Scope.close(child, Exit.failCause(cause)))
        )),
      schedule
    ))

/**
 * How a claim release that failed is tried again: every second, for as long as the claim would
 * last without it (effect/cluster reads a claimed message again after 10 minutes).
 */
const CLAIM_RELEASE_RETRY = Schedule.spaced("1 second").pipe(Schedule.upTo({ duration: Duration.minutes(10) }))

/**
 * The message storage, its claim releases tried again until the database takes them.
 * effect/cluster's storage claims the messages a runner reads (`last_read`): a claimed message is
 * not read again for 10 minutes. A runner that gives a request up (its group ran while the database
 * was away: the reply is not stored, since the shard's lock could not be confirmed) releases the
 * claim with `resetRequests`, once, its failure ignored; with the database still away, the claim
 * stayed, no runner ran the group again for 10 minutes, and the coordinator waited for its reply
 * all that time (a database restart under a run: the run hung). The same for the claims released
 * when shards are taken (`resetShards`) and for the read loop's (`resetAddresses`). Here a release
 * that fails (or is cut short) is tried again in the background, in the storage's scope, until it
 * succeeds; the caller still gets the first outcome, as before. (A release is harmless when late or
 * repeated: a message being processed is skipped by the read loop when read again.)
 *
 * The read itself claims: on PostgreSQL one statement (`UPDATE ... SET last_read = NOW() ...
 * RETURNING`) marks the messages it returns, committed on its own. A read whose connection is cut
 * after that commit and before its rows arrive (a database restart, a network cut) fails, and its
 * messages were claimed all the same: no runner read them for 10 minutes, and the coordinator
 * waited that long for their replies (the "database down" test's resumed run, 1 of 28 runs under
 * load; reproduced with a proxy that cuts such a read, Cluster.test's "a runner's read of its
 * messages cut"). So the shards of a read that fails, in any way, have their claims released
 * (`resetShards`, as effect/cluster does for the shards a runner takes) before the next read, which
 * waits for that release: once the database answers again, the next read (every 0.5 s) gets them.
 */
const releasingClaims = (
  storage: MessageStorage.MessageStorage["Service"],
  scope: Scope.Scope
): MessageStorage.MessageStorage["Service"] => {
  const again = <A, E>(release: (items: ReadonlyArray<A>) => Effect.Effect<void, E>) => (items: Iterable<A>) => {
    // (a copy: the read loop empties its array once the call returns)
    const copy = Array.from(items)
    // (also when the caller stops waiting for it: Sharding gives the release of a shard's claims 2 s)
    return Effect.onExit(release(copy), (exit) =>
      Exit.isSuccess(exit)
        ? Effect.void
        : Effect.asVoid(Effect.forkIn(Effect.ignore(Effect.retry(release(copy), CLAIM_RELEASE_RETRY)), scope)))
  }
  // The shards of reads that failed: their claims may have been committed (see above), released
  // before the next read.
  let unread: Set<ShardId.ShardId> | undefined
  const releaseUnread = Effect.suspend(() => {
    const shards = unread
    if (shards === undefined) return Effect.void
    return Effect.tap(storage.resetShards(shards), () =>
      Effect.sync(() => {
        if (unread === shards) unread = undefined
      }))
  })
  return {
    ...storage,
    unprocessedMessages: (shardIds, options) =>
      Effect.suspend(() => {
        // (a copy: the read loop's set of shards changes as shards come and go)
        const shards = Array.from(shardIds)
        return Effect.andThen(releaseUnread, storage.unprocessedMessages(shards, options)).pipe(
          Effect.onExit((exit) =>
            Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => {
              unread ??= new Set()
              for (const shard of shards) unread.add(shard)
            })
          )
        )
      }),
    resetRequests: again(storage.resetRequests),
    resetAddresses: again(storage.resetAddresses),
    resetAddress: (address) => again(storage.resetAddresses)([address]),
    resetShards: again(storage.resetShards)
  }
}

/**
 * Both stores in the database (their tables are created at first start: `cluster_*`). Runners
 * started together on a fresh database race to create the tables: setting up is tried again.
 * (`SqlRunnerStorage` keeps its shard locking on one reserved connection; `@effect/sql-pg` runs the
 * statements of a connection one at a time itself.) The message storage's claim releases are tried
 * again while the database is away ({@link releasingClaims}).
 */
const storage: Layer.Layer<
  MessageStorage.MessageStorage | RunnerStorage.RunnerStorage,
  ClusterStartError,
  SqlClient.SqlClient | ShardingConfig.ShardingConfig
> = Layer.effectContext(
  buildRetrying(
    Layer.mergeAll(SqlMessageStorage.layer.pipe(Layer.provide(NodeCrypto.layerDigest)), SqlRunnerStorage.layer),
    setupRetry
  ).pipe(
    Effect.mapError((cause) =>
      new ClusterStartError({ option: "--cluster", detail: `cannot set up the cluster's tables: ${describe(cause)}` })
    ),
    Effect.flatMap((context) =>
      Effect.map(Effect.scope, (scope) =>
        Context.add(context, MessageStorage.MessageStorage, releasingClaims(Context.get(context, MessageStorage.MessageStorage), scope))
      )
    )
  )
)

/** How runners and coordinators encode their messages; a group's row has no size limit (frames are not capped). */
const serialization = RpcSerialization.layerSchemaBinary({ maxFrameSize: "unbounded" })

/**
 * A runner's sharding: it listens for the other runners and hosts entities' shards; the entities
 * (`Entity.toLayer`) are provided with it.
 *
 * @since 0.3.0
 * @category layers
 */
export const runner = (
  url: string,
  address: RunnerAddressOptions,
  wait?: { readonly seconds: number; readonly onWait: (why: string) => Effect.Effect<void> }
): Layer.Layer<
  Sharding.Sharding | Runners.Runners | MessageStorage.MessageStorage | RunnerStorage.RunnerStorage | SqlClient.SqlClient,
  ClusterStartError
> => {
  const listen = `${address.listenHost ?? address.host}:${address.port}`
  const sockets = SocketRunner.layer.pipe(
    Layer.provide([NodeClusterSocket.layerSocketServer, NodeClusterSocket.layerClientProtocol]),
    Layer.provide(RunnerHealth.layerPing.pipe(Layer.provide(Runners.layerRpc), Layer.provide(NodeClusterSocket.layerClientProtocol)))
  )
  return mapLayerError(sockets, (error) =>
    new ClusterStartError({ option: "--port", detail: `cannot listen on ${listen}: ${describe(Cause.fail(error))}` })).pipe(
      Layer.provideMerge(storage),
      Layer.provide(ShardingConfig.layer({
        ...shardingConfig,
        runnerAddress: Option.some(RunnerAddress.make(address.host, address.port)),
        runnerListenAddress: Option.some(RunnerAddress.make(address.listenHost ?? address.host, address.port))
      })),
      Layer.provide(serialization),
      Layer.provideMerge(database(url, { wait, idleInTransaction: Duration.seconds(10) }))
    )
}

/**
 * A client of the cluster (the coordinator): it sends messages and reads runners, hosts nothing.
 *
 * @since 0.3.0
 * @category layers
 */
export const client = (
  url: string
): Layer.Layer<
  | Sharding.Sharding
  | Runners.Runners
  | MessageStorage.MessageStorage
  | RunnerStorage.RunnerStorage
  | SqlClient.SqlClient,
  ClusterStartError
> =>
  SocketRunner.layerClientOnly.pipe(
    Layer.provide(NodeClusterSocket.layerClientProtocol),
    Layer.provideMerge(storage),
    Layer.provide(ShardingConfig.layer({ ...shardingConfig, runnerAddress: Option.none() })),
    Layer.provide(serialization),
    Layer.provideMerge(database(url, { maxConnections: 16 }))
  )

/** Re-exported for the commands: the registered runners, and whether each is healthy. */
export { RunnerStorage }
