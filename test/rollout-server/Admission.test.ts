import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Fiber, Option, TestClock } from "effect"
import { State, waitUntil } from "../../src/rollout-server/internal/admission.js"

describe("rollout server admission", () => {
  it.effect("shutdown's wait follows the Clock: done as soon as the condition holds, false at the deadline", () =>
    Effect.gen(function*() {
      let done = false
      const held = yield* Effect.fork(waitUntil(() => done, Duration.millis(300)))
      yield* TestClock.adjust("100 millis")
      expect(Option.isNone(yield* Fiber.poll(held))).toBe(true)
      done = true
      yield* TestClock.adjust("10 millis")
      expect(yield* Fiber.join(held)).toBe(true)

      const never = yield* Effect.fork(waitUntil(() => false, Duration.millis(300)))
      yield* TestClock.adjust("280 millis")
      expect(Option.isNone(yield* Fiber.poll(never))).toBe(true)
      yield* TestClock.adjust("40 millis")
      expect(yield* Fiber.join(never)).toBe(false)
      expect(yield* waitUntil(() => true, Duration.zero)).toBe(true)
    }))

  it("admits in one step against the per-request and global limits; a reservation releases what is left", () => {
    const state = new State(10, 6)
    const tooMany = state.admit(7)
    expect(Either.isLeft(tooMany) && tooMany.left.reason).toBe("TooManyTrajectories")
    const first = Either.getOrThrow(state.admit(6))
    const full = state.admit(5)
    expect(Either.isLeft(full) && full.left.reason).toBe("AtCapacity")
    expect(state).toMatchObject({ trajectoriesInFlight: 6, rejected: 1, admitted: 6 })
    first.finished(4)
    first.close()
    expect(state).toMatchObject({ trajectoriesInFlight: 0, completed: 4, cancelled: 2 })
    state.draining = true
    const draining = state.admit(1)
    expect(Either.isLeft(draining) && draining.left.reason).toBe("ShuttingDown")
  })
})
