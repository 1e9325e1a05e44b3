/**
 * Workload 1: orchestration throughput. FrozenLake, rows x generations, the seeded random policy
 * with zero latency, max_turns 10.
 *
 *   --path loop|events|plain   the run (Rollout.stream), the run with every turn event in one stream
 *                              (Rollout.streamEvents), or a plain async JavaScript loop with no
 *                              Effect (same env class, same policy logic)
 *   --concurrency N  --rows N  --generations N  --warmup N
 *
 * One process does `warmup` untimed runs, then one timed run, and prints its figures as JSON.
 */
import { Effect, Result, Schema } from "effect"
import { Config as FrozenLakeConfig, Game } from "../../dist/envs/FrozenLake.js"
import { mixSeed } from "../../dist/internal/seed.js"
import * as Message from "../../dist/Message.js"
import { flags, frozenLakeRun, randomPolicy, report } from "../lib.js"

const args = flags()
const path = args.path ?? "loop"
const concurrency = Number(args.concurrency ?? 64)
const rows = Number(args.rows ?? 1024)
const generations = Number(args.generations ?? 8)
const warmup = Number(args.warmup ?? 2)
const maxTurns = 10

const MOVES = ["<action>up</action>", "<action>down</action>", "<action>left</action>", "<action>right</action>"]

/**
 * The same work without Effect: async functions for the policy and the env (as a plain JavaScript
 * framework would have them), a pool of `concurrency` async workers, the same seeds.
 */
const plainRun = async () => {
  const decode = Schema.decodeUnknownSync(FrozenLakeConfig)
  const configs = Array.from({ length: rows }, (_, i) => decode({ seed: i }))
  // The random policy's choice (inference/Scripted.ts): the same moves, so the same trajectories.
  const policy = async (_messages: ReadonlyArray<Message.Message>, seed: number) => MOVES[mixSeed(seed, 1) & 3]
  const trajectory = async (row: number, generation: number) => {
    const game = new Game(configs[row])
    const env = { reset: async () => Result.getOrThrow(game.reset(row)), step: async (m: ReadonlyArray<Message.Message>) => game.step(m) }
    const reset = await env.reset()
    let messages: ReadonlyArray<Message.Message> = [Message.system(reset.systemPrompt!), Message.user(reset.observation)]
    const seed = mixSeed(mixSeed(0, row), 0x10000 + generation)
    let total = 0
    const rewards: Array<number> = []
    for (let turn = 1; turn <= maxTurns; turn++) {
      const reply = await policy(messages, mixSeed(seed, turn))
      messages = [...messages, Message.assistant(reply)]
      const out = await env.step(messages)
      total += out.reward
      rewards.push(out.reward)
      if (out.done || turn === maxTurns) return { turns: turn, total, rewards }
      messages = [...messages, Message.user(out.observation)]
    }
    return { turns: maxTurns, total, rewards }
  }
  let next = 0
  let turns = 0
  let trajectories = 0
  const started = performance.now()
  const worker = async () => {
    while (next < rows * generations) {
      const task = next++
      const result = await trajectory(Math.floor(task / generations), task % generations)
      turns += result.turns
      trajectories++
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  const seconds = (performance.now() - started) / 1000
  return { turns, trajectories, seconds, turnsPerSecond: turns / seconds, trajectoriesPerSecond: trajectories / seconds }
}

const main = async () => {
  const once = () =>
    path === "plain"
      ? plainRun()
      : Effect.runPromise(
        frozenLakeRun({ rows, generations, concurrency, maxTurns, events: path === "events" }).pipe(
          Effect.provide(randomPolicy())
        )
      )
  for (let i = 0; i < warmup; i++) await once()
  report(await once())
}

main()
