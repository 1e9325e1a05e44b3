/**
 * Workload 9: `effect-gym view` on a large log. Builds a log of `--mb` MB (once; kept in the temp
 * dir for the next runs) from a real FrozenLake run's lines (rows renumbered), either as they are
 * (`--lines short`: ~1.6 KB lines, the worst case for the index: most lines per byte) or with
 * long replies (`--lines long`: ~8 KB lines, closer to an LLM's). Then starts the built CLI
 * (`view FILE --port 0`) and measures, from process start: the page served (URL printed), the
 * index done (`/api/meta`, asked every 50 ms while it indexes: its latency says whether the page
 * stays responsive); after: a page of trajectories in file order, sorted by reward, deep in the results,
 * a trajectory near the end opened, a text search (first, then its next page), the overview.
 *
 *   --mb 1024  --lines short|long
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { encodeLine } from "../../dist/CompletionsLog.js"
import type * as Rollout from "../../dist/Rollout.js"
import { flags, frozenLakeRun, median, randomPolicy, report, spawnCli } from "../lib.js"

const args = flags()
const mb = Number(args.mb ?? 1024)
const kind = args.lines === "long" ? "long" : "short"
const file = path.join(os.tmpdir(), `effect-gym-bench-view-${kind}-${mb}mb.jsonl`)

const build = async () => {
  if (fs.existsSync(file) && fs.statSync(file).size >= mb * 1024 * 1024) return
  const lines: Array<Record<string, unknown>> = []
  const collect = (item: Rollout.Item) => {
    if (item._tag === "Group") for (const record of item.records) lines.push(JSON.parse(encodeLine(record)))
  }
  await Effect.runPromise(
    frozenLakeRun({ rows: 256, generations: 8, concurrency: 64, maxTurns: 10, onItem: collect }).pipe(Effect.provide(randomPolicy()))
  )
  if (kind === "long") {
    for (const line of lines) {
      line.messages = (line.messages as Array<{ role: string; content: string }>).map((m) =>
        m.role === "assistant" ? { ...m, content: `Let me look at the board and think about the safest move. ${m.content} `.repeat(24) } : m
      )
    }
  }
  const out = fs.openSync(`${file}.tmp`, "w")
  let written = 0
  let row = 0
  const target = mb * 1024 * 1024
  while (written < target) {
    let chunk = ""
    for (const line of lines) {
      const text = JSON.stringify({ ...line, row: row + (line.row as number), id: `r${row + (line.row as number)}-g${line.generation}` })
      chunk += text + "\n"
    }
    row += 256
    fs.writeSync(out, chunk)
    written += Buffer.byteLength(chunk)
  }
  fs.closeSync(out)
  fs.renameSync(`${file}.tmp`, file)
}

const timed = async (url: string) => {
  const started = performance.now()
  const response = await fetch(url)
  const body = await response.json()
  if (!response.ok) throw new Error(`${url}: ${JSON.stringify(body)}`)
  return { ms: performance.now() - started, body: body as Record<string, unknown> }
}

const main = async () => {
  await build()
  const bytes = fs.statSync(file).size
  const started = performance.now()
  const { child, url } = await spawnCli(["view", file, "--port", "0"], /view: (http:\/\/127\.0\.0\.1:\d+\/)/)
  const servedMs = performance.now() - started
  // Is the page responsive while it indexes? Ask for the meta every 50 ms, until it says the
  // index is done.
  const during: Array<number> = []
  let indexedMs = Number.NaN
  for (;;) {
    const meta = await timed(`${url}api/meta`)
    during.push(meta.ms)
    if ((meta.body as { logs: Array<{ indexing: boolean }> }).logs[0].indexing === false) {
      indexedMs = performance.now() - started
      break
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  const meta = (await timed(`${url}api/meta`)).body as { logs: Array<{ trajectories: number }> }
  const trajectories = meta.logs[0].trajectories
  const first = await timed(`${url}api/trajectories`)
  const byReward = await timed(`${url}api/trajectories?sort=reward`)
  const deep = await timed(`${url}api/trajectories?sort=reward&offset=${Math.floor(trajectories / 2)}`)
  const open = await timed(`${url}api/trajectory?line=${trajectories - 5}`)
  const search = await timed(`${url}api/trajectories?q=${encodeURIComponent("moved DOWN. Now at")}`)
  const searchNext = await timed(`${url}api/trajectories?q=${encodeURIComponent("moved DOWN. Now at")}&offset=50`)
  const overview = await timed(`${url}api/overview`)
  child.kill("SIGINT")
  await new Promise((r) => child.once("exit", r))
  report({
    bytes,
    trajectories,
    servedMs,
    indexedMs,
    indexMbPerSecond: bytes / 2 ** 20 / (indexedMs / 1000),
    metaDuringIndexP50Ms: median(during),
    metaDuringIndexMaxMs: Math.max(...during),
    firstPageMs: first.ms,
    sortByRewardMs: byReward.ms,
    deepPageMs: deep.ms,
    openTrajectoryMs: open.ms,
    searchMs: search.ms,
    searchMatched: (search.body as { matched: number }).matched,
    searchNextPageMs: searchNext.ms,
    overviewMs: overview.ms
  })
}

main()
