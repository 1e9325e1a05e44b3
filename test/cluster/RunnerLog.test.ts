/**
 * A runner's log while its database is away (`internal/log.ts`): effect/cluster's storage warnings
 * condensed to one line, and a line when the database is back, also after a short outage of which
 * effect/cluster says nothing more (its shard locks never found lost): the runner then asks the
 * database itself, once the cluster has logged no problem for a few seconds.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Logger } from "effect"
import { afterEach, beforeEach, vi } from "vitest"
import { condensed } from "../../src/cluster/internal/log.js"

const storageError = Cause.fail(Object.assign(new Error("PersistenceError"), { cause: new Error("connect ECONNREFUSED 127.0.0.1:5432") }))

const setup = () => {
  const lines: Array<string> = []
  const log = condensed("127.0.0.1:1", (line) => void lines.push(line), (text) => text)
  const emit = (effect: Effect.Effect<void>) => Effect.runSync(Effect.provideService(effect, Logger.CurrentLoggers, new Set([log.logger])))
  const problem = () => emit(Effect.logWarning("Could not read messages from storage", storageError))
  return { lines, log, emit, problem }
}

describe("a runner's log while its database is away", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["Date"], now: 1_000_000 }))
  afterEach(() => void vi.useRealTimers())

  it("a short outage: said once; the database asked once the cluster is quiet; said back once, with how long", () => {
    const { lines, log, problem } = setup()
    problem()
    vi.advanceTimersByTime(600)
    problem()
    expect(lines).toEqual([])
    vi.advanceTimersByTime(600)
    problem()
    expect(lines).toEqual(["runner 127.0.0.1:1: the database does not answer (connect ECONNREFUSED 127.0.0.1:5432): retrying; the groups running go on"])
    expect(log.downSince()).toBe(1_000_000)
    // not asked while the cluster still logs problems
    vi.advanceTimersByTime(2_000)
    expect(log.waiting()).toBe(false)
    log.answered()
    expect(lines.length).toBe(1)
    vi.advanceTimersByTime(3_000)
    expect(log.waiting()).toBe(true)
    log.answered()
    expect(lines[1]).toBe("runner 127.0.0.1:1: the database answers again (after 1.2 s)")
    expect(log.downSince()).toBeUndefined()
    expect(log.waiting()).toBe(false)
    log.answered()
    expect(lines.length).toBe(2)
  })

  it("effect/cluster's recovery says it back at once; a lone warning after it is not an outage", () => {
    const { emit, lines, log, problem } = setup()
    for (let i = 0; i < 4; i++) {
      problem()
      vi.advanceTimersByTime(500)
    }
    emit(Effect.logInfo("Shard lock storage has recovered"))
    expect(lines).toEqual([
      expect.stringContaining("the database does not answer"),
      "runner 127.0.0.1:1: the database answers again (after 2.0 s)"
    ])
    problem()
    vi.advanceTimersByTime(20_000)
    expect(lines.length).toBe(2)
    expect(log.waiting()).toBe(false)
  })
})
