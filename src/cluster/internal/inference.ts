/**
 * The inference of each run (`effect_gym_inference`, in the cluster's database): the first runner
 * to run one of a run's groups records its own (mode, model, policy and its options, inference
 * options); a runner with another refuses the run's groups (`InferenceMismatch`). Without it,
 * runners started with different `--policy` values or models ran one run's groups between them,
 * and the log mixed their samples.
 */
import { SqlClient } from "effect/sql"
import { Effect, Schedule } from "effect"
import { ClusterStartError, setupRetry } from "../Cluster.js"

/** The table, made at first use (runners started together race: tried again). */
export const setup = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS effect_gym_inference (
    run_id VARCHAR(100) PRIMARY KEY,
    inference TEXT NOT NULL,
    runner TEXT NOT NULL
  )`.pipe(
    Effect.retry(setupRetry),
    Effect.mapError((error) =>
      new ClusterStartError({ option: "--cluster", detail: `cannot set up the table of inference: ${error.message}` })
    ),
    Effect.asVoid
  ))

/** The run's inference and the runner that recorded it. */
export interface Pinned {
  readonly inference: string
  readonly runner: string
}

/**
 * The run's inference: `inference` (recorded now, by `runner`) when the run has none yet, else the
 * one recorded. Fails while the database does not answer (the group is then not run here).
 */
export const pin = (
  runId: string,
  inference: string,
  runner: string
): Effect.Effect<Pinned, unknown, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.andThen(
      sql`
        INSERT INTO effect_gym_inference (run_id, inference, runner) VALUES (${runId}, ${inference}, ${runner})
        ON CONFLICT (run_id) DO NOTHING
      `,
      sql<{ inference: string; runner: string }>`
        SELECT inference, runner FROM effect_gym_inference WHERE run_id = ${runId}
      `
    )).pipe(
      Effect.flatMap((rows) =>
        rows[0] === undefined
          ? Effect.fail(new Error(`no inference recorded for run ${runId}`))
          : Effect.succeed({ inference: rows[0].inference, runner: rows[0].runner })
      ),
      Effect.retry(Schedule.max([Schedule.exponential("200 millis"), Schedule.recurs(5)]))
    )
