/**
 * The built-ins, registered at the edge: the core's `Registry` knows no concrete game or policy, and
 * this module composes it with the ones that ship with the package. Library users start from
 * {@link registry} (and add plugins with `Registry.add`); the command line adds the Node-only
 * built-ins on top (`node/Builtins.ts`: the `openenv` scheduler).
 *
 * - envs: `frozen_lake`, `sudoku`, `calculator` and `kv_store` (tool envs);
 * - schedulers: `gym_scheduler`;
 * - reward functions: `format`;
 * - policies: `random`, `frozen-lake-solver`, `calculator-solver`, `kv-store-solver` (scripted `Inference` services).
 *
 * @since 0.1.0
 */
import { Calculator } from "./envs/Calculator.js"
import { FrozenLake } from "./envs/FrozenLake.js"
import { KvStore } from "./envs/KvStore.js"
import { Sudoku } from "./envs/Sudoku.js"
import { calculatorSolver, frozenLakeSolver, kvStoreSolver, random } from "./inference/Scripted.js"
import * as Registry from "./Registry.js"
import * as Reward from "./Reward.js"
import * as Scheduler from "./Scheduler.js"

/**
 * @since 0.1.0
 * @category constructors
 */
export const registry: Registry.Registry = Registry.add(Registry.empty, {
  envs: [FrozenLake, Sudoku, Calculator, KvStore],
  schedulers: [Scheduler.gym],
  rewards: [Reward.format],
  policies: [random, frozenLakeSolver, calculatorSolver, kvStoreSolver]
})
