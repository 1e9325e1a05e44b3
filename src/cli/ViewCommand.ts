/**
 * `effect-gym view FILE.jsonl [FILE2.jsonl]`: the report page of a completions log (or the
 * comparison of two), served on 127.0.0.1 until interrupted, or written as one self-contained HTML
 * file with `--html OUT.html`. What is wrong with a log (an empty file, a file that is not JSONL,
 * bad lines, a torn last line) is said here and on the page. Exit code 0, or 1 when a log had
 * problems (the rest is shown), 2 for a bad invocation.
 */
import { Console, Effect, FileSystem, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as nodeFs from "node:fs"
import * as path from "node:path"
import * as PluginLoader from "../node/PluginLoader.js"
import type { Problem } from "../view/Model.js"
import type * as Viewer from "../view/Viewer.js"
import { cannotListen, checkPort, errorDetail, FileError, integer, OptionError, plugins, setExitCode, version } from "./common.js"
import { DEFAULT_PORT } from "./RunView.js"
import { documentedAll } from "./help.js"


export const viewOptions = {
  files: Argument.String("FILE.jsonl").pipe(
    Argument.withDescription("A completions log; give two to compare them (two checkpoints on the same dataset)"),
    Argument.between(1, 2)
  ),
  port: integer("port").pipe(
    Flag.withDescription("The port on 127.0.0.1 (0 picks a free one)"),
    Flag.withDefault(DEFAULT_PORT)
  ),
  html: Flag.String("html").pipe(
    Flag.withDescription("Write one self-contained HTML file (no server, no network) instead of serving"),
    Flag.optional
  ),
  htmlMaxMb: integer("html-max-mb").pipe(
    Flag.withDescription("--html: the file's size cap in MB (trajectories beyond it are left out, and it says so)"),
    Flag.withDefault(32)
  ),
  model: Flag.String("model").pipe(
    Flag.withDescription("A GGUF model whose vocabulary decodes token ids into text (the run's model)"),
    Flag.optional
  ),
  tokenizer: Flag.String("tokenizer").pipe(
    Flag.withDescription("A Hugging Face model folder (tokenizer.json) whose tokenizer decodes token ids into text"),
    Flag.optional
  ),
  plugins
}

export type ViewArgs = Command.Command.Config.Infer<typeof viewOptions>

const MAX_PRINTED = 20

/** Whether two paths name one file: the same path, or (through a symlink or a hard link) the same inode. */
const sameFile = (a: string, b: string): boolean => {
  if (path.resolve(a) === path.resolve(b)) return true
  try {
    const x = nodeFs.statSync(a)
    const y = nodeFs.statSync(b)
    return x.dev === y.dev && x.ino === y.ino
  } catch {
    return false
  }
}

const where = (p: Problem) => `${p.file}${p.line === null ? "" : `:${p.line}`}`

/** Prints each log's index summary and problems; says whether any log had problems. */
const report = (viewer: Viewer.Viewer, ms: number) =>
  Effect.gen(function*() {
    let problems = false
    for (const log of viewer.logs) {
      const meta = log.meta()
      const mb = (meta.bytes / (1024 * 1024)).toFixed(1)
      yield* Console.error(
        `view: ${meta.path}: ${meta.trajectories} trajectories (${mb} MB) indexed in ${(ms / 1000).toFixed(2)} s`
      )
      if (meta.problemCount === 0) continue
      problems = true
      const fatal = meta.trajectories === 0
      for (const p of meta.problems.slice(0, MAX_PRINTED)) {
        yield* Console.error(`${fatal ? "error" : "warning"}: ${where(p)}: ${p.detail}`)
      }
      if (meta.problemCount > MAX_PRINTED) {
        yield* Console.error(`warning: ${meta.path}: ${meta.problemCount - MAX_PRINTED} more problems (shown on the page)`)
      }
    }
    return problems
  })

/**
 * The `view` job: opens the logs and serves the page (returning once they are indexed; the server
 * lives in the caller's scope) or writes the report.
 *
 * @since 0.1.0
 * @category commands
 */
export const viewJob = (args: ViewArgs) =>
  Effect.gen(function*() {
    yield* checkPort(args.port)
    if (args.htmlMaxMb < 1) {
      return yield* new OptionError({ option: "--html-max-mb", detail: `must be at least 1, got ${args.htmlMaxMb}` })
    }
    const htmlOut = Option.getOrUndefined(args.html)
    if (htmlOut !== undefined && args.files.some((file) => sameFile(file, htmlOut))) {
      return yield* new OptionError({ option: "--html", detail: `${htmlOut} is a log given to view: it would be overwritten` })
    }
    // The viewer (its HTTP server, tokenizers) loads only when this command runs.
    const [Renderer, Report, Server, Tokens, ViewerModule] = yield* Effect.promise(() =>
      Promise.all([
        import("../view/Renderer.js"),
        import("../view/Report.js"),
        import("../view/Server.js"),
        import("../view/Tokens.js"),
        import("../view/Viewer.js")
      ])
    )
    const loaded = yield* PluginLoader.loadAll(args.plugins)
    const renderers = Renderer.registry(loaded)
    if (Option.isSome(args.model) && Option.isSome(args.tokenizer)) {
      return yield* new OptionError({ option: "--tokenizer", detail: "give --tokenizer or --model, not both" })
    }
    const tokenizer = Option.isSome(args.model)
      ? yield* Tokens.fromGguf(args.model.value)
      : Option.isSome(args.tokenizer)
      ? yield* Tokens.fromHf(args.tokenizer.value)
      : undefined
    const viewer = yield* ViewerModule.make({ files: args.files, renderers, tokenizer, version: version() }).pipe(
      Effect.mapError((error) => new FileError({ option: "FILE.jsonl", file: error.file, detail: error.detail }))
    )
    const started = performance.now()
    if (Option.isSome(args.html)) {
      const out = args.html.value
      const built = yield* Report.build(viewer, { maxBytes: args.htmlMaxMb * 1024 * 1024 })
      const problems = yield* report(viewer, performance.now() - started)
      const fs = yield* FileSystem.FileSystem
      yield* fs.writeFileString(out, built.html).pipe(
        Effect.mapError((error) => new FileError({ option: "--html", file: out, detail: errorDetail(error) }))
      )
      yield* Console.log(
        `view: wrote ${out} (${(built.bytes / (1024 * 1024)).toFixed(1)} MB): ` +
          built.logs.map((l, i) => `${viewer.logs[i].meta().name}: ${l.trajectories} trajectories, ${l.detailed} in full`)
            .join("; ")
      )
      if (built.capNote !== null) yield* Console.error(`view: ${built.capNote}`)
      return { problems, url: undefined }
    }
    const running = yield* Server.serve({ viewer, port: args.port }).pipe(
      Effect.catchTag("ServeError", cannotListen("127.0.0.1", args.port))
    )
    // Serving: a stop from here on is the viewer's ordinary end (0), also while the logs are still
    // being read (a SIGTERM right after the URL exited 143: the code was set only after the reading)
    yield* setExitCode(0)
    yield* Console.log(`view: ${running.url} (Ctrl-C to stop)`)
    yield* viewer.update.pipe(
      Effect.mapError((error) => new FileError({ option: "FILE.jsonl", file: error.file, detail: error.detail }))
    )
    const problems = yield* report(viewer, performance.now() - started)
    return { problems, url: running.url }
  })

/** The `view` command. */
export const command = Command.make("view", documentedAll(viewOptions)).pipe(
  Command.withDescription(
    "Show completions logs in a browser: overview, charts, trajectories with filters, env boards, tokens; " +
      "two logs are compared row by row. Serves 127.0.0.1:PORT, or writes one HTML file with --html"
  ),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      const result = yield* viewJob(args)
      // The exit code after Ctrl-C (a viewer is stopped that way): 1 when a log had problems.
      yield* setExitCode(result.problems ? 1 : 0)
      if (result.url !== undefined) return yield* Effect.never
    }).pipe(Effect.scoped))
)
