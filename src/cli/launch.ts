/**
 * The command line's launcher (bin/effect-gym.js runs it; scripts/bundle.mjs puts it beside the
 * bundle as dist/bundle/launch.js). It runs the whole command line, bundled into one CommonJS file
 * (dist/bundle/cli.cjs), as a `vm.Script` with V8's code cache: the first run compiles the bundle and,
 * as the process exits, writes the compiled code (the bundle's top level and every function that ran)
 * to dist/bundle/cli.cjs.cache; later runs load it instead of parsing and compiling 3 MB of
 * JavaScript, which is most of a command's start-up (bench/workloads/startup.ts, BENCHMARKS.md).
 * The cache names the commands whose runs made it (`run`, `envs`, "" for the top level): the first
 * run of a command it does not name writes it again at exit, holding what that command compiled as
 * well (the cache a `--help` made held none of `run`'s engine).
 *
 * The cache is only ever an optimisation:
 * - it is used only when it was made from this exact bundle (its SHA-256), by this Node version on
 *   this architecture, and its payload's SHA-256 matches (V8 does not check a code cache's payload:
 *   a corrupt one would crash the process, so it is checked here first); anything else is ignored and
 *   rewritten;
 * - only a regular file of sane size is read (a FIFO or a link to a device at its path would block
 *   or never end); it is replaced like any other unusable cache;
 * - it is written atomically (a temporary file renamed), and where it cannot be written (a read-only
 *   installation) the command runs as without it;
 * - `EFFECT_GYM_CODE_CACHE=off` neither reads nor writes it (nor prints the help pages rendered
 *   ahead, see {@link helpPage}).
 * Without dist/bundle/cli.cjs it falls back to the ES module bundle (dist/bundle/bin.js).
 */
import * as buffer from "node:buffer"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as vm from "node:vm"

/** The cache file's first line (then the payload): what it was made from, and its payload's hash. */
interface Header {
  readonly format: 1
  readonly source: string
  readonly node: string
  readonly arch: string
  readonly payload: string
  /** The commands whose runs compiled what the cache holds (absent: none known). */
  readonly commands?: ReadonlyArray<string>
}

/** What a usable cache holds: its payload, and the commands that made it. */
export interface Cache {
  readonly payload: Buffer
  readonly commands: ReadonlyArray<string>
}

/** The most commands a cache names: past them, a new command does not write it again. */
const MAX_COMMANDS = 16

/**
 * The command of a command line (`process.argv`): its first word after the script (and after a
 * `--log-level`) when that is a command's name (`run`, `check-env`), else "" (the top level:
 * `--help`, `--version`, a typo's flags). A command line that asks for a built-in of the command line's instead of the command
 * (`run --help`, `envs --version`, `--wizard`, `--completions`) is the top level's too: such a
 * run compiles what `--help` compiles, none of the command (`run --help` named `run` in the cache,
 * and `run`'s engine was never added to it).
 */
export const commandOf = (argv: ReadonlyArray<string>): string => {
  // (past a --log-level before the command: `--log-level debug run` was the top level's, and a
  // cache naming it never got run's engine)
  let at = 2
  while (at < argv.length && (argv[at] === "--log-level" || argv[at].startsWith("--log-level="))) at += argv[at] === "--log-level" ? 2 : 1
  const word = argv[at]
  if (word === undefined || !/^[a-z][a-z-]{0,31}$/.test(word)) return ""
  for (let i = at + 1; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === "--") break
    if (BUILT_INS.has(arg) || arg.startsWith("--wizard=") || arg.startsWith("--completions=")) return ""
  }
  return word
}

/** The command line's own options that run instead of a command (effect/cli's built-ins). */
const BUILT_INS = new Set(["--help", "-h", "--version", "--wizard", "--completions"])

/**
 * Whether a run that exited with `code` ran its command (0; 1: a run that completed with failed
 * trajectories): one refused at its options (2), stopped on an error (3) or by a signal (130, 143)
 * may have compiled little of the command, and naming it in the cache kept the cache from ever
 * getting the command's code (`run --bogus` first, or a typo `rnu` taking one of the names).
 */
const ranThrough = (code: number | undefined): boolean => code === undefined || code === 0 || code === 1

/** The commands a cache's header names, as the launcher writes them: strings, each once, at most MAX_COMMANDS. */
const commandsOf = (value: unknown): ReadonlyArray<string> => {
  if (!Array.isArray(value)) return []
  const out: Array<string> = []
  for (const c of value) {
    if (typeof c === "string" && c.length <= 32 && !out.includes(c)) out.push(c)
    if (out.length === MAX_COMMANDS) break
  }
  return out
}

const sha256 = (data: string | Uint8Array): string => crypto.createHash("sha256").update(data).digest("hex")

const headerFor = (sourceHash: string, payload: Uint8Array, commands: ReadonlyArray<string>): Header => ({
  format: 1,
  source: sourceHash,
  node: process.version,
  arch: process.arch,
  payload: sha256(payload),
  commands
})

/** Bigger than any cache of this bundle (about 1.7 MB): a file this big is not one, and is not read. */
const MAX_CACHE_BYTES = 256 * 1024 * 1024

/**
 * The content of `file` if it is a regular file of at most `max` bytes. Something else at the path
 * (a FIFO, which would block a plain read for ever, a device, a folder) or a file that cannot be
 * opened gives `undefined`.
 */
const readRegularFile = (file: string, max: number): Buffer | undefined => {
  let fd: number
  try {
    // non-blocking: opening a FIFO for reading otherwise waits for a writer
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK)
  } catch {
    return undefined
  }
  try {
    const stat = fs.fstatSync(fd)
    if (!stat.isFile() || stat.size > max) return undefined
    const data = Buffer.allocUnsafe(stat.size)
    let read = 0
    while (read < data.length) {
      const n = fs.readSync(fd, data, read, data.length - read, read)
      if (n === 0) break
      read += n
    }
    return data.subarray(0, read)
  } catch {
    return undefined
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * The cached code in `file` if it was made from the source with this hash by this Node version on
 * this architecture and its payload is intact; else `undefined`.
 */
export const readCache = (file: string, sourceHash: string): Cache | undefined => {
  const data = readRegularFile(file, MAX_CACHE_BYTES)
  if (data === undefined) return undefined
  const newline = data.indexOf(10)
  if (newline < 0) return undefined
  try {
    const header = JSON.parse(data.subarray(0, newline).toString("utf8")) as Partial<Header>
    const payload = data.subarray(newline + 1)
    const ok = header.format === 1 && header.source === sourceHash && header.node === process.version &&
      header.arch === process.arch && header.payload === sha256(payload)
    if (!ok) return undefined
    return { payload, commands: commandsOf(header.commands) }
  } catch {
    return undefined
  }
}

/** Writes the cache atomically; gives up silently (read-only installation, full disk). */
const writeCache = (file: string, sourceHash: string, payload: Uint8Array, commands: ReadonlyArray<string>): void => {
  const temporary = `${file}.${process.pid}.tmp`
  try {
    fs.writeFileSync(temporary, JSON.stringify(headerFor(sourceHash, payload, commands)) + "\n")
    fs.appendFileSync(temporary, payload)
    fs.renameSync(temporary, file)
  } catch {
    try {
      fs.rmSync(temporary, { force: true })
    } catch {
      // nothing to clean up
    }
  }
}

const writable = (dir: string): boolean => {
  try {
    fs.accessSync(dir, fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

/**
 * The bundle's text as the function the launcher compiles (CommonJS's parameters, then the
 * launcher's own import(), see scripts/bundle.mjs): also what the build compiles to check it.
 */
export const wrapBundle = (text: string): string =>
  `(function (exports, require, module, __filename, __dirname, __effectGymImport) {${text}\n})`

/**
 * Runs the CommonJS bundle `bundle` (with its code cache at `${bundle}.cache` unless `cache` is
 * false), as Node would run it with `require`, for the command `command` (see {@link commandOf}).
 */
export const launch = (bundle: string, cache: boolean, command = ""): void => {
  // (read as bytes and hashed as bytes: reading it as UTF-8 and hashing the string took about 3x as
  // long; the build writes ASCII, which decodes faster as Latin-1, the same characters)
  const data = fs.readFileSync(bundle)
  const sourceHash = sha256(data)
  const text = buffer.isAscii(data) ? data.toString("latin1") : data.toString("utf8")
  const cacheFile = `${bundle}.cache`
  const found = cache ? readCache(cacheFile, sourceHash) : undefined
  const script = new vm.Script(wrapBundle(text), { filename: bundle, cachedData: found?.payload })
  const used = found !== undefined && script.cachedDataRejected !== true
  const commands = used ? found.commands : []
  const missing = !commands.includes(command) && commands.length < MAX_COMMANDS
  if (cache && (!used || missing) && writable(path.dirname(bundle))) {
    // At exit, so that the cache holds every function the command compiled, not just the top level
    // (and, from a cache it used, what the commands before it compiled).
    process.once("exit", (code) => {
      // (a throw here would change the command's exit code: the cache is never worth that)
      try {
        // a command that did not run through is not named: a usable cache is left as it is, and
        // where there was none, one is written naming what it named before (nothing)
        const named = missing && ranThrough(code)
        if (used && !named) return
        writeCache(cacheFile, sourceHash, script.createCachedData(), named ? [...commands, command] : commands)
      } catch {
        // no cache this time
      }
    })
  }
  const module = { exports: {} }
  const run = script.runInThisContext() as (
    exports: object,
    require: NodeJS.Require,
    module: { exports: object },
    filename: string,
    dirname: string,
    dynamicImport: (specifier: string) => Promise<unknown>
  ) => void
  // The bundle's import() calls (optional packages, plugins), rewritten by scripts/bundle.mjs: they
  // resolve from this module's folder, which is the bundle's.
  run(module.exports, createRequire(bundle), module, bundle, path.dirname(bundle), (specifier) => import(specifier))
}

/**
 * The help pages the build rendered ahead (scripts/help-pages.mjs, dist/bundle/help.json): each
 * command's `--help` and `-h` (and the bare `effect-gym`), plain and coloured, exactly as the
 * command line prints them, with the SHA-256 of the bundle they were rendered with (its size and
 * time would not do: npm's tarballs give every file one date). The command line took about 180 ms past Node's own start to print one (loading the bundle,
 * building the commands); printed from here, a help page costs what reading one JSON file costs.
 */
interface HelpPages {
  readonly format: 1
  readonly bundle: string
  readonly pages: Readonly<Record<string, { readonly code: number; readonly stdout: string; readonly stderr: string }>>
}

/** The key of a help page: its colour and its arguments (as `process.argv.slice(2)`). */
export const helpKey = (color: boolean, args: ReadonlyArray<string>): string => [color ? "color" : "plain", ...args].join("\0")

/**
 * The page the command line would print for `argv`, when it asks for nothing but a command's help
 * (`run --help`, `openenv serve -h`, no arguments at all) and the pages were rendered with `bundle`
 * as it is; `undefined` otherwise (anything else, another flag, a page missing or unreadable), and
 * the command line runs. Colour is decided as the command line decides it (see `Cli.main`).
 */
export const helpPage = (
  bundle: string,
  argv: ReadonlyArray<string>
): { readonly code: number; readonly stdout: string; readonly stderr: string } | undefined => {
  const args = argv.slice(2)
  if (args.length > 0 && args[args.length - 1] !== "--help" && args[args.length - 1] !== "-h") return undefined
  if (args.length > 4) return undefined
  try {
    const data = readRegularFile(path.join(path.dirname(bundle), "help.json"), 4 * 1024 * 1024)
    if (data === undefined) return undefined
    const pages = JSON.parse(data.toString("utf8")) as HelpPages
    if (pages.format !== 1 || typeof pages.pages !== "object" || pages.pages === null) return undefined
    const color = process.stdout.isTTY === true && (process.env.NO_COLOR ?? "") === "" && process.env.TERM !== "dumb"
    const key = helpKey(color, args)
    const page = Object.hasOwn(pages.pages, key) ? pages.pages[key] : undefined
    if (typeof page?.stdout !== "string" || typeof page.stderr !== "string" || typeof page.code !== "number") return undefined
    // (hashed only for a page there is: the command line, when it runs, reads and hashes the bundle itself)
    return pages.bundle === sha256(fs.readFileSync(bundle)) ? page : undefined
  } catch {
    return undefined
  }
}

/** Prints a help page and ends with its code, once the output has gone out (a reader gone: dropped). */
const printPage = (page: { readonly code: number; readonly stdout: string; readonly stderr: string }): void => {
  process.stdout.on("error", () => {})
  process.stderr.on("error", () => {})
  if (page.stderr !== "") process.stderr.write(page.stderr)
  process.stdout.write(page.stdout)
  process.exitCode = page.code
}

/**
 * The young generation `run` asks V8 for: semi-spaces of 8 MB from the start
 * (`--min-semi-space-size` and `--max-semi-space-size`), where V8 by itself starts the young
 * generation at 1 MiB and grows it up to 128 MiB (`v8.getHeapSpaceStatistics()`'s new space, Node
 * 24 on a machine of 24 GiB; 8 to 16 MiB with these flags). A run allocates fast and keeps little per
 * trajectory: in this young generation it ran 11% more turns a second at 10,000x8 (median 161k
 * against 145k, 4 runs each, the maximum alone), 6% more at a 20 ms policy with 1,024 in flight
 * (44.0k against 41.6k), and at 1024x8 87k against 75k (5 runs each; with the maximum alone, 74k:
 * the job is over before V8 has grown the space). V8 reads the sizes once, as the process starts,
 * so `run` starts again with them (see {@link youngGenerationArgv}).
 */
export const SEMI_SPACE_MB = 8

/**
 * The arguments to start `run` again with {@link SEMI_SPACE_MB}, or `undefined` when it already has
 * a young generation of its own choosing or should not start again: another command (their start is
 * what counts, `--help` above all), a size given already (on Node's command line or in
 * `NODE_OPTIONS`: the user's), a debugger's `--inspect`, code preloaded before it (`--require`,
 * `--import`), or `EFFECT_GYM_YOUNG_GENERATION=off`. The new process is this one
 * (`process.execve`: the same pid, standard streams, signals and parent), so nothing a user or a
 * supervisor sees changes but the flag; where Node has no `execve` (Windows), it runs as it is.
 */
export const youngGenerationArgv = (
  argv: ReadonlyArray<string>,
  execArgv: ReadonlyArray<string>,
  env: Readonly<Record<string, string | undefined>>
): ReadonlyArray<string> | undefined => {
  if (commandOf(argv) !== "run" || env.EFFECT_GYM_YOUNG_GENERATION === "off") return undefined
  const flags = [...execArgv, ...nodeOptions(env.NODE_OPTIONS ?? "")]
  if (flags.some((flag) => SIZE_FLAG.test(flag) || INSPECT_FLAG.test(flag) || PRELOAD_FLAG.test(flag))) return undefined
  return [...execArgv, `--min-semi-space-size=${SEMI_SPACE_MB}`, `--max-semi-space-size=${SEMI_SPACE_MB}`, ...argv.slice(1)]
}

/**
 * Node's flags that say the young generation's size already: a semi-space size, or a heap size (V8
 * refuses `--max-heap-size` with both a semi-space size and an old space size: "Check failed",
 * a fatal error as the process started again, exit 133, where the user had given the other two).
 */
const SIZE_FLAG = /^--(?:(?:max|min)[-_]semi[-_]space[-_]size|max[-_]heap[-_]size)(?:=|$)/

/**
 * Node's flags that open a debugger's session: started again, the process opened a second one at
 * another address (the first, which a debugger may have attached to, gone), and with
 * `--inspect-brk` or `--inspect-wait` waited for a debugger a second time.
 */
const INSPECT_FLAG = /^--inspect(?:[-_](?:brk|wait|brk[-_]node))?(?:=|$)/

/**
 * Node's flags that run code before the command line (`--require`, `-r`, `--import`, `--loader`):
 * started again, the process ran that code a second time (a banner printed twice, a tracer started
 * twice), so it is not started again. Such a run keeps V8's own young generation; the flags can be
 * given with the preload (`--min-semi-space-size=8 --max-semi-space-size=8`).
 */
const PRELOAD_FLAG = /^(?:--require|-r|--import|--loader|--experimental-loader)(?:=|$)/

/**
 * The flags in `NODE_OPTIONS` as Node reads them (`ParseNodeOptionsEnvVar`): words between spaces
 * (any white space here: a tab that Node keeps in a word would make a flag Node refuses anyway),
 * a double-quoted part kept whole without its quotes, a backslash in one escaping the next
 * character. (Split at white space alone, `"--max-semi-space-size=2"` was no size of the user's,
 * and the new command line's 8 MB, read after NODE_OPTIONS, replaced it.)
 */
const nodeOptions = (options: string): Array<string> => {
  const out: Array<string> = []
  let word: string | undefined
  let quoted = false
  for (let i = 0; i < options.length; i++) {
    let c = options[i]
    if (c === "\\" && quoted && i + 1 < options.length) c = options[++i]
    else if (/\s/.test(c) && !quoted) {
      if (word !== undefined) out.push(word)
      word = undefined
      continue
    } else if (c === "\"") {
      quoted = !quoted
      word ??= ""
      continue
    }
    word = (word ?? "") + c
  }
  if (word !== undefined) out.push(word)
  return out
}

/**
 * The most bytes of arguments and environment (their strings and pointers) that an exec takes on
 * Linux: a quarter of the stack's soft limit (`/proc/self/limits`), at most 6 MiB and never less
 * than 128 KiB (past it, E2BIG); 128 KiB where the limit cannot be read. A few KiB are kept spare.
 */
const execBytes = (): number => {
  const floor = 128 * 1024
  const most = 6 * 1024 * 1024
  let quarter = floor
  try {
    const stack = /^Max stack size\s+(\S+)/m.exec(fs.readFileSync("/proc/self/limits", "latin1"))?.[1]
    if (stack === "unlimited") quarter = most
    else if (stack !== undefined && /^\d+$/.test(stack)) quarter = Number(stack) / 4
  } catch {
    // (the floor)
  }
  return Math.max(floor, Math.min(quarter, most)) - 8 * 1024
}

/**
 * Whether `process.execve(file, args, env)` can be tried: Node aborts the process when the call
 * itself fails ("process.execve failed with error code E2BIG", exit 134: it does not throw), so
 * what would fail is not tried: arguments and environment past {@link execBytes} (a start that
 * fit with a few bytes to spare, and its 48 bytes of flags did not), a Node that cannot be run
 * (removed, not executable), or a permission model without child processes (which throws, and
 * printed an ExperimentalWarning).
 */
export const canExec = (
  file: string,
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string | undefined>>
): boolean => {
  let bytes = Buffer.byteLength(file) + 1 + 8
  for (const arg of args) bytes += Buffer.byteLength(arg) + 1 + 8
  for (const [key, value] of Object.entries(env)) {
    if (value !== undefined) bytes += Buffer.byteLength(key) + Buffer.byteLength(value) + 2 + 8
  }
  if (bytes > 120 * 1024 && bytes > execBytes()) return false
  const permission = (process as { readonly permission?: { readonly has: (scope: string) => boolean } }).permission
  if (permission !== undefined && !permission.has("child")) return false
  try {
    fs.accessSync(file, fs.constants.X_OK)
    return fs.statSync(file).isFile()
  } catch {
    return false
  }
}

/** The oldest Node major the command line runs on (package.json's `engines`). */
const NODE_MAJOR = 24

/**
 * The Node a clone brings (the `node` dev dependency, which `npm ci` installs): the command line
 * of a clone runs on it when the Node that started it is too old. `undefined` outside a clone
 * (an installed package has no dev dependencies) or when it is not there.
 */
const clonesNode = (dir: string): string | undefined => {
  // dist/bundle (or dist/cli) → the package root
  const file = path.resolve(dir, "../../node_modules/node/bin/node")
  try {
    fs.accessSync(file, fs.constants.X_OK)
    return fs.statSync(file).isFile() ? file : undefined
  } catch {
    return undefined
  }
}

/** Whether two paths are the same file (links followed); false when either cannot be resolved. */
const sameFile = (a: string, b: string): boolean => {
  try {
    return fs.realpathSync(a) === fs.realpathSync(b)
  } catch {
    return false
  }
}

/**
 * Runs this command line again on `node` (the clone's own Node 24), with the same arguments,
 * standard streams and environment; a signal sent to this process goes on to it, and this process
 * ends as it ends (its exit code, or the same signal).
 *
 * This process's end, however it comes, ends the child's run too: an IPC channel joins the two
 * (stdio's fourth entry), and the child stops as a hang-up (SIGHUP) stops it when its end of the channel
 * closes, which the kernel does the moment this process is gone, `kill -9` included (see
 * {@link stopWithLauncher}). Without it a `kill -9` of this process left the child running, orphaned,
 * still writing the log, and `--resume` was refused until it finished on its own. (A channel rather
 * than a watch of `process.ppid`: no timer, nothing polled, and it tells at once; a pid can be taken
 * again, a closed socket cannot. Linux's `PR_SET_PDEATHSIG` is not in Node.) Nothing is ever sent on
 * it, and neither end keeps its process alive.
 */
const rerun = (node: string): Promise<void> =>
  import("node:child_process").then(({ spawn }) =>
    new Promise<void>((resolve) => {
      // (`run` with its young generation at once, not started a third time: youngGenerationArgv)
      const child = spawn(node, youngGenerationArgv(process.argv, [], process.env) ?? process.argv.slice(1), {
        stdio: ["inherit", "inherit", "inherit", "ipc"],
        env: { ...process.env, EFFECT_GYM_RERUN: "1" }
      })
      // (this process waits for the child's exit, not for the channel: as with stdio "inherit" alone)
      child.channel?.unref()
      // A Ctrl-C at a terminal reaches the whole foreground group, so the child has it already:
      // passed on as SIGINT, it would be its second, which stops a run at once instead of gracefully.
      // Not passed on at a terminal, a `kill -INT` of this process alone was lost (the run went on).
      // So a SIGINT is passed on as SIGUSR2, which the child (EFFECT_GYM_RERUN) takes as a SIGINT
      // unless it has just had one straight from the terminal (src/cli/bin.ts); the others as they are.
      const signals = ["SIGINT", "SIGTERM", "SIGHUP"] as const
      const forward = (signal: NodeJS.Signals) => {
        try {
          child.kill(signal === "SIGINT" ? "SIGUSR2" : signal)
        } catch {
          // gone already
        }
      }
      for (const signal of signals) process.on(signal, forward)
      child.on("error", (error) => {
        for (const signal of signals) process.off(signal, forward)
        process.stderr.write(`error: could not run ${node}: ${error.message}\n`)
        process.exitCode = 2
        resolve()
      })
      child.on("exit", (code, signal) => {
        for (const signal of signals) process.off(signal, forward)
        // (a child stopped by the forwarded SIGINT before it listened for it: as SIGINT)
        if (signal !== null) process.kill(process.pid, signal === "SIGUSR2" ? "SIGINT" : signal)
        else process.exitCode = code ?? 1
        resolve()
      })
    })
  )

/**
 * In the command line run again by the launcher on the clone's Node ({@link rerun}): once the
 * launcher is gone (its end of the IPC channel closed: `kill -9`, a crash, the OOM killer), the run
 * stops as a hang-up stops it, within milliseconds: a SIGHUP to itself (src/cli/bin.ts: a first one
 * stops the run gracefully, the finished groups written and the log's lock released; after another
 * signal it is ignored, so a launcher killed while the run already stops gracefully, `timeout -k`'s
 * SIGTERM then SIGKILL, does not cut that stop short, as a SIGTERM did: "SIGTERM again: exiting now").
 * A launcher gone is a hang-up: no one is left to ask for a hard stop. Only a process with the
 * launcher's channel watches: Node reads `NODE_CHANNEL_FD` and deletes it from `process.env` as it
 * starts, and the channel's descriptor is closed on exec, so the run's own child processes (a
 * plugin's `node bin/effect-gym.js`, an env's Python) neither have it nor watch, though they inherit
 * `EFFECT_GYM_RERUN`. The channel is unref'd: it never keeps the process alive (a `disconnect`
 * listener alone would).
 */
const stopWithLauncher = (): void => {
  const channel = process.channel
  if (channel === undefined || process.env.EFFECT_GYM_RERUN !== "1") return
  // (Node removed them already; kept out of any process this one starts whatever a later Node does)
  delete process.env.NODE_CHANNEL_FD
  delete process.env.NODE_CHANNEL_SERIALIZATION_MODE
  process.once("disconnect", () => {
    try {
      process.kill(process.pid, "SIGHUP")
    } catch {
      // (cannot happen: a process may signal itself)
    }
  })
  channel.unref()
}

/**
 * Runs the command line: the CommonJS bundle beside this file with its code cache, or, where there
 * is none (this module run from dist/cli, a build without it), the ES module command line beside it.
 */
export const main = async (): Promise<void> => {
  const dir = path.dirname(fileURLToPath(import.meta.url))
  // On an older Node it failed late, with a stack trace (undici, which the HTTP client loads,
  // needs zlib functions Node 20 lacks: `--mode server` died with "internal error", exit 3). In a
  // clone it runs on the clone's own Node (`npx effect-gym` and `node bin/effect-gym.js` start the
  // system's, Node 20 on some machines); elsewhere it says which Node it needs.
  const major = Number(process.versions.node.split(".")[0])
  if (major < NODE_MAJOR) {
    // (not again on the clone's Node itself, if that is too old: decided by the Node that runs, not by
    // EFFECT_GYM_RERUN, which the run's own child processes inherit: a plugin's or a script's
    // `node bin/effect-gym.js` under a rerun was refused, its message saying to run npm ci)
    const node = clonesNode(dir)
    if (node !== undefined && !sameFile(node, process.execPath)) return rerun(node)
    process.stderr.write(
      `error: effect-gym needs Node >= ${NODE_MAJOR} (package.json engines); this is Node ${process.versions.node} ` +
        `(${process.execPath}). Install Node ${NODE_MAJOR} LTS, or in a clone run \`npm ci\` (it installs it).\n`
    )
    process.exitCode = 2
    return
  }
  const again = youngGenerationArgv(process.argv, process.execArgv, process.env)
  if (again !== undefined && typeof process.execve === "function") {
    const args = [process.execPath, ...again]
    const env = process.env as Record<string, string>
    if (canExec(process.execPath, args, env)) {
      try {
        process.execve(process.execPath, args, env)
      } catch {
        // (not started again: it runs as it is)
      }
    }
  }
  // (after the execve above, which the launcher's child never makes: its `run` has its young generation already)
  if (process.channel !== undefined) stopWithLauncher()
  const bundle = path.join(dir, "cli.cjs")
  const cache = process.env.EFFECT_GYM_CODE_CACHE !== "off"
  const page = cache && fs.existsSync(bundle) ? helpPage(bundle, process.argv) : undefined
  if (page !== undefined) printPage(page)
  else if (fs.existsSync(bundle)) launch(bundle, cache, commandOf(process.argv))
  else await import(pathToFileURL(path.join(dir, "bin.js")).href)
}
