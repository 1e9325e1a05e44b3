// Renders every command's help ahead, for the launcher (src/cli/launch.ts, helpPage): `--help` and
// `-h` of each command path (and the bare `effect-gym`), plain and coloured, as the command line
// (dist/cli/Cli.js, the program the bundle is made from) prints them, into dist/bundle/help.json with
// the SHA-256 of the bundle (dist/bundle/cli.cjs). Run by `npm run build` after
// scripts/bundle.mjs. test/Launch.test.ts checks each page against the command line's own output.
import { NodeServices } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const root = path.resolve(import.meta.dirname, "..")
const bundle = path.join(root, "dist/bundle/cli.cjs")
const { commandPaths, main } = await import(pathToFileURL(path.join(root, "dist/cli/Cli.js")).href)
const { helpKey } = await import(pathToFileURL(path.join(root, "dist/cli/launch.js")).href)

const render = (args, color) =>
  Effect.gen(function*() {
    const out = []
    const err = []
    const console = {
      ...globalThis.console,
      log: (...xs) => void out.push(`${xs.join(" ")}\n`),
      error: (...xs) => void err.push(`${xs.join(" ")}\n`)
    }
    const code = yield* main(["node", "effect-gym", ...args], undefined, undefined, color).pipe(
      Effect.provideService(Console.Console, console)
    )
    return { code, stdout: out.join(""), stderr: err.join("") }
  }).pipe(Effect.provide(NodeServices.layer))

const pages = {}
const asked = [[], ...commandPaths().flatMap((p) => [[...p, "--help"], [...p, "-h"]])]
for (const args of asked) {
  for (const color of [false, true]) pages[helpKey(color, args)] = await Effect.runPromise(render(args, color))
}
const hash = crypto.createHash("sha256").update(fs.readFileSync(bundle)).digest("hex")
fs.writeFileSync(path.join(root, "dist/bundle/help.json"), JSON.stringify({ format: 1, bundle: hash, pages }))
console.log(`help pages: ${asked.length * 2} (dist/bundle/help.json)`)
