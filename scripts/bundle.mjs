// Bundles the command line (dist/cli/bin.js, built by tsc) into dist/bundle/, twice: as one
// CommonJS file, dist/bundle/cli.cjs, which bin/effect-gym.js runs through the launcher
// (dist/bundle/launch.js, from src/cli/launch.ts) with V8's code cache; and as ES modules
// (dist/bundle/bin.js and chunks), which the env worker threads run and the launcher falls back to. Loading one bundle instead of hundreds of modules cuts the CPU time of
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
import { pathToFileURL } from "node:url"
import * as vm from "node:vm"

const root = path.resolve(import.meta.dirname, "..")
const outdir = path.join(root, "dist/bundle")
fs.rmSync(outdir, { recursive: true, force: true })
const external = [
  "node-llama-cpp",
  "tsx",
  "esbuild",
  "undici",
  "@huggingface/jinja",
  "@huggingface/tokenizers",
  // ws's optional native helpers, required inside a try
  "bufferutil",
  "utf-8-validate",
  // pg's optional native binding, required lazily
  "pg-native"
]
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
  external,
  // CommonJS dependencies inside an ES module bundle call require
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  minifySyntax: true,
  // EFFECT_GYM_BUNDLE_PRETTY=1: one statement per line, for reading a CPU profile's line numbers
  minifyWhitespace: process.env.EFFECT_GYM_BUNDLE_PRETTY !== "1",
  // Short lines: Node prints an uncaught error's whole source line (without this, up to 260 KB of
  // minified code on stderr), and a stack's line numbers then say where
  lineLimit: 160,
  legalComments: "none",
  logLevel: "warning"
})

// The same program as one CommonJS file, for the launcher's vm.Script and its code cache (Node 20
// has no code cache for ES modules). Its dynamic imports of its own modules are inlined (evaluated
// when first imported); those of external packages and plugins stay import() calls, which the
// launcher resolves as from this folder. `import.meta.url` becomes this file's URL: the
// modules that look for files beside themselves (the env worker's entry, the view's assets,
// package.json) find what they find from the ES module bundle, which sits in the same folder.
//
// In one file, every module that a dynamic import reaches is evaluated lazily, and so is all it
// imports: an import from a package's index (`import { Effect } from "effect"`, `import { Command }
// from "effect/cli"`) then evaluates every module that index re-exports (all of effect, its HTTP
// stack), where the ES module bundle drops them as unused. So our modules' imports from the effect
// packages' indexes are rewritten to the modules they name (`import * as Effect from
// "effect/Effect"`, `import * as Command from "effect/cli/Command"`), as they are in the packages
// themselves.
const barrels = new Map()
/** The names an index exports (`effect`, `effect/cli`, `@effect/platform-node`), and the modules they come from. */
const barrelOf = (specifier) => {
  if (barrels.has(specifier)) return barrels.get(specifier)
  const [, pkg, sub] = /^((?:@effect\/)?[\w-]+)(?:\/([\w-]+))?$/.exec(specifier) ?? []
  const dist = path.join(root, "node_modules", pkg ?? specifier, "dist")
  const index = [path.join(dist, sub ?? "", "index.js"), path.join(dist, "esm", sub ?? "", "index.js")].find((file) =>
    fs.existsSync(file)
  )
  let names
  if (pkg !== undefined && index !== undefined) {
    names = new Map()
    // (effect 4's indexes hold a doc comment before each name)
    const text = fs.readFileSync(index, "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "")
    const prefix = sub === undefined ? pkg : `${pkg}/${sub}`
    for (const m of text.matchAll(/export \* as (\w+) from "\.\/([\w/]+)\.js"/g)) {
      names.set(m[1], { module: `${prefix}/${m[2]}`, namespace: true })
    }
    for (const m of text.matchAll(/export \{([^}]*)\} from "\.\/([\w/]+)\.js"/g)) {
      for (const name of m[1].split(",").map((n) => n.trim()).filter((n) => /^\w+$/.test(n))) {
        names.set(name, { module: `${prefix}/${m[2]}`, namespace: false })
      }
    }
  }
  barrels.set(specifier, names)
  return names
}
const deepImports = {
  name: "deep-imports",
  setup(build) {
    build.onLoad({ filter: /[\\/]dist[\\/].*\.js$/ }, (args) => {
      if (args.path.includes("node_modules")) return undefined
      const text = fs.readFileSync(args.path, "utf8")
      const fromIndex = /import \{([^}]*)\} from "((?:@effect\/)?[\w-]+(?:\/[\w-]+)?)";/g
      const contents = text.replace(fromIndex, (statement, list, pkg) => {
        const ours = pkg === "effect" || pkg.startsWith("effect/") || pkg.startsWith("@effect/")
        const names = ours ? barrelOf(pkg) : undefined
        if (names === undefined) return statement
        const kept = []
        const deep = []
        for (const specifier of list.split(",").map((n) => n.trim()).filter((n) => n !== "")) {
          const [name, local = name] = specifier.split(/\s+as\s+/)
          const target = names.get(name)
          if (target === undefined) kept.push(specifier)
          else if (target.namespace) deep.push(`import * as ${local} from "${target.module}";`)
          else deep.push(`import { ${name} as ${local} } from "${target.module}";`)
        }
        return [...(kept.length > 0 ? [`import { ${kept.join(", ")} } from "${pkg}";`] : []), ...deep].join(" ")
      })
      return { contents, loader: "js" }
    })
  }
}
const cjs = path.join(outdir, "cli.cjs")
await esbuild.build({
  plugins: [deepImports],
  entryPoints: [path.join(root, "dist/cli/bin.js")],
  outfile: cjs,
  bundle: true,
  format: "cjs",
  platform: "node",
  target: "node20",
  external,
  define: { "import.meta.url": "__importMetaUrl", "import.meta.dirname": "__dirname", "import.meta.filename": "__filename" },
  // (strict, as the ES modules it comes from are)
  banner: { js: "\"use strict\";const __importMetaUrl = require('node:url').pathToFileURL(__filename).href;" },
  minifySyntax: true,
  // EFFECT_GYM_BUNDLE_PRETTY=1: one statement per line, for reading a CPU profile's line numbers
  minifyWhitespace: process.env.EFFECT_GYM_BUNDLE_PRETTY !== "1",
  // Short lines: Node prints an uncaught error's whole source line (without this, up to 260 KB of
  // minified code on stderr), and a stack's line numbers then say where
  lineLimit: 160,
  legalComments: "none",
  logLevel: "warning"
})
// The launcher compiles the file inside a function (no hashbang line) whose last parameter,
// __effectGymImport, is the launcher's own import(): a script restored from V8's code cache has lost
// the host's dynamic import callback in Node 20 ("A dynamic import callback was not specified"), so
// the bundle's import() calls (not those inside strings: the env worker's boot code) go through it.
const importCall = /(?<![\w$.`"'])import\(/g
// (the launcher's wrapper, from its build by tsc: dist/cli/launch.js, copied beside the bundle below)
const { wrapBundle } = await import(pathToFileURL(path.join(root, "dist/cli/launch.js")).href)
// ASCII only: esbuild escapes strings' non-ASCII characters but not those of regular expression
// literals (a tokenizer's /[\u0120\u2581]/ was written as its two characters), and one non-ASCII
// character made the launcher decode the whole 2.2 MB as UTF-8 into a two-byte string: `effect-gym
// envs` touched 1,100 more pages (9,600 against 8,500 minor faults) and took 8% longer (15 pairs,
// BENCHMARKS.md). `\uXXXX` means the same code unit in a string, a template's cooked text, a
// regular expression (with or without the u flag: a surrogate pair written as two escapes is still
// one code point) and a comment; in an identifier outside the Basic Multilingual Plane it does not
// parse, so the file is compiled here (as the launcher wraps it) and the build fails if it does not.
const ascii = (text) => text.replace(/[^\x00-\x7f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
const cjsText = ascii(fs.readFileSync(cjs, "utf8").replace(/^#!.*\n/, "").replace(importCall, "__effectGymImport("))
new vm.Script(wrapBundle(cjsText), { filename: cjs })
fs.writeFileSync(cjs, cjsText)
// The launcher imports node: modules only; it runs as built by tsc.
fs.copyFileSync(path.join(root, "dist/cli/launch.js"), path.join(outdir, "launch.js"))
