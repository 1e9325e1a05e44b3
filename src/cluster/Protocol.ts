/**
 * What the coordinator and the runners say to each other: the rollout entity (one message = one
 * GRPO group) and its reply. Messages are persisted (`effect/cluster`'s SQL message storage), so
 * a group survives the death of the runner that holds it (redelivered to the shard's next owner)
 * and of the coordinator that sent it (the same primary key finds the stored request and reply).
 *
 * @since 0.3.0
 */
import { Schema } from "effect"
import { ClusterSchema, Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"

/**
 * How every group of a run is run: the run's settings (a `RunSpec` as JSON, timeouts in
 * milliseconds: `RunSpec.toJson`; the runner decodes it with `RunSpec.decode`, the same checks as
 * every front end), the names of its scheduler and reward functions, and what the log does with a
 * failed group. Inference and plugins are the runner's own.
 *
 * @since 0.3.0
 * @category models
 */
export const GroupConfig = Schema.Struct({
  spec: Schema.Record(Schema.String, Schema.Unknown),
  scheduler: Schema.String,
  rewardFuncs: Schema.Array(Schema.String),
  failedGroups: Schema.Literals(["keep", "drop", "mask"])
})

/**
 * @since 0.3.0
 * @category models
 */
export type GroupConfig = typeof GroupConfig.Type

/**
 * One group to run: the dataset row (its line's text and 0-based index), the run's config (JSON
 * text, the same for every group) and the coordinator's registry digest.
 *
 * @since 0.3.0
 * @category models
 */
export const GroupRequest = Schema.Struct({
  runId: Schema.String,
  file: Schema.String,
  row: Schema.Number,
  line: Schema.String,
  config: Schema.String,
  digest: Schema.String
})

/**
 * @since 0.3.0
 * @category models
 */
export type GroupRequest = typeof GroupRequest.Type

/**
 * A row the runner could not run (the row's error, as `Row.RowError`'s fields).
 *
 * @since 0.3.0
 * @category models
 */
export const RowProblem = Schema.Struct({
  file: Schema.String,
  line: Schema.Number,
  path: Schema.String,
  detail: Schema.String
})

/**
 * A group's reply: who ran it, with which plugins (the runner's registry digest), the group's log
 * lines (advantages included, the failed-groups policy applied) and its part of the summary (a
 * `Summary.Accumulator` of the group's items).
 *
 * @since 0.3.0
 * @category models
 */
export const GroupReply = Schema.Struct({
  runner: Schema.String,
  digest: Schema.String,
  /** The runner's inference (see `InferenceMismatch`), as JSON; absent in replies stored by older runners. */
  inference: Schema.optional(Schema.String),
  text: Schema.String,
  summary: Schema.Unknown,
  rowError: Schema.NullOr(RowProblem)
})

/**
 * @since 0.3.0
 * @category models
 */
export type GroupReply = typeof GroupReply.Type

/**
 * The runner's plugins differ from the coordinator's: the group is refused, not run.
 *
 * @since 0.3.0
 * @category errors
 */
export class PluginMismatch extends Schema.TaggedError<PluginMismatch>("effect-gym/PluginMismatch")("PluginMismatch", {
  runner: Schema.String,
  expected: Schema.String,
  actual: Schema.String,
  runnerPlugins: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `runner ${this.runner} refused the run: its plugins (registry digest ${this.actual.slice(0, 12)}, ` +
      `plugins: ${this.runnerPlugins.length === 0 ? "none" : this.runnerPlugins.join(", ")}) differ from the ` +
      `coordinator's (digest ${this.expected.slice(0, 12)}); start every runner with the same --plugin files`
  }
}

/**
 * The runner's inference (mode, model, policy and its options, the inference options that change
 * samples) differs from the run's: the first runner to run a group of the run records its own
 * (`pinnedBy`), and a runner with another refuses the run's groups, as for other plugins.
 *
 * @since 0.3.0
 * @category errors
 */
export class InferenceMismatch
  extends Schema.TaggedError<InferenceMismatch>("effect-gym/InferenceMismatch")("InferenceMismatch", {
    runner: Schema.String,
    expected: Schema.String,
    actual: Schema.String,
    pinnedBy: Schema.String
  })
{
  override get message(): string {
    return `runner ${this.runner} refused the run: its inference ${this.actual} differs from the run's ${this.expected} ` +
      `(runner ${this.pinnedBy}'s, which ran its first group); start every runner of a run with the same --mode, ` +
      `--model, --policy, --policy-option and inference options`
  }
}

/**
 * The run's config cannot be used by a runner (an unknown scheduler or reward function, bad
 * weights): the group is refused.
 *
 * @since 0.3.0
 * @category errors
 */
export class ConfigRefused extends Schema.TaggedError<ConfigRefused>("effect-gym/ConfigRefused")("ConfigRefused", {
  runner: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `runner ${this.runner} refused the run's config: ${this.detail}`
  }
}

/**
 * The rollout entity: `RunGroup` runs one group. Persisted, keyed by run id and row (a message
 * sent again after a coordinator restart is the same message), and not interrupted when its
 * sender goes away.
 *
 * @since 0.3.0
 * @category entities
 */
export const RolloutEntity = Entity.make("EffectGymRollout", [
  Rpc.make("RunGroup", {
    payload: GroupRequest.fields,
    success: GroupReply,
    error: Schema.Union([PluginMismatch, ConfigRefused, InferenceMismatch]),
    primaryKey: ({ row, runId }) => `${runId}/${row}`
  })
]).annotateRpcs(ClusterSchema.Persisted, true)
  .annotateRpcs(ClusterSchema.Uninterruptible, "client")

/**
 * The entity id of a row's group: one entity per group, so groups spread over all shards.
 *
 * @since 0.3.0
 * @category entities
 */
export const entityId = (runId: string, row: number): string => `${runId}/${row}`
