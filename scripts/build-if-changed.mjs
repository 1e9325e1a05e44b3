// Builds dist/ (`npm run build`) unless it was built from the inputs there are now: the tests that
// run the built command line (vitest.config.ts's integration project) call it first, so that they
// never test an old build, and do not rebuild an up-to-date one. The inputs are named by a SHA-256 of
// their content (src/, the build scripts, package.json, the lock file, the tsconfigs), not by file
// times: `npm run build` writes it to dist/.inputs.sha256 last (`--stamp`), and deletes dist/ first,
// so a build that failed half-way leaves none, and the next call builds again.
//
//   node scripts/build-if-changed.mjs           build if dist/ is missing or was built from other inputs
//   node scripts/build-if-changed.mjs --stamp   record that dist/ was just built from the inputs there are now
import { execFileSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const root = path.resolve(import.meta.dirname, "..")
const stamp = path.join(root, "dist/.inputs.sha256")

const files = (dir) =>
  fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const file = path.posix.join(dir, entry.name)
    return entry.isDirectory() ? files(file) : entry.isFile() ? [file] : []
  })

/** The SHA-256 of what the build reads: each input's path and content, in a fixed order. */
export const inputsHash = () => {
  const hash = crypto.createHash("sha256")
  const inputs = [
    ...files("src"),
    ...files("scripts"),
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tsconfig.build.json"
  ].sort()
  for (const file of inputs) {
    hash.update(`${file}\0`)
    hash.update(fs.readFileSync(path.join(root, file)))
    hash.update("\0")
  }
  // (the bundle's one build option)
  hash.update(`EFFECT_GYM_BUNDLE_PRETTY=${process.env.EFFECT_GYM_BUNDLE_PRETTY ?? ""}`)
  return hash.digest("hex")
}

/** Builds dist/ unless its stamp names the inputs there are now; says which. */
export const ensureBuilt = () => {
  const now = inputsHash()
  const built = fs.existsSync(stamp) ? fs.readFileSync(stamp, "utf8").trim() : undefined
  if (built === now) {
    console.log(`dist/ is up to date (inputs ${now.slice(0, 12)}): no build`)
    return
  }
  console.log(built === undefined ? "dist/ has no build stamp: npm run build" : "src/ or the build changed since dist/ was built: npm run build")
  execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", ["run", "build"], { cwd: root, stdio: "inherit" })
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  if (process.argv.includes("--stamp")) fs.writeFileSync(stamp, `${inputsHash()}\n`)
  else ensureBuilt()
}
