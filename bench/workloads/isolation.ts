/**
 * The cost of running envs in worker threads (`--isolate-envs`, the servers' default): FrozenLake
 * played in-process and through `EnvWorkers`, trajectories of 10 steps (create, reset, 10 steps,
 * close), median over batches. Also the CLI, process start to exit: `effect-gym run` with and
 * without `--isolate-envs` (1024 trajectories of the random policy).
 *
 *   npm run build && node --import tsx bench/workloads/isolation.ts [--batches 7] [--trajectories 200]
 */
import { Effect, Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Builtins from "../../dist/Builtins.js"
import * as EnvWorkers from "../../dist/isolation/EnvWorkers.js"
import type * as Env from "../../dist/Env.js"
import { execFile } from "node:child_process"
import { flags, median } from "../lib.js"

const args = flags()
const batches = Number(args.batches ?? 7)
const trajectories = Number(args.trajectories ?? 200)
const STEPS = 10

const frozenLake = Builtins.registry.envs.get("frozen_lake")!
const request = { trajectoryId: "t", seed: 1, messages: [], dataDict: {}, envConfig: {} }

/** Per-step and per-trajectory microseconds of one batch. */
const batch = (definition: Env.Definition) =>
  Effect.gen(function*() {
    let stepNs = 0
    const started = process.hrtime.bigint()
    for (let t = 0; t < trajectories; t++) {
      yield* Effect.scoped(Effect.gen(function*() {
        const env = yield* Result.getOrThrow(definition.prepare({ seed: t, size: 8, p: 1 }))
        const reset = yield* env.reset(request)
        let messages: Array<{ role: "user" | "assistant"; content: string }> = [{ role: "user", content: reset.observation }]
        for (let i = 0; i < STEPS; i++) {
          // left and up keep the player at the start: the episode never ends early
          messages = [...messages, { role: "assistant", content: i % 2 === 0 ? "<action>left</action>" : "<action>up</action>" }]
          const t0 = process.hrtime.bigint()
          const step = yield* env.step(messages)
          stepNs += Number(process.hrtime.bigint() - t0)
          messages = [...messages, { role: "user", content: step.observation }]
        }
      }))
    }
    const totalNs = Number(process.hrtime.bigint() - started)
    return { stepUs: stepNs / (trajectories * STEPS) / 1000, trajectoryUs: totalNs / trajectories / 1000 }
  })

const measure = (definition: Env.Definition) =>
  Effect.gen(function*() {
    yield* batch(definition) // warm-up
    const out: Array<{ stepUs: number; trajectoryUs: number }> = []
    for (let i = 0; i < batches; i++) out.push(yield* batch(definition))
    return { stepUs: median(out.map((o) => o.stepUs)), trajectoryUs: median(out.map((o) => o.trajectoryUs)) }
  })

const program = Effect.gen(function*() {
  const inProcess = yield* measure(frozenLake)
  const workers = yield* EnvWorkers.make({ plugins: [], workers: 1 })
  const isolated = yield* measure(workers.wrap(frozenLake))

  // The CLI, process start to exit, the same run with and without --isolate-envs.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-bench-"))
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, Array.from({ length: 128 }, (_, i) => JSON.stringify({ env_config: { seed: i } })).join("\n") + "\n")
  const bin = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
  const cli = (extra: ReadonlyArray<string>) =>
    Effect.promise(() =>
      new Promise<{ ms: number; stdout: string }>((resolve, reject) => {
        const started = performance.now()
        execFile(process.execPath, [
          bin, "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--num-generations", "8",
          "--max-turns", "10", "--output", path.join(dir, "out.jsonl"), "--json", "--overwrite", ...extra
        ], (error, stdout) => (error ? reject(error) : resolve({ ms: performance.now() - started, stdout })))
      })
    )
  const cliRuns: Record<string, Array<number>> = { inProcess: [], isolated: [] }
  let turns = 0
  for (let i = 0; i < 3; i++) {
    const plain = yield* cli([])
    cliRuns.inProcess.push(plain.ms)
    const iso = yield* cli(["--isolate-envs", "--env-workers", "1"])
    cliRuns.isolated.push(iso.ms)
    const summary = JSON.parse(iso.stdout.trim().split("\n").at(-1)!) as { trajectories: number; mean_turns: number }
    turns = summary.trajectories * summary.mean_turns
  }
  const cliIn = median(cliRuns.inProcess)
  const cliIso = median(cliRuns.isolated)
  console.log(JSON.stringify({
    machine: { cores: os.availableParallelism(), load: os.loadavg()[0] },
    micro: {
      trajectories_per_batch: trajectories,
      steps_per_trajectory: STEPS,
      batches,
      in_process: { step_us: inProcess.stepUs, trajectory_us: inProcess.trajectoryUs },
      isolated: { step_us: isolated.stepUs, trajectory_us: isolated.trajectoryUs },
      added_per_step_us: isolated.stepUs - inProcess.stepUs
    },
    cli: {
      runs: 3,
      in_process_ms: cliIn,
      isolated_ms: cliIso,
      env_steps: turns,
      added_per_step_us: turns > 0 ? ((cliIso - cliIn) * 1000) / turns : null
    }
  }, null, 2))
})

Effect.runPromise(Effect.scoped(program))
