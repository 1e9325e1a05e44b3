/**
 * A self-contained report (`effect-gym view FILE --html OUT.html`): one HTML file with the page,
 * its script and styles, and the data embedded; it opens from disk with no server and no network.
 *
 * Its size is capped (`maxBytes`). The overview always covers every trajectory; the trajectories
 * listed and those held in full (conversation, board, tokens) are added until the cap is reached,
 * failures' examples first, then in file order. What is left out is said on the page and by the
 * command.
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import * as Json from "../internal/Json.js"
import * as Html from "./Html.js"
import type { LogError } from "./LogIndex.js"
import type { LogMeta } from "./Model.js"
import { pack } from "./Protocol.js"
import type { Meta } from "./Protocol.js"
import type * as Viewer from "./Viewer.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Report {
  readonly html: string
  readonly bytes: number
  /** Per log: trajectories, listed, held in full. */
  readonly logs: ReadonlyArray<{ readonly trajectories: number; readonly listed: number; readonly detailed: number }>
  /** Set when something was left out for the cap. */
  readonly capNote: string | null
}

const mb = (bytes: number) => `${(bytes / (1024 * 1024)).toFixed(1)} MB`

/**
 * Builds the report of the viewer's logs (indexing them to the end first).
 *
 * @since 0.1.0
 * @category constructors
 */
export const build = (
  viewer: Viewer.Viewer,
  options: { readonly maxBytes: number; readonly title?: string | undefined }
): Effect.Effect<Report, LogError | Html.AssetsError> =>
  Effect.gen(function*() {
    yield* viewer.finish
    const assets = yield* Html.assets
    const overviews = viewer.logs.map((log) => viewer.overview(log))
    const overviewsJson = Json.stringify(overviews)
    // Room for the meta (problems included) and the page's fixed parts.
    const fixed = assets.js.length + assets.css.length + overviewsJson.length + 64 * 1024 +
      Json.stringify(viewer.meta()).length
    let budget = options.maxBytes - fixed

    // Listed trajectories: up to 40% of what is left, shared between the logs.
    const listBudget = Math.max(0, budget * 0.4) / viewer.logs.length
    const listed = viewer.logs.map((log) => {
      const parts: Array<string> = []
      let size = 0
      for (const summary of log.summaries) {
        const text = Json.stringify(pack(summary))
        const bytes = Buffer.byteLength(text) + 1
        if (size + bytes > listBudget) break
        parts.push(text)
        size += bytes
      }
      budget -= size
      return parts
    })

    // Trajectories in full: failures' examples first, then in file order, among the listed ones.
    const details: Array<string> = []
    const detailed = viewer.logs.map(() => 0)
    const seen = new Set<string>()
    let full = false
    for (const log of viewer.logs) {
      const count = listed[log.index].length
      const examples = overviews[log.index].failuresByTag.flatMap((group) => group.examples.map((e) => e.line))
      const order = [...examples, ...log.summaries.slice(0, count).map((s) => s.line)]
      const positions = new Map(log.summaries.slice(0, count).map((s, i) => [s.line, i]))
      for (const line of order) {
        if (full) break
        const key = `${log.index}:${line}`
        if (seen.has(key)) continue
        if (!positions.has(line)) continue
        seen.add(key)
        const detail = yield* Effect.result(viewer.trajectory(log, line))
        if (Result.isFailure(detail)) continue
        const text = `${JSON.stringify(key)}:${Json.stringify(detail.success)}`
        const bytes = Buffer.byteLength(text) + 1
        if (bytes > budget) {
          full = true
          break
        }
        details.push(text)
        detailed[log.index]++
        budget -= bytes
      }
    }

    const left = viewer.logs.some((log, i) => listed[i].length < log.summaries.length || detailed[i] < log.summaries.length)
    const capNote = left
      ? `This report is capped at ${mb(options.maxBytes)} (--html-max-mb): ` +
        viewer.logs.map((log, i) =>
          `${log.meta().name}: ${listed[i].length} of ${log.summaries.length} trajectories listed, ${detailed[i]} in full`
        ).join("; ") +
        `. The overview covers every trajectory. Browse them all with: effect-gym view ${viewer.logs.map((l) => l.file).join(" ")}`
      : null
    const base = viewer.meta(null, capNote)
    const meta: Meta = {
      ...base,
      logs: base.logs.map((m, i): LogMeta => ({ ...m, browsable: listed[i].length, detailed: detailed[i] }))
    }
    const config = `{"mode":"report","data":{"meta":${Json.stringify(meta)},"overviews":${overviewsJson},` +
      `"summaries":[${listed.map((parts) => `[${parts.join(",")}]`).join(",")}],"details":{${details.join(",")}}}}`
    const html = Html.page(
      assets,
      config,
      options.title ?? `effect-gym report: ${viewer.logs.map((l) => l.meta().name).join(" vs ")}`
    )
    return {
      html,
      bytes: Buffer.byteLength(html),
      logs: viewer.logs.map((log, i) => ({
        trajectories: log.summaries.length,
        listed: listed[i].length,
        detailed: detailed[i]
      })),
      capNote
    }
  })
