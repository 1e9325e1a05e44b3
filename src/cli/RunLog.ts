/**
 * What makes `run` safe to interrupt and to run again: the output is never the dataset and is not
 * overwritten by accident; the run's identity is recorded next to the log (`<output>.run.json`);
 * `--resume` checks that identity field by field, keeps the complete groups already in the log,
 * drops a torn tail (a kill -9 in the middle of a write) and runs only the rows not done yet.
 *
 * The log itself stays one completions line per trajectory: a group's lines are written in one
 * append, so the complete groups are always a prefix of the file, followed at most by a torn tail.
 */
import { Effect, FileSystem, Option, Stream } from "effect"
import { createHash } from "node:crypto"
import * as NodeFs from "node:fs"
import * as path from "node:path"
import { canonical } from "../internal/inspect.js"
import * as Json from "../internal/Json.js"
import * as Redact from "../internal/redact.js"
import * as Row from "../Row.js"
import { errorDetail, FileError, fileProblem, OptionError } from "./common.js"

/**
 * The run's identity: what must be the same for `--resume` to continue a log. Values are JSON.
 * Concurrency, timeouts and retries may change between sessions: they do not change what a
 * trajectory does.
 */
export interface Identity {
  readonly dataset: string
  readonly dataset_sha256: string | null
  readonly seed: number
  readonly gym_env: string | null
  readonly scheduler: string
  readonly scheduler_options: Readonly<Record<string, unknown>>
  readonly mode: string
  readonly policy: string | null
  readonly policy_options: Readonly<Record<string, unknown>>
  readonly model: string | null
  readonly base_url: string | null
  readonly num_generations: number
  readonly max_turns: number
  readonly sampling: Readonly<Record<string, unknown>>
  readonly reward_funcs: ReadonlyArray<string>
  readonly reward_weights: ReadonlyArray<number>
  readonly plugins: ReadonlyArray<string>
  /** The sha256 of each `--plugin` file's content and its local imports', in order (a path alone let an edited env be resumed). */
  readonly plugins_sha256: ReadonlyArray<string>
  readonly failed_groups: string
}

/** The identity of a run from its options (paths made absolute, defaults filled in). */
export const identityOf = (
  args: {
    readonly dataset: string
    readonly seed: number
    readonly gymEnv: Option.Option<string>
    readonly scheduler: string
    readonly mode: string
    readonly policy: Option.Option<string>
    readonly policyOptions: Readonly<Record<string, unknown>>
    readonly model: Option.Option<string>
    readonly baseUrl: Option.Option<string>
    readonly numGenerations: number
    readonly maxTurns: number
    readonly plugins: ReadonlyArray<string>
    readonly failedGroups: string
  },
  resolved: {
    readonly sha256: string | null
    readonly schedulerOptions: Readonly<Record<string, unknown>>
    readonly sampling: object
    readonly columns: { readonly names: ReadonlyArray<string>; readonly weights: ReadonlyArray<number> }
  }
): Identity => ({
  dataset: path.resolve(args.dataset),
  dataset_sha256: resolved.sha256,
  seed: args.seed,
  gym_env: Option.getOrNull(args.gymEnv),
  scheduler: args.scheduler,
  scheduler_options: resolved.schedulerOptions,
  mode: args.mode,
  policy: args.mode === "scripted" ? Option.getOrElse(args.policy, () => "random") : null,
  policy_options: args.policyOptions,
  model: Option.getOrNull(Option.map(args.model, (model) => (args.mode === "colocate" ? path.resolve(model) : model))),
  // Without the credentials a URL may hold (user:pass@, query values): the file is not a secret.
  base_url: Option.getOrNull(Option.map(args.baseUrl, Redact.url)),
  num_generations: args.numGenerations,
  max_turns: args.maxTurns,
  sampling: resolved.sampling as Readonly<Record<string, unknown>>,
  reward_funcs: resolved.columns.names.slice(0, -1),
  reward_weights: resolved.columns.weights,
  plugins: args.plugins.map((plugin) => path.resolve(plugin)),
  plugins_sha256: args.plugins.map(pluginSha256),
  failed_groups: args.failedGroups
})

/** Relative module specifiers (`./x`, `../y`) in static and dynamic imports, re-exports and requires. */
const RELATIVE_IMPORT =
  /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)["'](\.{1,2}\/[^"'\n]+)["']/g

/** The file a relative specifier names, as Node or tsx resolves it (`./x.js` may be `./x.ts`), if any. */
const resolveLocal = (from: string, specifier: string): string | undefined => {
  const base = path.resolve(path.dirname(from), specifier)
  const swapped = base.replace(/\.(m|c)?js$/, (_, kind: string | undefined) => `.${kind ?? ""}ts`)
  const candidates = [base, swapped, ...["ts", "mts", "cts", "js", "mjs", "cjs", "json"].map((ext) => `${base}.${ext}`),
    ...["index.ts", "index.js", "index.mjs"].map((index) => path.join(base, index))]
  return candidates.find((file) => {
    try {
      return NodeFs.statSync(file).isFile()
    } catch {
      return false
    }
  })
}

/**
 * The sha256 of a plugin: its file's content alone when it imports no local file (as records have
 * it); else of its content and every local file it imports, followed (by relative specifier, outside
 * node_modules), each with its path from the plugin's folder: an edit to an env the plugin imports
 * from another file changed nothing recorded, and --resume mixed its old and new rewards.
 */
const pluginSha256 = (file: string): string => {
  const root = path.resolve(file)
  const seen = new Set<string>([root])
  const queue = [root]
  const hash = createHash("sha256")
  try {
    for (let at = 0; at < queue.length; at++) {
      const current = queue[at]
      const content = NodeFs.readFileSync(current)
      if (at > 0) hash.update(`\0${path.relative(path.dirname(root), current)}\0`)
      hash.update(content)
      if (/\.json$/.test(current)) continue
      for (const match of content.toString("utf8").matchAll(RELATIVE_IMPORT)) {
        const found = resolveLocal(current, match[1])
        if (found === undefined || seen.has(found) || found.split(path.sep).includes("node_modules")) continue
        seen.add(found)
        queue.push(found)
      }
    }
  } catch (error) {
    return `unreadable: ${error instanceof Error ? error.message : String(error)}`
  }
  return hash.digest("hex")
}


/** The option (or what) each identity field comes from, for messages. */
const FIELD_NAMES: Record<keyof Identity, string> = {
  dataset: "--dataset",
  dataset_sha256: "the dataset's content (sha256)",
  seed: "--seed",
  gym_env: "--env",
  scheduler: "--scheduler",
  scheduler_options: "--scheduler-option",
  mode: "--mode",
  policy: "--policy",
  policy_options: "--policy-option",
  model: "--model",
  base_url: "--base-url",
  num_generations: "--num-generations",
  max_turns: "--max-turns",
  sampling: "sampling",
  reward_funcs: "--reward-funcs",
  reward_weights: "--reward-weights",
  plugins: "--plugin",
  plugins_sha256: "the content of --plugin and the local files it imports (sha256)",
  failed_groups: "--failed-groups"
}

/**
 * The fields `--resume-force` lets differ: the code that ran (the plugins' content, effect-gym's
 * version), not what the run is (its dataset, seeds, sizes, options).
 */
const FORCEABLE: ReadonlySet<string> = new Set(["plugins_sha256", "effect_gym"])

/** The file that records a log's run identity. */
export const identityFile = (output: string): string => `${output}.run.json`

const show = (value: unknown): string => {
  const text = value === null || value === undefined ? "not set" : Json.stringify(value)
  return text.length > 80 ? `${text.slice(0, 77)}...` : text
}

/**
 * The first field where two identities differ, as a sentence for the user; `undefined` when they
 * are the same run.
 */
export const difference = (recorded: Readonly<Record<string, unknown>>, current: Identity): string | undefined =>
  differences(recorded, current, undefined)[0]?.text

/** One way a log's run differs from this one; `forceable` ones `--resume-force` overrides. */
export interface Difference {
  readonly field: string
  readonly text: string
  readonly forceable: boolean
}

/**
 * Every way two identities differ, as sentences for the user; with `version`, effect-gym's version
 * too (the record's `effect_gym`). A record written before plugins were digested has none: with
 * plugins, that is a difference (their content cannot be checked).
 */
export const differences = (
  recorded: Readonly<Record<string, unknown>>,
  current: Identity,
  version: string | undefined
): Array<Difference> => {
  const out: Array<Difference> = []
  for (const key of Object.keys(FIELD_NAMES) as Array<keyof Identity>) {
    const then = recorded[key]
    const now = current[key]
    if (canonical(then ?? null) === canonical(now ?? null)) continue
    const forceable = FORCEABLE.has(key)
    if (key === "dataset_sha256") {
      out.push({
        field: key,
        forceable,
        text: `the dataset's content changed since the log was written (sha256 ${show(then)} then, ${show(now)} now)`
      })
    } else if (key === "plugins_sha256") {
      if (then === undefined && current.plugins.length === 0) continue
      const before = Array.isArray(then) ? then : []
      const changed = current.plugins.findIndex((_, i) => before[i] !== current.plugins_sha256[i])
      out.push({
        field: key,
        forceable,
        text: then === undefined
          ? `the log's run recorded no digest of its plugins, so their content cannot be checked`
          : `the content of --plugin ${current.plugins[Math.max(0, changed)]} changed since the log was written ` +
            `(sha256 ${show(before[Math.max(0, changed)])} then, ${show(current.plugins_sha256[Math.max(0, changed)])} now, ` +
            `of it and the local files it imports)`
      })
    } else {
      out.push({ field: key, forceable, text: `${FIELD_NAMES[key]} is ${show(now)} here, ${show(then)} in the log's run` })
    }
  }
  if (version !== undefined && recorded.effect_gym !== version) {
    out.push({
      field: "effect_gym",
      forceable: true,
      text: `the log was written by effect-gym ${show(recorded.effect_gym)}, this is ${version}`
    })
  }
  return out
}

/**
 * Adds a forced resume to the log's run record (`forced_resumes`: when, by which version, over which
 * differences), written whole, as the record is.
 */
export const recordForcedResume = (
  output: string,
  recorded: Readonly<Record<string, unknown>>,
  entry: { readonly version: string; readonly plugins_sha256: ReadonlyArray<string>; readonly differences: ReadonlyArray<string> }
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = identityFile(output)
    const temporary = `${file}.${process.pid}.tmp`
    const before = Array.isArray(recorded.forced_resumes) ? recorded.forced_resumes : []
    const forced = { at: new Date().toISOString(), effect_gym: entry.version, plugins_sha256: entry.plugins_sha256, differences: entry.differences }
    const record = { ...recorded, forced_resumes: [...before, forced] }
    yield* Effect.tapError(
      Effect.andThen(fs.writeFileString(temporary, JSON.stringify(record, null, 2) + "\n"), fs.rename(temporary, file)),
      () => Effect.ignore(fs.remove(temporary))
    )
  }).pipe(Effect.mapError((error) => new FileError({ option: "--resume-force", file: identityFile(output), detail: errorDetail(error) })))

/** What a pass over the dataset found: its content hash (regular files) and its rows. */
export interface DatasetScan {
  /** `null` for a dataset that cannot be read twice (a pipe): such a run cannot be resumed. */
  readonly sha256: string | null
  readonly rows: number | undefined
}

/**
 * Fails unless the dataset can be read: it exists and is not a directory, nor a socket file (which
 * cannot be opened; a socket that is the process's stdin, `/dev/stdin`, is read from its descriptor).
 */
export const checkDataset = (file: string) =>
  FileSystem.FileSystem.use((fs) => fs.stat(file)).pipe(
    Effect.mapError((error) => new FileError({ option: "--dataset", file, detail: fileProblem(error) })),
    Effect.filterOrFail(
      (info) => info.type !== "Directory",
      () => new FileError({ option: "--dataset", file, detail: "is a directory" })
    ),
    Effect.filterOrFail(
      (info) => info.type !== "Socket" || inheritedFd(file) !== undefined,
      () =>
        new FileError({
          option: "--dataset",
          file,
          detail: "is a socket: a dataset is a file, a pipe, a FIFO or /dev/stdin (e.g. `nc HOST PORT | effect-gym run --dataset /dev/stdin`)"
        })
    )
  )

/**
 * The descriptor a dataset's path names (`/dev/stdin`: 0; `/dev/fd/N`, `/proc/self/fd/N`: N), if it
 * names one.
 */
export const inheritedFd = (file: string): number | undefined => {
  if (file === "/dev/stdin") return 0
  const match = /^\/(?:dev|proc\/self)\/fd\/(\d{1,6})$/.exec(file)
  return match === null ? undefined : Number(match[1])
}

/**
 * Reads the dataset once, in chunks (memory stays bounded): its sha256 and its row count. A pipe
 * or other non-regular file is not read here (it can be read only once, by the run itself).
 */
export const scanDataset = (file: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const info = yield* fs.stat(file)
    if (info.type === "Directory") {
      return yield* new FileError({ option: "--dataset", file, detail: "is a directory" })
    }
    if (info.type !== "File") return { sha256: null, rows: undefined } satisfies DatasetScan
    const hash = createHash("sha256")
    const rows = yield* Row.countStream(
      Stream.tap(fs.stream(file, { chunkSize: 256 * 1024 }), (chunk) => Effect.sync(() => hash.update(chunk)))
    )
    return { sha256: hash.digest("hex"), rows } satisfies DatasetScan
  }).pipe(
    Effect.catchTag("PlatformError", (error) => new FileError({ option: "--dataset", file, detail: fileProblem(error) }))
  )

/** How the output is opened: a new log, an overwritten one, or a resumed one. */
export type OutputMode = "new" | "overwrite" | "resume"

/**
 * Refuses an output that is the dataset (the same path, a symbolic link or a hard link to it), and
 * an existing non-empty output unless `--overwrite` or `--resume` says what to do with it.
 */
export const checkOutput = (dataset: string, output: string, mode: OutputMode) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const stat = (file: string) => Effect.option(fs.stat(file))
    const refuse = (detail: string) => new FileError({ option: "--output", file: output, detail })
    // (a trailing slash names a folder: the run record went to `a.jsonl/.run.json`)
    if (output === "") return yield* refuse("is empty: it names the log's file")
    if (/[\\/]$/.test(output)) return yield* refuse("names a folder (it ends with a slash), not the log's file")
    const out = yield* stat(output)
    if (Option.isSome(out) && out.value.type === "Directory") return yield* refuse("is a folder, not the log's file")
    if (Option.isNone(out)) {
      // the log and its run record are made in the output's folder: it must be one (not made here)
      const folder = path.dirname(output)
      const parent = yield* Effect.mapError(
        fs.stat(folder),
        (error) =>
          refuse(
            error.reason._tag === "NotFound"
              ? `its folder ${folder} does not exist`
              : /ENOTDIR/.test(errorDetail(error))
              ? `its folder ${folder} is not a folder (a part of its path is a file)`
              : `its folder ${folder}: ${errorDetail(error)}`
          )
      )
      if (parent.type !== "Directory" && parent.type !== "Unknown") return yield* refuse(`${folder} is not a folder`)
      return { exists: false, size: 0, regular: true }
    }
    const data = yield* stat(dataset)
    const same = path.resolve(dataset) === path.resolve(output) || (
      Option.isSome(data) && Option.isSome(out.value.ino) && Option.isSome(data.value.ino) &&
      out.value.ino.value === data.value.ino.value && out.value.dev === data.value.dev
    )
    if (same) {
      return yield* new OptionError({
        option: "--output",
        detail: `${output} is the dataset ${dataset} (the same file): writing the log there would destroy it`
      })
    }
    const size = Number(out.value.size)
    if (out.value.type !== "File" && out.value.type !== "Unknown") {
      // a pipe or a device: written to as it is (nothing to resume or overwrite)
      if (mode === "resume") {
        return yield* new OptionError({ option: "--resume", detail: `${output} is not a regular file` })
      }
      return { exists: true, size: 0, regular: false }
    }
    if (size > 0 && mode === "new") {
      return yield* new OptionError({
        option: "--output",
        detail: `${output} exists and is not empty (${size} bytes): pass --resume to continue that run, ` +
          `or --overwrite to replace it`
      })
    }
    return { exists: true, size, regular: true }
  })

/** Reads a log's recorded identity (`undefined` when there is none). */
export const readIdentity = (output: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = identityFile(output)
    const text = yield* Effect.option(fs.readFileString(file))
    if (Option.isNone(text)) return undefined
    const parsed = yield* Effect.try({
      try: () => Json.parse(text.value),
      catch: (error) => new FileError({ option: "--resume", file, detail: `not a run record: ${String(error)}` })
    })
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      return yield* new FileError({ option: "--resume", file, detail: "not a run record (expected a JSON object)" })
    }
    return parsed as Readonly<Record<string, unknown>>
  })

/** Records the run's identity next to the log (written whole, then renamed: never half a file). */
export const writeIdentity = (
  output: string,
  identity: Identity & { readonly cluster_run_id?: string; readonly inference?: unknown; readonly tool_parser?: unknown },
  version: string
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = identityFile(output)
    const temporary = `${file}.${process.pid}.tmp`
    const record = { effect_gym: version, written_at: new Date().toISOString(), ...identity }
    // a full disk must not leave the temporary file behind
    yield* Effect.tapError(
      Effect.andThen(fs.writeFileString(temporary, JSON.stringify(record, null, 2) + "\n"), fs.rename(temporary, file)),
      () => Effect.ignore(fs.remove(temporary))
    )
  }).pipe(Effect.mapError((error) =>
    // the first file a run writes in the output's folder: a folder it may not write in is named as such
    error.reason._tag === "PermissionDenied" || error.reason._tag === "NotFound"
      ? new FileError({
        option: "--output",
        file: output,
        detail: `cannot write in its folder ${path.dirname(output)} (${
          error.reason._tag === "NotFound" ? "it makes no new files" : "permission denied"
        }): the log and its run record are written there`
      })
      : new FileError({ option: "--output", file: identityFile(output), detail: errorDetail(error) })
  ))

/** Rows a log may name: a dataset line's index (2^31 lines, past any dataset a run reads). */
const MAX_ROW = 2 ** 31

/** A set of row indexes, as bits (a million rows take 125 KB). */
export class RowSet {
  private bits = new Uint8Array(1024)
  size = 0

  add(row: number): void {
    const byte = row >> 3
    if (byte >= this.bits.length) {
      const grown = new Uint8Array(Math.max(byte + 1, this.bits.length * 2))
      grown.set(this.bits)
      this.bits = grown
    }
    const mask = 1 << (row & 7)
    if ((this.bits[byte] & mask) === 0) this.size++
    this.bits[byte] |= mask
  }

  has(row: number): boolean {
    const byte = row >> 3
    return byte < this.bits.length && (this.bits[byte] & (1 << (row & 7))) !== 0
  }
}

/** What a log holds for a resumed run. */
export interface Resumable {
  /** The rows whose groups are complete in the log. */
  readonly done: RowSet
  readonly lines: number
  /** The length of the log's complete part: what is after it (a torn tail) is cut off. */
  readonly keepBytes: number
  readonly droppedBytes: number
  readonly droppedLines: number
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * A line's row and generation, when it is a whole JSON object that has them. Every line is read
 * whole: a line whose first bytes looked like one of this tool's (`{"row":5,"generation":0,`) was
 * kept by that alone, garbage after them included.
 */
const rowOf = (bytes: Uint8Array): readonly [number, number] | undefined => {
  try {
    const line = Json.parse(utf8.decode(bytes)) as { readonly row?: unknown; readonly generation?: unknown } | null
    if (typeof line !== "object" || line === null) return undefined
    return typeof line.row === "number" && typeof line.generation === "number" ? [line.row, line.generation] : undefined
  } catch {
    return undefined
  }
}

/**
 * Reads a log (in chunks) for `--resume`: the complete groups (`numGenerations` consecutive lines
 * of one row, generations in order) are kept; a torn tail (an unfinished last line, a group cut by
 * a kill between two writes) is to be dropped. A complete line out of place means the file is not
 * a log this run can continue.
 */
export const scanLog = (output: string, numGenerations: number) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const done = new RowSet()
    let offset = 0
    let keepBytes = 0
    let lines = 0
    let groupLines = 0
    let groupRow = -1
    let lineNumber = 0
    let carry: Uint8Array | undefined
    let problem: string | undefined
    const onLine = (bytes: Uint8Array, end: number): void => {
      lineNumber++
      if (problem !== undefined) return
      const found = rowOf(bytes)
      if (found === undefined) {
        problem = `line ${lineNumber} is not a completions line`
        return
      }
      const [row, generation] = found
      // (a row is a dataset line's index: a crafted 1e12 wrapped in the row set's 32-bit shift and was kept)
      if (!Number.isSafeInteger(row) || row < 0 || row >= MAX_ROW) {
        problem = `line ${lineNumber}: row ${row} is not a dataset line's index`
        return
      }
      if (groupLines === 0 && done.has(row)) {
        // a group written twice (a log appended to another) would train on its trajectories twice
        problem = `line ${lineNumber}: the group of row ${row} again (complete at an earlier line)`
        return
      }
      if (groupLines > 0 && row !== groupRow) {
        problem = `line ${lineNumber}: the group of row ${groupRow} has ${groupLines} of ${numGenerations} lines`
        return
      }
      if (generation !== groupLines) {
        problem = `line ${lineNumber}: generation ${generation} of row ${row} where ${groupLines} was expected`
        return
      }
      groupRow = row
      groupLines++
      if (groupLines === numGenerations) {
        done.add(row)
        lines += groupLines
        groupLines = 0
        keepBytes = end
      }
    }
    yield* Stream.runForEach(fs.stream(output, { chunkSize: 256 * 1024 }), (chunk) =>
      Effect.sync(() => {
        let data = chunk
        if (carry !== undefined) {
          data = new Uint8Array(carry.length + chunk.length)
          data.set(carry)
          data.set(chunk, carry.length)
        }
        const base = offset - (carry?.length ?? 0)
        carry = undefined
        let start = 0
        for (;;) {
          const newline = data.indexOf(0x0a, start)
          if (newline < 0) break
          onLine(data.subarray(start, newline), base + newline + 1)
          start = newline + 1
        }
        if (start < data.length) carry = data.slice(start)
        offset += chunk.length
      }))
    if (problem !== undefined) {
      // A torn write leaves only an unfinished last line or group; a complete line out of place
      // means the file was changed by something else.
      return yield* new OptionError({ option: "--resume", detail: `${output} cannot be continued: ${problem}` })
    }
    const droppedLines = lineNumber - lines + (carry !== undefined ? 1 : 0)
    return { done, lines, keepBytes, droppedBytes: offset - keepBytes, droppedLines } satisfies Resumable
  }).pipe(
    Effect.catchTag("PlatformError", (error) => new FileError({ option: "--output", file: output, detail: errorDetail(error) }))
  )

/** Cuts a log to its complete part. */
export const truncate = (output: string, bytes: number) =>
  FileSystem.FileSystem.use((fs) => fs.truncate(output, bytes)).pipe(
    Effect.mapError((error) => new FileError({ option: "--output", file: output, detail: errorDetail(error) }))
  )
