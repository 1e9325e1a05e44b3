/**
 * Workload 3: memory per trajectory in flight. N trajectories in flight at once (20 ms policy);
 * samples the heap while they run, and after a full GC in the middle of the run (live heap).
 * Run with --expose-gc.
 *
 *   --in-flight N (10000)  --latency-ms 20
 */
import { Effect } from "effect"
import { flags, frozenLakeRun, randomPolicy, report } from "../lib.js"

const args = flags()
const inFlight = Number(args["in-flight"] ?? 10_000)
const latencyMs = Number(args["latency-ms"] ?? 20)
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("run with --expose-gc")

const main = async () => {
  // Warm up code paths with a small run, then take the baseline.
  await Effect.runPromise(frozenLakeRun({ rows: 64, generations: 8, concurrency: 64, maxTurns: 10 }).pipe(Effect.provide(randomPolicy())))
  gc()
  const baseline = process.memoryUsage()
  let peakHeap = 0
  let peakRss = 0
  const liveSamples: Array<number> = []
  const sampler = setInterval(() => {
    const m = process.memoryUsage()
    peakHeap = Math.max(peakHeap, m.heapUsed)
    peakRss = Math.max(peakRss, m.rss)
  }, 5)
  // Take a few live-heap samples (after a full GC) while all trajectories are in flight; a full GC
  // of a large heap is slow, so not too often.
  const liveProbe = setInterval(() => {
    gc()
    liveSamples.push(process.memoryUsage().heapUsed)
  }, 250)
  // Enough trajectories that the pool stays full for a while: each lasts about 5.5 x 20 ms.
  const generations = Number(args.generations ?? 8)
  const rows = Math.ceil((inFlight * 4) / generations)
  const figures = await Effect.runPromise(
    frozenLakeRun({ rows, generations, concurrency: inFlight, maxTurns: 10 }).pipe(Effect.provide(randomPolicy(latencyMs)))
  )
  clearInterval(sampler)
  clearInterval(liveProbe)
  // Ignore the ramp-up and ramp-down samples: keep the middle half.
  const middle = liveSamples.slice(Math.floor(liveSamples.length / 4), Math.ceil((liveSamples.length * 3) / 4))
  const liveHeap = middle.length > 0 ? Math.max(...middle) : Math.max(...liveSamples)
  report({
    inFlight,
    trajectories: figures.trajectories,
    seconds: figures.seconds,
    baselineHeapBytes: baseline.heapUsed,
    peakHeapBytes: peakHeap,
    peakRssBytes: peakRss,
    liveHeapBytes: liveHeap,
    liveHeapPerInFlightBytes: (liveHeap - baseline.heapUsed) / inFlight,
    peakHeapPerInFlightBytes: (peakHeap - baseline.heapUsed) / inFlight,
    peakRssPerInFlightBytes: (peakRss - baseline.rss) / inFlight
  })
}

main()
