/**
 * The coordinator: sends every row's group to the cluster as a durable message (at most
 * `concurrency` in flight) and hands each reply to its caller as it arrives. It hosts no shard.
 * Sent again with the same run id (after a crash), a group's message is the stored one: a stored
 * reply comes back at once, a group still running is waited for, nothing is run twice.
 *
 * @since 0.3.0
 */
import type { Context } from "effect"
import { Cause, Deferred, Effect, Layer, Option, type Result, Schedule, Scope, Stream } from "effect"
import { EntityAddress, EntityId, MessageStorage, RunnerStorage } from "effect/cluster"
import { type SqlConnection, SqlError } from "effect/sql"
import * as os from "node:os"
import type { RowError } from "./internal/engine.js"
import * as Runs from "./internal/runs.js"
import * as Cluster from "./Cluster.js"
import type { GroupConfig, GroupReply } from "./Protocol.js"
import { entityId, RolloutEntity } from "./Protocol.js"

/**
 * A runner joining or leaving (or found unhealthy by the others' pings).
 *
 * @since 0.3.0
 * @category models
 */
export interface RunnerEvent {
  readonly event: "joined" | "left" | "unhealthy" | "healthy"
  readonly runner: string
  /** Milliseconds since the coordinator started. */
  readonly atMs: number
}

/**
 * A coordinator's connection to the cluster, made before anything of the run is written: the
 * database answered, the run id is this coordinator's (see {@link open}).
 *
 * @since 0.3.0
 * @category models
 */
export interface Session {
  readonly url: string
  readonly runId: string
  readonly context: Context.Context<Layer.Success<ReturnType<typeof Cluster.client>>>
  /** Records the run id as used (once the run's log is about to be written). */
  readonly register: Effect.Effect<void, Cluster.ClusterStartError>
  /**
   * Asks the database through the connection that holds the run's lock (not the pool, which may be
   * busy with the run's messages). Fails when it does not answer in 5 s; when that connection has
   * died (a database restart ended the session, and the lock with it) the lock is taken again on a
   * new one, or the run is found taken by another coordinator (`RunTaken`).
   */
  readonly probe: Effect.Effect<void, Cluster.RunTaken | { readonly message: string }>
}

/**
 * The database going away and coming back during a run.
 *
 * @since 0.3.0
 * @category models
 */
export interface DatabaseEvent {
  readonly event: "down" | "up"
  /** Milliseconds since the coordinator started. */
  readonly atMs: number
  /** Down: why (the driver's message); up: after how many milliseconds down. */
  readonly detail: string
}



/**
 * Connects to the cluster at `url` for the current scope and takes the run id: fails with a
 * `ClusterStartError` when the database cannot be used (within `Cluster.PROBE_TIMEOUT`), when
 * another coordinator is running `runId`, when a new run (not `resuming`) names a used run id, or
 * when a resumed run's options are not those the run id was started with.
 *
 * @since 0.3.0
 * @category constructors
 */
export const open = (
  url: string,
  runId: string,
  options: {
    readonly resuming: boolean
    /** The run's options (JSON), recorded with the run id; a resumed run's must be the same. */
    readonly identity: Readonly<Record<string, unknown>>
    /** How the options recorded with the run id differ from this run's (`undefined`: the same). */
    readonly difference: (recorded: Readonly<Record<string, unknown>>) => string | undefined
  }
): Effect.Effect<Session, Cluster.ClusterStartError, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const context = yield* Layer.build(Cluster.client(url))
    const claimed = yield* Effect.provide(
      Runs.claim(runId, {
        resuming: options.resuming,
        coordinator: `${os.hostname()} pid ${process.pid}`,
        identity: options.identity,
        difference: options.difference
      }),
      context
    )
    let holder: SqlConnection.Connection | undefined = claimed.connection
    const answer = (connection: SqlConnection.Connection) =>
      Effect.timeoutOrElse(connection.executeValues("SELECT 1", []), {
        duration: "5 seconds",
        orElse: () => Effect.fail({ message: "no answer in 5 s" })
      })
    // A lock found held may still be this coordinator's old session, until the server notices that
    // its connection is gone: taken only when it stays held for 15 s.
    let heldSince: number | undefined
    const relock = Effect.flatMap(Scope.provide(Effect.provide(Runs.lock(runId), context), scope), (connection) => {
      if (connection !== undefined) {
        heldSince = undefined
        return Effect.sync(() => void (holder = connection))
      }
      heldSince ??= Date.now()
      return Date.now() - heldSince >= 15_000
        ? Effect.fail(new Cluster.RunTaken({ runId }))
        : Effect.fail({ message: "the run's lock is held by another session (this coordinator's old one?)" })
    })
    const probe = Effect.suspend(() => {
      const connection = holder
      if (connection === undefined) return relock
      return Effect.catchIf(
        answer(connection),
        // the session is gone (a timeout is not: a slow database keeps its sessions)
        (error) => SqlError.isSqlError(error),
        (error) => {
          holder = undefined
          return Effect.andThen(Effect.ignore(relock), Effect.fail({ message: Cluster.rootMessage(Cause.fail(error)) }))
        }
      )
    }).pipe(
      Effect.catchIf(
        (error): error is Cluster.ClusterStartError => error instanceof Cluster.ClusterStartError,
        (error) => Effect.fail({ message: error.detail })
      ),
      Effect.asVoid
    )
    return { url, runId, context, register: claimed.register, probe }
  })

/**
 * @since 0.3.0
 * @category models
 */
export interface Options<E, R> {
  readonly session: Session
  readonly runId: string
  readonly file: string
  /** The dataset's rows, each with its line's text; bad lines as errors. */
  readonly rows: Stream.Stream<Result.Result<{ readonly row: { readonly index: number }; readonly text: string }, RowError>, E, R>
  readonly config: GroupConfig
  readonly digest: string
  /** Groups in flight at most. */
  readonly concurrency: number
  /** When it completes, no new group is sent and the replies are no longer waited for. */
  readonly until?: Effect.Effect<unknown> | undefined
  readonly onReply: (row: number, reply: GroupReply) => Effect.Effect<void, E>
  readonly onRowError: (error: RowError) => Effect.Effect<void, E>
  readonly onRunner: (event: RunnerEvent) => Effect.Effect<void>
  /** Called when no healthy runner is registered (at start, or after the last one left). */
  readonly onNoRunner: Effect.Effect<void>
  /** Called when the database stops answering, and when it answers again. */
  readonly onDatabase: (event: DatabaseEvent) => Effect.Effect<void>
}

const isTransient = (error: { readonly _tag: string }) =>
  error._tag === "PersistenceError" || error._tag === "MailboxFull" || error._tag === "RunnerUnavailable"

/** A message the database refuses to store (permissions, read-only): not tried again. */
const isRefusedWrite = (error: { readonly _tag: string }) =>
  error._tag === "PersistenceError" && Cluster.isRefusedWrite(Cluster.rootMessage(Cause.fail(error)))

/**
 * Watches the database (`Session.probe` every second): reports it going and coming back; fails
 * with `DatabaseDown` once it has been down for `databaseWait()` seconds, with `RunTaken` when the
 * run's lock (lost with its session) is another coordinator's when it comes back. Never succeeds.
 */
const watchDatabase = (
  session: Session,
  started: number,
  onDatabase: (event: DatabaseEvent) => Effect.Effect<void>
): Effect.Effect<never, Cluster.DatabaseDown | Cluster.RunTaken> =>
  Effect.gen(function*() {
    const wait = Cluster.databaseWait()
    let downSince: number | undefined
    let why = ""
    const atMs = () => Math.round(performance.now() - started)
    const check = Effect.matchEffect(session.probe, {
      onFailure: (error) =>
        Effect.gen(function*() {
          if (error instanceof Cluster.RunTaken) return yield* error
          if (downSince === undefined) {
            downSince = performance.now()
            why = Cluster.scrub(session.url, error.message)
            yield* onDatabase({ event: "down", atMs: atMs(), detail: why })
          }
          if (performance.now() - downSince >= wait * 1000) {
            return yield* new Cluster.DatabaseDown({ url: Cluster.redact(session.url), seconds: wait, detail: why })
          }
        }),
      onSuccess: () =>
        Effect.gen(function*() {
          if (downSince === undefined) return
          const downMs = Math.round(performance.now() - downSince)
          downSince = undefined
          yield* onDatabase({ event: "up", atMs: atMs(), detail: `after ${(downMs / 1000).toFixed(1)} s` })
        })
    })
    return yield* Effect.forever(Effect.andThen(check, Effect.sleep("1 second")))
  })

/**
 * Runs the groups through the session's cluster. Fails with the refusal of a runner
 * (`PluginMismatch`, `ConfigRefused`, `InferenceMismatch`).
 *
 * @since 0.3.0
 * @category running
 */
export const run = <E, R>(options: Options<E, R>) =>
  Effect.gen(function*() {
    const started = performance.now()
    const makeClient = yield* RolloutEntity.client
    const storage = yield* RunnerStorage.RunnerStorage
    const config = JSON.stringify(options.config)

    // Runners joining and leaving, read from the cluster's runner table.
    const known = new Map<string, boolean>()
    let waiting = false
    /** Done when a runner leaves or is found unhealthy (then made anew). */
    let departure = Deferred.makeUnsafe<void>()
    const watch = Effect.flatMap(Effect.orElseSucceed(storage.getRunners, () => undefined), (runners) => {
      if (runners === undefined) return Effect.void
      const now = new Map(runners.map(([runner, healthy]) => [`${runner.address.host}:${runner.address.port}`, healthy]))
      const events: Array<RunnerEvent> = []
      const atMs = Math.round(performance.now() - started)
      for (const [runner, healthy] of now) {
        const before = known.get(runner)
        if (before === undefined) events.push({ event: "joined", runner, atMs })
        if (before !== undefined && before !== healthy) events.push({ event: healthy ? "healthy" : "unhealthy", runner, atMs })
        if (before === undefined && !healthy) events.push({ event: "unhealthy", runner, atMs })
      }
      for (const runner of known.keys()) if (!now.has(runner)) events.push({ event: "left", runner, atMs })
      known.clear()
      for (const [runner, healthy] of now) known.set(runner, healthy)
      const none = ![...now.values()].some((healthy) => healthy)
      const waits = none && !waiting
      waiting = none
      if (events.some((e) => e.event === "left" || e.event === "unhealthy")) {
        Deferred.doneUnsafe(departure, Effect.void)
        departure = Deferred.makeUnsafe<void>()
      }
      return Effect.andThen(
        Effect.forEach(events, options.onRunner, { discard: true }),
        waits ? options.onNoRunner : Effect.void
      )
    })
    yield* watch
    yield* Effect.forkScoped(Effect.repeat(watch, Schedule.spaced("1 second")))

    // A refusal (other plugins, a config a runner cannot use) is stored as the group's reply like
    // any other: it is forgotten (the group's message and reply cleared) so that the group can be
    // sent again once the runners are fixed. A refusal found stored (an earlier try's, answered
    // after its coordinator stopped) is forgotten and the group sent once more.
    const messages = yield* MessageStorage.MessageStorage
    const forget = (row: number) =>
      Effect.flatMap(RolloutEntity.getShardId(EntityId.make(entityId(options.runId, row))), (shardId) =>
        messages.clearAddress(EntityAddress.make({
          shardId,
          entityType: RolloutEntity.type,
          entityId: EntityId.make(entityId(options.runId, row))
        }))).pipe(Effect.retry(Schedule.max([Schedule.exponential("200 millis"), Schedule.recurs(5)])), Effect.ignore)
    const isRefusal = (error: { readonly _tag: string }) =>
      error._tag === "PluginMismatch" || error._tag === "ConfigRefused" || error._tag === "InferenceMismatch"
    const sendOrForget = (row: number, line: string) =>
      Effect.catchIf(sendOnce(row, line), isRefusal, () =>
        Effect.andThen(
          forget(row),
          Effect.tapError(sendOnce(row, line), (error) => (isRefusal(error) ? forget(row) : Effect.void))
        ))
    // A group's first send waits for its reply on the connection to the runner that has it: a
    // runner frozen with its connection open (stopped, swapping) never answers, and the connection
    // does not fail. When a runner leaves or is found unhealthy, the groups waiting are sent again
    // (once the shards have moved: the cluster reads the assignments every second): the stored
    // message is found, and its reply read from the storage, from whichever runner runs it now.
    const send = (row: number, line: string): ReturnType<typeof sendOrForget> =>
      Effect.suspend(() => {
        const gone = departure
        return Effect.raceFirst(
          Effect.map(sendOrForget(row, line), Option.some),
          Effect.as(Deferred.await(gone), Option.none())
        ).pipe(
          Effect.flatMap((reply) =>
            reply._tag === "Some" ? Effect.succeed(reply.value) : Effect.andThen(Effect.sleep("2 seconds"), send(row, line))
          )
        )
      })
    const sendOnce = (row: number, line: string) =>
      makeClient(entityId(options.runId, row)).RunGroup({
        runId: options.runId,
        file: options.file,
        row,
        line,
        config,
        digest: options.digest
      }).pipe(
        // tried again while the database or a runner is away (the database watch bounds the wait);
        // a database that answers but refuses the write stops the run
        Effect.retry({
          while: (error) => isTransient(error) && !isRefusedWrite(error),
          schedule: Schedule.min([Schedule.exponential("200 millis"), Schedule.spaced("2 seconds")])
        }),
        Effect.catchIf(isRefusedWrite, (error) =>
          Effect.fail(
            new Cluster.StorageRefused({
              url: Cluster.redact(options.session.url),
              detail: Cluster.scrub(options.session.url, Cluster.rootMessage(Cause.fail(error)))
            })
          ))
      )

    const groups = options.rows.pipe(
      Stream.mapEffect(
        (item) =>
          item._tag === "Failure"
            ? options.onRowError(item.failure)
            : Effect.flatMap(send(item.success.row.index, item.success.text), (reply) => options.onReply(item.success.row.index, reply)),
        { concurrency: options.concurrency, unordered: true }
      ),
      Stream.runDrain
    )
    const watched = Effect.raceFirst(groups, watchDatabase(options.session, started, options.onDatabase))
    return yield* options.until === undefined ? watched : Effect.raceFirst(watched, Effect.asVoid(options.until))
  }).pipe(Effect.scoped, Effect.provide(options.session.context))
