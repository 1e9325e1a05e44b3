/**
 * A `Scope` that stands for "the scope of the trajectory this fiber is running now".
 *
 * Giving each trajectory its scope through the context (`Scope.extend`) updates the fiber's context
 * every time, which costs about as much as a whole FrozenLake trajectory. A worker fiber runs one
 * trajectory at a time, so it puts one slot in its context once and points the slot at each new
 * trajectory's scope: everything that asks the context for the `Scope` (`Effect.acquireRelease`,
 * `Effect.addFinalizer`, `Effect.forkScoped`) reaches the current trajectory's scope.
 *
 * The one difference from `Scope.extend`: a fiber that outlives its trajectory without being
 * scoped to it (a bare `Effect.fork`/`forkDaemon` started by an env) and later adds a finalizer
 * through the context adds it to the worker's current trajectory, where it still runs exactly once.
 */
import { ExecutionStrategy } from "effect"
import type * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import { pipeArguments } from "effect/Pipeable"
import * as Scope from "effect/Scope"

export class ScopeSlot implements Scope.Scope {
  readonly [Scope.ScopeTypeId]: Scope.ScopeTypeId = Scope.ScopeTypeId
  readonly strategy: ExecutionStrategy.ExecutionStrategy = ExecutionStrategy.sequential

  constructor(public current: Scope.Scope) {}

  /** Effect's `forkIn` reads the scope's state directly; it must be the current scope's. */
  get state(): unknown {
    return (this.current as unknown as { readonly state: unknown }).state
  }

  // The two methods effect's runtime calls on a scope (internal in its public typings).
  fork(strategy: ExecutionStrategy.ExecutionStrategy): Effect.Effect<Scope.CloseableScope> {
    return Scope.fork(this.current, strategy)
  }

  addFinalizer(finalizer: (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>): Effect.Effect<void> {
    return Scope.addFinalizerExit(this.current, finalizer)
  }

  pipe() {
    // eslint-disable-next-line prefer-rest-params
    return pipeArguments(this, arguments)
  }
}
