import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { defineConfig } from "vitest/config"

/**
 * Tests, examples and fixtures import the package by its public names (`effect-gym`,
 * `effect-gym/openenv`, ...). `tsconfig.test.json` maps each name to its TypeScript source (one
 * entry per subpath of package.json's `exports`; a test keeps the two in step), and both loaders use
 * that map: vitest through `resolve.alias`, and tsx, which loads `.ts` plugin files at run time,
 * through `TSX_TSCONFIG_PATH`. So editing `src/` and running `npx vitest run` tests the edited code.
 * Only the spawned `bin/effect-gym.js` (and `.mjs` plugins it imports) runs the built `dist/`:
 * `npm test` builds first.
 */
const root = import.meta.dirname
const testTsconfig = path.join(root, "tsconfig.test.json")
const paths = (JSON.parse(fs.readFileSync(testTsconfig, "utf8")) as {
  readonly compilerOptions: { readonly paths: Record<string, ReadonlyArray<string>> }
}).compilerOptions.paths

export default defineConfig({
  resolve: {
    alias: Object.entries(paths).map(([name, [target]]) => ({
      find: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}$`),
      replacement: path.resolve(root, target)
    }))
  },
  test: {
    include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
    env: { TSX_TSCONFIG_PATH: testTsconfig },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // vitest's default is one fork per CPU but one; on a 2-CPU machine that is one fork, and most test
    // files wait on child processes, servers and timers: two forks took 548 s of wall time against
    // 815 s for one (the whole suite, same machine, 2026-12-02), every test passing
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    sequence: { concurrent: false }
  }
})
