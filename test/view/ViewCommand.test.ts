import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { Embedded } from "../../src/view/Protocol.js"
import { cli } from "../cli.js"
import * as Logs from "./logs.js"

/** The data a report embeds. */
const embedded = (file: string): Embedded => {
  const html = fs.readFileSync(file, "utf8")
  const json = /<script type="application\/json" id="effect-gym-config">(.*?)<\/script>/s.exec(html)![1]
  return (JSON.parse(json) as { data: Embedded }).data
}

describe("effect-gym view (command line)", () => {
  const dir = Logs.tmp()

  it.live("--html writes one self-contained file: the page, its script, and the data; nothing from the network", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.mixed(dir)
      const out = path.join(dir, "report.html")
      const result = yield* cli("view", file, "--html", out, "--plugin", Logs.viewPlugin)
      expect(result.stderr).toMatch(/^view: .*mixed_log\.jsonl: 48 trajectories \(0\.\d MB\) indexed in /)
      expect(result.stdout).toMatch(/^view: wrote .*report\.html \(0\.\d MB\): mixed_log\.jsonl: 48 trajectories, 48 in full$/)
      expect(result.code).toBe(0)
      const html = fs.readFileSync(out, "utf8")
      // no external resource: no src/href to another origin, no imports, no fetched fonts
      expect(html).not.toMatch(/(src|href)=["']?(https?:)?\/\//i)
      expect(html).not.toMatch(/@import|url\(\s*["']?https?:/i)
      const data = embedded(out)
      expect(data.meta.logs[0]).toMatchObject({ trajectories: 48, browsable: 48, detailed: 48, problemCount: 0 })
      expect(data.meta.capNote).toBeNull()
      expect(data.summaries[0].length).toBe(48)
      expect(Object.keys(data.details).length).toBe(48)
      expect(data.overviews[0].failuresByTag[0].tag).toBe("EnvError")
      // the plugin's renderer drew its env's trajectories
      const flaky = Object.values(data.details).find((d) => d.summary.env === "flaky_counter")!
      expect(flaky.rendered).toMatchObject({ renderer: "flaky_counter", title: "Counter" })
    }))

  it.live("--html caps the file's size and says what it left out, on the command line and in the page", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 96, policy: "frozen-lake-solver", generations: 8 })
      expect(fs.statSync(file).size).toBeGreaterThan(1.1 * 1024 * 1024)
      const out = path.join(dir, "capped.html")
      const result = yield* cli("view", file, "--html", out, "--html-max-mb", "1")
      expect(result.code).toBe(0)
      expect(result.stderr).toMatch(/view: This report is capped at 1\.0 MB \(--html-max-mb\): frozen-lake-solver\.jsonl: \d+ of 768 trajectories listed, \d+ in full\. The overview covers every trajectory\./)
      expect(fs.statSync(out).size).toBeLessThanOrEqual(1024 * 1024)
      const data = embedded(out)
      expect(data.meta.capNote).toContain("capped at 1.0 MB")
      expect(data.overviews[0].trajectories).toBe(768)
      const listed = data.summaries[0].length
      const detailed = Object.keys(data.details).length
      expect(detailed).toBeGreaterThan(0)
      expect(detailed).toBeLessThan(768)
      expect(listed).toBeGreaterThanOrEqual(detailed)
      expect(data.meta.logs[0]).toMatchObject({ trajectories: 768, browsable: listed, detailed })
    }))

  it.live("bad input: a torn last line, a file that is not JSONL, an empty file: a clear message, the rest shown, exit 1", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 2, policy: "random", name: "source.jsonl" })
      const lines = fs.readFileSync(file, "utf8").trim().split("\n")
      const torn = path.join(dir, "torn.jsonl")
      fs.writeFileSync(torn, lines.slice(0, 7).join("\n") + "\n" + lines[7].slice(0, 99))
      const notJsonl = path.join(dir, "notes.txt")
      fs.writeFileSync(notJsonl, "these are my notes\nnot a log\n")
      const empty = path.join(dir, "empty.jsonl")
      fs.writeFileSync(empty, "")
      const cases = [
        [torn, `warning: ${torn}:8: the last line is cut off (99 bytes without a newline, not complete JSON): the writer was probably interrupted; the 7 trajectories before it are shown`],
        [notJsonl, `error: ${notJsonl}: no line is a completions log line (line 1: not JSON: Unexpected token 'h', "these are my notes" is not valid JSON): is this an effect-gym completions.jsonl?`],
        [empty, `error: ${empty}: is empty: no trajectories (a run writes its log as groups finish; nothing was written)`]
      ] as const
      for (const [input, message] of cases) {
        const out = path.join(dir, `${path.basename(input)}.html`)
        const result = yield* cli("view", input, "--html", out)
        expect(result.code, input).toBe(1)
        expect(result.stderr.split("\n")).toContain(message)
        // the page says the same
        const problems = embedded(out).meta.logs[0].problems
        expect(problems.map((p) => `${p.file}${p.line === null ? "" : `:${p.line}`}: ${p.detail}`)).toContain(message.replace(/^(warning|error): /, ""))
      }
    }))

  it.live("a bad invocation is exit 2 with the option named", () =>
    Effect.gen(function*() {
      const missing = path.join(dir, "missing.jsonl")
      const a = yield* cli("view", missing, "--html", path.join(dir, "x.html"))
      expect(a.code).toBe(2)
      expect(a.stderr).toBe(`error: FILE.jsonl ${missing}: no such file`)
      const b = yield* cli("view", missing, "--port", "70000")
      expect(b.code).toBe(2)
      expect(b.stderr).toBe("error: --port: must be between 0 and 65535, got 70000")
      const c = yield* cli("view", missing, "--html", "x.html", "--html-max-mb", "0")
      expect(c.stderr).toBe("error: --html-max-mb: must be at least 1, got 0")
      const d = yield* cli("view", missing, missing, missing)
      expect(d.code).toBe(2)
      const log = path.join(dir, "kept.jsonl")
      fs.writeFileSync(log, "")
      const f = yield* cli("view", log, "--html", log)
      expect(f.code).toBe(2)
      expect(f.stderr).toBe(`error: --html: ${log} is a log given to view: it would be overwritten`)
      expect(fs.readFileSync(log, "utf8")).toBe("")
      const e = yield* cli("view", missing, "--model", path.join(dir, "nope.gguf"))
      expect(e.code).toBe(2)
      expect(e.stderr).toBe(`error: --model ${path.join(dir, "nope.gguf")}: no such file`)
    }))
})
