/**
 * What the scope slot (src/internal/scopeSlot.ts, the engine's one reliance on an Effect internal)
 * saves: N "trajectories" run one after another in a worker fiber, each with its own scope that
 * the trajectory's work registers a finalizer in (as an env's acquisition does), closed after it.
 * `extend`: each trajectory gets its scope through the context (`Scope.extend`, the public way: a
 * context update per trajectory); `slot`: the worker's context holds one slot, pointed at each
 * trajectory's scope. Reports the CPU time per trajectory of each, alternated in one process
 * (`--rounds`, median), and their difference. `--turns` Effect steps per trajectory stand for the
 * trajectory's own work.
 */
import { Context, Effect, ExecutionStrategy, Exit, FiberRef, Scope } from "effect"
import { ScopeSlot } from "../../dist/internal/scopeSlot.js"
import { flags, median, report } from "../lib.js"

const args = flags()
const n = Number(args.n ?? 100_000)
const rounds = Number(args.rounds ?? 5)
const turns = Number(args.turns ?? 6)

const work = Effect.gen(function*() {
  yield* Effect.addFinalizer(() => Effect.void)
  let x = 0
  for (let t = 0; t < turns; t++) x += yield* Effect.succeed(t)
  return x
})

const viaExtend = (parent: Scope.Scope) =>
  Effect.gen(function*() {
    for (let i = 0; i < n; i++) {
      const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
      yield* Scope.extend(work, scope)
      yield* Scope.close(scope, Exit.void)
    }
  })

const viaSlot = (parent: Scope.Scope) =>
  Effect.gen(function*() {
    const slot = new ScopeSlot(parent)
    yield* FiberRef.update(FiberRef.currentContext, (context) => Context.add(context, Scope.Scope, slot))
    for (let i = 0; i < n; i++) {
      const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
      slot.current = scope
      yield* (work as Effect.Effect<number>)
      yield* Scope.close(scope, Exit.void)
    }
  })

const timed = (run: (parent: Scope.Scope) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    const parent = yield* Scope.make()
    const before = process.cpuUsage()
    yield* run(parent)
    const cpu = process.cpuUsage(before)
    yield* Scope.close(parent, Exit.void)
    return (cpu.user + cpu.system) / n
  })

const main = Effect.gen(function*() {
  // warm-up
  yield* timed(viaExtend)
  yield* timed(viaSlot)
  const extend: Array<number> = []
  const slot: Array<number> = []
  for (let r = 0; r < rounds; r++) {
    extend.push(yield* timed(viaExtend))
    slot.push(yield* timed(viaSlot))
  }
  report({
    extendCpuMicrosecondsPerTrajectory: median(extend),
    slotCpuMicrosecondsPerTrajectory: median(slot),
    savedMicrosecondsPerTrajectory: median(extend) - median(slot),
    extendOverSlot: median(extend) / median(slot)
  })
})

Effect.runPromise(main)
