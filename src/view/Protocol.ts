/**
 * What the viewer's server and its page say to each other: the answers of `/api/meta`, the page's
 * start-up configuration, the data a self-contained `--html` report embeds, and the live events
 * (a run's progress, a rollout server's dashboard). Shared by both sides.
 *
 * @since 0.1.0
 */
import type { Detail } from "./Detail.js"
import type { EndReason, LogMeta, Overview, Summary } from "./Model.js"

/**
 * A run in progress as the live page shows it.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunProgress {
  readonly done: number
  /** Trajectories the run will have (rows x generations), when known. */
  readonly total: number | null
  readonly trajectoriesPerSecond: number
  readonly turnsPerSecond: number
  readonly meanReward: number
  readonly successRate: number
  readonly failures: number
  readonly badRows: number
  readonly elapsedMs: number
  readonly finished: boolean
}

/**
 * `GET /api/meta`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Meta {
  readonly version: string
  readonly logs: ReadonlyArray<LogMeta>
  /** What decodes token ids, when the viewer was given a tokenizer. */
  readonly tokenizer: string | null
  /** Env names with a renderer. */
  readonly renderers: ReadonlyArray<string>
  /** The page shows a run in progress. */
  readonly live: boolean
  readonly progress: RunProgress | null
  /** Set in a size-capped `--html` report: what it leaves out. */
  readonly capNote: string | null
}

/**
 * A summary as an array, in {@link SUMMARY_FIELDS} order: a report embeds many.
 *
 * @since 0.1.0
 * @category models
 */
export type PackedSummary = readonly [
  line: number,
  id: string,
  row: number,
  generation: number,
  env: string | null,
  endReason: EndReason,
  reward: number | null,
  envReward: number,
  advantage: number | null,
  turns: number,
  totalMs: number,
  modelMs: number,
  envMs: number,
  errorTag: string | null,
  errorMessage: string | null,
  tokens: 0 | 1,
  config: string,
  waitMs: number,
  solved: 0 | 1 | null,
  rewards: Readonly<Record<string, number>> | null,
  truncated: "max_turns" | "length" | null,
  completionTokens: number | null,
  completionChars: number
]

/**
 * @since 0.1.0
 * @category encoding
 */
export const pack = (s: Summary): PackedSummary => [
  s.line,
  s.id,
  s.row,
  s.generation,
  s.env,
  s.endReason,
  s.reward,
  s.envReward,
  s.advantage,
  s.turns,
  s.totalMs,
  s.modelMs,
  s.envMs,
  s.errorTag,
  s.errorMessage,
  s.tokens ? 1 : 0,
  s.config,
  s.waitMs,
  s.solved === null ? null : s.solved ? 1 : 0,
  s.rewards,
  s.truncated,
  s.completionTokens,
  s.completionChars
]

/**
 * @since 0.1.0
 * @category encoding
 */
export const unpack = (p: PackedSummary): Summary => ({
  line: p[0],
  id: p[1],
  row: p[2],
  generation: p[3],
  env: p[4],
  endReason: p[5],
  reward: p[6],
  envReward: p[7],
  advantage: p[8],
  turns: p[9],
  totalMs: p[10],
  modelMs: p[11],
  envMs: p[12],
  errorTag: p[13],
  errorMessage: p[14],
  tokens: p[15] === 1,
  config: p[16],
  waitMs: p[17],
  solved: p[18] === null ? null : p[18] === 1,
  rewards: p[19],
  truncated: p[20],
  completionTokens: p[21],
  completionChars: p[22]
})

/**
 * The data of a self-contained report (`--html`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Embedded {
  readonly meta: Meta
  /** One per log, over all of its trajectories. */
  readonly overviews: ReadonlyArray<Overview>
  /** One list per log: the trajectories the report can list (all, unless capped). */
  readonly summaries: ReadonlyArray<ReadonlyArray<PackedSummary>>
  /** The trajectories the report holds in full, by `log:line`. */
  readonly details: Readonly<Record<string, Detail>>
}

/**
 * A rollout server's state for `/dashboard`.
 *
 * @since 0.1.0
 * @category models
 */
export interface DashboardSnapshot {
  readonly at: number
  readonly requestsInFlight: number
  readonly trajectoriesInFlight: number
  readonly admitted: number
  readonly completed: number
  readonly cancelled: number
  readonly rejected: number
  readonly failed: number
  readonly draining: boolean
  /** Trajectories completed per second, over the last 10 seconds. */
  readonly completedPerSecond: number
  /** Trajectories admitted per second, over the last 10 seconds. */
  readonly admittedPerSecond: number
  readonly maxTrajectoriesInFlight: number | null
  readonly recentFailures: ReadonlyArray<{
    readonly at: number
    readonly id: string
    readonly uuid: string | null
    readonly env: string | null
    readonly tag: string
    readonly message: string
  }>
}

/**
 * How the page starts: against a viewer's API, from embedded data, or as a rollout server's
 * dashboard.
 *
 * @since 0.1.0
 * @category models
 */
export type PageConfig =
  | { readonly mode: "server"; readonly api: string }
  | { readonly mode: "report"; readonly data: Embedded }
  | { readonly mode: "dashboard"; readonly events: string; readonly title: string }
