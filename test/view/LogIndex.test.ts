import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as LogIndex from "../../src/view/LogIndex.js"
import * as Model from "../../src/view/Model.js"
import * as Viewer from "../../src/view/Viewer.js"
import * as Logs from "./logs.js"

const open = (file: string, options: Partial<LogIndex.Options> = {}) =>
  Effect.tap(LogIndex.make({ file, ...options }), (log) => log.update)

const problems = (log: LogIndex.LogIndex) => log.problems.map((p) => `${p.kind} ${p.line ?? "-"}: ${p.detail}`)

describe("the log index", () => {
  const dir = Logs.tmp()

  it.effect("indexes a run's log: its overview has the run's own summary figures", () =>
    Effect.gen(function*() {
      for (const make of [() => Logs.frozenLake(dir, { rows: 12, policy: "random" }), () => Logs.mixed(dir)]) {
        const { file, summary } = yield* make()
        const log = yield* open(file)
        expect(problems(log)).toEqual([])
        const o = Model.overview(log.summaries)
        expect({
          trajectories: o.trajectories,
          groups: o.groups,
          successes: o.successes,
          failures: o.failures,
          endReasons: o.endReasons,
          failuresByError: Object.fromEntries(o.failuresByTag.map((f) => [f.tag, f.count]))
        }).toEqual({
          trajectories: summary.trajectories,
          groups: summary.groups,
          successes: summary.successes,
          failures: summary.failures,
          endReasons: summary.end_reasons,
          failuresByError: summary.failures_by_error
        })
        expect(o.meanReward ?? 0).toBeCloseTo(summary.mean_reward as number, 10)
        expect(o.meanEnvReward ?? 0).toBeCloseTo(summary.mean_env_reward as number, 10)
        expect(o.meanTurns ?? 0).toBeCloseTo(summary.mean_turns as number, 10)
        // the figures added for issue 29: solved, each reward column's mean, truncation, completion length
        expect([o.solved, o.solvedReported]).toEqual([summary.solved, summary.solved_reported])
        expect(o.solvedRate).toBeCloseTo(summary.solved_rate as number, 10)
        const columns = summary.mean_rewards as Record<string, number>
        expect(o.meanRewards.map((c) => c.column)).toEqual(Object.keys(columns))
        for (const c of o.meanRewards) expect(c.mean).toBeCloseTo(columns[c.column], 10)
        expect([o.truncated.maxTurns, o.truncated.length]).toEqual([summary.truncated_by_max_turns, summary.truncated_by_length])
        expect(o.truncated.rate).toBeCloseTo(summary.truncation_rate as number, 10)
        expect(o.completion.meanChars ?? 0).toBeCloseTo(summary.mean_completion_chars as number, 10)
        expect(o.completion.meanTokens).toBe(summary.mean_completion_tokens)
        // every line is read back exactly from its offset
        const lines = fs.readFileSync(file, "utf8").split("\n")
        for (const s of log.summaries) expect(yield* log.readLine(s.line)).toBe(lines[s.line - 1])
      }
    }))

  it.effect("reads any chunk size the same way (lines cut across chunks, CRLF, blank lines)", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 2, policy: "random", name: "chunks.jsonl" })
      const crlf = path.join(dir, "crlf.jsonl")
      fs.writeFileSync(crlf, "\n" + fs.readFileSync(file, "utf8").replace(/\n/g, "\r\n\r\n"))
      const whole = yield* open(file)
      for (const chunkBytes of [1, 7, 100, 4096]) {
        const log = yield* open(crlf, { chunkBytes })
        expect(problems(log)).toEqual([])
        expect(log.summaries.map((s) => ({ ...s, line: 0 }))).toEqual(whole.summaries.map((s) => ({ ...s, line: 0 })))
        // line numbers are the file's own (a blank first line, blank lines in between)
        expect(log.summaries.map((s) => s.line)).toEqual(whole.summaries.map((_, i) => 2 + 2 * i))
        const again = yield* log.readLine(log.summaries[3].line)
        expect(again).toBe(yield* whole.readLine(whole.summaries[3].line))
      }
    }))

  it.effect("bad input: a torn last line, bad lines in the middle, an empty file, a file that is not JSONL", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 3, policy: "random", name: "bad.jsonl" })
      const text = fs.readFileSync(file, "utf8")
      const lines = text.trim().split("\n")
      const torn = path.join(dir, "torn.jsonl")
      fs.writeFileSync(torn, lines.slice(0, 5).join("\n") + "\n" + lines[5].slice(0, 200))
      const log = yield* open(torn)
      expect(log.summaries.length).toBe(5)
      expect(problems(log)).toEqual([
        "torn 6: the last line is cut off (200 bytes without a newline, not complete JSON): the writer was probably interrupted; the 5 trajectories before it are shown"
      ])

      const middle = path.join(dir, "middle.jsonl")
      fs.writeFileSync(middle, [lines[0], "{oops", "[1]", lines[1]].join("\n") + "\n")
      const m = yield* open(middle)
      expect(m.summaries.map((s) => s.line)).toEqual([1, 4])
      expect(problems(m)).toEqual([
        expect.stringMatching(/^malformed 2: not JSON: /),
        "shape 3: not a JSON object (a completions log line is one object per line)"
      ])

      // A last line without a newline that is whole is a trajectory, not a problem.
      const noNewline = path.join(dir, "no-newline.jsonl")
      fs.writeFileSync(noNewline, text.trimEnd())
      expect((yield* open(noNewline)).summaries.length).toBe(lines.length)

      const empty = path.join(dir, "empty.jsonl")
      fs.writeFileSync(empty, "")
      expect(problems(yield* open(empty))).toEqual([
        "empty -: is empty: no trajectories (a run writes its log as groups finish; nothing was written)"
      ])
      const csv = path.join(dir, "data.csv")
      fs.writeFileSync(csv, "row,reward\n0,1\n1,0\n")
      const c = yield* open(csv)
      expect(problems(c)[0]).toBe(
        "not-jsonl -: no line is a completions log line (line 1: not JSON: Unexpected token 'r', \"row,reward\" is not valid JSON): is this an effect-gym completions.jsonl?"
      )
      const binary = path.join(dir, "image.png")
      fs.writeFileSync(binary, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 10, 10]))
      expect(problems(yield* open(binary))).toEqual([
        "not-jsonl -: is a binary file (it holds NUL bytes), not a completions log (JSON lines)"
      ])
      const missing = yield* Effect.flip(LogIndex.make({ file: path.join(dir, "nope.jsonl") }))
      expect(missing.message).toBe(`${path.join(dir, "nope.jsonl")}: no such file`)
      const directory = yield* Effect.flip(LogIndex.make({ file: dir }))
      expect(directory.message).toContain("is a directory")
    }))

  it.effect("a log being written: appended lines are indexed, a half-written line waits, finish makes it torn", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.frozenLake(dir, { rows: 2, policy: "random", name: "source.jsonl" })
      const lines = fs.readFileSync(file, "utf8").trim().split("\n")
      const live = path.join(dir, "live.jsonl")
      fs.writeFileSync(live, "")
      const log = yield* open(live, { live: true })
      expect(log.summaries.length).toBe(0)
      expect(problems(log)).toEqual([])
      fs.appendFileSync(live, lines.slice(0, 3).join("\n") + "\n" + lines[3].slice(0, 50))
      yield* log.update
      expect(log.summaries.length).toBe(3)
      expect(problems(log)).toEqual([])
      const version = log.version
      fs.appendFileSync(live, lines[3].slice(50) + "\n" + lines[4].slice(0, 10))
      yield* log.update
      expect(log.summaries.length).toBe(4)
      expect(log.version).toBeGreaterThan(version)
      expect(yield* log.readLine(4)).toBe(lines[3])
      yield* log.finish
      expect(log.summaries.length).toBe(4)
      expect(problems(log)).toEqual([expect.stringMatching(/^torn 5: the last line is cut off \(10 bytes/)])
      expect(log.meta().indexing).toBe(false)
    }))

  it.effect("text search: case-insensitive (ASCII), as JSON writes the text, across chunks; equal to a scan of the decoded lines", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.mixed(dir)
      const log = yield* open(file)
      const lines = fs.readFileSync(file, "utf8").split("\n")
      const brute = (query: string) => {
        const needle = LogIndex.searchNeedle(query)
        return lines.flatMap((l, i) => (LogIndex.asciiLower(l).includes(needle) ? [i + 1] : []))
      }
      for (const query of ["JAMMED at 2", "<action>", "row 0, col", "\"", "counter", "zzz-not-there", "You moved\nup"]) {
        const found = [...(yield* log.search(query))].sort((a, b) => a - b)
        expect(found, query).toEqual(brute(query))
      }
      expect((yield* log.search("jammed")).size).toBeGreaterThan(0)
      // non-ASCII text is found as it is written
      const unicode = path.join(dir, "unicode.jsonl")
      const first = JSON.parse(lines[0])
      first.messages[0].content = "Déjà vu ✓ \"quoted\""
      fs.writeFileSync(unicode, JSON.stringify(first) + "\n" + lines[1] + "\n")
      const u = yield* open(unicode)
      expect([...(yield* u.search("déjà VU ✓"))]).toEqual([1])
      expect([...(yield* u.search("\"quoted\""))]).toEqual([1])
      expect([...(yield* u.search("DÉJÀ"))]).toEqual([]) // only ASCII letters ignore case
    }))

  // The matcher against a scan of the decoded lines: text with both cases, multi-byte characters and
  // regular-expression characters, long enough to cross the matcher's 32 KiB windows.
  const alphabet = Arbitrary.schema(Schema.Literals("aAbBzZ .*\\[]()?é✓É\"".split("")))
  const lineText = Arbitrary.array(alphabet, { maxLength: 40 }).pipe(Arbitrary.map((cs) => cs.join("")))
  it.prop("the matcher finds exactly the lines a scan of the decoded text finds", [
    Arbitrary.array(lineText, { minLength: 1, maxLength: 3000 }),
    Arbitrary.array(alphabet, { minLength: 1, maxLength: 5 }).pipe(Arbitrary.map((cs) => cs.join("")))
  ], ([lines, needle]) => {
    const buffer = Buffer.from(lines.join("\n") + "\n")
    const starts: Array<number> = []
    let offset = 0
    for (const l of lines) {
      starts.push(offset)
      offset += Buffer.byteLength(l) + 1
    }
    const found: Array<number> = []
    LogIndex.matcher(needle).scan(buffer, (start) => {
      let line = starts.length - 1
      while (starts[line] > start) line--
      found.push(line)
      return starts[line] + Buffer.byteLength(lines[line]) + 1
    })
    const lower = LogIndex.asciiLower(needle)
    expect(found).toEqual(lines.flatMap((l, i) => (LogIndex.asciiLower(l).includes(lower) ? [i] : [])))
  }, { arbitrary: { runs: 60 } })

  it.effect("the viewer answers pages, filters and sorts from the index, and opens a trajectory from its offset", () =>
    Effect.gen(function*() {
      const { file } = yield* Logs.mixed(dir)
      const viewer = yield* Viewer.make({ files: [file] })
      yield* viewer.update
      const log = viewer.logs[0]
      const page = (params: string) => viewer.trajectories(log, Model.parseQuery(new URLSearchParams(params)))
      const all = yield* page("limit=500")
      expect(all.matched).toBe(48)
      const failed = yield* page("tag=EnvError")
      expect(failed.items.every((s) => s.errorTag === "EnvError" && s.env === "flaky_counter")).toBe(true)
      expect(failed.matched).toBe(all.items.filter((s) => s.errorTag !== null).length)
      const sorted = yield* page("sort=reward&dir=desc&limit=500")
      const rewards = sorted.items.map((s) => s.reward)
      const scored = rewards.filter((r) => r !== null) as Array<number>
      expect(scored).toEqual([...scored].sort((a, b) => b - a))
      expect(rewards.slice(scored.length).every((r) => r === null)).toBe(true) // failures last
      const second = yield* page("sort=reward&dir=desc&offset=10&limit=10")
      expect(second.items).toEqual(sorted.items.slice(10, 20))
      const lake = yield* page("env=frozen_lake&end=done&min=0.5")
      expect(lake.items.every((s) => s.env === "frozen_lake" && s.endReason === "done" && (s.reward ?? 0) >= 0.5)).toBe(true)
      const searched = yield* page("q=jammed&env=flaky_counter")
      expect(searched.matched).toBe(failed.matched)
      const detail = yield* viewer.trajectory(log, failed.items[0].line)
      expect(detail.line.id).toBe(failed.items[0].id)
      expect(detail.problems).toEqual([])
      expect(detail.rendered).toBeNull() // the plugin that draws flaky_counter is not loaded here
      const missing = yield* Effect.flip(viewer.trajectory(log, 999))
      expect(missing.reason).toBe("NotFound")
    }))
})
