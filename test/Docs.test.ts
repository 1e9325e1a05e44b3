/**
 * The docs (README.md and docs/*.md) against the command line they describe (issue 29, item 2):
 * every page reached from the README, each with its contents; every `effect-gym` command in a
 * shell block names a command that exists and options that command takes.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli } from "./cli.js"

const root = path.resolve(import.meta.dirname, "..")
const pages = ["README.md", ...fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)]
const read = (file: string) => fs.readFileSync(path.join(root, file), "utf8")

/** The commands of a page's shell blocks (continuation lines joined), as words. */
const commands = (text: string): Array<Array<string>> => {
  const out: Array<Array<string>> = []
  for (const block of text.matchAll(/```(?:sh|bash|shell|console)?\n([\s\S]*?)```/g)) {
    const joined = block[1].replace(/\\\n\s*/g, " ")
    for (const raw of joined.split("\n")) {
      const line = raw.replace(/\s+#.*$/, "").trim()
      const at = line.search(/(?:^|\s)(?:npx effect-gym|node bin\/effect-gym\.js|effect-gym)\s/)
      if (at < 0) continue
      const words = line.slice(at).trim().split(/\s+/)
      const start = words.findIndex((w) => w === "effect-gym" || w === "bin/effect-gym.js")
      // (up to a pipe or a shell operator)
      const end = words.findIndex((w, i) => i > start && /^(\||&&|;|>|2>|<|&)$/.test(w))
      out.push(words.slice(start + 1, end < 0 ? undefined : end))
    }
  }
  return out
}

const NESTED = new Set(["openenv", "dataset"])
const GLOBAL = new Set(["--help", "-h", "--version", "--wizard", "--completions", "--log-level", "--no-color"])

describe("docs", () => {
  it("the README is short and links every page of docs/; each page has its contents and links back", () => {
    const readme = read("README.md")
    expect(readme.split("\n").length).toBeLessThanOrEqual(250)
    for (const page of pages.filter((p) => p.startsWith("docs/") && p !== "docs/README.md")) {
      expect(readme, page).toContain(`](${page})`)
      const text = read(page)
      expect(text, page).toContain("**Contents**")
      expect(text, page).toContain("](../README.md)")
    }
  })

  it("every link between the pages reaches a page and a heading that exist", () => {
    const slug = (heading: string) => heading.trim().toLowerCase().replace(/[^\w\- ]/g, "").replace(/ /g, "-")
    const anchors = new Map(pages.map((p) => [p, new Set([...read(p).replace(/```[\s\S]*?```/g, "").matchAll(/^#+ (.*)$/gm)].map((m) => slug(m[1])))]))
    for (const page of pages) {
      const text = read(page).replace(/```[\s\S]*?```/g, "")
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:)/.test(target)) continue
        const [file, anchor] = target.split("#")
        const resolved = file === "" ? page : path.posix.normalize(path.posix.join(path.posix.dirname(page), file))
        expect(fs.existsSync(path.join(root, resolved)), `${page}: ${target}`).toBe(true)
        if (anchor !== undefined && resolved.endsWith(".md")) expect(anchors.get(resolved)?.has(anchor), `${page}: ${target}`).toBe(true)
      }
    }
  })

  it.effect("every effect-gym command in the docs names a command that exists, with options it takes", () =>
    Effect.gen(function*() {
      const helps = new Map<string, string>()
      let checked = 0
      for (const page of pages) {
        for (const words of commands(read(page))) {
          const first = words[0]
          if (first === undefined || first.startsWith("-")) continue
          const command = NESTED.has(first) && words[1] !== undefined && !words[1].startsWith("-") ? [first, words[1]] : [first]
          const key = command.join(" ")
          if (!helps.has(key)) {
            const help = yield* cli(...command, "--help")
            expect(help.code, `${page}: effect-gym ${key}`).toBe(0)
            helps.set(key, help.stdout)
          }
          const help = helps.get(key)!
          for (const word of words.slice(command.length)) {
            const flag = /^\[?(--?[a-z][a-z0-9-]*)/.exec(word)?.[1]
            if (flag === undefined || GLOBAL.has(flag)) continue
            expect(help, `${page}: effect-gym ${words.join(" ")}: ${flag}`).toMatch(new RegExp(`(^|[\\s,])${flag}([ ,]|$)`, "m"))
          }
          checked++
        }
      }
      expect(checked).toBeGreaterThan(20)
    }))
})
