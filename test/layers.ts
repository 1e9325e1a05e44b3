/**
 * The test suite's two layers (vitest.config.ts's projects), classified by file:
 *
 * - `unit` (`npm run test:unit`): every test file not listed below. Needs no build and starts no
 *   child process; its setup file (test/setup/no-child-process.ts) makes node:child_process throw,
 *   so a file that starts one fails there and has to be listed here.
 * - `integration`: the files listed below, which run the built command line (`bin/effect-gym.js`,
 *   `dist/`) or another program (Python, PostgreSQL, Chromium, `script`, node-llama-cpp's binding
 *   probe), or start env worker threads (which load the built `dist/isolation`). The project builds
 *   `dist/` first when its inputs changed (scripts/build-if-changed.mjs).
 *
 * Files listed as `heavy` (unit or integration) start first (they take the longest), so that they do not end the run alone.
 */

/** Test files of the integration project, paths from the package root. */
export const integration: ReadonlyArray<string> = [
  "test/Cli.test.ts",
  "test/FreshProject.test.ts",
  "test/FrozenLakeBudget.test.ts",
  "test/Launch.test.ts",
  "test/LaunchParity.test.ts",
  "test/PluginTypeScript.test.ts",
  "test/PythonDocs.test.ts",
  "test/PythonLoop.test.ts",
  "test/RunSafety.test.ts",
  "test/RunSafetyHostile.test.ts",
  "test/SyncFastPath.test.ts",
  "test/SyncFastPathHostile.test.ts",
  "test/check/CheckEnvCommand.test.ts",
  "test/clients/Python.test.ts",
  "test/cluster/Cluster.test.ts",
  "test/hostile/CliHostile.test.ts",
  "test/hostile/Issue27HostileCli.test.ts",
  "test/hostile/Issue27HostileNode.test.ts",
  "test/hostile/Issue27Hostile4Node.test.ts",
  "test/hostile/Issue27Hostile5Node.test.ts",
  "test/hostile/Issue27Kill9Node.test.ts",
  "test/hostile/Issue28HostileIsolation.test.ts",
  "test/hostile/Issue28ServerCli.test.ts",
  "test/hostile/Issue29Hostile2Cli.test.ts",
  "test/hostile/Issue29HostileBin.test.ts",
  "test/hostile/Issue29HostileNode.test.ts",
  "test/hostile/Issue29Hostile4Node.test.ts",
  "test/hostile/PythonHostile.test.ts",
  "test/hostile/TerminalRun.test.ts",
  "test/hostile/ViewHostile.test.ts",
  "test/inference/LlamaCpp.test.ts",
  "test/isolation/EnvWorkers.test.ts",
  "test/isolation/Freeze.test.ts",
  "test/isolation/Neighbours.test.ts",
  "test/openenv/Cli.test.ts",
  "test/openenv/McpCli.test.ts",
  "test/openenv/OpenEnvScheduler.test.ts",
  "test/openenv/Shutdown.test.ts",
  "test/rollout-server/Cli.test.ts",
  "test/rollout-server/ColocateShutdown.test.ts",
  "test/rollout-server/Swift.test.ts",
  "test/view/Browser.test.ts",
  "test/view/Tokens.test.ts"
]

/** Every test file, as globs from the package root. */
export const all: ReadonlyArray<string> = ["test/**/*.test.ts", "examples/**/*.test.ts"]

/**
 * The `docs` project (`npm run test:docs`, which CI runs after `npm test`): every block of the docs,
 * run as it is written (about 2 minutes of commands: kept out of `npm test`'s time).
 */
export const docs: ReadonlyArray<string> = ["test/DocsRun.test.ts"]

/**
 * The files that take the longest, longest first (as `npm test` ran on the quiet 2-core machine,
 * 2026-12-04, 19:20): they start first, so that none of them ends the run alone. vitest orders the
 * rest by the times it cached, which a clean clone (CI) does not have: there the unit file of huge
 * strings, not listed, came last and ran 19 s alone (npm test 373 s against 343 s).
 */
export const heavy: ReadonlyArray<string> = [
  "test/cluster/Cluster.test.ts",
  "test/Launch.test.ts",
  "test/LaunchParity.test.ts",
  "test/inference/LlamaCpp.test.ts",
  "test/isolation/Freeze.test.ts",
  "test/view/Browser.test.ts",
  "test/RunSafety.test.ts",
  "test/FreshProject.test.ts",
  "test/hostile/Issue27Hostile4.test.ts",
  "test/SyncFastPathHostile.test.ts",
  "test/hostile/TerminalRun.test.ts",
  "test/openenv/McpCli.test.ts",
  "test/isolation/EnvWorkers.test.ts",
  "test/hostile/Issue28Server.test.ts",
  "test/hostile/Issue29Hostile2Cli.test.ts",
  "test/hostile/Issue29Hostile4Node.test.ts",
  "test/hostile/CliHostile.test.ts",
  "test/inference/TokenPath.test.ts"
]
