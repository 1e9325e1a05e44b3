// Bundles the command line (dist/cli/bin.js, built by tsc) into dist/bundle/, which
// bin/effect-gym.js runs. Loading one bundle instead of hundreds of modules cuts the CPU time of
// `effect-gym envs` about 3.5x (bench/workloads/startup.ts). Code split at dynamic imports: the
// servers, the checker and the inference backends load only when used. The package's own
// dependencies that are native, heavy or load files of their own (node-llama-cpp, tsx, undici,
// @huggingface/*) stay outside, loaded from node_modules when used; ws (which @effect/platform-node
// brings, not a dependency of ours) is bundled, in the chunk the OpenEnv client loads. Plugins
// import effect-gym and effect from node_modules (their own copies), which work with the bundle's
// as any two copies of one version do.
import * as esbuild from "esbuild"
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "..")
const outdir = path.join(root, "dist/bundle")
fs.rmSync(outdir, { recursive: true, force: true })
await esbuild.build({
  entryPoints: {
    bin: path.join(root, "dist/cli/bin.js"),
    // The env worker threads' entry (isolation/EnvWorkers looks for it beside its own chunk): it
    // shares the bundle's chunks, so a worker starts as fast as the command line does.
    "env-worker": path.join(root, "dist/isolation/internal/worker.js")
  },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external: [
    "node-llama-cpp",
    "tsx",
    "undici",
    "@huggingface/jinja",
    "@huggingface/tokenizers",
    // ws's optional native helpers, required inside a try
    "bufferutil",
    "utf-8-validate",
    // pg's optional native binding, required lazily
    "pg-native"
  ],
  // CommonJS dependencies inside an ES module bundle call require
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  minifySyntax: true,
  minifyWhitespace: true,
  legalComments: "none",
  logLevel: "warning"
})
