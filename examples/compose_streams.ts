/**
 * Library example: a run is a value (`Rollout.make`), rows go through it as a `Stream`, and what
 * comes out is a `Stream` of groups, or of the run's turn events and groups (`Rollout.events`).
 *
 *   npx tsx examples/compose_streams.ts
 */
import { Effect, Stream } from "effect"
import { FrozenLake, Policy, Rollout, ScriptedPolicies } from "effect-gym"

const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 4, maxTurns: 10 })
const rows = Stream.range(0, 2).pipe(Stream.map((seed) => ({ env_config: { seed, size: 6 } })))

const program = Effect.gen(function*() {
  // The run's turn events, tagged with their trajectory: print each step's reward as it happens...
  yield* rows.pipe(
    Stream.take(1),
    Rollout.events(Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 1 })),
    Stream.filter((event) => event._tag === "Step"),
    Stream.runForEach((step) => Effect.log(`${step.trajectoryId} turn ${step.turn}: reward ${step.reward}, done ${step.done}`))
  )
  // ...and the GRPO groups (with advantages), each as soon as its last trajectory ends.
  yield* rows.pipe(
    Rollout.run(rollout),
    Stream.runForEach((item) =>
      item._tag === "Group"
        ? Effect.log(`row ${item.row.index}: rewards ${item.records.map((r) => r.reward).join(", ")}`)
        : Effect.logError(item.error.message)
    )
  )
}).pipe(
  // The policy is a layer of the Inference service (a server or a GGUF model is another layer).
  Effect.provide(Policy.layer(ScriptedPolicies.frozenLakeSolver, { epsilon: 0.3 }))
)

Effect.runPromise(program)
