/**
 * Canary of the one Effect internal the engine relies on for speed: `internal/scopeSlot.ts`, a
 * `Scope` that stands for "the current trajectory's scope" in a worker fiber's context (the run
 * loop points it at each new trajectory instead of updating the fiber's context per trajectory;
 * see bench/NOTES.md). It works because Effect's runtime reaches a scope only through its `fork`
 * and `addFinalizer` methods and, in `forkIn` (`Effect.forkScoped`), its `state` field. These
 * tests go through every public way an env registers work in its scope; an Effect upgrade that
 * reaches a scope some other way fails here (effect is pinned exactly: see the last test).
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, ExecutionStrategy, Exit, Fiber, FiberRef, Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { ScopeSlot } from "../src/internal/scopeSlot.js"

/** A worker fiber's setup: the slot in its context once, pointing at the run's scope. */
const withSlot = <A, E>(run: (slot: ScopeSlot, parent: Scope.CloseableScope) => Effect.Effect<A, E, Scope.Scope>) =>
  Effect.gen(function*() {
    const parent = yield* Scope.make()
    const slot = new ScopeSlot(parent)
    yield* FiberRef.update(FiberRef.currentContext, (context) => Context.add(context, Scope.Scope, slot))
    // The slot is the fiber's `Scope` now (what a worker does once): nothing else provides one.
    const result = yield* (run(slot, parent) as Effect.Effect<A, E>)
    yield* Scope.close(parent, Exit.void)
    return result
  })

/** The fiber's exit; a fiber its scope failed to stop fails the test instead of hanging it. */
const ended = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Fiber.await(fiber).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error("still running") }))

describe("ScopeSlot (canary of the Effect internal it relies on)", () => {
  it.effect("every public way of registering a finalizer reaches the slot's current scope", () =>
    withSlot((slot, parent) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const a = yield* Scope.fork(parent, ExecutionStrategy.sequential)
        const b = yield* Scope.make()
        slot.current = a
        yield* Effect.addFinalizer(() => Effect.sync(() => ran.push("a: addFinalizer")))
        yield* Effect.acquireRelease(Effect.void, () => Effect.sync(() => ran.push("a: acquireRelease")))
        yield* Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, Effect.sync(() => ran.push("a: Scope.addFinalizer"))))
        slot.current = b
        yield* Effect.addFinalizer(() => Effect.sync(() => ran.push("b: addFinalizer")))
        yield* Scope.close(a, Exit.void)
        assert.deepStrictEqual(ran, ["a: Scope.addFinalizer", "a: acquireRelease", "a: addFinalizer"])
        yield* Scope.close(b, Exit.void)
        assert.deepStrictEqual(ran.slice(3), ["b: addFinalizer"])
      })
    ))

  it.effect("Effect.forkScoped (which reads the scope's state) ties the fiber to the current scope", () =>
    withSlot((slot) =>
      Effect.gen(function*() {
        const a = yield* Scope.make()
        const b = yield* Scope.make()
        slot.current = a
        const inA = yield* Effect.forkScoped(Effect.never)
        slot.current = b
        const inB = yield* Effect.forkScoped(Effect.never)
        yield* Scope.close(a, Exit.void)
        assert.isTrue(Exit.isInterrupted(yield* ended(inA)))
        // The other trajectory's fiber is still running.
        assert.isTrue((yield* Fiber.poll(inB))._tag === "None")
        yield* Scope.close(b, Exit.void)
        assert.isTrue(Exit.isInterrupted(yield* ended(inB)))
      })
    ))

  it.effect("a fiber forked into a closed current scope is interrupted at once; a finished one is forgotten", () =>
    withSlot((slot) =>
      Effect.gen(function*() {
        const a = yield* Scope.make()
        slot.current = a
        const done = yield* Effect.forkScoped(Effect.succeed(1))
        assert.deepStrictEqual(yield* Fiber.join(done), 1)
        yield* Scope.close(a, Exit.void)
        const late = yield* Effect.forkScoped(Effect.never)
        assert.isTrue(Exit.isInterrupted(yield* ended(late)))
      })
    ))

  it.effect("nested scopes (Scope.fork through the slot, Effect.scoped inside a trajectory) close with it", () =>
    withSlot((slot) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const a = yield* Scope.make()
        slot.current = a
        const child = yield* Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential))
        yield* Scope.addFinalizer(child, Effect.sync(() => ran.push("child")))
        yield* Effect.scoped(Effect.addFinalizer(() => Effect.sync(() => ran.push("inner scoped"))))
        assert.deepStrictEqual(ran, ["inner scoped"])
        yield* Scope.close(a, Exit.void)
        assert.deepStrictEqual(ran, ["inner scoped", "child"])
      })
    ))

  it("effect is pinned exactly, to the version the slot and the env checker's finalizer observer were checked against", () => {
    const read = (file: string) => JSON.parse(fs.readFileSync(path.join(import.meta.dirname, "..", file), "utf8"))
    const pkg = read("package.json") as { readonly dependencies: Record<string, string> }
    // An upgrade changes this on purpose, after this file's and test/check/EnvCheck.test.ts's canaries pass
    // on the new version (src/internal/scopeSlot.ts, src/check/internal/lifecycle.ts observeFinalizers).
    assert.strictEqual(pkg.dependencies.effect, "3.22.4")
    assert.strictEqual((read("node_modules/effect/package.json") as { readonly version: string }).version, "3.22.4")
  })
})
