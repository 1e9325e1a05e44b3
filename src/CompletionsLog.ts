/**
 * The completions log: one JSON line per trajectory (`completions.jsonl`), written as groups finish.
 *
 * @since 0.1.0
 */
import { Effect, FileSystem, Schema, Semaphore } from "effect"
import { constants } from "node:buffer"
import type { PlatformError } from "effect/PlatformError"
import type * as Scope from "effect/Scope"
import { jsonIssue, plainJson } from "./internal/inspect.js"
import * as Json from "./internal/Json.js"
import { errorMessage } from "./internal/lift.js"
import { Messages } from "./Message.js"
import type { Group, Item, TrajectoryRecord } from "./Rollout.js"
import * as Reward from "./Reward.js"
import { UnexpectedError } from "./Scheduler.js"

/**
 * A trajectory whose log line cannot be written: a value JSON cannot hold (a cycle, a function,
 * NaN or Infinity, a Map) at `path` in the line. The trajectory's line is written with this error
 * (without the values that could not be written); the rest of the run goes on. Big integers are
 * not a problem: they are written exactly.
 *
 * @since 0.1.0
 * @category errors
 */
export class EncodeError extends Schema.TaggedError<EncodeError>()("EncodeError", {
  path: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `cannot write the log line: ${this.path} ${this.detail}`
  }
}

const Info = Schema.Record(Schema.String, Schema.Unknown)

/**
 * The error of a failed trajectory as written to the log: its tag, its message and its fields.
 *
 * @since 0.1.0
 * @category schemas
 */
export const LoggedError = Schema.StructWithRest(
  Schema.Struct({ _tag: Schema.String, message: Schema.String }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

/**
 * One line of `completions.jsonl`. Consumers can decode lines with this schema.
 *
 * @since 0.1.0
 * @category schemas
 */
export const CompletionLine = Schema.Struct({
  row: Schema.Number,
  generation: Schema.Number,
  id: Schema.String,
  env: Schema.NullOr(Schema.String),
  env_config: Info,
  messages: Messages,
  rewards: Schema.NullOr(Schema.Record(Schema.String, Schema.Number)),
  reward: Schema.NullOr(Schema.Number),
  advantage: Schema.NullOr(Schema.Number),
  rollout_infos: Schema.StructWithRest(
    Schema.Struct({
      /** `null` when the trajectory failed (as `reward`, `rewards` and `advantage`). */
      total_reward: Schema.NullOr(Schema.Number),
      step_rewards: Schema.NullOr(Schema.Array(Schema.Number)),
      num_turns: Schema.Number,
      reset_info: Schema.NullOr(Info),
      step_infos: Schema.Array(Info)
    }),
    [Schema.Record(Schema.String, Schema.Unknown)]
  ),
  end_reason: Schema.Literals(["done", "max_turns", "error"]),
  error: Schema.NullOr(LoggedError),
  finish_reasons: Schema.Array(Schema.String),
  /** Attempts made, when the trajectory was retried (`--trajectory-retries`); absent for one attempt. */
  attempts: Schema.optional(Schema.Number),
  /** The errors of the attempts before the last, when it was retried. */
  attempt_errors: Schema.optional(Schema.Array(LoggedError)),
  /** One entry per turn: the completion's token ids, `null` for a turn whose backend gave none. */
  response_token_ids: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** One entry per turn: 1 for each model token (the response holds model tokens only). */
  response_loss_mask: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** One entry per turn: the logprob of each token, `null` for a turn whose backend gave none. */
  rollout_logprobs: Schema.optional(Schema.Array(Schema.NullOr(Schema.Array(Schema.Number)))),
  /** The templated first prompt (token in, token out; see `TokenSequence`). */
  prompt_token_ids: Schema.optional(Schema.Array(Schema.Number)),
  /** Everything after the prompt: sampled tokens and the template/observation tokens between turns; `null` when unavailable. */
  token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Number))),
  /** 1 exactly on sampled tokens. */
  loss_mask: Schema.optional(Schema.Array(Schema.Literals([0, 1]))),
  /** Per token of `token_ids`: the sampled token's logprob, `null` elsewhere. */
  logprobs: Schema.optional(Schema.Array(Schema.NullOr(Schema.Number))),
  /** Why `token_ids` is `null`. */
  token_ids_unavailable: Schema.optional(Schema.String),
  /** One entry per turn: the policy version its model call was sent under (`null`: not versioned). */
  policy_versions: Schema.optional(Schema.Array(Schema.NullOr(Schema.Number))),
  /**
   * One entry per turn, present when a turn's reply held a tool call that could not be parsed (kept
   * as text): why, `null` for the other turns.
   */
  malformed_tool_call: Schema.optional(Schema.Array(Schema.NullOr(Schema.String))),
  /** The cluster runner (`host:port`) that ran the trajectory, in a cluster run's log. */
  runner: Schema.optional(Schema.String),
  timings: Schema.Struct({
    total_ms: Schema.Number,
    reset_ms: Schema.Number,
    /** Of the start, the time spent waiting to be scheduled (a limit on envs); absent: none (logs before it have none). */
    reset_wait_ms: Schema.optional(Schema.Number),
    turns: Schema.Array(Schema.Struct({
      model_ms: Schema.Number,
      /** The time inside the env's answer, without `wait_ms`. */
      env_ms: Schema.Number,
      /** The time the env's answer waited to be taken up (behind other trajectories' work or a limit on envs); absent: none. */
      wait_ms: Schema.optional(Schema.Number)
    }))
  })
})

/**
 * @since 0.1.0
 * @category models
 */
export type CompletionLine = typeof CompletionLine.Encoded

/**
 * A typed error as plain data: `_tag`, `message` and its fields (not its cause or stack).
 *
 * @since 0.1.0
 * @category encoding
 */
export const errorToJson = (error: { readonly _tag: string; readonly message: string }): typeof LoggedError.Type => {
  const out: Record<string, unknown> = { _tag: error._tag, message: error.message }
  for (const [key, value] of Object.entries(error)) {
    if (key !== "cause" && key !== "stack" && key !== "_tag" && key !== "message") out[key] = value
  }
  return out as typeof LoggedError.Type
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000

/** The longest string V8 holds (2^29 - 24 characters on 64-bit machines). */
const MAX_STRING_LENGTH = constants.MAX_STRING_LENGTH

/**
 * The log line of one trajectory, as an object: the one description of the line, which
 * {@link encodeLine} writes. Built as one object literal (the fields every line has, in the line's
 * order), the optional fields then added in their order, `timings` last: every line of a run has
 * the same few shapes, which `JSON.stringify` writes on its fast path.
 *
 * @since 0.1.0
 * @category encoding
 */
export const toLine = (record: TrajectoryRecord): CompletionLine => {
  const result = record.result
  // A failed trajectory has no reward: every reward field is `null`, so that a trainer that reads
  // one without looking at `error` gets no number to learn from (a partial sum, or 0, was written).
  const failed = record.error !== undefined
  const turns = result.turns
  const finishReasons = new Array<unknown>(turns.length)
  for (let i = 0; i < turns.length; i++) finishReasons[i] = turns[i].finishReason
  const line: Record<string, unknown> = {
    row: result.row,
    generation: result.generation,
    id: result.id,
    env: result.env ?? null,
    env_config: record.row.envConfig,
    messages: result.messages,
    rewards: failed ? null : record.rewards ?? null,
    reward: failed ? null : record.reward ?? null,
    advantage: failed ? null : record.advantage ?? null,
    rollout_infos: {
      ...result.rolloutInfos,
      total_reward: failed ? null : result.totalReward,
      step_rewards: failed ? null : result.stepRewards,
      num_turns: result.numTurns,
      reset_info: result.resetInfo ?? null,
      step_infos: result.stepInfos
    },
    end_reason: result.endReason,
    error: record.error === undefined ? null : errorToJson(record.error),
    finish_reasons: finishReasons
  }
  if (record.attempts !== undefined && record.attempts > 1) {
    line.attempts = record.attempts
    line.attempt_errors = (record.attemptErrors ?? []).map(errorToJson)
  }
  // Token fields keep one entry per turn, so turn i is always entry i; a turn whose backend gave no
  // ids (or no logprobs) is `null` there, never a made-up list. A field no turn has is left out.
  if (turns.some((t) => t.tokenIds !== undefined)) {
    line.response_token_ids = turns.map((t) => t.tokenIds ?? null)
    line.response_loss_mask = turns.map((t) => t.tokenIds === undefined ? null : t.tokenIds.map(() => 1))
  }
  if (turns.some((t) => t.logprobs !== undefined)) line.rollout_logprobs = turns.map((t) => t.logprobs ?? null)
  if (turns.some((t) => t.policyVersion !== undefined)) line.policy_versions = turns.map((t) => t.policyVersion ?? null)
  if (turns.some((t) => t.malformedToolCall !== undefined)) {
    line.malformed_tool_call = turns.map((t) => t.malformedToolCall ?? null)
  }
  const tokens = result.tokens
  if (tokens !== undefined) {
    if (tokens._tag === "Sequence") {
      line.prompt_token_ids = tokens.sequence.promptTokenIds
      line.token_ids = tokens.sequence.tokenIds
      line.loss_mask = tokens.sequence.lossMask
      line.logprobs = tokens.sequence.logprobs
    } else {
      line.token_ids = null
      line.token_ids_unavailable = tokens.reason
    }
  }
  if (record.runner !== undefined) line.runner = record.runner
  const timings = result.timings
  const turnTimings = new Array<unknown>(timings.turns.length)
  for (let i = 0; i < turnTimings.length; i++) {
    const t = timings.turns[i]
    const waitMs = round(t.waitMs ?? 0)
    turnTimings[i] = waitMs > 0
      ? { model_ms: round(t.modelMs), env_ms: round(t.envMs), wait_ms: waitMs }
      : { model_ms: round(t.modelMs), env_ms: round(t.envMs) }
  }
  const resetWaitMs = round(timings.resetWaitMs ?? 0)
  // (reset_wait_ms written only when there was waiting: the lines of runs without any stay as they were)
  line.timings = resetWaitMs > 0
    ? { total_ms: round(timings.totalMs), reset_ms: round(timings.resetMs), reset_wait_ms: resetWaitMs, turns: turnTimings }
    : { total_ms: round(timings.totalMs), reset_ms: round(timings.resetMs), turns: turnTimings }
  return line as CompletionLine
}

/**
 * The JSON text of one log line (integers beyond 2^53 stay exact): {@link toLine}'s object in one
 * `JSON.stringify`. Writing each field in turn and joining the texts (what it did before) took 8.0
 * against 6.4 us a FrozenLake line, the UTF-8 copy included: the joined text had to be flattened
 * before its copy, and V8's own writer is faster than the loop (bench/workloads/log_encoding.ts).
 * Throws on a value JSON cannot hold; records from `Rollout.stream` were checked with {@link check}
 * already.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeLine = (record: TrajectoryRecord): string => Json.stringify(toLine(record)) as string

/** A field's value as `JSON.stringify` writes it as a property named `key` (a `toJSON` is called with the key). */
const fieldText = (key: string, value: unknown): string | undefined => {
  const one = Json.stringify({ [key]: value })
  const prefix = `{${JSON.stringify(key)}:`
  return one.length === prefix.length + 1 ? undefined : one.slice(prefix.length, -1)
}

/**
 * The first value of a record's log line that JSON cannot hold, as an {@link EncodeError} naming
 * its path in the line (`rollout_infos.step_infos[2].board`), or `undefined` when the line can be
 * written. Only the parts that come from envs, schedulers, models, reward functions and rows are
 * walked: the rest is built by the log itself.
 *
 * @since 0.1.0
 * @category encoding
 */
export const check = (record: TrajectoryRecord): EncodeError | undefined => {
  if (plainRecord(record)) return undefined
  const result = record.result
  const issue = jsonIssue(result.messages, "messages") ??
    jsonIssue(record.row.envConfig, "env_config") ??
    jsonIssue(record.rewards, "rewards") ??
    jsonIssue(record.reward, "reward") ??
    jsonIssue(result.totalReward, "rollout_infos.total_reward") ??
    jsonIssue(result.stepRewards, "rollout_infos.step_rewards") ??
    jsonIssue(result.resetInfo, "rollout_infos.reset_info") ??
    jsonIssue(result.stepInfos, "rollout_infos.step_infos") ??
    jsonIssue(result.rolloutInfos, "rollout_infos") ??
    turnsIssue(record)
  return issue === undefined ? undefined : new EncodeError({ path: cut(issue.path), detail: cut(issue.detail) })
}

/**
 * A path or detail of at most about 300 characters: an info nested thousands of levels deep made
 * a path of tens of kilobytes, written into every line and the summary.
 */
const cut = (text: string): string =>
  text.length <= 300 ? text : `${text.slice(0, 150)}…(${text.length - 300} characters)…${text.slice(-150)}`

/** Rows whose `env_config` was found plain JSON (checked once per row, not per trajectory). */
const plainConfigs = new WeakSet<object>()

/**
 * Messages as the engine builds them: `{ role, content }` with text. (Other fields a custom
 * scheduler may add are not walked; should one not be JSON, the writer still catches it.)
 */
const plainMessages = (messages: ReadonlyArray<unknown>): boolean => {
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as { readonly role?: unknown; readonly content?: unknown } | null
    if (typeof m !== "object" || m === null || typeof m.role !== "string" || typeof m.content !== "string") return false
  }
  return true
}

/** The common case, checked quickly: every part of the line is plain JSON data. */
const plainRecord = (record: TrajectoryRecord): boolean => {
  const result = record.result
  try {
    const config = record.row.envConfig
    if (!plainConfigs.has(config)) {
      if (!plainJson(config)) return false
      plainConfigs.add(config)
    }
    if (!plainMessages(result.messages) || !plainJson(record.rewards)) return false
    if (!plainJson(record.reward) || !plainJson(result.totalReward) || !plainJson(result.stepRewards)) return false
    if (!plainJson(result.resetInfo) || !plainJson(result.stepInfos) || !plainJson(result.rolloutInfos)) return false
    for (const turn of result.turns) {
      if (typeof turn.finishReason !== "string" || !plainJson(turn.logprobs)) return false
    }
    return true
  } catch {
    return false
  }
}

const turnsIssue = (record: TrajectoryRecord) => {
  const turns = record.result.turns
  for (let i = 0; i < turns.length; i++) {
    const issue = jsonIssue(turns[i].logprobs, `rollout_logprobs[${i}]`) ?? jsonIssue(turns[i].finishReason, `finish_reasons[${i}]`)
    if (issue !== undefined) return issue
  }
  return undefined
}

const finiteOr0 = (x: number): number => (Number.isFinite(x) ? x : 0)

/** An attempt's error as is when it can be written, else its tag and message (or only its tag). */
const writableAttempt = <E extends { readonly _tag: string; readonly message: string }>(error: E): E | UnexpectedError => {
  if (writable(error)) return error
  let message: string
  try {
    message = `${error._tag}: ${String(error.message)}`
  } catch {
    message = String(error._tag)
  }
  return new UnexpectedError({ phase: "log", detail: `${message} (its fields cannot be written as JSON)` })
}

/** Whether an error's log form ({@link errorToJson}) can be written as JSON. */
const writable = (error: { readonly _tag: string; readonly message: string }): boolean => {
  try {
    Json.stringify(errorToJson(error))
    return true
  } catch {
    return false
  }
}

/**
 * The record of a trajectory whose line cannot be written: failed with `error` (a trajectory that
 * had failed already keeps its own error, when that error can be written itself), keeping what
 * can be written (ids, the row's config, the conversation when it is text, turns and timings) and
 * leaving out infos, rewards and other values that JSON cannot hold.
 *
 * @since 0.1.0
 * @category encoding
 */
export const withEncodeError = (record: TrajectoryRecord, error: EncodeError): TrajectoryRecord => {
  const result = record.result
  const envConfig = jsonIssue(record.row.envConfig, "env_config") === undefined ? record.row.envConfig : {}
  return {
    ...record,
    row: envConfig === record.row.envConfig ? record.row : { ...record.row, envConfig },
    rewards: undefined,
    reward: undefined,
    advantage: undefined,
    // (an error that cannot be written itself, say an EnvError whose `details` hold a cycle, is
    // replaced: kept, it made the line fail again and stopped the run with an internal error)
    error: record.error === undefined || !writable(record.error) ? error : record.error,
    ...(record.attemptErrors === undefined ? {} : { attemptErrors: record.attemptErrors.map(writableAttempt) }),
    result: {
      ...result,
      messages: jsonIssue(result.messages, "messages") === undefined ? result.messages : [],
      totalReward: finiteOr0(result.totalReward),
      stepRewards: result.stepRewards.map(finiteOr0),
      resetInfo: undefined,
      stepInfos: [],
      rolloutInfos: {},
      endReason: "error",
      error: undefined,
      turns: result.turns.map((t) => ({
        finishReason: typeof t.finishReason === "string" ? t.finishReason : "stop",
        tokenIds: t.tokenIds,
        logprobs: jsonIssue(t.logprobs, "") === undefined ? t.logprobs : undefined
      }))
    }
  }
}

/**
 * What the log does with a group that has a failed trajectory: `keep` its lines (failed ones have a
 * `null` advantage, the others' advantages are computed among themselves), `drop` the whole group,
 * or `mask`: keep the lines with every advantage of the group `null` (so a trainer skips it).
 *
 * @since 0.1.0
 * @category models
 */
export type FailedGroups = "keep" | "drop" | "mask"

/**
 * Whether a group has a failed trajectory.
 *
 * @since 0.1.0
 * @category encoding
 */
export const hasFailure = (group: Group): boolean => group.records.some((r) => r.error !== undefined)

/**
 * A thrown error of `JSON.stringify` said as what it means for a log line.
 */
const thrownDetail = (error: unknown): string => {
  const message = errorMessage(error)
  if (error instanceof RangeError && /string length/i.test(message)) {
    return `is longer than the longest text JavaScript can hold (about 512 MB): it cannot be written as JSON (${message})`
  }
  if (error instanceof RangeError && /call stack/i.test(message)) return `nests too deep to be written as JSON (${message})`
  return `cannot be written as JSON: ${message}`
}

/**
 * The line's text, or what `JSON.stringify` threw. A text of the longest string V8 holds is no line
 * either: its newline cannot be added ({@link EncodedGroup}'s `lines`: `text + "\n"` threw a
 * RangeError out of {@link encodeGroup}, and the run stopped with an internal error).
 */
const attempt = (record: TrajectoryRecord): string | { readonly thrown: unknown } => {
  if (pastLongest(record.result.messages)) return { thrown: tooLong() }
  try {
    const text = encodeLine(record)
    if (text.length < MAX_STRING_LENGTH) return text
    return { thrown: tooLong() }
  } catch (thrown) {
    return { thrown }
  }
}

const tooLong = () => new RangeError(`Invalid string length: the line and its newline are longer than ${MAX_STRING_LENGTH} characters`)

/**
 * Whether the contents of a conversation alone are longer than the longest string (their JSON text
 * is at least as long): such a line cannot be written, and is known so at once. The line stringified
 * whole got that far before it threw (a conversation of 576 MiB: 11 s per attempt, where the text
 * of each field, joined, threw at the join).
 */
const pastLongest = (messages: unknown): boolean => {
  if (!Array.isArray(messages)) return false
  let chars = 0
  for (const m of messages) {
    const content = (m as { readonly content?: unknown } | null)?.content
    if (typeof content === "string") chars += content.length
  }
  return chars >= MAX_STRING_LENGTH
}

/**
 * The field of a record's line that cannot be written: the first whose text throws alone, else the
 * longest (a line of fields that each fit, but not together, past the longest string).
 */
const failingField = (record: TrajectoryRecord): string => {
  let longest = "(line)"
  let longestLength = -1
  for (const [key, value] of Object.entries(toLine(record))) {
    if (key === "messages" && pastLongest(value)) return key
    try {
      const length = fieldText(key, value)?.length ?? 0
      if (length > longestLength) {
        longest = key
        longestLength = length
      }
    } catch {
      return key
    }
  }
  return longest
}

/**
 * The record of a trajectory whose line `JSON.stringify` could not write after all (past V8's
 * stack or its longest string, or a `toJSON` that throws only the second time): failed with an
 * {@link EncodeError} naming the field, keeping what can be written; when even that cannot be
 * written, a bare record (ids, end reason, turns and timings, the error) that always can.
 */
const unwritable = (record: TrajectoryRecord, thrown: unknown): TrajectoryRecord => {
  const error = new EncodeError({ path: failingField(record), detail: cut(thrownDetail(thrown)) })
  const kept = withEncodeError(record, error)
  if (typeof attempt(kept) === "string") return kept
  return {
    ...kept,
    row: { ...kept.row, envConfig: {} },
    error,
    attemptErrors: undefined,
    result: {
      ...kept.result,
      messages: [],
      stepRewards: [],
      tokens: undefined,
      turns: kept.result.turns.map((t) => ({ finishReason: t.finishReason, tokenIds: undefined, logprobs: undefined }))
    }
  }
}

/**
 * A group as the log writes it: its records (a record whose line cannot be written replaced by its
 * {@link EncodeError} record, and the group's advantages computed again without it) and their lines
 * (each ending in a newline) under the failed-groups policy: none when the group is dropped.
 *
 * @since 0.4.0
 * @category models
 */
export interface EncodedGroup {
  readonly group: Group
  readonly lines: ReadonlyArray<string>
  /**
   * The same lines without their newlines (what {@link Writer.writeJsonLines} takes): each one the
   * text `JSON.stringify` made, in one piece.
   *
   * @since 0.5.0
   */
  readonly texts: ReadonlyArray<string>
}

/**
 * Encodes a group for the log, whatever its records hold: a line that `JSON.stringify` cannot write
 * (nested past the stack, longer than the longest string) becomes that trajectory's
 * {@link EncodeError} line, never an exception that stops the run or a response.
 *
 * @since 0.4.0
 * @category encoding
 */
export const encodeGroup = (group: Group, failedGroups: FailedGroups = "keep"): EncodedGroup => {
  const textsOf = (records: ReadonlyArray<TrajectoryRecord>): Array<string> | undefined => {
    const masked = failedGroups !== "keep" && records.some((r) => r.error !== undefined)
    if (masked && failedGroups === "drop") return []
    const texts: Array<string> = []
    for (const record of records) {
      const text = attempt(masked ? { ...record, advantage: undefined } : record)
      if (typeof text !== "string") return undefined
      texts.push(text)
    }
    return texts
  }
  // (`lines` made when asked for: the command line writes `texts`, and made for each group, they
  // were strings and a list per line that nothing read)
  const encoded = (group: Group, texts: ReadonlyArray<string>): EncodedGroup => ({
    group,
    get lines() {
      return texts.map((text) => text + "\n")
    },
    texts
  })
  const texts = textsOf(group.records)
  if (texts !== undefined) return encoded(group, texts)
  // (rare: a line the record check passed but JSON.stringify cannot write)
  const fixed = group.records.map((record) => {
    const text = attempt(record)
    return typeof text === "string" ? record : unwritable(record, text.thrown)
  })
  // (the group's advantages again, as the run computes them: the failed record has no reward)
  const scores = Reward.advantages(fixed.map((r) => r.reward))
  const records = fixed.map((r, i) => ({ ...r, advantage: scores[i] }))
  return encoded({ ...group, records }, textsOf(records) ?? [])
}

/**
 * The text a group adds to the log under a failed-groups policy: one line per trajectory, or
 * nothing (see {@link encodeGroup}: a line that cannot be encoded is written with an
 * {@link EncodeError} instead, never lost).
 *
 * @since 0.1.0
 * @category encoding
 */
export const groupText = (group: Group, failedGroups: FailedGroups = "keep", runner?: string): string =>
  encodeGroup(
    runner === undefined ? group : { ...group, records: group.records.map((record) => ({ ...record, runner })) },
    failedGroups
  ).lines.join("")

/**
 * One record's line (without its newline) and the record it was written from: the record itself,
 * or, when its line cannot be written, its {@link EncodeError} record (see {@link encodeGroup}).
 *
 * @since 0.4.0
 * @category encoding
 */
export const encodeRecord = (record: TrajectoryRecord): { readonly record: TrajectoryRecord; readonly text: string } => {
  const text = attempt(record)
  if (typeof text === "string") return { record, text }
  const fixed = unwritable(record, text.thrown)
  const again = attempt(fixed)
  return { record: fixed, text: typeof again === "string" ? again : encodeLine({ ...fixed, row: { ...fixed.row, envConfig: {} } }) }
}

/**
 * A writer of the log: `write` appends the lines of some items (each group's trajectories; nothing
 * for a row failure) in one write, so a group is never split across writes; `flush` asks the OS to
 * put what was written on disk (when something was written since the last flush). The file is
 * flushed and closed with the scope.
 *
 * @since 0.1.0
 * @category models
 */
export interface Writer {
  readonly write: (items: Iterable<Item>) => Effect.Effect<void, PlatformError>
  /**
   * Appends lines already encoded (each ending in a newline, e.g. a chunk's {@link encodeGroup}
   * lines), in one write: each line is encoded to UTF-8 on its own, so a write's text need not fit
   * in one JavaScript string.
   */
  readonly writeLines: (lines: Iterable<string>) => Effect.Effect<void, PlatformError>
  /**
   * {@link writeLines} of lines given without their newlines (each one a line's text, e.g. a chunk's
   * {@link encodeGroup} texts): the writer adds each newline's byte. A line and its newline joined
   * as strings are two pieces, which the UTF-8 encoder first copied into one: a third of the
   * encoding's time for a FrozenLake line.
   *
   * @since 0.5.0
   */
  readonly writeJsonLines: (texts: Iterable<string>) => Effect.Effect<void, PlatformError>
  readonly flush: Effect.Effect<void, PlatformError>
  /** Appends text already made of whole log lines (groups encoded elsewhere, e.g. by a cluster runner). */
  readonly writeText: (text: string) => Effect.Effect<void, PlatformError>
}

/**
 * How {@link open} opens the log: `append` to it (resuming a run) instead of truncating it, and the
 * {@link FailedGroups} policy.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenOptions {
  readonly append?: boolean | undefined
  readonly failedGroups?: FailedGroups | undefined
}

/** The first size of the writer's kept buffer, and the most it keeps (a larger write's bytes are its own). */
const INITIAL_BYTES = 64 * 1024
const REUSED_BYTES = 16 * 1024 * 1024

/**
 * Opens the log file: truncated (the default) or appended to.
 *
 * @since 0.1.0
 * @category constructors
 */
export const open = (
  path: string,
  options: OpenOptions = {}
): Effect.Effect<Writer, PlatformError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = yield* fs.open(path, { flag: options.append === true ? "a" : "w" })
    const encoder = new TextEncoder()
    const policy = options.failedGroups ?? "keep"
    // The size of the whole lines written: a write that fails half way (a full disk) is cut back
    // to it, so the log never ends in a torn line.
    let size = options.append === true ? Number((yield* file.stat).size) : 0
    let dirty = false
    const flush = Effect.suspend(() => {
      if (!dirty) return Effect.void
      dirty = false
      return file.sync
    })
    yield* Effect.addFinalizer(() => Effect.ignore(flush))
    // The UTF-8 bytes of a write go into one buffer, kept and reused from write to write (grown
    // as needed; one of up to REUSED_BYTES is kept), each group's text encoded as it is made: a
    // new Uint8Array per write cost about 80 us per group of 8 FrozenLake lines (20 KB: the
    // allocation, not the copy), and encoding a chunk's text made of hundreds of groups at once
    // cost 5 us per KB (the flattening of one huge concatenation), against 1 us per KB for a
    // group at a time (BENCHMARKS.md, workload 10). A write that finds the buffer in use (a
    // write that threw while encoding lost it) allocates its own.
    //
    // One write at a time, and a write once begun is not interrupted: the file writes at a
    // position it counts itself, and an interrupted write went on in the OS without being counted
    // (the next write, at the old position, was overwritten by it, or cut into it: a torn line in
    // the middle of the log; and the buffer was still read by it), and a write that failed half
    // way cut the file back to `size` after another fiber's write had gone on past its bytes
    // (that write lost while counted in `size`: a later cut-back extended the file with zeros).
    let kept: Uint8Array | undefined = new Uint8Array(INITIAL_BYTES)
    const lock = yield* Semaphore.make(1)
    const writeTexts = (
      each: (add: (text: string, newline?: boolean) => void) => void
    ): Effect.Effect<void, PlatformError> =>
      lock.withPermits(1)(Effect.uninterruptible(Effect.suspend(() => {
        let buffer = kept ?? new Uint8Array(INITIAL_BYTES)
        kept = undefined
        let length = 0
        const grow = (to: number) => {
          const grown = new Uint8Array(to)
          grown.set(buffer.subarray(0, length))
          buffer = grown
        }
        // Grown to what is needed, doubled up to REUSED_BYTES, and past it by half again at least:
        // grown to the exact need past it, a write of many large lines copied its whole buffer for
        // each line (quadratic: 24 lines of 20 MB took 20 s, and 35 s with their newlines, each
        // newline at a full buffer one more copy).
        const grownSize = (need: number) =>
          Math.max(need, Math.min(buffer.length * 2, REUSED_BYTES), buffer.length >= REUSED_BYTES ? buffer.length + (buffer.length >> 1) : 0)
        const add = (text: string, newline?: boolean) => {
          // (room for the newline asked for with the text's, not found missing after it)
          const extra = newline === true ? 1 : 0
          encode(text, extra)
          if (extra === 1) {
            if (length === buffer.length) grow(grownSize(length + 1))
            buffer[length++] = 10
          }
        }
        const encode = (text: string, extra: number) => {
          // at most 3 bytes of UTF-8 per UTF-16 code unit: a text that fits so is encoded at once
          if (length + text.length * 3 + extra <= buffer.length) {
            length += encoder.encodeInto(text, length === 0 ? buffer : buffer.subarray(length)).written
            return
          }
          // else grown for what it needs (not 3 bytes per code unit up front: an ASCII text of
          // 100 MB took a buffer of 300 MB), in pieces: encodeInto stops before a character that
          // does not fit, never inside a surrogate pair
          let rest = text
          if (length + rest.length + extra > buffer.length) grow(grownSize(length + rest.length + extra))
          for (;;) {
            const { read, written } = encoder.encodeInto(rest, buffer.subarray(length))
            length += written
            if (read === rest.length) return
            rest = rest.slice(read)
            grow(grownSize(length + rest.length * 3 + extra))
          }
        }
        each(add)
        const reused = buffer.length <= REUSED_BYTES ? buffer : undefined
        if (length === 0) {
          kept = reused
          return Effect.void
        }
        return writeBytes(buffer.subarray(0, length), reused)
      })))
    const writeBytes = (bytes: Uint8Array, buffer: Uint8Array | undefined): Effect.Effect<void, PlatformError> => {
      dirty = true
      return file.writeAll(bytes).pipe(
        Effect.tap(Effect.sync(() => void (size += bytes.length))),
        Effect.tapError(() => Effect.ignore(file.truncate(size))),
        // (given back however the write ends: it is never interrupted, so the OS no longer reads it)
        Effect.ensuring(Effect.sync(() => {
          if (buffer !== undefined) kept = buffer
        }))
      )
    }
    return {
      write: (items) =>
        writeTexts((add) => {
          for (const item of items) {
            if (item._tag === "Group") for (const text of encodeGroup(item, policy).texts) add(text, true)
          }
        }),
      writeLines: (lines) =>
        writeTexts((add) => {
          for (const line of lines) add(line)
        }),
      writeJsonLines: (texts) =>
        writeTexts((add) => {
          for (const text of texts) add(text, true)
        }),
      // (cut back on failure as the others: it wrote on without counting `size`, so a full disk
      // left a cluster run's log torn, and a later failed write cut back into its lines)
      writeText: (text) => writeTexts((add) => add(text)),
      flush
    }
  })
