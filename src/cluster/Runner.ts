/**
 * A runner: a process that hosts the rollout entity's shards. Each message runs one group with the
 * engine of `run` (through `internal/engine.ts`), with this runner's plugins and inference.
 *
 * @since 0.3.0
 */
import { SqlClient } from "effect/sql"
import { Effect, Layer, Schema, Scope, Semaphore } from "effect"
import { Inference } from "../Inference.js"
import type * as Registry from "../Registry.js"
import * as Cluster from "./Cluster.js"
import * as Attempts from "./internal/attempts.js"
import * as Engine from "./internal/engine.js"
import * as RunInference from "./internal/inference.js"
import { ConfigRefused, GroupConfig, InferenceMismatch, PluginMismatch, RolloutEntity } from "./Protocol.js"

/**
 * @since 0.3.0
 * @category models
 */
export interface Options {
  readonly url: string
  readonly host: string
  readonly port: number
  readonly listenHost?: string | undefined
  readonly registry: Registry.Registry
  /** The plugin files (reported in a refusal). */
  readonly plugins: ReadonlyArray<string>
  /** The registry digest (see `internal/digest.ts`). */
  readonly digest: string
  /**
   * This runner's inference as JSON (mode, model, policy and its options, inference options): a run
   * takes the first runner's, and a runner with another refuses its groups (`InferenceMismatch`).
   */
  readonly inference: string
  /** Groups run at once on this runner. */
  readonly concurrency: number
  /** Print a line on stderr per group run. */
  readonly logGroups?: boolean | undefined
  /** Called once the runner has joined the cluster. */
  readonly onReady?: (() => void) | undefined
  /** Called once when the database does not answer at start (it is waited for, `Cluster.databaseWait()` s). */
  readonly onWaitForDatabase?: ((why: string) => void) | undefined
  /**
   * While `waiting()` (the runner's log says the database is away, and the cluster has logged no
   * problem for a while), the database is asked every second; `answered` is called when it answers
   * (see `internal/log.ts`: effect/cluster says nothing when a short outage ends).
   */
  readonly databaseBack?: { readonly waiting: () => boolean; readonly answered: () => void } | undefined
}

const decodeConfig = Schema.decodeUnknownEffect(Schema.fromJsonString(GroupConfig))

/**
 * The runner: the entity's handlers on this runner's sharding. Runs until interrupted; on
 * interruption it hands its shards back (the groups it was running are redelivered elsewhere).
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<never, Cluster.ClusterStartError, Inference> => {
  const name = `${options.host}:${options.port}`
  const handlers = Layer.unwrap(Effect.gen(function*() {
    const inference = yield* Inference
    const sql = yield* SqlClient.SqlClient
    yield* Attempts.setup
    yield* RunInference.setup
    // each run's inference, once read (it never changes)
    const pinned = new Map<string, RunInference.Pinned>()
    const runInference = (runId: string): Effect.Effect<RunInference.Pinned | undefined> =>
      Effect.suspend(() => {
        const known = pinned.get(runId)
        if (known !== undefined) return Effect.succeed(known)
        return RunInference.pin(runId, options.inference, name).pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
          Effect.tap((read) => Effect.sync(() => pinned.set(runId, read))),
          // (the database away: run; the coordinator still checks each reply's inference)
          Effect.orElseSucceed(() => undefined)
        )
      })
    const maxAttempts = Attempts.maxAttempts()
    // the groups running here now, counted as started: `runId NUL row`
    const startedHere = new Set<string>()
    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.provideService(effect, SqlClient.SqlClient, sql)
    const scope = yield* Effect.scope
    const back = options.databaseBack
    if (back !== undefined) {
      const ask = Effect.suspend(() =>
        back.waiting()
          ? Effect.ignore(Effect.andThen(Effect.timeout(sql`SELECT 1`, "2 seconds"), Effect.sync(back.answered)))
          : Effect.void
      )
      yield* Effect.forkScoped(Effect.forever(Effect.andThen(ask, Effect.sleep("1 second"))))
    }
    const permits = yield* Semaphore.make(options.concurrency)
    // The way to the permits, one at a time: a group that takes them all (its last start) waits
    // for the groups running to end while no other starts (Effect's semaphore alone would let
    // groups taking one permit pass it for ever).
    const gate = yield* Semaphore.make(1)
    const withPermits = (n: number) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(restore(gate.withPermits(1)(permits.take(n))), (taken) => Effect.ensuring(restore(effect), permits.release(taken)))
      )
    // one engine config per run config (the scheduler's instance is shared by the run's groups)
    const configs = new Map<string, Effect.Effect<Engine.Prepared, string>>()
    const prepared = (text: string) =>
      Effect.suspend(() => {
        const known = configs.get(text)
        if (known !== undefined) return known
        return Effect.flatMap(
          Effect.cached(
            Effect.flatMap(
              Effect.mapError(decodeConfig(text), (error) => `not a run config: ${error.message}`),
              (config) => Scope.provide(Engine.prepare(options.registry, config), scope)
            )
          ),
          (cached) => Effect.sync(() => {
            configs.set(text, cached)
            return cached
          })
        ).pipe(Effect.flatten)
      })
    return RolloutEntity.toLayer(
      Effect.succeed({
        RunGroup: ({ payload }) =>
          Effect.gen(function*() {
            if (payload.digest !== options.digest) {
              return yield* new PluginMismatch({
                runner: name,
                expected: payload.digest,
                actual: options.digest,
                runnerPlugins: options.plugins
              })
            }
            const theRun = yield* runInference(payload.runId)
            if (theRun !== undefined && theRun.inference !== options.inference) {
              return yield* new InferenceMismatch({
                runner: name,
                expected: theRun.inference,
                actual: options.inference,
                pinnedBy: theRun.runner
              })
            }
            const config = yield* Effect.mapError(prepared(payload.config), (detail) => new ConfigRefused({ runner: name, detail }))
            const start = performance.now()
            // Counted as it starts (not while it waits for a permit): a group that was started
            // `maxAttempts` times already killed each runner that took it; given up, a bad row.
            // Its last start is alone on this runner (all permits), so that a group that only ran
            // beside the one that killed the runner is not given up with it. A start interrupted
            // here (its shard moved, the runner stopped) is taken back: only a death counts.
            const key = `${payload.runId}\u0000${payload.row}`
            const runIt = Effect.provideService(Engine.runGroup(config, payload.file, payload.row, payload.line, name), Inference, inference)
            const counted = (alone: boolean): Effect.Effect<Engine.GroupOutcome | undefined> =>
              withPermits(alone ? options.concurrency : 1)(Effect.suspend(() => {
                // delivered again while it runs here (not after a death): not a new start
                if (startedHere.has(key)) return runIt
                // (the start recorded and its take-back set up with no interruption between them: an
                // interruption while the record is tried again after a cut answer, up to 1.4 s, left
                // the start counted, as if the group had killed this runner)
                return Effect.uninterruptibleMask((restore) =>
                  Effect.flatMap(withSql(Attempts.start(payload.runId, payload.row)), ({ attempts: attempt, id }) => {
                    const unstart = withSql(Attempts.unstart(payload.runId, payload.row, id, scope))
                    if (attempt > maxAttempts) {
                      return Effect.succeed(Engine.failedRow(
                        payload.file,
                        payload.row,
                        `its group was started ${attempt - 1} times and never finished: the runner running it stopped each ` +
                          `time before replying (the env crashed the process? ran it out of memory?); not started again ` +
                          `(EFFECT_GYM_CLUSTER_MAX_ATTEMPTS=${maxAttempts})`
                      ))
                    }
                    // the last start, found by a start counted meanwhile elsewhere: taken back, run alone
                    if (attempt === maxAttempts && !alone) return Effect.as(unstart, undefined)
                    // the start is taken back when the group ends here in any way (done, interrupted as its
                    // shard moves), before its permits go: only a start whose runner died stays counted
                    // (a reply not yet stored when the next group killed the runner included)
                    startedHere.add(key)
                    return Effect.ensuring(restore(runIt),
                      Effect.andThen(Effect.sync(() => startedHere.delete(key)), unstart))
                  }))
              }))
            const run = (alone: boolean): Effect.Effect<Engine.GroupOutcome> =>
              Effect.flatMap(counted(alone), (outcome) => outcome === undefined ? run(true) : Effect.succeed(outcome))
            const before = yield* withSql(Attempts.count(payload.runId, payload.row))
            const outcome = yield* run(before + 1 >= maxAttempts)
            if (options.logGroups === true) {
              process.stderr.write(
                `runner ${name}: ran row ${payload.row} of run ${payload.runId} in ${Math.round(performance.now() - start)} ms\n`
              )
            }
            return { runner: name, digest: options.digest, inference: options.inference, ...outcome }
          })
      }),
      { maxIdleTime: "10 seconds" }
    )
  }))
  const ready = Layer.effectDiscard(
    Effect.sync(() => options.onReady?.())
  )
  return ready.pipe(
    Layer.provideMerge(handlers),
    Layer.provide(Cluster.runner(
      options.url,
      { host: options.host, port: options.port, listenHost: options.listenHost },
      { seconds: Cluster.databaseWait(), onWait: (why) => Effect.sync(() => options.onWaitForDatabase?.(why)) }
    ))
  )
}
