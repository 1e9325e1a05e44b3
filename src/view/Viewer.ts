/**
 * The viewer's engine: one or two indexed logs, the env renderers and the tokenizer, answering
 * what the page asks (meta, overview, a page of trajectories, one trajectory, the comparison).
 * The HTTP server (`Server`) and the self-contained report (`Report`) both use it.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema, SchemaIssue, SchemaParser } from "effect"
import type * as Scope from "effect/Scope"
import { CompletionLine } from "../CompletionsLog.js"
import * as Json from "../internal/Json.js"
import * as Row from "../Row.js"
import type { Detail } from "./Detail.js"
import * as LogIndex from "./LogIndex.js"
import * as Model from "./Model.js"
import type { Meta, RunProgress } from "./Protocol.js"
import * as Renderer from "./Renderer.js"
import * as Tokens from "./Tokens.js"

/**
 * A request the viewer cannot answer: a log or line that does not exist, a line that cannot be
 * read.
 *
 * @since 0.1.0
 * @category errors
 */
export class ViewError extends Schema.TaggedError<ViewError>("effect-gym/view/ViewError")("ViewError", {
  reason: Schema.Literals(["NotFound", "BadRequest", "Unreadable"]),
  detail: Schema.String
}) {
  override get message(): string {
    return this.detail
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly files: ReadonlyArray<string>
  readonly renderers?: Renderer.Registry | undefined
  readonly tokenizer?: Tokens.Tokenizer | undefined
  /** The first log is being written by a run (see `LogIndex.Options.live`). */
  readonly live?: boolean | undefined
  readonly chunkBytes?: number | undefined
  readonly version?: string | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Viewer {
  readonly logs: ReadonlyArray<LogIndex.LogIndex>
  readonly renderers: Renderer.Registry
  readonly tokenizer: Tokens.Tokenizer | undefined
  readonly meta: (progress?: RunProgress | null, capNote?: string | null) => Meta
  readonly log: (index: number) => Result.Result<LogIndex.LogIndex, ViewError>
  readonly overview: (log: LogIndex.LogIndex) => Model.Overview
  readonly trajectories: (log: LogIndex.LogIndex, query: Model.Query) => Effect.Effect<Model.Page, LogIndex.LogError>
  readonly trajectory: (log: LogIndex.LogIndex, line: number) => Effect.Effect<Detail, ViewError>
  readonly compare: (options: ReturnType<typeof Model.parseCompareOptions>) => Result.Result<Model.Comparison, ViewError>
  /** Indexes what was appended to every log. */
  readonly update: Effect.Effect<void, LogIndex.LogError>
  /** Every writer is done (see `LogIndex.finish`). */
  readonly finish: Effect.Effect<void, LogIndex.LogError>
}

const decodeLine = SchemaParser.decodeUnknownResult(CompletionLine, { errors: "all", onExcessProperty: "ignore" })

const formatIssue = SchemaIssue.makeFormatterStandardSchemaV1()

/** (Standard Schema paths may hold `{ key }` segments; Schema's hold the keys themselves.) */
const keyOf = (segment: PropertyKey | { readonly key: PropertyKey }): PropertyKey =>
  typeof segment === "object" ? segment.key : segment

/** Where a line does not match the log schema, as `field: problem` lines. */
export const schemaProblems = (value: unknown): Array<string> => {
  const decoded = decodeLine(value)
  if (Result.isSuccess(decoded)) return []
  return formatIssue(decoded.failure).issues
    .slice(0, 20)
    .map((issue) => `${Row.formatPath((issue.path ?? []).map(keyOf)) || "(line)"}: ${issue.message}`)
}

/**
 * Opens the logs (nothing is indexed until `update`); they are closed with the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Viewer, LogIndex.LogError, Scope.Scope> =>
  Effect.gen(function*() {
    const logs = yield* Effect.forEach(options.files, (file, index) =>
      LogIndex.make({ file, index, live: index === 0 && options.live === true, chunkBytes: options.chunkBytes }))
    const renderers = options.renderers ?? Renderer.builtins
    const tokenizer = options.tokenizer

    const overviews = new Map<number, { version: number; overview: Model.Overview }>()
    const overview = (log: LogIndex.LogIndex) => {
      const cached = overviews.get(log.index)
      if (cached !== undefined && cached.version === log.version) return cached.overview
      const computed = Model.overview(log.summaries)
      overviews.set(log.index, { version: log.version, overview: computed })
      return computed
    }

    // The last selection per log: paging through results does not filter and sort again.
    const selections = new Map<number, { key: string; version: number; selected: ReadonlyArray<Model.Summary> }>()
    const trajectories = (log: LogIndex.LogIndex, query: Model.Query) =>
      Effect.gen(function*() {
        const key = Model.queryParams({ ...query, offset: 0, limit: Model.DEFAULT_QUERY.limit }).toString()
        const cached = selections.get(log.index)
        let selected: ReadonlyArray<Model.Summary>
        if (cached !== undefined && cached.key === key && cached.version === log.version) {
          selected = cached.selected
        } else {
          const version = log.version
          const matches = query.q === undefined ? undefined : yield* log.search(query.q)
          selected = Model.select(log.summaries, query, matches === undefined ? undefined : (s) => matches.has(s.line))
          selections.set(log.index, { key, version, selected })
        }
        return Model.page(selected, log.summaries.length, query)
      })

    const logAt = (index: number) =>
      Number.isInteger(index) && index >= 0 && index < logs.length
        ? Result.succeed(logs[index])
        : Result.fail(new ViewError({ reason: "NotFound", detail: `no log ${index} (this viewer has ${logs.length})` }))

    const trajectory = (log: LogIndex.LogIndex, line: number) =>
      Effect.gen(function*() {
        const summary = log.summary(line)
        if (summary === undefined) {
          return yield* new ViewError({
            reason: "NotFound",
            detail: `${log.file}: line ${line} is not a trajectory of this log`
          })
        }
        const text = yield* Effect.mapError(log.readLine(line), (e) => new ViewError({ reason: "Unreadable", detail: e.message }))
        let value: unknown
        try {
          value = Json.parse(text)
        } catch (error) {
          return yield* new ViewError({
            reason: "Unreadable",
            detail: `${log.file}:${line}: not JSON: ${error instanceof Error ? error.message : String(error)}`
          })
        }
        const record = value as Record<string, unknown>
        const problems = schemaProblems(record)
        const renderer = Renderer.pick(renderers, record as unknown as CompletionLine)
        return {
          log: log.index,
          summary,
          line: record,
          problems,
          rendered: renderer === undefined ? null : Renderer.run(renderer, record as unknown as CompletionLine),
          tokens: Tokens.view(record, tokenizer)
        } satisfies Detail
      })

    const compare = (options: ReturnType<typeof Model.parseCompareOptions>) =>
      logs.length < 2
        ? Result.fail(new ViewError({ reason: "BadRequest", detail: "comparing needs two logs: effect-gym view A.jsonl B.jsonl" }))
        : Result.succeed(Model.compare(logs[0].summaries, logs[1].summaries, options))

    const meta = (progress: RunProgress | null = null, capNote: string | null = null): Meta => ({
      version: options.version ?? "0.1.0",
      logs: logs.map((log) => log.meta()),
      tokenizer: tokenizer?.name ?? null,
      renderers: [...renderers.keys()].sort(),
      live: options.live === true,
      progress,
      capNote
    })

    return {
      logs,
      renderers,
      tokenizer,
      meta,
      log: logAt,
      overview,
      trajectories,
      trajectory,
      compare,
      update: Effect.forEach(logs, (log) => log.update, { discard: true }),
      finish: Effect.forEach(logs, (log) => log.finish, { discard: true })
    } satisfies Viewer
  })
