import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { defineConfig } from "vitest/config"
import { BaseSequencer, type TestSpecification } from "vitest/node"
import { all, docs, heavy, integration } from "./test/layers.js"

/**
 * Tests, examples and fixtures import the package by its public names (`effect-gym`,
 * `effect-gym/openenv`, ...). `tsconfig.test.json` maps each name to its TypeScript source (one
 * entry per subpath of package.json's `exports`; a test keeps the two in step), and both loaders use
 * that map: vitest through `resolve.alias`, and tsx (`.tsx` plugins, or any with
 * EFFECT_GYM_TS_LOADER=tsx) through `TSX_TSCONFIG_PATH`. So editing `src/` and running `npx vitest run`
 * tests the edited code. The spawned `bin/effect-gym.js` (and the plugins it imports), CommonJS `.ts`
 * plugins loaded in a test's process and the env worker threads run the built `dist/`: the
 * integration project builds it first when its inputs changed.
 *
 * Three projects, classified by file in test/layers.ts: `unit` (no build, no child process: `npm run
 * test:unit`) and `integration` (the built command line, other programs), which `npm test` runs at
 * once, and `docs` (`npm run test:docs`: the docs' blocks run as written; CI runs it after npm test).
 */
const root = import.meta.dirname
const testTsconfig = path.join(root, "tsconfig.test.json")
const paths = (JSON.parse(fs.readFileSync(testTsconfig, "utf8")) as {
  readonly compilerOptions: { readonly paths: Record<string, ReadonlyArray<string>> }
}).compilerOptions.paths

/** vitest's order (failed, then longest first, from its cache), with the heavy files first of all. */
class HeavyFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>) {
    const sorted = await super.sort(files)
    const rank = (spec: TestSpecification) => {
      const at = heavy.indexOf(path.relative(root, spec.moduleId).split(path.sep).join("/"))
      return at === -1 ? heavy.length : at
    }
    return sorted.map((spec, i) => ({ spec, i })).sort((a, b) => rank(a.spec) - rank(b.spec) || a.i - b.i).map(({ spec }) => spec)
  }
}

export default defineConfig({
  resolve: {
    alias: Object.entries(paths).map(([name, [target]]) => ({
      find: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}$`),
      replacement: path.resolve(root, target)
    }))
  },
  test: {
    env: { TSX_TSCONFIG_PATH: testTsconfig },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Test files share their forks (each would load effect and the sources again: about 2 s of CPU a
    // file). For the integration files too: npm test took 407 s (673 s of CPU) with them isolated,
    // 329 s (524 s of CPU) without, on a quiet 2-core machine.
    isolate: false,
    // Most integration files wait on child processes, servers and timers, so more forks than CPUs
    // keep the CPUs busy: on the quiet 2-core machine npm test took 379 s with 2 forks (1.55 CPUs
    // used), 347 s with 3, all 895 tests passing both times (2026-12-04).
    maxWorkers: Math.max(3, os.availableParallelism() - 1),
    sequence: { concurrent: false, sequencer: HeavyFirst },
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: [...all],
          exclude: [...integration, ...docs],
          setupFiles: ["test/setup/no-child-process.ts"]
        }
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: [...integration],
          globalSetup: ["test/setup/built.ts"]
        }
      },
      {
        extends: true,
        test: {
          name: "docs",
          include: [...docs],
          globalSetup: ["test/setup/built.ts"]
        }
      }
    ]
  }
})
