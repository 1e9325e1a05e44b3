/**
 * The README's library pipelines, as tests (they import "effect-gym" as a user does). A run is a
 * value (`Rollout.make`), rows go through it with `rows.pipe(Rollout.run(rollout))`, and what comes
 * out is a `Stream` of groups (or, with `Rollout.events`, of the run's turn events and groups), so
 * Effect's own `Stream` combinators compose rollouts.
 *
 *   npx vitest run examples/pipelines.test.ts
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Ref, Sink, Stream } from "effect"
import { FrozenLake, Policy, Rollout, ScriptedPolicies, Sudoku } from "effect-gym"

/** A policy: the scripted FrozenLake solver (30% random moves), as the `Inference` Layer. */
const policy = Policy.layer(ScriptedPolicies.frozenLakeSolver, { epsilon: 0.3 })

/** Rows as plain JSON values, as they are in a dataset file. */
const lakes = (n: number) => Array.from({ length: n }, (_, i) => ({ env_config: { seed: i, size: 4 } }))

describe("README pipelines", () => {
  it.effect("1. filter groups by reward: keep the rows some generation solved, stop after 5", () =>
    Effect.gen(function*() {
      const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 4, bufferSize: 4 })
      const solved = yield* Stream.fromIterable(lakes(100)).pipe(
        Rollout.run(rollout),
        Stream.filter(Rollout.isGroup),
        Stream.filter((group) => group.records.some((record) => (record.reward ?? 0) > 0)),
        Stream.take(5),
        Stream.runCollect
      )
      expect(solved.length).toBe(5)
      for (const group of solved) {
        expect(group.records.length).toBe(4)
        expect(Math.max(...group.records.map((r) => r.reward ?? 0))).toBeGreaterThan(0)
      }
    }).pipe(Effect.provide(policy)))

  it.effect("2. tee the run's turn events to a sink, keep the groups", () =>
    Effect.gen(function*() {
      const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 2, maxTurns: 6 })
      // The sink: count each kind of event (a metrics exporter, a log file, a queue to a UI...).
      const counts = yield* Ref.make<Record<string, number>>({})
      const sink = Sink.forEach((event: Rollout.Event) =>
        Ref.update(counts, (c) => ({ ...c, [event._tag]: (c[event._tag] ?? 0) + 1 }))
      )
      const groups = yield* Stream.fromIterable(lakes(6)).pipe(
        Rollout.events(rollout),
        Stream.tapSink(sink),
        Stream.filter(Rollout.isGroup),
        Stream.runCollect
      )
      const seen = yield* Ref.get(counts)
      const records = groups.flatMap((g) => g.records)
      const turns = records.reduce((n, r) => n + r.result.numTurns, 0)
      expect(groups.length).toBe(6)
      expect(seen.Group).toBe(6)
      expect(seen.Reset).toBe(12)
      expect(seen.End).toBe(12)
      expect(seen.Completion).toBe(turns)
      expect(seen.Step).toBe(turns)
    }).pipe(Effect.provide(policy)))

  it.effect("3. mix two envs in one run: FrozenLake and Sudoku rows, interleaved", () =>
    Effect.gen(function*() {
      const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake, Sudoku.Sudoku], numGenerations: 2, maxTurns: 3 })
      const frozen = Stream.fromIterable(lakes(4)).pipe(
        Stream.map((row) => ({ env_config: { ...row.env_config, name: "frozen_lake" } }))
      )
      // 3 Sudoku rows (Stream.range is inclusive)
      const sudoku = Stream.range(0, 2).pipe(Stream.map((i) => ({ env_config: { name: "sudoku", seed: i } })))
      const groups = yield* Stream.interleave(frozen, sudoku).pipe(
        Rollout.run(rollout),
        Stream.filter(Rollout.isGroup),
        Stream.runCollect
      )
      const byEnv = groups.map((g) => g.records[0].result.env)
      expect(byEnv.filter((env) => env === "frozen_lake").length).toBe(4)
      expect(byEnv.filter((env) => env === "sudoku").length).toBe(3)
      for (const group of groups) for (const record of group.records) expect(record.error).toBeUndefined()
    }).pipe(Effect.provide(policy)))
})
