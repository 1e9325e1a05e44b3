/**
 * The cluster's one door into the engine: everything a runner needs to run a group the way `run`
 * runs it (the same `Rollout.stream`, the same log encoding and summary fold). A change of the
 * engine's API touches this file only.
 */
import { Effect, Result, Stream } from "effect"
import type { Scope } from "effect"
import * as CompletionsLog from "../../CompletionsLog.js"
import type { Inference } from "../../Inference.js"
import * as Registry from "../../Registry.js"
import * as Rollout from "../../Rollout.js"
import * as Row from "../../Row.js"
import * as RunSpec from "../../RunSpec.js"
import * as Summary from "../../Summary.js"
import type { GroupConfig } from "../Protocol.js"

/** A run's config, ready to run groups on this runner. */
export interface Prepared {
  readonly config: Rollout.Config
  readonly failedGroups: CompletionsLog.FailedGroups
}

/** What running one group gives: its log text, its summary part, or the row's error. */
export interface GroupOutcome {
  readonly text: string
  readonly summary: Record<string, unknown>
  readonly rowError: { readonly file: string; readonly line: number; readonly path: string; readonly detail: string } | null
}

const message = (error: { readonly message: string }): string => error.message

/**
 * Builds the engine's config of a run from the coordinator's group config and this runner's
 * registry, the way every front end builds one: its settings decoded by `RunSpec.decode` (with a
 * group's generations all at once: the runner bounds its groups in flight), its scheduler and
 * reward functions looked up by name, then `Rollout.configOf`; the scheduler's instance lives in
 * `Scope` (the runner's, shared by all the run's groups).
 */
export const prepare = (
  registry: Registry.Registry,
  group: GroupConfig
): Effect.Effect<Prepared, string, Scope.Scope> =>
  Effect.gen(function*() {
    const spec = yield* Effect.fromResult(Result.mapError(
      RunSpec.decode({ ...group.spec, concurrency: group.spec.numGenerations }, "flags"),
      message
    ))
    const scheduler = yield* Effect.fromResult(Result.mapError(Registry.scheduler(registry, group.scheduler), message))
    const rewards = yield* Effect.forEach(
      group.rewardFuncs,
      (name) => Effect.fromResult(Result.mapError(Registry.reward(registry, name), message))
    )
    // The env the run names: one the scheduler brings, or this runner's registry's (the check `run` makes).
    yield* Effect.fromResult(Result.mapError(Registry.checkDefaultEnv(registry, scheduler, spec.defaultEnv), message))
    const config = yield* Effect.mapError(Rollout.configOf(spec, { registry, scheduler, rewards }), message)
    return { config, failedGroups: group.failedGroups }
  })

/**
 * Runs the group of the dataset's row `index` (its line's text) with the engine of `run`: fresh
 * envs, its generations, rewards and advantages; gives the group's log text and summary part.
 */
export const runGroup = (
  prepared: Prepared,
  file: string,
  index: number,
  line: string,
  /** The runner (`host:port`), named in each line. */
  runner?: string
): Effect.Effect<GroupOutcome, never, Inference> =>
  Effect.gen(function*() {
    const decoded = Row.decodeLine(file, index, line) ??
      Result.fail(new Row.RowError({ file, line: index + 1, path: "", detail: "blank line" }))
    const items = yield* Stream.runCollect(Rollout.stream(prepared.config, [decoded]))
    const accumulator = new Summary.Accumulator()
    let text = ""
    let rowError: GroupOutcome["rowError"] = null
    for (const item of items) {
      accumulator.add(item)
      if (item._tag === "RowFailure") {
        const { detail, file, line, path } = item.error
        rowError = { file, line, path, detail }
        continue
      }
      if (prepared.failedGroups === "drop" && CompletionsLog.hasFailure(item)) accumulator.droppedGroups++
      text += CompletionsLog.groupText(item, prepared.failedGroups, runner)
    }
    return { text, summary: { ...accumulator }, rowError }
  })

/** The outcome of a group that was not run: its row's error (a bad row in the summary). */
export const failedRow = (file: string, index: number, detail: string): GroupOutcome => {
  const error = new Row.RowError({ file, line: index + 1, path: "", detail })
  const accumulator = new Summary.Accumulator()
  accumulator.add({ _tag: "RowFailure", error })
  return { text: "", summary: { ...accumulator }, rowError: { file, line: index + 1, path: "", detail } }
}

/** A `Row.RowError` from a runner's reply. */
export const rowError = (problem: NonNullable<GroupOutcome["rowError"]>): Row.RowError => new Row.RowError(problem)

/** The rows of a dataset stream with their lines' text, bad ones (not UTF-8, malformed) as errors. */
export const datasetLines = <E, R>(file: string, bytes: Stream.Stream<Uint8Array, E, R>, skip?: (index: number) => boolean) =>
  Stream.filterMap(
    Row.streamLines(bytes),
    ([index, text, invalid]): Result.Result<Result.Result<{ readonly row: Row.Row; readonly text: string }, Row.RowError>, void> => {
      if (skip !== undefined && skip(index)) return Result.failVoid
      if (invalid !== undefined) {
        return Result.succeed(Result.fail(new Row.RowError({ file, line: index + 1, path: "", detail: invalid })))
      }
      const decoded = Row.decodeLine(file, index, text)
      if (decoded === undefined) return Result.failVoid
      return Result.succeed(Result.map(decoded, (row) => ({ row, text })))
    }
  )

/** A dataset row that cannot run. */
export type RowError = Row.RowError
