/**
 * The report's data model, shared by the viewer's server (Node) and its page (the browser): one
 * trajectory's summary, the filters of the trajectory browser and their URL form, the overview's
 * aggregates and the comparison of two logs. Pure functions over arrays of summaries: the server
 * runs them over its index, a self-contained `--html` page over the summaries embedded in it, so
 * both answer a query the same way.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category models
 */
export type EndReason = "done" | "max_turns" | "error"

/**
 * @since 0.1.0
 * @category constants
 */
export const END_REASONS: ReadonlyArray<EndReason> = ["done", "max_turns", "error"]

/**
 * What the browser and the overview need of one log line, without its conversation.
 *
 * @since 0.1.0
 * @category models
 */
export interface Summary {
  /** The line number in the file (1-based). */
  readonly line: number
  readonly id: string
  readonly row: number
  readonly generation: number
  readonly env: string | null
  readonly endReason: EndReason
  /** The weighted reward; `null` for a failed trajectory. */
  readonly reward: number | null
  /** The env's total reward (`rollout_infos.total_reward`). */
  readonly envReward: number
  readonly advantage: number | null
  readonly turns: number
  readonly totalMs: number
  readonly modelMs: number
  /** The time inside the env (`env_ms`), without waiting. */
  readonly envMs: number
  /** Time spent waiting to be scheduled (`wait_ms`, `reset_wait_ms`; 0 in logs written before them). */
  readonly waitMs: number
  readonly errorTag: string | null
  readonly errorMessage: string | null
  /** The line has token fields (`response_token_ids`). */
  readonly tokens: boolean
  /** `env_config` as JSON text, to tell whether two logs ran the same row. */
  readonly config: string
  /** The env's `is_success` on the last step (a failed trajectory is not solved); `null`: the env did not say. */
  readonly solved: boolean | null
  /** The reward columns (`rewards`); `null` for a failed trajectory. */
  readonly rewards: Readonly<Record<string, number>> | null
  /** Cut off rather than finished: by `max_turns`, or its last reply ran out of tokens (`length`). */
  readonly truncated: "max_turns" | "length" | null
  /** Tokens of the model's replies, when every turn has token ids. */
  readonly completionTokens: number | null
  /** Characters of the model's replies. */
  readonly completionChars: number
}

/**
 * As the run's summary counts it: ended `done` with a positive env reward.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isSuccess = (s: Summary): boolean => s.errorTag === null && s.endReason === "done" && s.envReward > 0

/**
 * Something wrong with a log: where (file, 1-based line) and what.
 *
 * @since 0.1.0
 * @category models
 */
export interface Problem {
  readonly file: string
  readonly line: number | null
  readonly kind: "empty" | "torn" | "malformed" | "shape" | "not-jsonl" | "unreadable"
  readonly detail: string
}

/**
 * The state of one log as the page sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface LogMeta {
  readonly index: number
  readonly name: string
  readonly path: string
  readonly bytes: number
  /** Bytes indexed so far (equal to `bytes` once indexing is done). */
  readonly indexedBytes: number
  readonly trajectories: number
  readonly indexing: boolean
  /** The first problems met (at most 100), and how many there are in all. */
  readonly problems: ReadonlyArray<Problem>
  readonly problemCount: number
  /** Lines the page can browse: all of them, or fewer in a size-capped `--html` file. */
  readonly browsable: number
  /** Lines whose whole trajectory the page can open (fewer in a size-capped `--html` file). */
  readonly detailed: number
}

// ---------------------------------------------------------------------------------------------
// The browser's query
// ---------------------------------------------------------------------------------------------

/**
 * @since 0.1.0
 * @category models
 */
export type SortKey = "line" | "reward" | "turns" | "time" | "advantage"

/**
 * @since 0.1.0
 * @category constants
 */
export const SORT_KEYS: ReadonlyArray<SortKey> = ["line", "reward", "turns", "time", "advantage"]

/**
 * The trajectory browser's filters, sort and page.
 *
 * @since 0.1.0
 * @category models
 */
export interface Query {
  readonly env?: string | undefined
  readonly end?: EndReason | undefined
  readonly tag?: string | undefined
  readonly row?: number | undefined
  readonly min?: number | undefined
  readonly max?: number | undefined
  /** Text searched in the line's JSON text (as JSON writes it in a string), ignoring the case of ASCII letters. */
  readonly q?: string | undefined
  readonly sort: SortKey
  readonly dir: "asc" | "desc"
  readonly offset: number
  readonly limit: number
}

/**
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_QUERY: Query = { sort: "line", dir: "asc", offset: 0, limit: 50 }

/**
 * @since 0.1.0
 * @category constants
 */
export const MAX_LIMIT = 500

const finite = (text: string | null): number | undefined => {
  if (text === null || text.trim() === "") return undefined
  const n = Number(text)
  return Number.isFinite(n) ? n : undefined
}

const nonEmpty = (text: string | null): string | undefined => (text === null || text === "" ? undefined : text)

/**
 * The query of URL parameters (`env`, `end`, `tag`, `row`, `min`, `max`, `q`, `sort`, `dir`,
 * `offset`, `limit`); values that make no sense fall back to the defaults.
 *
 * @since 0.1.0
 * @category url
 */
export const parseQuery = (params: URLSearchParams): Query => {
  const end = params.get("end")
  const sortText = params.get("sort")
  const sort = SORT_KEYS.includes(sortText as SortKey) ? (sortText as SortKey) : DEFAULT_QUERY.sort
  const dir = params.get("dir")
  const row = finite(params.get("row"))
  const offset = finite(params.get("offset"))
  const limit = finite(params.get("limit"))
  return {
    env: nonEmpty(params.get("env")),
    end: END_REASONS.includes(end as EndReason) ? (end as EndReason) : undefined,
    tag: nonEmpty(params.get("tag")),
    row: row === undefined ? undefined : Math.trunc(row),
    min: finite(params.get("min")),
    max: finite(params.get("max")),
    q: nonEmpty(params.get("q")),
    sort,
    // Without a direction: largest first, except in file order.
    dir: dir === "desc" ? "desc" : dir === "asc" ? "asc" : sort !== "line" ? "desc" : "asc",
    offset: offset === undefined ? 0 : Math.max(0, Math.trunc(offset)),
    limit: limit === undefined ? DEFAULT_QUERY.limit : Math.min(MAX_LIMIT, Math.max(1, Math.trunc(limit)))
  }
}

/**
 * The URL parameters of a query, defaults left out (the inverse of {@link parseQuery}).
 *
 * @since 0.1.0
 * @category url
 */
export const queryParams = (query: Partial<Query>): URLSearchParams => {
  const params = new URLSearchParams()
  const set = (key: string, value: string | number | undefined) => {
    if (value !== undefined && value !== "") params.set(key, String(value))
  }
  set("env", query.env)
  set("end", query.end)
  set("tag", query.tag)
  set("row", query.row)
  set("min", query.min)
  set("max", query.max)
  set("q", query.q)
  if (query.sort !== undefined && query.sort !== "line") set("sort", query.sort)
  if (query.dir !== undefined) {
    const implied = query.sort === undefined || query.sort === "line" ? "asc" : "desc"
    if (query.dir !== implied) set("dir", query.dir)
  }
  if (query.offset !== undefined && query.offset > 0) set("offset", query.offset)
  if (query.limit !== undefined && query.limit !== DEFAULT_QUERY.limit) set("limit", query.limit)
  return params
}

/**
 * A page of the browser's results.
 *
 * @since 0.1.0
 * @category models
 */
export interface Page {
  /** Lines considered (all browsable lines). */
  readonly total: number
  readonly matched: number
  readonly offset: number
  readonly items: ReadonlyArray<Summary>
}

const sortValue = (s: Summary, key: SortKey): number | null => {
  switch (key) {
    case "line":
      return s.line
    case "reward":
      return s.reward
    case "turns":
      return s.turns
    case "time":
      return s.totalMs
    case "advantage":
      return s.advantage
  }
}

/**
 * The summaries that pass the filters (all but the text search, which `text` decides), sorted;
 * missing values (failed trajectories' rewards) last whatever the direction, then by line.
 *
 * @since 0.1.0
 * @category querying
 */
export const select = (
  summaries: ReadonlyArray<Summary>,
  query: Query,
  text?: ((s: Summary) => boolean) | undefined
): ReadonlyArray<Summary> => {
  const unfiltered = query.env === undefined && query.end === undefined && query.tag === undefined &&
    query.row === undefined && query.min === undefined && query.max === undefined && text === undefined
  // The whole log in file order: the summaries as they are, not a copy (a large log's first page).
  if (unfiltered && query.sort === "line" && query.dir === "asc") return summaries
  const out: Array<Summary> = unfiltered ? summaries.slice() : []
  for (const s of unfiltered ? [] : summaries) {
    if (query.env !== undefined && (s.env ?? "") !== query.env) continue
    if (query.end !== undefined && s.endReason !== query.end) continue
    if (query.tag !== undefined && s.errorTag !== query.tag) continue
    if (query.row !== undefined && s.row !== query.row) continue
    if (query.min !== undefined && (s.reward === null || s.reward < query.min)) continue
    if (query.max !== undefined && (s.reward === null || s.reward > query.max)) continue
    if (text !== undefined && !text(s)) continue
    out.push(s)
  }
  if (query.sort === "line" && query.dir === "asc") return out
  const sign = query.dir === "asc" ? 1 : -1
  return out.sort((a, b) => {
    const x = sortValue(a, query.sort)
    const y = sortValue(b, query.sort)
    if (x === null || y === null) return x === y ? a.line - b.line : x === null ? 1 : -1
    return x === y ? a.line - b.line : sign * (x - y)
  })
}

/**
 * One page of selected summaries.
 *
 * @since 0.1.0
 * @category querying
 */
export const page = (selected: ReadonlyArray<Summary>, total: number, query: Query): Page => ({
  total,
  matched: selected.length,
  offset: query.offset,
  items: selected.slice(query.offset, query.offset + query.limit)
})

// ---------------------------------------------------------------------------------------------
// The overview
// ---------------------------------------------------------------------------------------------

/**
 * Series of the overview's charts: at most {@link MAX_POINTS} points, rows merged into bins when a
 * log has more (`binned` rows per point).
 *
 * @since 0.1.0
 * @category models
 */
export interface RowSeries {
  readonly x: ReadonlyArray<number>
  readonly mean: ReadonlyArray<number | null>
  readonly min: ReadonlyArray<number | null>
  readonly max: ReadonlyArray<number | null>
  readonly binned: number
}

/**
 * @since 0.1.0
 * @category models
 */
export interface FailureGroup {
  readonly tag: string
  readonly count: number
  readonly examples: ReadonlyArray<{ readonly line: number; readonly id: string; readonly message: string }>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Overview {
  readonly trajectories: number
  readonly groups: number
  readonly successes: number
  readonly successRate: number
  /** Trajectories the env said were solved (`is_success`), over all; `null` when no env said either way. */
  readonly solved: number | null
  readonly solvedRate: number | null
  /** Trajectories whose env said whether they were solved. */
  readonly solvedReported: number
  /** The mean of each reward column over the trajectories that did not fail, in the log's column order. */
  readonly meanRewards: ReadonlyArray<{ readonly column: string; readonly mean: number }>
  /** Trajectories cut off rather than finished (`max_turns`, or a last reply out of tokens). */
  readonly truncated: { readonly maxTurns: number; readonly length: number; readonly rate: number }
  /** Per trajectory: tokens of the model's replies (over those whose every turn has ids; `null`: none) and characters. */
  readonly completion: { readonly meanTokens: number | null; readonly meanChars: number | null }
  /** Trajectories that did not fail: the means are over these, as in the run's summary. */
  readonly scored: number
  readonly meanReward: number | null
  readonly meanEnvReward: number | null
  readonly meanTurns: number | null
  readonly failures: number
  readonly endReasons: Readonly<Record<EndReason, number>>
  readonly envs: ReadonlyArray<{ readonly env: string; readonly count: number; readonly meanReward: number | null }>
  readonly turns: ReadonlyArray<{ readonly turns: number; readonly count: number }>
  readonly failuresByTag: ReadonlyArray<FailureGroup>
  readonly time: {
    readonly totalMs: number
    readonly modelMs: number
    readonly envMs: number
    /** Waiting to be scheduled (not in `envMs`). */
    readonly waitMs: number
    readonly meanTotalMs: number | null
  }
  readonly tokens: number
  readonly rewardHistogram: {
    readonly x: ReadonlyArray<number>
    readonly counts: ReadonlyArray<number>
    readonly width: number
    readonly discrete: boolean
  }
  readonly rewardByRow: RowSeries
  readonly advantageByGroup: RowSeries & {
    /** Groups whose scored rewards are all equal: every advantage is 0, the group teaches nothing. */
    readonly flatGroups: number
    readonly groupsScored: number
  }
  readonly turnsVsReward: {
    /** Distinct (turns, reward) pairs with their counts. */
    readonly points: ReadonlyArray<readonly [number, number, number]>
    readonly pointsCapped: boolean
    readonly meanByTurns: ReadonlyArray<readonly [number, number]>
  }
}

/**
 * @since 0.1.0
 * @category constants
 */
export const MAX_POINTS = 2000

const EXAMPLES = 5
const HISTOGRAM_BINS = 30

interface Acc {
  n: number
  sum: number
  min: number
  max: number
}

const acc = (): Acc => ({ n: 0, sum: 0, min: Infinity, max: -Infinity })
const push = (a: Acc, x: number) => {
  a.n++
  a.sum += x
  if (x < a.min) a.min = x
  if (x > a.max) a.max = x
}

/** Per key (sorted) accumulators merged into at most MAX_POINTS bins of consecutive keys. */
const series = (byKey: Map<number, Acc>): RowSeries => {
  const keys = [...byKey.keys()].sort((a, b) => a - b)
  const binned = Math.max(1, Math.ceil(keys.length / MAX_POINTS))
  const x: Array<number> = []
  const mean: Array<number | null> = []
  const min: Array<number | null> = []
  const max: Array<number | null> = []
  for (let i = 0; i < keys.length; i += binned) {
    const merged = acc()
    for (let j = i; j < Math.min(keys.length, i + binned); j++) {
      const a = byKey.get(keys[j])!
      merged.n += a.n
      merged.sum += a.sum
      merged.min = Math.min(merged.min, a.min)
      merged.max = Math.max(merged.max, a.max)
    }
    x.push(keys[i])
    mean.push(merged.n === 0 ? null : merged.sum / merged.n)
    min.push(merged.n === 0 ? null : merged.min)
    max.push(merged.n === 0 ? null : merged.max)
  }
  return { x, mean, min, max, binned }
}

/**
 * The overview of a log: counts and means as the run's summary computes them (`effect-gym run`
 * prints the same figures), and the series of its charts.
 *
 * @since 0.1.0
 * @category aggregating
 */
export const overview = (summaries: ReadonlyArray<Summary>): Overview => {
  const rows = new Set<number>()
  const endReasons: Record<EndReason, number> = { done: 0, max_turns: 0, error: 0 }
  const envs = new Map<string, Acc & { count: number }>()
  const turns = new Map<number, number>()
  const tags = new Map<string, { count: number; examples: Array<FailureGroup["examples"][number]> }>()
  const rewardByRow = new Map<number, Acc>()
  const advantageByRow = new Map<number, Acc>()
  const pairs = new Map<string, [number, number, number]>()
  const byTurns = new Map<number, Acc>()
  let successes = 0
  let solved = 0
  let solvedReported = 0
  const rewardSums = new Map<string, number>()
  let truncatedByMaxTurns = 0
  let truncatedByLength = 0
  let completionTokens = 0
  let tokenTrajectories = 0
  let completionChars = 0
  let waitMs = 0
  let scored = 0
  let rewardSum = 0
  let envRewardSum = 0
  let turnSum = 0
  let failures = 0
  let tokens = 0
  let totalMs = 0
  let modelMs = 0
  let envMs = 0
  let rewardMin = Infinity
  let rewardMax = -Infinity
  const distinct = new Set<number>()
  for (const s of summaries) {
    rows.add(s.row)
    endReasons[s.endReason]++
    turns.set(s.turns, (turns.get(s.turns) ?? 0) + 1)
    turnSum += s.turns
    totalMs += s.totalMs
    modelMs += s.modelMs
    envMs += s.envMs
    waitMs += s.waitMs
    if (s.tokens) tokens++
    if (s.solved !== null) solvedReported++
    if (s.solved === true) solved++
    if (s.truncated === "max_turns") truncatedByMaxTurns++
    else if (s.truncated === "length") truncatedByLength++
    if (s.completionTokens !== null) {
      tokenTrajectories++
      completionTokens += s.completionTokens
    }
    completionChars += s.completionChars
    const envName = s.env ?? "(none)"
    let env = envs.get(envName)
    if (env === undefined) envs.set(envName, env = { ...acc(), count: 0 })
    env.count++
    if (s.errorTag !== null) {
      failures++
      let tag = tags.get(s.errorTag)
      if (tag === undefined) tags.set(s.errorTag, tag = { count: 0, examples: [] })
      tag.count++
      if (tag.examples.length < EXAMPLES) {
        tag.examples.push({ line: s.line, id: s.id, message: s.errorMessage ?? "" })
      }
      continue
    }
    scored++
    if (isSuccess(s)) successes++
    if (s.rewards !== null) {
      for (const column in s.rewards) rewardSums.set(column, (rewardSums.get(column) ?? 0) + s.rewards[column])
    }
    envRewardSum += s.envReward
    const reward = s.reward ?? 0
    rewardSum += reward
    push(env, reward)
    if (reward < rewardMin) rewardMin = reward
    if (reward > rewardMax) rewardMax = reward
    if (distinct.size <= HISTOGRAM_BINS) distinct.add(reward)
    let byRow = rewardByRow.get(s.row)
    if (byRow === undefined) rewardByRow.set(s.row, byRow = acc())
    push(byRow, reward)
    if (s.advantage !== null) {
      let adv = advantageByRow.get(s.row)
      if (adv === undefined) advantageByRow.set(s.row, adv = acc())
      push(adv, s.advantage)
    }
    const key = `${s.turns}|${reward}`
    const pair = pairs.get(key)
    if (pair === undefined) pairs.set(key, [s.turns, reward, 1])
    else pair[2]++
    let t = byTurns.get(s.turns)
    if (t === undefined) byTurns.set(s.turns, t = acc())
    push(t, reward)
  }

  // Reward histogram: one bar per value when there are few distinct values, else equal-width bins.
  let histogram: Overview["rewardHistogram"]
  if (scored === 0) {
    histogram = { x: [], counts: [], width: 1, discrete: true }
  } else if (distinct.size <= HISTOGRAM_BINS) {
    const values = [...distinct].sort((a, b) => a - b)
    const counts = new Map(values.map((v) => [v, 0]))
    for (const s of summaries) if (s.errorTag === null) counts.set(s.reward ?? 0, counts.get(s.reward ?? 0)! + 1)
    let gap = Infinity
    for (let i = 1; i < values.length; i++) gap = Math.min(gap, values[i] - values[i - 1])
    histogram = { x: values, counts: values.map((v) => counts.get(v)!), width: Number.isFinite(gap) ? gap : 1, discrete: true }
  } else {
    const width = (rewardMax - rewardMin) / HISTOGRAM_BINS
    const counts = new Array<number>(HISTOGRAM_BINS).fill(0)
    for (const s of summaries) {
      if (s.errorTag !== null) continue
      const i = Math.min(HISTOGRAM_BINS - 1, Math.floor(((s.reward ?? 0) - rewardMin) / width))
      counts[i]++
    }
    histogram = {
      x: counts.map((_, i) => rewardMin + (i + 0.5) * width),
      counts,
      width,
      discrete: false
    }
  }

  let flatGroups = 0
  for (const a of rewardByRow.values()) if (a.n > 1 && a.min === a.max) flatGroups++
  let points = [...pairs.values()].sort((a, b) => a[0] - b[0] || a[1] - b[1])
  const pointsCapped = points.length > MAX_POINTS
  if (pointsCapped) points = points.sort((a, b) => b[2] - a[2]).slice(0, MAX_POINTS).sort((a, b) => a[0] - b[0] || a[1] - b[1])

  return {
    trajectories: summaries.length,
    groups: rows.size,
    successes,
    successRate: summaries.length === 0 ? 0 : successes / summaries.length,
    solved: solvedReported === 0 ? null : solved,
    solvedRate: solvedReported === 0 ? null : solved / summaries.length,
    solvedReported,
    meanRewards: [...rewardSums.entries()].map(([column, sum]) => ({ column, mean: sum / scored })),
    truncated: {
      maxTurns: truncatedByMaxTurns,
      length: truncatedByLength,
      rate: summaries.length === 0 ? 0 : (truncatedByMaxTurns + truncatedByLength) / summaries.length
    },
    completion: {
      meanTokens: tokenTrajectories === 0 ? null : completionTokens / tokenTrajectories,
      meanChars: summaries.length === 0 ? null : completionChars / summaries.length
    },
    scored,
    meanReward: scored === 0 ? null : rewardSum / scored,
    meanEnvReward: scored === 0 ? null : envRewardSum / scored,
    meanTurns: summaries.length === 0 ? null : turnSum / summaries.length,
    failures,
    endReasons,
    envs: [...envs.entries()]
      .map(([env, a]) => ({ env, count: a.count, meanReward: a.n === 0 ? null : a.sum / a.n }))
      .sort((a, b) => b.count - a.count || a.env.localeCompare(b.env)),
    turns: [...turns.entries()].map(([t, count]) => ({ turns: t, count })).sort((a, b) => a.turns - b.turns),
    failuresByTag: [...tags.entries()]
      .map(([tag, t]) => ({ tag, count: t.count, examples: t.examples }))
      .sort((a, b) => b.count - a.count || a.tag.localeCompare(b.tag)),
    time: { totalMs, modelMs, envMs, waitMs, meanTotalMs: summaries.length === 0 ? null : totalMs / summaries.length },
    tokens,
    rewardHistogram: histogram,
    rewardByRow: series(rewardByRow),
    advantageByGroup: { ...series(advantageByRow), flatGroups, groupsScored: rewardByRow.size },
    turnsVsReward: {
      points,
      pointsCapped,
      meanByTurns: [...byTurns.entries()].sort((a, b) => a[0] - b[0]).map(([t, a]) => [t, a.sum / a.n] as const)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Comparing two logs
// ---------------------------------------------------------------------------------------------

/**
 * One dataset row in both logs: its mean reward in each (over the trajectories that did not fail)
 * and the change.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompareRow {
  readonly row: number
  readonly env: string | null
  readonly a: { readonly n: number; readonly failed: number; readonly mean: number | null; readonly successes: number }
  readonly b: { readonly n: number; readonly failed: number; readonly mean: number | null; readonly successes: number }
  /** `b.mean - a.mean`; `null` when either side has no scored trajectory. */
  readonly delta: number | null
  /** The row's `env_config` differs between the logs: they did not run the same dataset row. */
  readonly configDiffers: boolean
}

/**
 * @since 0.1.0
 * @category models
 */
export type CompareSort = "change" | "delta" | "row"

/**
 * @since 0.1.0
 * @category models
 */
export interface Comparison {
  readonly common: number
  readonly onlyA: number
  readonly onlyB: number
  /** A's and B's mean reward and success rate over the rows in both logs (so that B − A is a change, not a change of dataset). */
  readonly meanA: number | null
  readonly meanB: number | null
  readonly successRateA: number
  readonly successRateB: number
  readonly improved: number
  readonly worsened: number
  readonly unchanged: number
  readonly configDiffers: number
  /** The change per row (rows in both logs), binned as the overview's series. */
  readonly deltaByRow: RowSeries
  readonly matched: number
  readonly offset: number
  readonly rows: ReadonlyArray<CompareRow>
}

interface Side {
  n: number
  failed: number
  sum: number
  scored: number
  successes: number
  env: string | null
  config: string
}

const sides = (summaries: ReadonlyArray<Summary>): Map<number, Side> => {
  const out = new Map<number, Side>()
  for (const s of summaries) {
    let side = out.get(s.row)
    if (side === undefined) {
      out.set(s.row, side = { n: 0, failed: 0, sum: 0, scored: 0, successes: 0, env: s.env, config: s.config })
    }
    side.n++
    if (s.errorTag !== null) {
      side.failed++
      continue
    }
    side.scored++
    side.sum += s.reward ?? 0
    if (isSuccess(s)) side.successes++
  }
  return out
}

const sideView = (side: Side | undefined) =>
  side === undefined
    ? { n: 0, failed: 0, mean: null, successes: 0 }
    : { n: side.n, failed: side.failed, mean: side.scored === 0 ? null : side.sum / side.scored, successes: side.successes }

/**
 * Two logs of the same dataset (two checkpoints, say) row by row: each row's mean reward in both,
 * the change, and the rows sorted by how much they changed (`change`: largest absolute change
 * first), by change (`delta`, `dir`), or by row.
 *
 * @since 0.1.0
 * @category aggregating
 */
export const compare = (
  a: ReadonlyArray<Summary>,
  b: ReadonlyArray<Summary>,
  options: { readonly sort: CompareSort; readonly dir: "asc" | "desc"; readonly offset: number; readonly limit: number }
): Comparison => {
  const left = sides(a)
  const right = sides(b)
  const rows: Array<CompareRow> = []
  let improved = 0
  let worsened = 0
  let unchanged = 0
  let configDiffers = 0
  const deltas = new Map<number, Acc>()
  for (const [row, l] of left) {
    const r = right.get(row)
    if (r === undefined) continue
    const av = sideView(l)
    const bv = sideView(r)
    const delta = av.mean === null || bv.mean === null ? null : bv.mean - av.mean
    const differs = l.config !== r.config
    if (differs) configDiffers++
    if (delta !== null) {
      if (delta > 1e-12) improved++
      else if (delta < -1e-12) worsened++
      else unchanged++
      const d = acc()
      push(d, delta)
      deltas.set(row, d)
    }
    rows.push({ row, env: l.env ?? r.env, a: av, b: bv, delta, configDiffers: differs })
  }
  const sign = options.dir === "asc" ? 1 : -1
  rows.sort((x, y) => {
    if (options.sort === "row") return sign * (x.row - y.row)
    if (x.delta === null || y.delta === null) return x.delta === y.delta ? x.row - y.row : x.delta === null ? 1 : -1
    const dx = options.sort === "change" ? Math.abs(x.delta) : x.delta
    const dy = options.sort === "change" ? Math.abs(y.delta) : y.delta
    return dx === dy ? x.row - y.row : (options.sort === "change" ? -1 : sign) * (dx - dy)
  })
  const all = (side: Map<number, Side>, other: Map<number, Side>) => {
    let sum = 0
    let n = 0
    let successes = 0
    let total = 0
    for (const [row, s] of side) {
      if (!other.has(row)) continue
      sum += s.sum
      n += s.scored
      successes += s.successes
      total += s.n
    }
    return { mean: n === 0 ? null : sum / n, successRate: total === 0 ? 0 : successes / total }
  }
  const totalA = all(left, right)
  const totalB = all(right, left)
  return {
    common: rows.length,
    onlyA: [...left.keys()].filter((row) => !right.has(row)).length,
    onlyB: [...right.keys()].filter((row) => !left.has(row)).length,
    meanA: totalA.mean,
    meanB: totalB.mean,
    successRateA: totalA.successRate,
    successRateB: totalB.successRate,
    improved,
    worsened,
    unchanged,
    configDiffers,
    deltaByRow: series(deltas),
    matched: rows.length,
    offset: options.offset,
    rows: rows.slice(options.offset, options.offset + options.limit)
  }
}

/**
 * The comparison's options from URL parameters (`sort`, `dir`, `offset`, `limit`).
 *
 * @since 0.1.0
 * @category url
 */
export const parseCompareOptions = (params: URLSearchParams) => {
  const sort = params.get("sort")
  const offset = finite(params.get("offset"))
  const limit = finite(params.get("limit"))
  return {
    sort: sort === "delta" || sort === "row" ? sort : "change",
    dir: params.get("dir") === "asc" ? "asc" : "desc",
    offset: offset === undefined ? 0 : Math.max(0, Math.trunc(offset)),
    limit: limit === undefined ? DEFAULT_QUERY.limit : Math.min(MAX_LIMIT, Math.max(1, Math.trunc(limit)))
  } as const
}
