import { describe, expect, it } from "@effect/vitest"
import { Effect, Result, Schema } from "effect"
import * as fs from "node:fs"
import * as Env from "../src/Env.js"
import { Config, FrozenLake, Game, generateMap, parseAction, render, SYSTEM_PROMPT } from "../src/envs/FrozenLake.js"
import * as Message from "../src/Message.js"

interface VectorStep {
  readonly assistant: string
  readonly observation: string
  readonly reward: number
  readonly done: boolean
  readonly status: string
  readonly parsed?: string | null
}
interface VectorCase {
  readonly env_config: Record<string, unknown>
  readonly map: ReadonlyArray<string>
  readonly reset?: { readonly observation: string; readonly info: unknown; readonly system: string }
  readonly steps: ReadonlyArray<VectorStep>
}

const load = (file: string): ReadonlyArray<VectorCase> =>
  JSON.parse(fs.readFileSync(new URL(`./fixtures/${file}`, import.meta.url), "utf8")).cases

const decode = Schema.decodeUnknownSync(Config)

/** Plays a case through the real env (Env contract, scoped), returning reset and step results. */
const play = (envConfig: Record<string, unknown>, replies: ReadonlyArray<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const create = Result.getOrThrow(FrozenLake.prepare(envConfig))
    const env = yield* create
    const reset = yield* env.reset({ trajectoryId: "t", seed: 0, messages: [], dataDict: {}, envConfig })
    const messages: Array<Message.Message> = [Message.user(reset.observation)]
    const steps: Array<Env.StepResult> = []
    for (const reply of replies) {
      messages.push(Message.assistant(reply))
      const out = yield* env.step(messages)
      steps.push(out)
      if (out.done) break
      messages.push(Message.user(out.observation))
    }
    return { reset, steps }
  }))

describe("FrozenLake: the reference vectors (shared/vectors/frozen_lake.json)", () => {
  const cases = load("frozen_lake.json")

  it("has the reference cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(33)
  })

  for (const c of cases) {
    it.effect(`env_config ${JSON.stringify(c.env_config)}`, () =>
      Effect.gen(function*() {
        const { reset, steps } = yield* play(c.env_config, c.steps.map((s) => s.assistant))
        const game = new Game(decode(c.env_config))
        Result.getOrThrow(game.reset(0))
        expect(game.grid).toEqual(c.map)
        expect(reset.observation).toBe(c.reset!.observation)
        expect(reset.info).toEqual(c.reset!.info)
        expect(reset.systemPrompt).toBe(c.reset!.system)
        expect(steps.length).toBe(c.steps.length)
        steps.forEach((out, i) => {
          const want = c.steps[i]
          expect(out.observation).toBe(want.observation)
          expect(out.reward).toBe(want.reward)
          expect(out.done).toBe(want.done)
          expect(out.info.status).toBe(want.status)
        })
      }))
  }
})

describe("FrozenLake: differential cases from the reference algorithm", () => {
  const cases = load("frozen_lake_differential.json")

  it("reproduces 300 random maps (big and negative seeds, sizes 2-8) and every parse/step outcome", () => {
    expect(cases.length).toBe(300)
    for (const c of cases) {
      const game = new Game(decode(c.env_config))
      Result.getOrThrow(game.reset(0))
      expect(game.grid, JSON.stringify(c.env_config)).toEqual(c.map)
      const messages: Array<Message.Message> = []
      for (const s of c.steps) {
        expect(parseAction(s.assistant) ?? null, JSON.stringify(s.assistant)).toBe(s.parsed)
        messages.push(Message.assistant(s.assistant))
        const out = game.step(messages)
        if (s.observation !== "INVALID") expect(out.observation).toBe(s.observation)
        expect([out.reward, out.done, out.info.status]).toEqual([s.reward, s.done, s.status])
      }
    }
  })
})

describe("FrozenLake: action parsing (Python re semantics)", () => {
  it("takes the first tag, else the last bare word", () => {
    expect(parseAction("<action>down</action><action>left</action>")).toBe("down")
    expect(parseAction("left then right")).toBe("right")
    expect(parseAction("<action> Up </action>")).toBe("up")
    expect(parseAction("?")).toBeUndefined()
    expect(parseAction("")).toBeUndefined()
  })

  it("uses Python's Unicode word boundaries and whitespace", () => {
    expect(parseAction("éup")).toBeUndefined() // é is a word character in Python
    expect(parseAction("²down")).toBeUndefined() // so is a superscript digit
    expect(parseAction("up\u0301")).toBe("up") // a combining mark is not
    expect(parseAction("<action>\u3000right\t</action>")).toBe("right")
    expect(parseAction("<action>\x1cup\x1d</action>")).toBe("up") // \x1c-\x1f are \s in Python
    expect(parseAction("<action>\ufeffup</action> left")).toBe("left") // U+FEFF is not \s in Python
  })
})

describe("FrozenLake: config", () => {
  it("coerces values like Python int() and float()", () => {
    expect(decode({ size: "5", p: "0.5", seed: "12" })).toEqual({ size: 5n, p: 0.5, seed: 12n })
    expect(decode({ size: 4.9, seed: true })).toEqual({ size: 4n, p: 0.8, seed: 1n })
    expect(decode({ seed: "123456789012345678901234567890" }).seed).toBe(123456789012345678901234567890n)
    expect(decode({})).toEqual({ size: 4n, p: 0.8, seed: null })
  })

  it("reports a bad value with its field", () => {
    const bad = (config: Record<string, unknown>) => Result.flip(FrozenLake.prepare(config)).pipe(Result.getOrThrow)
    expect(bad({ size: "abc" }).path).toBe("env_config.size")
    expect(bad({ size: "abc" }).message).toContain("expected an integer")
    expect(bad({ size: 1 }).message).toContain("between 2 and 256")
    expect(bad({ p: 2 }).path).toBe("env_config.p")
    expect(bad({ seed: "1.5" }).path).toBe("env_config.seed")
    expect(bad({ seed: [1] }).path).toBe("env_config.seed")
  })

  it("without a seed, uses the row seed: same map for the same row seed, info says so", () => {
    const a = new Game(decode({}))
    const b = new Game(decode({}))
    const ra = Result.getOrThrow(a.reset(77))
    Result.getOrThrow(b.reset(77))
    expect(a.grid).toEqual(b.grid)
    expect(ra.info).toEqual({ seed: null, size: 4, map_seed: 77 })
    expect(ra.systemPrompt).toBe(SYSTEM_PROMPT)
  })
})

/** Independent reachability check (BFS written again here, not the env's). */
const solvable = (grid: ReadonlyArray<string>): boolean => {
  const n = grid.length
  const cells = grid.join("")
  const start = cells.indexOf("S")
  const seen = new Set([start])
  const queue = [start]
  while (queue.length > 0) {
    const cell = queue.shift()!
    if (cells[cell] === "G") return true
    const r = Math.floor(cell / n)
    const c = cell % n
    for (const [nr, nc] of [[r + 1, c], [r - 1, c], [r, c + 1], [r, c - 1]]) {
      const next = nr * n + nc
      if (nr >= 0 && nr < n && nc >= 0 && nc < n && cells[next] !== "H" && !seen.has(next)) {
        seen.add(next)
        queue.push(next)
      }
    }
  }
  return false
}

describe("FrozenLake: seeded determinism (properties)", () => {
  const configs = Schema.Struct({
    size: Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 9 })),
    p: Schema.Finite.check(Schema.isBetween({ minimum: 0.2, maximum: 1 })),
    seed: Schema.Union([Schema.Int, Schema.BigInt.check(Schema.isBetweenBigInt({ minimum: -(2n ** 80n), maximum: 2n ** 80n }))])
  })
  const replies = Schema.Array(
    Schema.Union([
      Schema.Literals(["<action>up</action>", "<action>down</action>", "left", "RIGHT", "?", ""]),
      Schema.String.check(Schema.isMaxLength(30))
    ])
  ).check(Schema.isMaxLength(12))

  it.prop("every generated map is solvable, has one S and one G, and has the configured size", [configs], ([config]) => {
    const grid = Result.getOrThrow(generateMap(config.size, config.p, config.seed))
    expect(grid.length).toBe(config.size)
    expect(grid.every((row) => row.length === config.size && /^[SFHG]+$/.test(row))).toBe(true)
    expect(grid.join("").split("S").length - 1).toBe(1)
    expect(grid.join("").split("G").length - 1).toBe(1)
    expect(solvable(grid)).toBe(true)
  })

  it.effect.prop("the same env_config gives the same map and the same transcript", [configs, replies], ([config, rs]) =>
    Effect.gen(function*() {
      const envConfig = { ...config, seed: String(config.seed) }
      const a = yield* play(envConfig, rs)
      const b = yield* play(envConfig, rs)
      expect(a).toEqual(b)
    }))

  it.prop("the player is always rendered exactly once, on the grid", [configs, replies], ([config, rs]) => {
    const game = new Game(decode({ ...config, seed: String(config.seed) }))
    Result.getOrThrow(game.reset(0))
    const messages: Array<Message.Message> = []
    for (const reply of rs) {
      messages.push(Message.assistant(reply))
      const out = game.step(messages)
      const board = render(game.grid, game.row, game.col)
      expect(board.split(/[P*]/).length - 1).toBe(1)
      if (out.done) break
    }
  })
})
