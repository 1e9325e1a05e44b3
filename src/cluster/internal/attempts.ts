/**
 * How many times each group of a run was started (`effect_gym_attempts`, in the cluster's
 * database). A group is delivered again when its runner dies before replying; a group that kills
 * every runner that takes it (an env that crashes the process, runs it out of memory) would go
 * round the runners for ever. Counted here, it is given up after `maxAttempts()` starts and
 * answered as a bad row instead. The groups that ran beside it on the runners it killed were
 * started as often: a group's last start is alone on its runner (`Runner.ts`), so only the group
 * that kills its runner by itself is given up. A start that ends on a live runner (done, or
 * interrupted as its shard moves) is taken back (`unstart`): only a runner's death counts.
 */
import { SqlClient } from "effect/sql"
import { Effect, Schedule } from "effect"
import { ClusterStartError, setupRetry } from "../Cluster.js"

/**
 * Starts of a group after which it is given up (`EFFECT_GYM_CLUSTER_MAX_ATTEMPTS`, default 3).
 */
export const maxAttempts = (): number => {
  const text = process.env.EFFECT_GYM_CLUSTER_MAX_ATTEMPTS
  const value = text === undefined ? NaN : Number(text)
  return Number.isInteger(value) && value > 0 ? value : 3
}

/** The table, made at first use (runners started together race: tried again). */
export const setup = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS effect_gym_attempts (
    run_id VARCHAR(100) NOT NULL,
    row_index INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    PRIMARY KEY (run_id, row_index)
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
    sql<{ attempts: number }>`
      SELECT attempts FROM effect_gym_attempts WHERE run_id = ${runId} AND row_index = ${row}
    `).pipe(
      Effect.map((rows) => Number(rows[0]?.attempts ?? 0)),
      Effect.orElseSucceed(() => 0)
    )

/**
 * Records a start of the group of `row` and gives how many starts it has had, this one included
 * (1 the first time). When the database cannot say, 1 (the group is run).
 */
export const start = (runId: string, row: number): Effect.Effect<number, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ attempts: number }>`
      INSERT INTO effect_gym_attempts (run_id, row_index, attempts) VALUES (${runId}, ${row}, 1)
      ON CONFLICT (run_id, row_index) DO UPDATE SET attempts = effect_gym_attempts.attempts + 1
      RETURNING attempts
    `).pipe(
      Effect.retry(Schedule.max([Schedule.exponential("200 millis"), Schedule.recurs(3)])),
      Effect.map((rows) => Number(rows[0]?.attempts ?? 1)),
      Effect.orElseSucceed(() => 1)
    )

/**
 * Takes back a start that did not end in a crash: the group ended on a live runner (done, or
 * interrupted as its shard moved or the runner stopped), so it did not kill anything. Only the
 * starts of runners that died while running the group count; a group done whose reply was not
 * stored yet when another group killed the runner is run again, not blamed.
 */
export const unstart = (runId: string, row: number): Effect.Effect<void, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`
      UPDATE effect_gym_attempts SET attempts = GREATEST(attempts - 1, 0)
      WHERE run_id = ${runId} AND row_index = ${row}
    `).pipe(Effect.asVoid, Effect.orElseSucceed(() => undefined))
