/**
 * FrozenLake's bounded map generation: inside the budget the map is the reference's, draw for draw;
 * past it the config fails at once with a typed error, without blocking the event loop.
 *
 * The reference's generator retries for ever, and the generator on e87c5df did too, in synchronous
 * code that no timeout can stop. So the first check runs in a child process that is killed after a
 * minute, and every test that runs such a config in this process waits for that check first: on
 * an unbounded generator the suite fails instead of hanging.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Result, Schema, SchemaTransformation } from "effect"
import { execFile, spawn } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import * as Env from "../src/Env.js"
import { FrozenLake, generateMap, MapBudgetExceeded, MAX_MAP_CELLS, maxAttempts } from "../src/envs/FrozenLake.js"
import { PyRandom } from "../src/envs/PyRandom.js"
import { cli, readLines, tmp } from "./cli.js"

const ROOT = path.resolve(import.meta.dirname, "..")
const HANG_LIMIT_MS = 60_000

interface Isolated {
  readonly killed: boolean
  readonly stdout: string
  readonly stderr: string
}

/** Runs an ES module script (TypeScript sources load through tsx) in a child killed after `timeout`. */
const isolated = (script: string, timeout = HANG_LIMIT_MS) =>
  new Promise<Isolated>((resolve) =>
    execFile(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      { cwd: ROOT, timeout, killSignal: "SIGKILL" },
      (error, stdout, stderr) => resolve({ killed: error?.killed === true, stdout, stderr })
    )
  )

const source = (file: string) => JSON.stringify(pathToFileURL(path.join(ROOT, file)).href)

/** 256x256, p 0, seed 0: the reference needs more than 256 attempts (fixture below). */
const childCheck = isolated(`
  import { Result } from "effect"
  import { generateMap } from ${source("src/envs/FrozenLake.ts")}
  const started = performance.now()
  const out = generateMap(256, 0, 0)
  const ms = performance.now() - started
  console.log(JSON.stringify(Result.isFailure(out)
    ? { tag: out.failure._tag, attempts: out.failure.attempts, message: out.failure.message, ms }
    : { tag: Array.isArray(out) ? "array" : out._tag, ms }))
`)

let bounded: Promise<void> | undefined
/** Resolves once the child check showed that generation is bounded; fails otherwise. */
const ensureBounded = () =>
  (bounded ??= childCheck.then((out) => {
    if (out.killed) throw new Error(`generateMap(256, 0, 0) did not return within ${HANG_LIMIT_MS} ms`)
    const result = JSON.parse(out.stdout)
    if (result.tag !== "MapBudgetExceeded") throw new Error(`generateMap(256, 0, 0) gave ${out.stdout}`)
  }))

const guarded = <A, E>(effect: Effect.Effect<A, E>) => Effect.andThen(Effect.promise(ensureBounded), effect)

/**
 * The reference's loop, written again literally (boards of strings, `random() < p` per cell, its
 * depth-first check), stopped after `cap` attempts: the accepted attempt and its map, or none.
 */
const reference = (size: number, p: number, seed: number | bigint, cap: number) => {
  const rng = new PyRandom(seed)
  for (let attempt = 1; attempt <= cap; attempt++) {
    const board: Array<Array<string>> = []
    for (let r = 0; r < size; r++) {
      const row: Array<string> = []
      for (let c = 0; c < size; c++) row.push(rng.random() < p ? "F" : "H")
      board.push(row)
    }
    const sr = rng.randrange(size)
    const sc = rng.randrange(size)
    const gr = rng.randrange(size)
    const gc = rng.randrange(size)
    if (sr === gr && sc === gc) continue
    board[sr][sc] = "S"
    board[gr][gc] = "G"
    const frontier: Array<readonly [number, number]> = [[sr, sc]]
    const discovered = new Set<number>()
    let valid = false
    search: while (frontier.length > 0) {
      const [r, c] = frontier.pop()!
      if (discovered.has(r * size + c)) continue
      discovered.add(r * size + c)
      for (const [dr, dc] of [[1, 0], [0, 1], [-1, 0], [0, -1]]) {
        const nr = r + dr
        const nc = c + dc
        if (nr >= 0 && nr < size && nc >= 0 && nc < size) {
          if (board[nr][nc] === "G") {
            valid = true
            break search
          }
          if (board[nr][nc] !== "H") frontier.push([nr, nc])
        }
      }
    }
    if (valid) return { attempts: attempt, map: board.map((row) => row.join("")) }
  }
  return undefined
}

const sha256 = (map: ReadonlyArray<string>) => crypto.createHash("sha256").update(map.join("\n")).digest("hex")

const expectFailure = (
  out: Result.Result<ReadonlyArray<string>, MapBudgetExceeded>,
  fields: { size: number; p: number; seed: string; attempts: number }
) => {
  expect(Result.isFailure(out), JSON.stringify(fields)).toBe(true)
  const error = (out as Result.Failure<ReadonlyArray<string>, MapBudgetExceeded>).failure
  expect(error).toBeInstanceOf(MapBudgetExceeded)
  expect({ size: error.size, p: error.p, seed: error.seed, attempts: error.attempts }).toEqual(fields)
}

describe("FrozenLake: the generation budget", () => {
  it("is 2^24 cells: 256 attempts at size 256, more on smaller maps (an attempt counts at least 64)", () => {
    expect(MAX_MAP_CELLS).toBe(16_777_216)
    expect([256, 128, 64, 32, 8, 4, 2, 1].map(maxAttempts)).toEqual([256, 1024, 4096, 16384, 262_144, 262_144, 262_144, 262_144])
  })

  it.effect("size 1 (start and goal always coincide) fails after its attempts; sizes that are no size throw", () =>
    guarded(Effect.sync(() => {
      expectFailure(generateMap(1, 0.8, 5), { size: 1, p: 0.8, seed: "5", attempts: 262_144 })
      expect(() => generateMap(0, 0.8, 5)).toThrow(RangeError)
      expect(() => generateMap(2.5, 0.8, 5)).toThrow(RangeError)
    })))

  it("a config past the budget fails with MapBudgetExceeded in a child process (killed if it hangs)", async () => {
    const out = await childCheck
    expect(out.killed, `no answer within ${HANG_LIMIT_MS} ms: the generator does not stop`).toBe(false)
    const result = JSON.parse(out.stdout)
    expect(result.tag).toBe("MapBudgetExceeded")
    expect(result.attempts).toBe(256)
    expect(result.message).toContain("FrozenLake size 256, p 0, seed 0: no solvable map in 256 attempts")
    expect(result.message).toContain("solvable only when S and G are adjacent")
    expect(result.message).toContain("Use a larger p or a smaller size")
  }, HANG_LIMIT_MS + 30_000)
})

interface BudgetCase {
  readonly size: number
  readonly p: number
  readonly seed: string
  readonly attempts: number | null
  readonly more_than?: number
  readonly sha256?: string
  readonly map?: ReadonlyArray<string>
}

describe("FrozenLake: bounded generation against CPython running the reference (fixtures/frozen_lake_budget.json)", () => {
  const cases: ReadonlyArray<BudgetCase> =
    JSON.parse(fs.readFileSync(new URL("./fixtures/frozen_lake_budget.json", import.meta.url), "utf8")).cases

  it("has cases on both sides of the budget", () => {
    const within = cases.filter((c) => c.attempts !== null && c.attempts <= maxAttempts(c.size))
    const past = cases.filter((c) => c.attempts === null || c.attempts > maxAttempts(c.size))
    expect(within.length).toBeGreaterThan(100)
    expect(within.some((c) => c.attempts! > 100)).toBe(true)
    expect(past.length).toBeGreaterThanOrEqual(8)
    expect(past.some((c) => c.attempts !== null)).toBe(true)
  })

  it.effect("inside the budget, the reference's map; past it, MapBudgetExceeded after exactly the budget", () =>
    guarded(Effect.sync(() => {
      for (const c of cases) {
        const label = JSON.stringify({ size: c.size, p: c.p, seed: c.seed, attempts: c.attempts })
        const seed = BigInt(c.seed)
        const limit = maxAttempts(c.size)
        const out = generateMap(c.size, c.p, seed)
        if (c.attempts !== null && c.attempts <= limit) {
          expect(Result.isSuccess(out), label).toBe(true)
          const map = Result.getOrThrow(out)
          expect(sha256(map), label).toBe(c.sha256)
          if (c.map !== undefined) expect(map, label).toEqual(c.map)
        } else {
          expectFailure(out, { size: c.size, p: c.p, seed: c.seed, attempts: limit })
        }
      }
    })))

  it.effect("the budget's edge: the reference's accepted attempt k succeeds with k attempts, fails with k - 1", () =>
    guarded(Effect.sync(() => {
      for (const c of cases) {
        const label = JSON.stringify({ size: c.size, p: c.p, seed: c.seed, attempts: c.attempts })
        const seed = BigInt(c.seed)
        // (capped at 4 budgets' worth of work to keep the test short)
        const cap = 4 * maxAttempts(c.size)
        if (c.attempts === null) {
          // the reference had not found one after `more_than` attempts: neither do we
          const limit = Math.min(c.more_than!, cap)
          expectFailure(generateMap(c.size, c.p, seed, { maxAttempts: limit }), {
            size: c.size,
            p: c.p,
            seed: c.seed,
            attempts: limit
          })
          continue
        }
        if (c.attempts > cap) continue
        // past the env's budget too (the reference's own count)
        expect(sha256(Result.getOrThrow(generateMap(c.size, c.p, seed, { maxAttempts: c.attempts }))), label).toBe(c.sha256)
        if (c.attempts > 1) {
          expectFailure(generateMap(c.size, c.p, seed, { maxAttempts: c.attempts - 1 }), {
            size: c.size,
            p: c.p,
            seed: c.seed,
            attempts: c.attempts - 1
          })
        }
      }
    })))
})

describe("FrozenLake: bounded generation against the reference's loop written again (properties)", () => {
  const seeds = Schema.Union([Schema.Int, Schema.BigInt.check(Schema.isBetweenBigInt({ minimum: -(2n ** 80n), maximum: 2n ** 80n }))])
  const between = (minimum: number, maximum: number) => Schema.Int.check(Schema.isBetween({ minimum, maximum }))
  // p: anywhere in [0, 1], with weight on the edges and on values a draw can equal exactly
  const probabilities = Schema.Union([
    Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 })),
    Schema.Literals([0, 1, 0.5, 0.3, 0.8, 0.59, 2 ** -53, 1 - 2 ** -53]),
    // k / 2^20 for k in [0, 2^20]: decoded from the integer, so the arbitrary draws the integer
    between(0, 2 ** 20).pipe(Schema.decodeTo(Schema.Number, SchemaTransformation.transform({ decode: (k) => k / 2 ** 20, encode: (p) => p * 2 ** 20 })))
  ])

  it.prop(
    "with any attempt limit, the bounded map is the reference's when it accepts within the limit, else MapBudgetExceeded",
    [between(2, 24), probabilities, seeds, between(1, 40)],
    ([size, p, seed, limit]) => {
      const want = reference(size, p, seed, limit)
      const got = generateMap(size, p, seed, { maxAttempts: limit })
      if (want === undefined) expectFailure(got, { size, p, seed: String(seed), attempts: limit })
      else expect(Result.getOrThrow(got)).toEqual(want.map)
    },
    { arbitrary: { runs: 300 } }
  )

  it.prop(
    "with the env's budget, sizes up to 32 give the reference's map for any p (p 0 included)",
    [between(2, 32), probabilities, seeds],
    ([size, p, seed]) => {
      // S and G adjacent always passes, so an attempt succeeds with probability >= 4(size-1)/size^3
      // and the budget fails with probability below 1e-26 here: the reference's loop terminates.
      const want = reference(size, p, seed, Infinity)!
      expect(Result.getOrThrow(generateMap(size, p, seed))).toEqual(want.map)
    },
    { arbitrary: { runs: 150 } }
  )

  it.prop(
    "with the env's budget, p >= 0.6 gives the reference's map on boards up to 128",
    [between(33, 128), Schema.Finite.check(Schema.isBetween({ minimum: 0.6, maximum: 1 })), seeds],
    ([size, p, seed]) => {
      const want = reference(size, p, seed, maxAttempts(size))
      expect(want).toBeDefined()
      expect(Result.getOrThrow(generateMap(size, p, seed))).toEqual(want!.map)
    },
    { arbitrary: { runs: 25 } }
  )

  it("decides a cell exactly at the draw: p equal to the draw is a hole, the next double up is safe", () => {
    for (let seed = 0; seed < 40; seed++) {
      const first = new PyRandom(seed).random()
      for (const p of [first, first + 2 ** -53]) {
        const want = reference(3, p, seed, 1)
        const got = generateMap(3, p, seed, { maxAttempts: 1 })
        if (want === undefined) expectFailure(got, { size: 3, p, seed: String(seed), attempts: 1 })
        else expect(Result.getOrThrow(got)).toEqual(want.map)
      }
    }
  })
})

describe("FrozenLake env: a config past the budget", () => {
  const reset = (envConfig: Record<string, unknown>, seed = 0) =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Result.getOrThrow(FrozenLake.prepare(envConfig))
      return yield* env.reset({ trajectoryId: "t", seed, messages: [], dataDict: {}, envConfig })
    }))

  it.live("fails reset with an EnvError naming the config and the reason; every generation of the row alike", () =>
    guarded(Effect.gen(function*() {
      for (const envConfig of [{ size: 256, p: 0, seed: 0 }, { size: 256, p: 0, seed: 0 }, { size: 256, p: "0.3" }]) {
        const error = yield* Effect.flip(reset(envConfig, 7))
        expect(error).toBeInstanceOf(Env.EnvError)
        expect(error.phase).toBe("reset")
        expect(error.cause).toBeInstanceOf(MapBudgetExceeded)
        const seed = envConfig.seed ?? 7 // without a seed, the row's seed
        expect(error.message).toContain(`FrozenLake size 256, p ${Number(envConfig.p)}, seed ${seed}: no solvable map`)
        expect(error.message.endsWith("(The seed is the row's: env_config has none.)")).toBe(envConfig.seed === undefined)
      }
    })))

  it.live("searches in slices: timers run while it searches, and an interrupted search resumes where it was", () =>
    guarded(Effect.gen(function*() {
      // 128x128, p 0, seed 11: CPython's reference accepts attempt 958 (fixture) of the 1,024 allowed,
      // about 240 slices of 4 attempts
      const envConfig = { size: 128, p: 0, seed: 11 }
      const want = Result.getOrThrow(generateMap(128, 0, 11))
      const fiber = yield* Effect.forkChild(reset(envConfig))
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 0)))
      // a timer fired during the search: the search is not one synchronous block
      expect(fiber.pollUnsafe()).toBeUndefined()
      yield* Fiber.interrupt(fiber)
      expect(Exit.hasInterrupts(yield* Fiber.await(fiber))).toBe(true)
      // the next reset of the same config picks the shared search up and gives the reference's map
      const out = yield* reset(envConfig)
      const grid = out.observation.split("\n").slice(1, 129).map((line) => line.replace(/ /g, "").replace("P", "S"))
      expect(grid).toEqual(want)
    })))
})

describe("FrozenLake: effect-gym run with configs past the budget", () => {
  it("answers SIGINT while it searches maps that fail (the built binary; killed if it hangs)", async () => {
    const dir = tmp()
    const dataset = path.join(dir, "rows.jsonl")
    const output = path.join(dir, "out.jsonl")
    // 256x256, p 0: about 0.1-0.4 s of search per row before it fails, 300 rows
    const lines = Array.from({ length: 300 }, (_, i) =>
      JSON.stringify({ messages: [{ role: "user", content: "x" }], env_config: { size: 256, p: 0, seed: 1000 + i } }))
    fs.writeFileSync(dataset, lines.join("\n") + "\n")
    const child = spawn(
      process.execPath,
      [path.join(ROOT, "bin/effect-gym.js"), "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random",
        "--num-generations", "2", "--output", output],
      { stdio: "ignore" }
    )
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on("exit", (code, signal) => resolve({ code, signal })))
    const guard = setTimeout(() => child.kill("SIGKILL"), HANG_LIMIT_MS)
    try {
      // the run has started (its signal handlers are installed) once the output file exists
      for (let i = 0; i < 600 && !fs.existsSync(output); i++) await new Promise((r) => setTimeout(r, 50))
      await new Promise((r) => setTimeout(r, 1000))
      child.kill("SIGINT")
      const { code, signal } = await exited
      expect(signal, "killed by the test's guard: SIGINT was not handled").toBeNull()
      expect(code).toBe(130)
    } finally {
      clearTimeout(guard)
    }
  }, HANG_LIMIT_MS + 30_000)

  it.live("fails those rows' trajectories with the typed error and runs the rest", () =>
    guarded(Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      const output = path.join(dir, "out.jsonl")
      const row = (envConfig: Record<string, unknown>) =>
        JSON.stringify({ messages: [{ role: "user", content: "<placeholder>" }], env_config: envConfig })
      fs.writeFileSync(dataset, [row({ seed: 1 }), row({ size: 256, p: 0, seed: 0 }), row({ size: 256, p: 0.3 }), row({ seed: 2 })].join("\n") + "\n")
      const { stdout } = yield* cli(
        "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "frozen-lake-solver",
        "--num-generations", "4", "--max-turns", "20", "--output", output
      )
      const lines = readLines(output)
      expect(lines.length).toBe(16)
      for (const line of lines) {
        if (line.row === 1 || line.row === 2) {
          expect(line.end_reason).toBe("error")
          expect(line.error?._tag).toBe("EnvError")
          expect(String(line.error?.message)).toMatch(/FrozenLake size 256, p 0(\.3)?, seed \d+: no solvable map in 256 attempts/)
        } else {
          expect(line.end_reason).toBe("done")
          expect(line.reward).toBe(1)
        }
      }
      expect(stdout).toContain("EnvError 8")
    })))
})
