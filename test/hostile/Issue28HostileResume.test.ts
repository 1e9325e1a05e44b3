/**
 * Issue 28's hostile pass (after the merge): item 17 (--resume compared the digest of the --plugin
 * file alone, so an env the plugin imports from another file could be edited and the run resumed,
 * mixing its old and new rewards, 0.3 and 2.1, in one log, exit 0) and item 21 (advantages at the
 * ends of the doubles, lines out of place in a resumed log, dataset seeds past 2^53 - 1).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Reward from "../../src/Reward.js"
import { cli, tmp } from "../cli.js"

const plugin = `import { Env, Plugin } from "effect-gym"
import { REWARD } from "./lib/reward.js"
class OneStep {
  async reset() { return { observation: "go", info: {} } }
  async step() { return { observation: "done", reward: REWARD, done: true, info: {} } }
  async close() {}
}
export default Plugin.make({ envs: [Env.fromClass({ name: "imports_reward", description: "one step", class: OneStep })] })
`

describe("issue 28 item 17, hostile: --resume checks the local files a plugin imports", () => {
  it.live("an edit to a file the plugin imports (a .ts behind ./x.js, two levels) is refused; touching without a change is not", () =>
    Effect.gen(function*() {
      const dir = tmp()
      fs.mkdirSync(path.join(dir, "lib"))
      const main = path.join(dir, "p.ts")
      fs.writeFileSync(main, plugin)
      fs.writeFileSync(path.join(dir, "lib", "reward.ts"), `export { REWARD } from "../value"\n`)
      const value = path.join(dir, "value.ts")
      fs.writeFileSync(value, "export const REWARD = 0.3\n")
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 8 }, (_, i) => JSON.stringify({ env_config: { seed: i } })).join("\n") + "\n")
      const output = path.join(dir, "out.jsonl")
      const args = [
        "run", "--dataset", dataset, "--plugin", main, "--env", "imports_reward", "--policy", "random", "--num-generations",
        "1", "--output", output
      ]
      const first = yield* cli(...args)
      expect(first.code, first.stderr).toBe(0)
      const half = fs.readFileSync(output, "utf8").split("\n").slice(0, 4).join("\n") + "\n"
      fs.writeFileSync(output, half)
      // touched, not changed: resumes
      fs.utimesSync(value, new Date(), new Date())
      const touched = yield* cli(...args, "--resume")
      expect(touched.code, touched.stderr).toBe(0)
      fs.writeFileSync(output, half)
      fs.writeFileSync(value, "export const REWARD = 2.1\n")
      const refused = yield* cli(...args, "--resume")
      expect(refused.stderr).toContain(`the content of --plugin ${main} changed since the log was written`)
      expect(refused.code).toBe(2)
      expect(fs.readFileSync(output, "utf8")).toBe(half)
      fs.rmSync(dir, { recursive: true, force: true })
    }), 60_000)
})

describe("issue 28 item 21, hostile: advantages at the ends of the doubles", () => {
  // [1.7e308, -1.7e308] gave [0, 0] (the scaled std overflowed again); [1e308 x3, -1e308] gave NaN
  // (null in the log: the running mean's r - mean overflowed).
  it("rewards near the largest double get the advantages their scaled values get", () => {
    const max = Number.MAX_VALUE
    const close = (got: ReadonlyArray<number | undefined>, want: ReadonlyArray<number>) =>
      got.forEach((g, i) => expect(g!, JSON.stringify(got)).toBeCloseTo(want[i], 12))
    close(Reward.advantages([max, -max]), [Math.SQRT1_2, -Math.SQRT1_2])
    close(Reward.advantages([1e308, 1e308, 1e308, -1e308]), [0.5, 0.5, 0.5, -1.5])
    const unscored = Reward.advantages([max, 0.9 * -max, undefined])
    close(unscored.slice(0, 2), [Math.SQRT1_2, -Math.SQRT1_2])
    expect(unscored[2]).toBeUndefined()
    close(Reward.advantages([1e154, -1e154]), [Math.SQRT1_2, -Math.SQRT1_2])
  })
})

describe("issue 28 item 21, hostile: --resume reads every line of the log whole", () => {
  // A group written twice in the middle of the log was kept (42 lines for 40 trajectories after the
  // resume, exit 0); a line naming row 1e12 was kept (its index wrapped in the row set's 32-bit shift).
  it.live("a group written twice, or a row that is no dataset line's index, is refused (exit 2), the log untouched", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, Array.from({ length: 10 }, (_, i) => JSON.stringify({ env_config: { seed: i } })).join("\n") + "\n")
      const output = path.join(dir, "out.jsonl")
      const args = ["run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--output", output]
      expect((yield* cli(...args, "--num-generations", "2")).code).toBe(0)
      const lines = fs.readFileSync(output, "utf8").trimEnd().split("\n")
      const twice = [...lines.slice(0, 6), ...lines.slice(2, 4), ...lines.slice(6, 12)].join("\n") + "\n"
      fs.writeFileSync(output, twice)
      const refused = yield* cli(...args, "--num-generations", "2", "--resume")
      // (the row of lines 3-4: groups are written as they finish, in an order a loaded machine changes)
      const again = (JSON.parse(lines[2]) as { readonly row: number }).row
      expect(refused.stderr).toContain(`line 7: the group of row ${again} again`)
      expect(refused.code).toBe(2)
      expect(fs.readFileSync(output, "utf8")).toBe(twice)

      expect((yield* cli(...args, "--num-generations", "1", "--overwrite")).code).toBe(0)
      const far = fs.readFileSync(output, "utf8").split("\n").slice(0, 4).join("\n") + "\n" +
        JSON.stringify({ row: 1e12, generation: 0 }) + "\n"
      fs.writeFileSync(output, far)
      const huge = yield* cli(...args, "--num-generations", "1", "--resume")
      expect(huge.stderr).toContain("line 5: row 1000000000000 is not a dataset line's index")
      expect(huge.code).toBe(2)
      fs.rmSync(dir, { recursive: true, force: true })
    }), 60_000)
})

describe("issue 28 item 21, hostile: dataset's seeds stay exact", () => {
  // --start-seed 9007199254740990 --rows 4 wrote seeds ...990, ...991, ...992, ...992 (exit 0).
  it.live("a last seed past 2^53 - 1 is refused (exit 2); up to it is written", () =>
    Effect.gen(function*() {
      const past = yield* cli("dataset", "frozen-lake", "--rows", "4", "--start-seed", "9007199254740990")
      expect(past.stderr).toContain("--start-seed: with --rows 4 the last seed would be past 9007199254740991")
      expect(past.code).toBe(2)
      const upTo = yield* cli("dataset", "frozen-lake", "--rows", "2", "--start-seed", "9007199254740990")
      expect(upTo.code).toBe(0)
      expect(upTo.stdout).toContain("\"seed\":9007199254740991")
    }))
})
