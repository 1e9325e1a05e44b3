/**
 * Workload 3: memory per trajectory in flight. Up to N trajectories in flight at once (20 ms
 * policy); samples the heap while they run, and after a full GC in the middle of the run (live
 * heap), each time with the number of trajectories actually in flight then (their envs open: a
 * loaded machine starts them slower than they end, and dividing by N would flatter the figure).
 * Run with --expose-gc.
 *
 *   --in-flight N (10000)  --latency-ms 20
 */
import { Effect, Result } from "effect"
import * as Builtins from "../../dist/Builtins.js"
import type * as Env from "../../dist/Env.js"
import * as Registry from "../../dist/Registry.js"
import { flags, frozenLakeRun, randomPolicy, report } from "../lib.js"

/** Trajectories in flight: FrozenLake envs created and not yet closed. */
let open = 0
const frozenLake = Result.getOrThrow(Registry.env(Builtins.registry, "frozen_lake"))
const counted: Env.Definition = {
  ...frozenLake,
  prepare: (config) =>
    Result.map(frozenLake.prepare(config), (create) =>
      Effect.andThen(Effect.acquireRelease(Effect.sync(() => void open++), () => Effect.sync(() => void open--)), create))
}
const registry = Registry.add(Builtins.registry, { envs: [counted] })

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
  const liveSamples: Array<{ readonly heap: number; readonly open: number }> = []
  const sampler = setInterval(() => {
    const m = process.memoryUsage()
    peakHeap = Math.max(peakHeap, m.heapUsed)
    peakRss = Math.max(peakRss, m.rss)
  }, 5)
  // Take a few live-heap samples (after a full GC) while all trajectories are in flight; a full GC
  // of a large heap is slow, so not too often.
  const liveProbe = setInterval(() => {
    const inFlightNow = open
    gc()
    liveSamples.push({ heap: process.memoryUsage().heapUsed, open: inFlightNow })
  }, 250)
  // Enough trajectories that the pool stays full for a while: each lasts about 5.5 x 20 ms.
  const generations = Number(args.generations ?? 8)
  const rows = Math.ceil((inFlight * 4) / generations)
  const figures = await Effect.runPromise(
    frozenLakeRun({ rows, generations, concurrency: inFlight, maxTurns: 10, registry }).pipe(Effect.provide(randomPolicy(latencyMs)))
  )
  clearInterval(sampler)
  clearInterval(liveProbe)
  // The probe with the most trajectories in flight (the others are ramps up and down).
  const fullest = liveSamples.reduce((a, b) => (b.open > a.open ? b : a))
  const liveHeap = fullest.heap
  report({
    inFlight,
    inFlightAtProbe: fullest.open,
    trajectories: figures.trajectories,
    seconds: figures.seconds,
    baselineHeapBytes: baseline.heapUsed,
    peakHeapBytes: peakHeap,
    peakRssBytes: peakRss,
    liveHeapBytes: liveHeap,
    liveHeapPerInFlightBytes: (liveHeap - baseline.heapUsed) / fullest.open,
    peakHeapPerInFlightBytes: (peakHeap - baseline.heapUsed) / inFlight,
    peakRssPerInFlightBytes: (peakRss - baseline.rss) / inFlight
  })
}

main()
