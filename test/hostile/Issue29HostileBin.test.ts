/**
 * Issue 29 under a hostile user, 2026-12-04: scripts/link-bin.mjs (`prepare`), which links the
 * clone's command into node_modules/.bin. Integration layer: it runs the script in a copy.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const script = path.resolve(import.meta.dirname, "../../scripts/link-bin.mjs")

/** A copy of the package's layout (scripts/, bin/, node_modules/.bin) in a temporary folder. */
const layout = (): string => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-linkbin-"))
  fs.mkdirSync(path.join(root, "scripts"))
  fs.mkdirSync(path.join(root, "bin"))
  fs.mkdirSync(path.join(root, "node_modules/.bin"), { recursive: true })
  fs.copyFileSync(script, path.join(root, "scripts/link-bin.mjs"))
  fs.writeFileSync(path.join(root, "bin/effect-gym.js"), "")
  return root
}

const run = (root: string) => {
  const result = spawnSync(process.execPath, [path.join(root, "scripts/link-bin.mjs")], { encoding: "utf8" })
  return { code: result.status, stderr: result.stderr }
}

describe("issue 29, hostile (2026-12-04): link-bin", () => {
  it("a folder at node_modules/.bin/effect-gym: a warning, exit 0, the folder kept (it threw ERR_FS_EISDIR with a stack trace, and npm ci failed)", () => {
    const root = layout()
    const link = path.join(root, "node_modules/.bin/effect-gym")
    fs.mkdirSync(link)
    fs.writeFileSync(path.join(link, "keep"), "x")
    const result = run(root)
    expect(result.code, result.stderr).toBe(0)
    expect(result.stderr).toContain("is a folder, not a link")
    expect(fs.existsSync(path.join(link, "keep"))).toBe(true)
  })

  it("a broken link, a file, and a second run: each ends as the link", () => {
    const root = layout()
    const link = path.join(root, "node_modules/.bin/effect-gym")
    fs.symlinkSync("/nonexistent/effect-gym", link)
    expect(run(root).code).toBe(0)
    expect(fs.readlinkSync(link)).toBe("../../bin/effect-gym.js")
    fs.rmSync(link)
    fs.writeFileSync(link, "#!/bin/sh\n")
    expect(run(root).code).toBe(0)
    expect(fs.readlinkSync(link)).toBe("../../bin/effect-gym.js")
    expect(run(root).code).toBe(0)
    expect(fs.readlinkSync(link)).toBe("../../bin/effect-gym.js")
  })
})
