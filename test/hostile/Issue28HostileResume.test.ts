/**
 * Issue 28's hostile pass (after the merge), item 17: --resume compared the digest of the --plugin
 * file alone, so an env the plugin imports from another file could be edited and the run resumed,
 * mixing its old and new rewards (0.3 and 2.1) in one log, exit 0.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
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
