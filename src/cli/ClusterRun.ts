/**
 * `effect-gym run --cluster postgres://...`: the coordinator side of `run`. `RunCommand` does
 * everything else as for a local run (options, output safety and `--resume`, the writer, the
 * summary, progress); this module sends the groups to the cluster and folds the replies in.
 */
import { Console, Effect, FileSystem, Option, Semaphore, Stream } from "effect"
import type * as CompletionsLog from "../CompletionsLog.js"
import type { DatabaseEvent, RunnerEvent } from "../cluster/Coordinator.js"
import * as Cluster from "../cluster/Cluster.js"
import * as Coordinator from "../cluster/Coordinator.js"
import * as Engine from "../cluster/internal/engine.js"
import { registryDigest } from "../cluster/internal/digest.js"
import * as RunSpec from "../RunSpec.js"
import type * as Summary from "../Summary.js"
import { errorDetail, FileError, OptionError } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import type * as RolloutOptions from "./RolloutOptions.js"
import type { RunArgs } from "./RunCommand.js"
import * as RunLog from "./RunLog.js"

/** What the cluster did, for the summary. */
export interface ClusterReport {
  readonly run_id: string
  /** Groups per runner that ran them (a group rerun after a runner died counts once, where it finished). */
  readonly groups_by_runner: Record<string, number>
  readonly runner_events: Array<RunnerEvent>
  /** The database going away and coming back during the run. */
  readonly database_events: Array<DatabaseEvent>
}

/** An empty report of the run `runId`, filled as the run goes (kept when the run stops early). */
export const newReport = (runId: string): ClusterReport => ({
  run_id: runId,
  groups_by_runner: {},
  runner_events: [],
  database_events: []
})

/** The run id: `--run-id`, else the one recorded with the log (`--resume`), else a new one. */
export const runId = (args: RunArgs, resuming: boolean) =>
  Effect.gen(function*() {
    const given = Option.getOrUndefined(args.runId)
    if (given !== undefined && !/^[A-Za-z0-9._:-]{1,100}$/.test(given)) {
      return yield* new OptionError({
        option: "--run-id",
        detail: `${JSON.stringify(given)}: use 1 to 100 letters, digits, '.', '_', ':' or '-'`
      })
    }
    if (resuming) {
      const recorded = yield* RunLog.readIdentity(args.output)
      const before = recorded?.cluster_run_id
      if (typeof before === "string") {
        if (given !== undefined && given !== before) {
          return yield* new OptionError({
            option: "--run-id",
            detail: `${args.output} was written by cluster run ${before}, not ${given}`
          })
        }
        return before
      }
      if (recorded !== undefined) {
        return yield* new OptionError({ option: "--resume", detail: `${args.output} was not written by a cluster run` })
      }
    }
    return given ?? `run-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`
  })

/** What only a runner takes (inference, policy, env workers): each runner's own on a cluster run. */
const RUNNER_ONLY: ReadonlyArray<readonly [string, keyof RunArgs]> = [
  ["--policy", "policy"],
  ["--policy-option", "policyOptions"],
  ...InferenceOptions.SERVER_ONLY,
  ...InferenceOptions.COLOCATE_ONLY,
  // (--tito-check has a message of its own)
  ...InferenceOptions.MODEL_ONLY.filter(([flag]) => flag !== "--tito-check"),
  ["--isolate-envs", "isolateEnvs"],
  ["--env-workers", "envWorkers"]
]

const given = (value: unknown): boolean =>
  Option.isOption(value)
    ? Option.isSome(value)
    : typeof value === "boolean"
    ? value
    : typeof value === "object" && value !== null && Object.keys(value).length > 0

/**
 * Options of a local run that a cluster run's coordinator does not use (the runners' inference,
 * policy and env workers): refused by name, not silently dropped.
 */
export const refuseRunnerOptions = (args: RunArgs): Effect.Effect<void, OptionError> => {
  if (args.titoCheck) {
    return Effect.fail(
      new OptionError({
        option: "--tito-check",
        detail: "not on a cluster run: the drift check re-tokenizes where inference runs, and runners do not run it; " +
          "check a sample with a local run (without --cluster)"
      })
    )
  }
  const runnerOnly = (option: string) =>
    new OptionError({
      option,
      detail: "a runner's option: on a cluster run, inference, the policy and env workers are each runner's own " +
        "(give it to `effect-gym runner`)"
    })
  if (args.mode !== "scripted") return Effect.fail(runnerOnly("--mode"))
  if (args.envTimeout !== "60") return Effect.fail(runnerOnly("--env-timeout"))
  const found = RUNNER_ONLY.find(([, key]) => given(args[key]))
  return found === undefined ? Effect.void : Effect.fail(runnerOnly(found[0]))
}

/** Checks the shape of `--cluster` (before anything is written). */
export const checkUrl = (url: string) => Effect.asVoid(Cluster.parseUrl(url))

/**
 * Connects to the cluster and takes the run id, for the run's scope (before anything is written:
 * a database that does not answer, a run id in use, or a resumed run id started with other options
 * (`identity`, recorded in the database: its stored replies are that run's) writes nothing and
 * trims nothing).
 */
export const open = (url: string, runId: string, resuming: boolean, identity: RunLog.Identity) =>
  Coordinator.open(url, runId, {
    resuming,
    identity: { ...identity },
    difference: (recorded) =>
      identity.dataset_sha256 === null
        ? `the dataset ${identity.dataset} is not a regular file: it cannot be checked against the run's`
        : RunLog.difference(recorded, identity)
  })

/** Sends the dataset's groups (those not done yet) to the cluster and folds each reply in. */
export const coordinate = (
  args: RunArgs,
  parts: {
    readonly url: string
    readonly session: Coordinator.Session
    readonly runId: string
    readonly resolved: RolloutOptions.Resolved
    readonly spec: RunSpec.RunSpec
    readonly done: RunLog.RowSet | undefined
    readonly writer: CompletionsLog.Writer
    readonly accumulator: Summary.Accumulator
    readonly until: Effect.Effect<unknown> | undefined
    readonly report: ClusterReport
    /**
     * The run's inference (the runners', canonical JSON): the one its record holds (`--resume`), and
     * what records it when the first reply brings it.
     */
    readonly inference: {
      readonly recorded: string | undefined
      readonly record: (inference: string) => Effect.Effect<void, FileError>
    }
  }
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const { accumulator, resolved, writer } = parts
    const report = parts.report
    const digest = registryDigest(resolved.registry, args.plugins)
    const writing = yield* Semaphore.make(1)
    let inference = parts.inference.recorded
    const outputError = (error: { readonly message: string }) =>
      new FileError({ option: "--output", file: args.output, detail: errorDetail(error) })
    const done = parts.done
    const rows = Engine.datasetLines(
      args.dataset,
      fs.stream(args.dataset, { chunkSize: 256 * 1024 }),
      done === undefined ? undefined : (index) => done.has(index)
    ).pipe(Stream.mapError((error) => new FileError({ option: "--dataset", file: args.dataset, detail: errorDetail(error) })))
    yield* Console.error(`cluster run ${parts.runId}: groups go to the runners of ${Cluster.redact(parts.url)}`)
    yield* Coordinator.run({
      session: parts.session,
      runId: parts.runId,
      file: args.dataset,
      rows,
      digest,
      concurrency: args.concurrency,
      until: parts.until,
      config: {
        spec: RunSpec.toJson(parts.spec),
        scheduler: args.scheduler,
        rewardFuncs: args.rewardFuncs,
        failedGroups: args.failedGroups
      },
      onRowError: (error) =>
        Effect.andThen(
          Effect.sync(() => accumulator.add({ _tag: "RowFailure", error })),
          Console.error(`bad row: ${error.message}`)
        ),
      onReply: (_row, reply) =>
        Effect.gen(function*() {
          if (reply.digest !== digest) {
            return yield* new OptionError({
              option: "--plugin",
              detail: `runner ${reply.runner} answered with plugins (digest ${reply.digest.slice(0, 12)}) that differ from ` +
                `the coordinator's (${digest.slice(0, 12)})`
            })
          }
          // One reply at a time, whole: written, then counted (a stop never cuts a group in two,
          // and two writes never overlap).
          yield* writing.withPermits(1)(Effect.uninterruptible(Effect.gen(function*() {
            // The runners refuse a run's groups with another inference than its first runner's; a
            // reply with another all the same (its runner could not read the run's) stops the run.
            if (reply.inference !== undefined) {
              if (inference === undefined) {
                inference = reply.inference
                yield* parts.inference.record(reply.inference)
              } else if (reply.inference !== inference) {
                return yield* new OptionError({
                  option: "--policy",
                  detail: `runner ${reply.runner} answered with the inference ${reply.inference}, not the run's ` +
                    `${inference}: start every runner of a run with the same --mode, --model, --policy, ` +
                    `--policy-option and inference options`
                })
              }
            }
            yield* Effect.mapError(writer.writeText(reply.text), outputError)
            report.groups_by_runner[reply.runner] = (report.groups_by_runner[reply.runner] ?? 0) + 1
            accumulator.merge(reply.summary as never)
          })))
          if (reply.rowError !== null) {
            yield* Console.error(`bad row: ${Engine.rowError(reply.rowError).message}`)
          }
        }),
      onDatabase: (event) =>
        Effect.andThen(
          Effect.sync(() => report.database_events.push(event)),
          Console.error(
            event.event === "down"
              ? `cluster: the database does not answer (${event.detail}): waiting for it up to ${Cluster.databaseWait()} s ` +
                `(EFFECT_GYM_CLUSTER_DB_WAIT); the replies received are written`
              : `cluster: the database answers again (${event.detail})`
          )
        ),
      onNoRunner: Console.error(
        `cluster: waiting for runners: none is up in ${Cluster.redact(parts.url)} (start one: effect-gym runner --cluster URL)`
      ),
      onRunner: (event) =>
        Effect.andThen(
          Effect.sync(() => report.runner_events.push(event)),
          Console.error(`cluster: runner ${event.runner} ${event.event} (at ${(event.atMs / 1000).toFixed(1)} s)`)
        )
    }).pipe(
      // refused before any reply came: the refusal says the run's inference, for its record
      Effect.tapError((error) =>
        error._tag === "InferenceMismatch" && inference === undefined
          ? Effect.ignore(parts.inference.record(error.expected))
          : Effect.void
      )
    )
    return report
  })
