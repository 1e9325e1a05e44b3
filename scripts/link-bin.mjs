// Links the package's own command into its node_modules/.bin (`npm ci` runs it, from `prepare`):
// npm links a package's bin for those who install it, never for the package itself, so in a clone
// `npx effect-gym` did not find one, installed the clone into npx's cache as a `file:` package, and
// ran `prepare` (the whole build, deleting dist/ under any command running from it): 75 s, where
// the linked command starts at once.
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "..")
const binDir = path.join(root, "node_modules/.bin")
const link = path.join(binDir, "effect-gym")
const target = path.relative(binDir, path.join(root, "bin/effect-gym.js"))
// (only in a checkout with its dependencies installed: an installed copy's prepare has nothing to link)
if (fs.existsSync(path.join(root, "node_modules"))) {
  fs.mkdirSync(binDir, { recursive: true })
  let current
  try {
    current = fs.readlinkSync(link)
  } catch {
    current = undefined
  }
  let kind
  try {
    kind = fs.lstatSync(link)
  } catch {
    kind = undefined
  }
  if (kind !== undefined && kind.isDirectory()) {
    // (a folder is not removed: it may hold someone's files; rmSync threw EISDIR and npm ci failed)
    process.stderr.write(
      `link-bin: ${link} is a folder, not a link: not replaced (npx effect-gym will not find the clone's command); remove it and run npm run prepare\n`
    )
  } else if (current !== target) {
    fs.rmSync(link, { force: true })
    fs.symlinkSync(target, link)
  }
}
