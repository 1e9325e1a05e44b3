/**
 * How many times each group of a run was started (`effect_gym_starts`, in the cluster's
 * database). A group is delivered again when its runner dies before replying; a group that kills
 * every runner that takes it (an env that crashes the process, runs it out of memory) would go
 * round the runners for ever. Counted here, it is given up after `maxAttempts()` starts and
 * answered as a bad row instead. The groups that ran beside it on the runners it killed were
 * started as often: a group's last start is alone on its runner (`Runner.ts`), so only the group
 * that kills its runner by itself is given up. A start that ends on a live runner (done, or
 * interrupted as its shard moves) is taken back (`unstart`): only a runner's death counts.
 */
import { SqlClient } from "effect/sql"
import { Effect, Schedule, type Scope } from "effect"
import * as crypto from "node:crypto"
import { ClusterStartError, setupRetry } from "../Cluster.js"

/**
 * Starts of a group after which it is given up (`EFFECT_GYM_CLUSTER_MAX_ATTEMPTS`, default 3).
 */
export const maxAttempts = (): number => {
  const text = process.env.EFFECT_GYM_CLUSTER_MAX_ATTEMPTS
  const value = text === undefined ? NaN : Number(text)
  return Number.isInteger(value) && value > 0 ? value : 3
}

/**
 * The table, made at first use (runners started together race: tried again). One line a start,
 * named by the runner that made it: recording a start and taking it back can then both be tried
 * again when their answer is lost (a database restart, a cut connection), and neither counts twice.
 * (A counter did: a start whose increment was committed and its answer lost was counted again when
 * tried again, and a take-back that failed once was lost, so a healthy group could be given up
 * after a few outages.)
 */
export const setup = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS effect_gym_starts (
    run_id VARCHAR(100) NOT NULL,
    row_index INTEGER NOT NULL,
    start_id VARCHAR(36) NOT NULL,
    PRIMARY KEY (run_id, row_index, start_id)
  )`.pipe(
    Effect.retry(setupRetry),
    Effect.mapError((error) =>
      new ClusterStartError({ option: "--cluster", detail: `cannot set up the table of attempts: ${error.message}` })
    ),
    Effect.asVoid
  ))

/** How many times the group of `row` was started so far (0 when the database cannot say). */
export const count = (runId: string, row: number): Effect.Effect<number, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ attempts: number | string }>`
      SELECT COUNT(*) AS attempts FROM effect_gym_starts WHERE run_id = ${runId} AND row_index = ${row}
    `).pipe(
      Effect.map((rows) => Number(rows[0]?.attempts ?? 0)),
      Effect.orElseSucceed(() => 0)
    )

/** A start of a group, recorded: how many starts it has had, this one included, and its name. */
export interface Start {
  readonly attempts: number
  readonly id: string
}

const tries = Schedule.max([Schedule.exponential("200 millis"), Schedule.recurs(3)])

/**
 * Records a start of the group of `row` and gives how many starts it has had, this one included
 * (1 the first time). When the database cannot say, 1 (the group is run). Tried again with the same
 * name, it is recorded once: the statement counts the starts there were and adds its own only when
 * its line is new.
 */
export const start = (runId: string, row: number): Effect.Effect<Start, never, SqlClient.SqlClient> => {
  const id = crypto.randomUUID()
  return Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ attempts: number | string }>`
      WITH added AS (
        INSERT INTO effect_gym_starts (run_id, row_index, start_id) VALUES (${runId}, ${row}, ${id})
        ON CONFLICT DO NOTHING RETURNING 1
      )
      SELECT (SELECT COUNT(*) FROM effect_gym_starts WHERE run_id = ${runId} AND row_index = ${row})
        + (SELECT COUNT(*) FROM added) AS attempts
    `).pipe(
      Effect.retry(tries),
      Effect.map((rows) => ({ attempts: Number(rows[0]?.attempts ?? 1), id })),
      Effect.orElseSucceed(() => ({ attempts: 1, id }))
    )
}

/**
 * Takes back a start that did not end in a crash: the group ended on a live runner (done, or
 * interrupted as its shard moved or the runner stopped), so it did not kill anything. Only the
 * starts of runners that died while running the group count; a group done whose reply was not
 * stored yet when another group killed the runner is run again, not blamed. Tried a few times here;
 * then, while the database does not answer, in the background (in `scope`, every second, for up to
 * 10 minutes): a start left counted would bring its group closer to being given up.
 */
export const unstart = (
  runId: string,
  row: number,
  id: string,
  scope: Scope.Scope
): Effect.Effect<void, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const remove = sql`
      DELETE FROM effect_gym_starts WHERE run_id = ${runId} AND row_index = ${row} AND start_id = ${id}
    `
    return Effect.catch(
      Effect.asVoid(Effect.retry(remove, tries)),
      () => Effect.asVoid(Effect.forkIn(Effect.ignore(Effect.retry(remove, AGAIN)), scope))
    )
  })

const AGAIN = Schedule.spaced("1 second").pipe(Schedule.upTo({ duration: "10 minutes" }))
