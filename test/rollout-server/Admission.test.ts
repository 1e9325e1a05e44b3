import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Result } from "effect"
import { TestClock } from "effect/testing"
import { State, waitUntil } from "../../src/rollout-server/internal/admission.js"

describe("rollout server admission", () => {
  it.effect("shutdown's wait follows the Clock: done as soon as the condition holds, false at the deadline", () =>
    Effect.gen(function*() {
      let done = false
      const held = yield* Effect.forkChild(waitUntil(() => done, Duration.millis(300)))
      yield* TestClock.adjust("100 millis")
      expect(held.pollUnsafe()).toBeUndefined()
      done = true
      yield* TestClock.adjust("10 millis")
      expect(yield* Fiber.join(held)).toBe(true)

      const never = yield* Effect.forkChild(waitUntil(() => false, Duration.millis(300)))
      yield* TestClock.adjust("280 millis")
      expect(never.pollUnsafe()).toBeUndefined()
      yield* TestClock.adjust("40 millis")
      expect(yield* Fiber.join(never)).toBe(false)
      expect(yield* waitUntil(() => true, Duration.zero)).toBe(true)
    }))

  it("admits in one step against the per-request and global limits; a reservation releases what is left", () => {
    const state = new State(10, 6)
    const tooMany = state.admit(7)
    expect(Result.isFailure(tooMany) && tooMany.failure.reason).toBe("TooManyTrajectories")
    const first = Result.getOrThrow(state.admit(6))
    const full = state.admit(5)
    expect(Result.isFailure(full) && full.failure.reason).toBe("AtCapacity")
    expect(state).toMatchObject({ trajectoriesInFlight: 6, rejected: 1, admitted: 6 })
    first.finished(4)
    first.close()
    expect(state).toMatchObject({ trajectoriesInFlight: 0, completed: 4, cancelled: 2 })
    state.draining = true
    const draining = state.admit(1)
    expect(Result.isFailure(draining) && draining.failure.reason).toBe("ShuttingDown")
  })
})
