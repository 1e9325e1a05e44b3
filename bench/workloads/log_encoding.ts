/**
 * The log's encoding, alone: the lines of a FrozenLake run (1024 rows x 8, random policy) encoded
 * the way the writer does (`CompletionsLog.encodeLine`: written directly for plain records) and the
 * general way (`toLine`, then JSON.stringify), each followed by the UTF-8 copy, alternated in one
 * process, a group's lines at a time (as the writer encodes them). Reports CPU microseconds per line, median over the rounds after the first (warm), and
 * the first round's (cold).
 *
 *   --rows N (1024)  --rounds R (6)
 */
import { Effect } from "effect"
import * as CompletionsLog from "../../dist/CompletionsLog.js"
import * as Json from "../../dist/internal/Json.js"
import type * as Rollout from "../../dist/Rollout.js"
import { flags, frozenLakeRun, median, randomPolicy, report } from "../lib.js"

const args = flags()
const rows = Number(args.rows ?? 1024)
const rounds = Number(args.rounds ?? 6)

const main = async () => {
  const groups: Array<ReadonlyArray<Rollout.TrajectoryRecord>> = []
  await Effect.runPromise(
    frozenLakeRun({
      rows,
      generations: 8,
      concurrency: 64,
      maxTurns: 10,
      onItem: (item) => {
        if (item._tag === "Group") groups.push(item.records)
      }
    }).pipe(Effect.provide(randomPolicy(0)))
  )
  const encoder = new TextEncoder()
  const time = (encode: (record: Rollout.TrajectoryRecord) => string): number => {
    const started = process.cpuUsage()
    let bytes = 0
    let lines = 0
    for (const group of groups) {
      let text = ""
      for (const record of group) text += encode(record) + "\n"
      bytes += encoder.encode(text).length
      lines += group.length
    }
    const used = process.cpuUsage(started)
    if (bytes === 0) throw new Error("nothing encoded")
    return (used.user + used.system) / lines
  }
  const direct: Array<number> = []
  const general: Array<number> = []
  for (let i = 0; i < rounds; i++) {
    direct.push(time(CompletionsLog.encodeLine))
    general.push(time((record) => Json.stringify(CompletionsLog.toLine(record))))
  }
  report({
    lines: groups.reduce((n, group) => n + group.length, 0),
    directMicrosPerLine: median(direct.slice(1)),
    generalMicrosPerLine: median(general.slice(1)),
    directColdMicrosPerLine: direct[0],
    generalColdMicrosPerLine: general[0]
  })
}

main()
