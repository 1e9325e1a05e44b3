/**
 * The trajectory loop's fast path, alone: the same FrozenLake run (rows x 8, random policy,
 * max_turns 10, concurrency 64, in process) with the model's and the env's answers as they are
 * (completed Effects: the fast path) and with each wrapped in `Effect.suspend` (every answer through
 * the fiber runtime, as before the fast path), alternated in one process. Reports CPU microseconds
 * per turn, medians over the rounds after the first.
 *
 *   --rows N (1024)  --rounds R (7)
 */
import { Effect, Layer, Result } from "effect"
import * as Builtins from "../../dist/Builtins.js"
import type * as Env from "../../dist/Env.js"
import { FrozenLake } from "../../dist/envs/FrozenLake.js"
import * as Inference from "../../dist/Inference.js"
import { random } from "../../dist/inference/Scripted.js"
import * as Registry from "../../dist/Registry.js"
import * as Reward from "../../dist/Reward.js"
import * as Rollout from "../../dist/Rollout.js"
import * as Scheduler from "../../dist/Scheduler.js"
import { flags, frozenLakeRows, median, report } from "../lib.js"

const args = flags()
const rows = Number(args.rows ?? 1024)
const rounds = Number(args.rounds ?? 7)

/** FrozenLake with every answer wrapped in `Effect.suspend` (not a completed Effect). */
const suspended: Env.Definition = {
  name: "frozen_lake",
  description: "FrozenLake, answers through the runtime",
  prepare: (config) =>
    Result.map(FrozenLake.prepare(config), (create) =>
      Effect.map(create, (env): Env.Env => ({
        reset: (request) => Effect.suspend(() => env.reset(request)),
        step: (messages) => Effect.suspend(() => env.step(messages))
      })))
}

const policy = (slow: boolean) =>
  Layer.effect(
    Inference.Inference,
    Effect.map(Effect.orDie(random.make({})), (service): Inference.Service =>
      slow ? { ...service, chat: (request) => Effect.suspend(() => service.chat(request)) } : service)
  )

const runOnce = (slow: boolean) =>
  Effect.gen(function*() {
    const instance = yield* Scheduler.gym.make({ options: {} })
    const config: Rollout.Config = {
      registry: slow ? Registry.add(Builtins.registry, { envs: [suspended] }) : Builtins.registry,
      scheduler: { definition: Scheduler.gym, instance },
      defaultEnv: "frozen_lake",
      numGenerations: 8,
      maxTurns: 10,
      concurrency: 64,
      seed: 0,
      columns: Result.getOrThrow(Reward.columns([]))
    }
    const started = process.cpuUsage()
    const items = yield* Rollout.runAll(config, frozenLakeRows(rows))
    const used = process.cpuUsage(started)
    let turns = 0
    for (const item of items) if (item._tag === "Group") for (const r of item.records) turns += r.result.numTurns
    return (used.user + used.system) / turns
  }).pipe(Effect.scoped, Effect.provide(policy(slow)))

const main = async () => {
  const fast: Array<number> = []
  const slow: Array<number> = []
  for (let i = 0; i < rounds; i++) {
    fast.push(await Effect.runPromise(runOnce(false)))
    slow.push(await Effect.runPromise(runOnce(true)))
  }
  const f = median(fast.slice(1))
  const s = median(slow.slice(1))
  report({ fastMicrosPerTurn: f, throughRuntimeMicrosPerTurn: s, ratio: f / s })
}

main()
