/**
 * Property-testing an env with effect-gym's developer kit, written the way a user writes it (it
 * imports "effect-gym"). Run it with `npx vitest run examples/env_property.test.ts`.
 *
 * - `EnvCheck.check` runs the env through the whole contract (determinism for a seed, types,
 *   JSON infos, close on every path, hangs, isolation between instances) and returns a report.
 * - `EnvCheck.transcript` plays replies through a fresh env, for your own properties, with
 *   arbitraries for replies (`EnvCheck.replies`, `EnvCheck.repliesFor(actions)`) and for configs
 *   (`EnvCheck.config(schema)`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Env, EnvCheck, FrozenLake } from "effect-gym"

/** The env of the README: guess a number from 1 to `max`, told "Higher." or "Lower." each time. */
class GuessTheNumber {
  private target = 0
  constructor(readonly config: { readonly max: number }) {}
  async reset(request: Env.ResetRequest) {
    this.target = 1 + (request.seed % this.config.max)
    return { observation: `Guess a number from 1 to ${this.config.max}.`, info: {} }
  }
  async step(messages: ReadonlyArray<{ content: string }>) {
    const guess = Number(messages.at(-1)?.content.match(/\d+/)?.[0])
    if (guess === this.target) return { observation: "Correct!", reward: 1, done: true, info: { guess } }
    // A reply without a number gives NaN: compare it as "no guess" rather than letting NaN into the info.
    const hint = Number.isNaN(guess) ? "Reply with a number." : guess < this.target ? "Higher." : "Lower."
    return { observation: hint, reward: 0, done: false, info: { guess: Number.isNaN(guess) ? null : guess } }
  }
}

const GuessConfig = Schema.Struct({
  max: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 100 })).pipe(Schema.withDecodingDefaultType(Effect.succeed(100)))
})

const guess = Env.fromClass({ name: "guess", config: GuessConfig, class: GuessTheNumber })

describe("guess: checked and property-tested", () => {
  it.effect("passes the conformance checker", () =>
    Effect.gen(function*() {
      const report = yield* EnvCheck.check(guess, { configs: [{ max: 3 }, { max: 10 }], actions: [/^[1-9]$/, "I guess 10"] })
      expect(report.failures, EnvCheck.format(report)).toEqual([])
      expect(report.passed).toContain("determinism")
    }))

  it.effect.prop(
    "is deterministic: the same config and replies give the same transcript",
    [EnvCheck.config(GuessConfig), EnvCheck.repliesFor([/^[1-9][0-9]?$/])],
    ([config, replies]) =>
      Effect.gen(function*() {
        const first = yield* EnvCheck.transcript(guess, config, replies, { seed: 7 })
        expect(yield* EnvCheck.transcript(guess, config, replies, { seed: 7 })).toEqual(first)
      })
  )

  it.effect.prop("pays 1 exactly when it says done, and survives any reply", [EnvCheck.replies], ([replies]) =>
    Effect.gen(function*() {
      const { steps } = yield* EnvCheck.transcript(guess, { max: 5 }, replies)
      for (const { result } of steps) expect(result.reward).toBe(result.done ? 1 : 0)
    }))
})

describe("frozen_lake: properties over configs from a schema", () => {
  // A narrower schema than the env's own: the configs worth testing (small maps, mostly safe ice).
  const Configs = Schema.Struct({
    seed: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
    size: Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 6 })),
    p: Schema.Number.check(Schema.isBetween({ minimum: 0.6, maximum: 1 }))
  })
  const moves = ["<action>up</action>", "<action>down</action>", "<action>left</action>", "<action>right</action>"]

  it.effect.prop(
    "reaching the goal is the only way to earn a reward",
    [EnvCheck.config(Configs), EnvCheck.repliesFor(moves, { maxLength: 20 })],
    ([config, replies]) =>
      Effect.gen(function*() {
        const { steps } = yield* EnvCheck.transcript(FrozenLake.FrozenLake, config, replies)
        for (const { result } of steps) expect(result.reward).toBe(result.info.status === "goal" ? 1 : 0)
      }),
    { arbitrary: { runs: 50 } }
  )
})
