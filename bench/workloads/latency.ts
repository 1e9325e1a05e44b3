/**
 * Workload 2: latency-bound efficiency. The random policy answers after a fixed delay (as a remote
 * model would); with C trajectories in flight the bound is C / delay turns per second. Reports the
 * achieved rate divided by that bound.
 *
 *   --concurrency C  --latency-ms 20  --seconds 5 (minimum run length)
 *   --path engine        the whole run (Rollout, FrozenLake, the policy's delay)      (default)
 *          effect-floor  C Effect fibers that only wait the delay in a loop, the way the policy
 *                        waits (`Effect.sleep` on the Clock, interruptible): the best an
 *                        Effect-based loop with one interruptible wait per turn can do here
 *          shared-floor  the same with the scripted policies' own wait (`sleepOf`,
 *                        dist/inference/internal/latency.js: the Clock's sleep since 2026-12-04,
 *                        before it a timer shared by the sleeps ending in one millisecond)
 *          plain-floor   C plain async functions that only await a setTimeout of the delay
 *   --work-us W  (floors only; 0) after each wait, W microseconds of work on the main thread (a busy
 *                loop): the best any loop whose turn costs W us of that thread's time can do here
 *
 * Each run also reports `cpuMicrosPerTurn` (the process's user + system CPU over the turns).
 */
import { Duration, Effect } from "effect"
import { sleepOf } from "../../dist/inference/internal/latency.js"
import { flags, frozenLakeRun, randomPolicy, report } from "../lib.js"

const args = flags()
const path = args.path ?? "engine"
const concurrency = Number(args.concurrency ?? 256)
const latencyMs = Number(args["latency-ms"] ?? 20)
const seconds = Number(args.seconds ?? 5)
const bound = concurrency / (latencyMs / 1000)
const workUs = Number(args["work-us"] ?? 0)

/** `workUs` microseconds of the main thread's time, spent. */
const work = (): void => {
  if (workUs <= 0) return
  const until = performance.now() + workUs / 1000
  while (performance.now() < until) {
    // busy: the turn's own work, as the engine's would be
  }
}

const floor = async (): Promise<{ turns: number; seconds: number }> => {
  // Each "turn" is one wait; as many as the engine run would do at the bound for `seconds`.
  const perFiber = Math.ceil((seconds * 1000) / latencyMs)
  const started = performance.now()
  if (path === "effect-floor" || path === "shared-floor") {
    const wait = path === "effect-floor" ? Effect.sleep(Duration.millis(latencyMs)) : Effect.runSync(sleepOf(latencyMs))
    const fiber = Effect.gen(function*() {
      for (let i = 0; i < perFiber; i++) {
        yield* wait
        work()
      }
    })
    await Effect.runPromise(Effect.forEach(Array.from({ length: concurrency }), () => fiber, { concurrency: "unbounded", discard: true }))
  } else {
    const wait = () => new Promise<void>((resolve) => setTimeout(resolve, latencyMs))
    await Promise.all(Array.from({ length: concurrency }, async () => {
      for (let i = 0; i < perFiber; i++) {
        await wait()
        work()
      }
    }))
  }
  return { turns: perFiber * concurrency, seconds: (performance.now() - started) / 1000 }
}

const main = async () => {
  const cpu = process.cpuUsage()
  const cpuMicrosPerTurn = (turns: number) => {
    const used = process.cpuUsage(cpu)
    return (used.user + used.system) / turns
  }
  if (path === "engine") {
    // FrozenLake with the random policy averages about 5.5 turns; size the run to last `seconds`.
    const trajectories = Math.ceil((bound * seconds * 1.1) / 5.5)
    const generations = 8
    const rows = Math.ceil(trajectories / generations)
    const figures = await Effect.runPromise(
      frozenLakeRun({ rows, generations, concurrency, maxTurns: 10 }).pipe(Effect.provide(randomPolicy(latencyMs)))
    )
    report({ ...figures, bound, efficiency: figures.turnsPerSecond / bound, cpuMicrosPerTurn: cpuMicrosPerTurn(figures.turns) })
  } else {
    const { seconds: elapsed, turns } = await floor()
    report({
      turns,
      seconds: elapsed,
      turnsPerSecond: turns / elapsed,
      bound,
      workUs,
      efficiency: turns / elapsed / bound,
      cpuMicrosPerTurn: cpuMicrosPerTurn(turns)
    })
  }
}

main()
