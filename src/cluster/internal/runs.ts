/**
 * The cluster's runs, by id, in the cluster's database (`effect_gym_runs`): a run id names one run
 * only (the stored messages are keyed by it, so a second run under the same id would be answered
 * with the first one's replies), and one coordinator at a time sends its groups (PostgreSQL's
 * advisory lock on the run id, held by one connection of the coordinator: it goes when the
 * coordinator or its connection dies, nothing to expire by hand).
 */
import { SqlClient, type SqlConnection } from "effect/sql"
import { Effect, type Scope } from "effect"
import { ClusterStartError, setupRetry } from "../Cluster.js"
import { waitAtMost } from "../../internal/duration.js"

/** A run id that was used (its start, and who coordinated it last). */
export interface Known {
  readonly startedAt: string
  readonly coordinator: string
}

const lockKey = (runId: string) => `effect-gym run ${runId}`

const failure = (option: string, detail: string) => new ClusterStartError({ option, detail })

const sqlError = (what: string) => (error: { readonly message: string; readonly cause?: unknown }) =>
  failure(
    "--cluster",
    `${what}: ${error.cause instanceof Error ? error.cause.message : error.message}`
  )

/** The table, made at first use (runners and coordinators started together race: tried again). */
const setup = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS effect_gym_runs (
    run_id VARCHAR(100) PRIMARY KEY,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    coordinator TEXT NOT NULL
  )`.pipe(
    // the run's options (a table made by an older version has no such column: added; asked first,
    // since ALTER TABLE needs the table's owner, which a coordinator's user need not be)
    Effect.andThen(sql`
      SELECT 1 FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name = 'effect_gym_runs' AND column_name = 'identity'
    `),
    Effect.flatMap((rows) => rows.length > 0 ? Effect.void : sql`ALTER TABLE effect_gym_runs ADD COLUMN IF NOT EXISTS identity TEXT`),
    Effect.retry(setupRetry),
    Effect.mapError(sqlError("cannot set up the table of runs"))
  ))

/**
 * Takes the run's lock for the current scope: the connection that holds it, or none when another
 * coordinator holds it. The lock lives in one session: a connection of its own, held for the scope,
 * unlocked before it goes back to the pool. A database restart ends the session, and the lock with
 * it: take it again then.
 */
export const lock = (
  runId: string
): Effect.Effect<SqlConnection.Connection | undefined, ClusterStartError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const connection = yield* Effect.mapError(sql.reserve, sqlError("cannot reserve a connection"))
    const rows = yield* Effect.mapError(
      connection.executeValues("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", [lockKey(runId)]),
      sqlError("cannot lock the run id")
    )
    if (rows[0]?.[0] !== true) return undefined
    // (an unlock on a database that stopped answering held the stop: see waitAtMost)
    yield* Effect.addFinalizer(() =>
      waitAtMost(connection.executeValues("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [lockKey(runId)]), "2 seconds")
    )
    return connection
  })

/**
 * Takes the run id for this coordinator, for the current scope: fails when another coordinator
 * holds it (`--run-id`, with who), when a new run (not `resuming`) names a run id already used, or
 * when a resumed run's options differ from those recorded when the run started (`difference`
 * says how: the stored replies were computed with those, and would be handed back as this run's).
 * Gives `register`, which records the run and its options (call it once the run's log is about to
 * be written).
 */
export const claim = (
  runId: string,
  options: {
    readonly resuming: boolean
    readonly coordinator: string
    /** The run's options (JSON), recorded with the run id. */
    readonly identity: Readonly<Record<string, unknown>>
    /** How the recorded options differ from this run's (`undefined`: the same run). */
    readonly difference: (recorded: Readonly<Record<string, unknown>>) => string | undefined
  }
): Effect.Effect<
  { readonly register: Effect.Effect<void, ClusterStartError>; readonly connection: SqlConnection.Connection },
  ClusterStartError,
  SqlClient.SqlClient | Scope.Scope
> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* setup
    const known = sql<{ started_at: Date; coordinator: string; identity: string | null }>`
      SELECT started_at, coordinator, identity FROM effect_gym_runs WHERE run_id = ${runId}
    `.pipe(
      Effect.map((rows): (Known & { readonly identity: string | null }) | undefined =>
        rows[0] === undefined ? undefined : {
          startedAt: new Date(rows[0].started_at).toISOString(),
          coordinator: rows[0].coordinator,
          identity: rows[0].identity
        }
      ),
      Effect.mapError(sqlError("cannot read the table of runs"))
    )
    const connection = yield* lock(runId)
    if (connection === undefined) {
      const holder = yield* known
      return yield* failure(
        "--run-id",
        `run ${runId} is being coordinated by another process` +
          (holder === undefined ? "" : ` (${holder.coordinator}, started ${holder.startedAt})`) +
          `: one coordinator per run; wait for it to end, or stop it and --resume`
      )
    }
    const before = yield* known
    if (before !== undefined && !options.resuming) {
      return yield* failure(
        "--run-id",
        `run id ${runId} was already used (a run started ${before.startedAt} by ${before.coordinator}): ` +
          `--resume continues that run with its log; a new run needs another --run-id`
      )
    }
    // Resumed: the options must be the run's (a run recorded by an older version has none to compare).
    if (before !== undefined && before.identity !== null) {
      let recorded: Readonly<Record<string, unknown>> = {}
      try {
        recorded = JSON.parse(before.identity) as Readonly<Record<string, unknown>>
      } catch {
        // unreadable: compared as empty, so every option differs
      }
      const difference = options.difference(recorded)
      if (difference !== undefined) {
        return yield* failure(
          "--resume",
          `run ${runId} was started with other options (its groups' stored replies were computed with those): ` +
            `${difference}; resume it with its own options, or start a new run (another --run-id)`
        )
      }
    }
    const identity = JSON.stringify(options.identity)
    const register = sql`
      INSERT INTO effect_gym_runs (run_id, coordinator, identity) VALUES (${runId}, ${options.coordinator}, ${identity})
      ON CONFLICT (run_id) DO UPDATE SET coordinator = EXCLUDED.coordinator,
        identity = COALESCE(effect_gym_runs.identity, EXCLUDED.identity)
    `.pipe(Effect.asVoid, Effect.mapError(sqlError("cannot record the run")))
    return { register, connection }
  })
