/**
 * Completions logs for the viewer's tests, made by real runs of the CLI (in-process): FrozenLake
 * with the solver, FrozenLake with the random policy, a mixed dataset whose plugin env fails now
 * and then, Sudoku with an erring solver, and server mode against the loopback OpenAI-compatible
 * fake (token ids, loss masks, logprobs).
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "../cli.js"
import * as FakeOpenAi from "../inference/FakeOpenAi.js"

export const root = path.resolve(import.meta.dirname, "../..")
export const viewPlugin = path.join(root, "test/fixtures/plugins/view_envs.mjs")

const jsonl = (dir: string, name: string, rows: ReadonlyArray<unknown>) => {
  const file = path.join(dir, name)
  fs.writeFileSync(file, rows.map((r) => JSON.stringify(r)).join("\n") + "\n")
  return file
}

const run = (args: ReadonlyArray<string>) =>
  Effect.flatMap(cli("run", ...args, "--json", "--overwrite"), (result) =>
    result.code > 1 ? Effect.die(new Error(`run failed (${result.code}): ${result.stderr}`)) : Effect.succeed(JSON.parse(result.stdout) as Record<string, unknown>))

/** FrozenLake, `rows` rows: the solver (all succeed) or the random policy (holes, max_turns). */
export const frozenLake = (dir: string, options: { readonly rows: number; readonly policy: "frozen-lake-solver" | "random"; readonly name?: string; readonly generations?: number }) =>
  Effect.gen(function*() {
    const dataset = jsonl(dir, `fl-${options.rows}.jsonl`, Array.from({ length: options.rows }, (_, seed) => ({ env_config: { seed } })))
    const output = path.join(dir, options.name ?? `${options.policy}.jsonl`)
    const summary = yield* run([
      "--dataset", dataset, "--env", "frozen_lake", "--policy", options.policy, "--num-generations", String(options.generations ?? 4),
      "--max-turns", "6", "--seed", "1", "--output", output
    ])
    return { file: output, summary }
  })

/** FrozenLake rows and a plugin env that throws in rows whose seed is a multiple of 3. */
export const mixed = (dir: string) =>
  Effect.gen(function*() {
    const rows = Array.from({ length: 6 }, (_, i) => [{ env_config: { name: "flaky_counter" } }, { env_config: { name: "frozen_lake", seed: i } }]).flat()
    const dataset = jsonl(dir, "mixed.jsonl", rows)
    const output = path.join(dir, "mixed_log.jsonl")
    const summary = yield* run([
      "--dataset", dataset, "--plugin", viewPlugin, "--policy", "frozen-lake-solver", "--policy-option", "epsilon=0.5",
      "--num-generations", "4", "--max-turns", "5", "--output", output
    ])
    return { file: output, summary }
  })

/** Sudoku with the example plugin's solver, which errs 30% of the time. */
export const sudoku = (dir: string) =>
  Effect.gen(function*() {
    const dataset = jsonl(dir, "sudoku.jsonl", [0, 1].map((seed) => ({ env_config: { seed, clues: 74 } })))
    const output = path.join(dir, "sudoku_log.jsonl")
    const summary = yield* run([
      "--dataset", dataset, "--env", "sudoku", "--plugin", path.join(root, "examples/sudoku_scheduler.ts"),
      "--policy", "sudoku-solver", "--policy-option", "epsilon=0.3", "--num-generations", "2", "--max-turns", "12", "--output", output
    ])
    return { file: output, summary }
  })

/** Server mode against the fake OpenAI server: every turn's token ids, loss mask and logprobs. */
export const tokens = (dir: string) =>
  Effect.gen(function*() {
    const server = yield* FakeOpenAi.make
    const dataset = jsonl(dir, "tokens.jsonl", [0, 1, 2].map((seed) => ({ env_config: { seed } })))
    const output = path.join(dir, "tokens_log.jsonl")
    const summary = yield* run([
      "--dataset", dataset, "--env", "frozen_lake", "--mode", "server", "--base-url", server.baseUrl, "--model", "tiny",
      "--num-generations", "2", "--max-turns", "6", "--output", output
    ])
    return { file: output, summary }
  }).pipe(Effect.scoped)

/**
 * Server mode's token path on Qwen3's real vocabulary (the fake server samples with Qwen3's
 * tokenizer and template; the run uses the same tokenizer locally): per-turn token fields and the
 * whole sequence with its loss mask.
 */
export const qwen3Tokens = (dir: string) =>
  Effect.gen(function*() {
    const Qwen3 = yield* Effect.promise(() => import("../inference/qwen3.js"))
    const server = yield* FakeOpenAi.make
    server.state.tokenizer = Qwen3.fake
    server.state.maxModelLen = 4096
    const dataset = jsonl(dir, "qwen3.jsonl", [0, 1].map((seed) => ({ env_config: { seed } })))
    const output = path.join(dir, "qwen3_log.jsonl")
    const summary = yield* run([
      "--dataset", dataset, "--env", "frozen_lake", "--mode", "server", "--base-url", server.baseUrl, "--model", "tiny",
      "--tokenizer", Qwen3.QWEN3_TOKENIZER, "--max-tokens", "64", "--num-generations", "2", "--max-turns", "4", "--output", output
    ])
    return { file: output, summary, tokenizer: Qwen3.QWEN3_TOKENIZER }
  }).pipe(Effect.scoped)

export { tmp }
