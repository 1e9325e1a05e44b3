/**
 * The index of a completions log: the byte range and summary of every line, built once by reading
 * the file in chunks (the event loop is free between chunks, so the page stays responsive while a
 * large log is indexed), then extended with the bytes appended since (a log being written by a
 * run). Pages of trajectories are answered from the summaries; a trajectory's line is read from
 * its offset when opened; text search scans the file.
 *
 * What is wrong with the file is kept as problems with their line numbers: an empty file, a file
 * that is not JSONL, malformed lines and lines of the wrong shape (skipped, the rest indexed), a
 * torn last line (a run interrupted while writing it).
 *
 * @since 0.1.0
 */
import { Effect, Schema, Semaphore } from "effect"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as path from "node:path"
import { isProblem, summarize } from "./Lines.js"
import type { LogMeta, Problem, Summary } from "./Model.js"

/**
 * A log that cannot be opened or read.
 *
 * @since 0.1.0
 * @category errors
 */
export class LogError extends Schema.TaggedError<LogError>("effect-gym/view/LogError")("LogError", {
  file: Schema.String,
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `${this.file}: ${this.detail}`
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly file: string
  /** The log's number on the page (0 for the first file, 1 for the second). */
  readonly index?: number | undefined
  /**
   * The file is being written (a run in progress): an unfinished last line is waited for, not
   * reported as torn, until {@link LogIndex.finish}.
   */
  readonly live?: boolean | undefined
  /** Bytes read per chunk (default 1 MiB: the event loop is free at least that often). */
  readonly chunkBytes?: number | undefined
}

const MAX_PROBLEMS = 100
const SEARCH_CHUNK = 16 * 1024 * 1024

/** Grows a Float64Array by doubling. */
class Offsets {
  data = new Float64Array(1024)
  length = 0
  push(n: number) {
    if (this.length === this.data.length) {
      const next = new Float64Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.length++] = n
  }
}

const readAt = (fd: number, position: number, length: number, file: string): Effect.Effect<Buffer, LogError> =>
  Effect.callback<Buffer, LogError>((resume) => {
    const buffer = Buffer.allocUnsafe(length)
    fs.read(fd, buffer, 0, length, position, (error, bytesRead) => {
      if (error !== null) resume(Effect.fail(new LogError({ file, detail: `cannot read: ${error.message}`, cause: error })))
      else resume(Effect.succeed(bytesRead === length ? buffer : buffer.subarray(0, bytesRead)))
    })
  })

/**
 * @since 0.1.0
 * @category models
 */
export interface LogIndex {
  readonly file: string
  readonly index: number
  /** The summaries of the lines indexed so far, in file order. */
  readonly summaries: ReadonlyArray<Summary>
  readonly problems: ReadonlyArray<Problem>
  /** Changes whenever lines or problems are added. */
  readonly version: number
  readonly meta: () => LogMeta
  /** Indexes what was appended since the last call (the whole file the first time). */
  readonly update: Effect.Effect<void, LogError>
  /** The writer is done: an unfinished last line is now a torn line. */
  readonly finish: Effect.Effect<void, LogError>
  /** The summary of a line (by its 1-based number), if it is a trajectory. */
  readonly summary: (line: number) => Summary | undefined
  /** The text of a line (1-based) that has a summary. */
  readonly readLine: (line: number) => Effect.Effect<string, LogError>
  /** The lines (1-based) whose JSON text contains `query`, case-insensitive. */
  readonly search: (query: string) => Effect.Effect<ReadonlySet<number>, LogError>
}

/**
 * Text search matches the query as JSON writes it inside a string (quotes, backslashes and control
 * characters escaped; other characters as they are), anywhere in the line's text, ignoring the
 * case of ASCII letters.
 *
 * @since 0.1.0
 * @category search
 */
export const searchNeedle = (query: string): string => asciiLower(JSON.stringify(query).slice(1, -1))

/**
 * Lowercases ASCII letters only (the search's notion of case).
 *
 * @since 0.1.0
 * @category search
 */
export const asciiLower = (text: string): string => text.replace(/[A-Z]+/g, (m) => m.toLowerCase())

const REGEX_SPECIAL = /[.*+?^${}()|[\]\\]/g
const WINDOW = 32 * 1024

/**
 * Finds a needle in bytes, ignoring the case of ASCII letters. The bytes are read as latin1 text in
 * windows of 32 KiB that end at a line end, and searched with a case-insensitive regular
 * expression: small strings die young (decoding a large log in big strings fills the old heap and
 * makes the garbage collector mark it again and again: 5x slower with a large index in memory). An
 * ASCII needle matches only ASCII bytes; a match of another one is checked on its decoded bytes.
 *
 * @since 0.1.0
 * @category search
 */
export const matcher = (needle: string) => {
  const lower = asciiLower(needle)
  const bytes = Buffer.byteLength(lower)
  const ascii = bytes === lower.length
  const pattern = new RegExp(Buffer.from(lower, "utf8").toString("latin1").replace(REGEX_SPECIAL, "\\$&"), "gi")
  return {
    /**
     * Calls `found(start)` for each match in `buffer`, in order; `found` gives where to look next
     * (to skip the rest of a line).
     */
    scan: (buffer: Buffer, found: (start: number) => number): void => {
      let from = 0
      while (from < buffer.length) {
        let to = Math.min(buffer.length, from + WINDOW)
        if (to < buffer.length) {
          const nl = buffer.indexOf(10, to)
          to = nl < 0 ? buffer.length : nl + 1
        }
        const text = buffer.toString("latin1", from, to)
        pattern.lastIndex = 0
        for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
          const start = from + m.index
          const real = ascii || asciiLower(buffer.toString("utf8", start, start + bytes)) === lower
          pattern.lastIndex = real ? Math.max(m.index + 1, found(start) - from) : m.index + 1
        }
        from = to
      }
    }
  }
}

/**
 * Opens a log and prepares its index (nothing is read until `update`). The file stays open until
 * the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<LogIndex, LogError, Scope.Scope> =>
  Effect.gen(function*() {
    const file = options.file
    const name = path.basename(file)
    const index = options.index ?? 0
    const chunkBytes = options.chunkBytes ?? 1024 * 1024
    const fd = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const stat = fs.statSync(file)
          if (stat.isDirectory()) throw new Error("is a directory, not a completions log")
          return fs.openSync(file, "r")
        },
        catch: (cause) =>
          new LogError({
            file,
            detail: (cause as NodeJS.ErrnoException).code === "ENOENT"
              ? "no such file"
              : cause instanceof Error
              ? cause.message
              : String(cause),
            cause
          })
      }),
      (fd) => Effect.sync(() => fs.closeSync(fd))
    )

    const summaries: Array<Summary> = []
    const byLine: Array<Summary | undefined> = []
    const starts = new Offsets()
    const ends = new Offsets()
    const problems: Array<Problem> = []
    let problemCount = 0
    let version = 0
    let bytes = 0
    let indexedBytes = 0
    let indexing = true
    let finished = !options.live
    let sawContent = false
    /** Bytes of a line whose newline has not been read yet, and where it starts. */
    let carry: Buffer | undefined
    let carryStart = 0
    const searches = new Map<string, { upTo: number; lines: Set<number> }>()

    const addProblem = (problem: Problem) => {
      problemCount++
      if (problems.length < MAX_PROBLEMS) problems.push(problem)
    }

    const addLine = (buffer: Buffer, begin: number, end: number, at: number) => {
      let start = begin
      let offset = at
      // A UTF-8 byte order mark (an editor's, PowerShell's) before the first line is not part of it.
      if (at === 0 && end - begin >= 3 && buffer[begin] === 0xef && buffer[begin + 1] === 0xbb && buffer[begin + 2] === 0xbf) {
        start += 3
        offset += 3
      }
      let stop = end
      if (stop > start && buffer[stop - 1] === 13) stop-- // CRLF
      const line = starts.length
      starts.push(offset)
      ends.push(offset + (stop - start))
      byLine.push(undefined)
      let blank = true
      for (let i = start; i < stop && blank; i++) {
        const c = buffer[i]
        if (c !== 32 && c !== 9) blank = false
      }
      if (blank) return
      sawContent = true
      const result = summarize(buffer.toString("utf8", start, stop), file, line + 1)
      if (isProblem(result)) addProblem(result)
      else {
        summaries.push(result)
        byLine[line] = result
      }
    }

    const stat = Effect.try({
      try: () => fs.fstatSync(fd).size,
      catch: (cause) => new LogError({ file, detail: `cannot read: ${String(cause)}`, cause })
    })

    const semaphore = yield* Semaphore.make(1)

    const readNew = Effect.gen(function*() {
      bytes = yield* stat
      if (indexedBytes === 0 && bytes > 0) {
        // A binary file is not JSONL: say so once instead of a malformed line per newline.
        const head = yield* readAt(fd, 0, Math.min(bytes, 8192), file)
        // A log that begins with a JSON object and has NUL bytes later (the zero-filled tail a crash
        // can leave) is still a log: those lines are bad lines, the others are shown.
        let first = 0
        if (head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf) first = 3
        while (first < head.length && (head[first] === 32 || head[first] === 9 || head[first] === 10 || head[first] === 13)) first++
        if (head.includes(0) && head[first] !== 0x7b) {
          indexedBytes = bytes
          addProblem({
            file,
            line: null,
            kind: "not-jsonl",
            detail: "is a binary file (it holds NUL bytes), not a completions log (JSON lines)"
          })
          version++
          return
        }
      }
      while (indexedBytes < bytes) {
        const fresh = yield* readAt(fd, indexedBytes, Math.min(chunkBytes, bytes - indexedBytes), file)
        if (fresh.length === 0) break
        const chunk = carry === undefined ? fresh : Buffer.concat([carry, fresh])
        const base = carry === undefined ? indexedBytes : carryStart
        let start = 0
        for (let nl = chunk.indexOf(10, start); nl >= 0; nl = chunk.indexOf(10, start)) {
          addLine(chunk, start, nl, base + start)
          start = nl + 1
        }
        carry = start < chunk.length ? chunk.subarray(start) : undefined
        carryStart = base + start
        indexedBytes += fresh.length
        version++
        // Let other requests in between chunks.
        yield* Effect.yieldNow
      }
    })

    const closeOut = Effect.sync(() => {
      if (carry !== undefined) {
        const problemsBefore = problemCount
        const text = carry
        carry = undefined
        addLine(text, 0, text.length, carryStart)
        if (problemCount > problemsBefore) {
          // The last line has no newline and does not parse: a torn write, not a bad line.
          if (problems.length > 0 && problems[problems.length - 1].line === starts.length) problems.pop()
          problemCount--
          addProblem({
            file,
            line: starts.length,
            kind: "torn",
            detail: `the last line is cut off (${text.length} bytes without a newline, not complete JSON): ` +
              `the writer was probably interrupted; the ${summaries.length} trajectories before it are shown`
          })
        }
      }
      if (bytes === 0) {
        addProblem({
          file,
          line: null,
          kind: "empty",
          detail: "is empty: no trajectories (a run writes its log as groups finish; nothing was written)"
        })
      } else if (summaries.length === 0 && !problems.some((p) => p.kind === "not-jsonl")) {
        const first = problems[0]
        // Said first: it explains the line errors that follow.
        problemCount++
        problems.unshift({
          file,
          line: null,
          kind: "not-jsonl",
          detail: sawContent
            ? `no line is a completions log line${
              first === undefined ? "" : ` (line ${first.line}: ${first.detail})`
            }: is this an effect-gym completions.jsonl?`
            : "holds only blank lines: no trajectories"
        })
      }
      indexing = false
      version++
    })

    const update = semaphore.withPermits(1)(
      Effect.gen(function*() {
        yield* readNew
        if (finished) {
          if (indexing) yield* closeOut
        }
      })
    )

    const finish = semaphore.withPermits(1)(
      Effect.gen(function*() {
        finished = true
        yield* readNew
        if (indexing) yield* closeOut
      })
    )

    const readLine = (lineNumber: number) =>
      Effect.suspend(() => {
        const line = lineNumber - 1
        if (line < 0 || line >= starts.length || byLine[line] === undefined) {
          return Effect.fail(new LogError({ file, detail: `line ${lineNumber} is not a trajectory of this log` }))
        }
        const start = starts.data[line]
        return Effect.map(readAt(fd, start, ends.data[line] - start, file), (b) => b.toString("utf8"))
      })

    // One buffer for every chunk a search reads (grown for a line longer than a chunk).
    let scratch: Buffer | undefined
    const readInto = (length: number, position: number) =>
      Effect.callback<Buffer, LogError>((resume) => {
        if (scratch === undefined || scratch.length < length) scratch = Buffer.allocUnsafe(Math.max(length, SEARCH_CHUNK))
        const target = scratch
        fs.read(fd, target, 0, length, position, (error, bytesRead) => {
          if (error !== null) resume(Effect.fail(new LogError({ file, detail: `cannot read: ${error.message}`, cause: error })))
          else resume(Effect.succeed(target.subarray(0, bytesRead)))
        })
      })

    /** The line holding byte `offset` (binary search over the line starts). */
    const lineAt = (offset: number): number => {
      let lo = 0
      let hi = starts.length - 1
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1
        if (starts.data[mid] <= offset) lo = mid
        else hi = mid - 1
      }
      return lo
    }

    const search = (query: string) =>
      Effect.gen(function*() {
        const needle = searchNeedle(query)
        if (needle === "") return new Set(summaries.map((s) => s.line))
        const match = matcher(needle)
        let cached = searches.get(needle)
        if (cached === undefined) {
          cached = { upTo: 0, lines: new Set() }
          if (searches.size >= 16) searches.delete(searches.keys().next().value!)
          searches.set(needle, cached)
        }
        const lines = cached.lines
        const limit = starts.length === 0 ? 0 : ends.data[starts.length - 1]
        while (cached.upTo < limit) {
          // Chunks end at a line end, so no match spans two chunks.
          const firstLine = lineAt(cached.upTo)
          let lastLine = lineAt(Math.min(limit, cached.upTo + SEARCH_CHUNK) - 1)
          if (lastLine < firstLine) lastLine = firstLine
          const from = starts.data[firstLine]
          const to = ends.data[lastLine]
          const buffer = yield* readInto(to - from, from)
          match.scan(buffer, (start) => {
            const line = lineAt(from + start)
            if (byLine[line] !== undefined) lines.add(line + 1)
            // the rest of this line: nothing more to find there
            return ends.data[line] - from + 1
          })
          cached.upTo = to + 1
          yield* Effect.yieldNow
        }
        return cached.lines
      })

    const meta = (): LogMeta => ({
      index,
      name,
      path: file,
      bytes,
      indexedBytes,
      trajectories: summaries.length,
      indexing,
      problems,
      problemCount,
      browsable: summaries.length,
      detailed: summaries.length
    })

    return {
      file,
      index,
      summaries,
      problems,
      get version() {
        return version
      },
      meta,
      update,
      finish,
      summary: (lineNumber: number) => byLine[lineNumber - 1],
      readLine,
      search
    } satisfies LogIndex
  })
