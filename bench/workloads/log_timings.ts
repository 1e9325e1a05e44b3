/**
 * The time each phase of the turns took in a completions log (`timings` of each line): quantiles of
 * `model_ms` (the model call: with `--policy-option latency_ms=MS`, the policy's wait and how late its
 * timer fired), `env_ms` and `reset_ms`. What a run's turns/s under the bound is made of: with a 20 ms
 * policy, a turn whose model call took 23 ms is 15% under the bound.
 *
 *   node --import tsx bench/workloads/log_timings.ts --log LOG.jsonl
 */
import * as fs from "node:fs"
import { flags, percentile, report } from "../lib.js"

const args = flags()
if (args.log === undefined) throw new Error("--log LOG.jsonl is required")

interface Timings {
  readonly reset_ms: number
  readonly turns: ReadonlyArray<{ readonly model_ms: number; readonly env_ms: number }>
}

const model: Array<number> = []
const env: Array<number> = []
const reset: Array<number> = []
for (const line of fs.readFileSync(args.log, "utf8").split("\n")) {
  if (line === "") continue
  const timings = (JSON.parse(line) as { readonly timings?: Timings }).timings
  if (timings === undefined) continue
  reset.push(timings.reset_ms)
  for (const turn of timings.turns) {
    model.push(turn.model_ms)
    env.push(turn.env_ms)
  }
}

const quantiles = (xs: Array<number>) => {
  const sorted = Float64Array.from(xs).sort()
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length
  return { mean, p50: percentile(sorted, 0.5), p90: percentile(sorted, 0.9), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1] }
}

report({ trajectories: reset.length, turns: model.length, modelMs: quantiles(model), envMs: quantiles(env), resetMs: quantiles(reset) })
