/**
 * effect-gym: multi-turn LLM rollouts against Gym-style environments, on Effect.
 *
 * @since 0.1.0
 */
export * as Builtins from "./Builtins.js"
export * as Calculator from "./envs/Calculator.js"
export * as CompletionsLog from "./CompletionsLog.js"
export * as Env from "./Env.js"
export * as EnvCheck from "./check/EnvCheck.js"
export * as FrozenLake from "./envs/FrozenLake.js"
export * as Inference from "./Inference.js"
export * as KvStore from "./envs/KvStore.js"
export * as Message from "./Message.js"
export * as Plugin from "./Plugin.js"
export * as Policy from "./Policy.js"
export * as PyRandom from "./envs/PyRandom.js"
export * as Registry from "./Registry.js"
export * as Reward from "./Reward.js"
export * as Rollout from "./Rollout.js"
export * as RunSpec from "./RunSpec.js"
export * as Row from "./Row.js"
export * as Scheduler from "./Scheduler.js"
export * as ScriptedPolicies from "./inference/Scripted.js"
export * as Sudoku from "./envs/Sudoku.js"
export * as Summary from "./Summary.js"
export * as TokenSequence from "./TokenSequence.js"
export * as Tool from "./Tool.js"
export * as Trajectory from "./Trajectory.js"
