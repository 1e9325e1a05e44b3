/**
 * Workload 2: latency-bound efficiency. The random policy answers after a fixed delay (as a remote
 * model would); with C trajectories in flight the bound is C / delay turns per second. Reports the
 * achieved rate divided by that bound.
 *
 *   --concurrency C  --latency-ms 20  --seconds 5 (minimum run length)
 */
import { Effect } from "effect"
import { flags, frozenLakeRun, randomPolicy, report } from "../lib.js"

const args = flags()
const concurrency = Number(args.concurrency ?? 256)
const latencyMs = Number(args["latency-ms"] ?? 20)
const seconds = Number(args.seconds ?? 5)
// FrozenLake with the random policy averages about 5.5 turns; size the run to last `seconds`.
const bound = concurrency / (latencyMs / 1000)
const trajectories = Math.ceil((bound * seconds * 1.1) / 5.5)
const generations = 8
const rows = Math.ceil(trajectories / generations)

Effect.runPromise(
  frozenLakeRun({ rows, generations, concurrency, maxTurns: 10 }).pipe(Effect.provide(randomPolicy(latencyMs)))
).then((figures) => report({ ...figures, bound, efficiency: figures.turnsPerSecond / bound }))
