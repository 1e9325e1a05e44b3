/**
 * Library example: a trajectory is a Stream of turn events; compose it, or fold it into a result.
 *
 *   npx tsx examples/compose_streams.ts
 */
import { Effect, Either, Stream } from "effect"
import { Builtins, Policy, Reward, Rollout, Row, Scheduler, ScriptedPolicies, Trajectory } from "effect-gym"

const program = Effect.gen(function*() {
  const instance = yield* Scheduler.gym.make({ options: {} })
  const config: Rollout.Config = {
    registry: Builtins.registry,
    scheduler: { definition: Scheduler.gym, instance },
    defaultEnv: "frozen_lake",
    numGenerations: 1,
    maxTurns: 10,
    concurrency: 4,
    seed: 0,
    columns: Either.getOrThrow(Reward.columns([]))
  }
  const row = Either.getOrThrow(Row.decodeValue("inline", 0, { env_config: { seed: 3, size: 6 } }))
  const request = Rollout.request(config, Either.getOrThrow(Rollout.prepareRow(config, row)), 0)

  // A trajectory is a stream of turn events: print each step's reward as it happens...
  yield* Trajectory.stream(request, { scheduler: instance }).pipe(
    Stream.filter((event) => event._tag === "Step"),
    Stream.runForEach((step) => Effect.log(`turn ${step.turn}: reward ${step.reward}, done ${step.done}`))
  )
  // ...or fold it into the result (messages, total_reward, step_rewards, infos, timings).
  const result = yield* Trajectory.fold(request, Trajectory.stream(request, { scheduler: instance }))
  yield* Effect.log(`total reward ${result.totalReward}, ended ${result.endReason} after ${result.numTurns} turns`)

  // A whole run is a stream of GRPO groups, emitted as each completes.
  const rows = [0, 1, 2].map((i) => Row.decodeValue("inline", i, { env_config: { seed: i } }))
  yield* Rollout.stream({ ...config, numGenerations: 4 }, rows).pipe(
    Stream.runForEach((item) =>
      item._tag === "Group"
        ? Effect.log(`row ${item.row.index}: rewards ${item.records.map((r) => r.reward).join(", ")}`)
        : Effect.logError(item.error.message)
    )
  )
}).pipe(
  Effect.scoped,
  // The policy is a layer of the Inference service (a server or a GGUF model is another layer).
  Effect.provide(Policy.layer(ScriptedPolicies.frozenLakeSolver, { epsilon: 0.3 }))
)

Effect.runPromise(program)
