/**
 * `effect-gym run`: rollouts over a dataset, written to the completions log, with a summary.
 *
 * Nothing finished is lost: the dataset is read as a stream; each group is appended whole as it
 * completes (once the write before it has finished) and flushed to disk at least every second; a first SIGINT or
 * SIGTERM stops the run gracefully (the groups complete are written, the summary says it was
 * interrupted, exit 130 or 143); `--resume` continues a log after an interruption or a kill.
 */
import * as NodeStream from "@effect/platform-node/NodeStream"
import { Cause, Console, type Context, Effect, Exit, FileSystem, Option, Result, Schedule, Stream } from "effect"
import { Command, Flag } from "effect/cli"
import * as NodeFs from "node:fs"
import * as NodeNet from "node:net"
import { PassThrough } from "node:stream"
import * as NodeTty from "node:tty"
import * as CompletionsLog from "../CompletionsLog.js"
import { Inference, type InferenceError, type SamplingParams } from "../Inference.js"
import { canonical } from "../internal/inspect.js"
import * as Json from "../internal/Json.js"
import * as Rollout from "../Rollout.js"
import * as RunSpec from "../RunSpec.js"
import * as Registry from "../Registry.js"
import * as Row from "../Row.js"
import * as Summary from "../Summary.js"
import { choice, errorDetail, FileError, integer, OptionError, setExitCode, signalExitCode, Signals, toggle, version } from "./common.js"
import * as InferenceOptions from "./InferenceOptions.js"
import * as Preflight from "./preflight.js"
import * as Progress from "./Progress.js"
import * as RolloutOptions from "./RolloutOptions.js"
import * as RunView from "./RunView.js"
import * as OutputLock from "./OutputLock.js"
import * as RunLog from "./RunLog.js"
import { documentedAll } from "./help.js"

export const runOptions = {
  dataset: Flag.String("dataset").pipe(
    Flag.withDescription("The dataset, one JSON row per line (- reads standard input)"),
    // ("-" is what other command-line tools take for standard input: it said "no such file")
    Flag.map((file) => (file === "-" ? "/dev/stdin" : file))
  ),
  ...RolloutOptions.options,
  isolateEnvs: RolloutOptions.isolateEnvs,
  ...InferenceOptions.options,
  seed: integer("seed").pipe(Flag.withDescription("The run's seed"), Flag.withDefault(0)),
  numGenerations: integer("num-generations").pipe(
    Flag.withDescription(`Trajectories per row (the GRPO group size), at most ${Rollout.LIMITS.numGenerations.max}`),
    Flag.withDefault(8)
  ),
  maxTurns: integer("max-turns").pipe(
    Flag.withDescription(`Turns after which a trajectory ends, at most ${Rollout.LIMITS.maxTurns.max}`),
    Flag.withDefault(10)
  ),
  concurrency: integer("concurrency").pipe(
    Flag.withDescription(`Trajectories in flight, at most ${Rollout.LIMITS.concurrency.max}`),
    Flag.withDefault(64)
  ),
  output: Flag.String("output").pipe(
    Flag.withDescription("The completions log (one JSON line per trajectory)"),
    Flag.withDefault("completions.jsonl")
  ),
  resume: toggle(
    "resume",
    "Continue the run that wrote --output (after an interruption or a kill): its complete groups are kept"
  ),
  resumeForce: toggle(
    "resume-force",
    "With --resume: resume though a --plugin's content or effect-gym's version changed since the log was written " +
      "(recorded in the log's run record)"
  ),
  overwrite: toggle("overwrite", "Replace an existing --output"),
  failedGroups: choice("failed-groups", ["keep", "drop", "mask"]).pipe(
    Flag.withDescription(
      "A group with a failed trajectory: keep its lines, drop the group, or mask it (every advantage null)"
    ),
    Flag.withDefault("keep" as const)
  ),
  json: toggle("json", "Print the summary as JSON"),
  cluster: Flag.String("cluster").pipe(
    Flag.withDescription(
      "Run the groups on a cluster: its PostgreSQL database (postgres://...), where `effect-gym runner` processes " +
        "wait; --concurrency is then groups in flight. Inference and plugins are the runners' own"
    ),
    Flag.optional
  ),
  runId: Flag.String("run-id").pipe(
    Flag.withDescription("--cluster: the run's id in the cluster (default: a new one, recorded with the log for --resume)"),
    Flag.optional
  ),
  ...RunView.options
}

export type RunArgs = Command.Command.Config.Infer<typeof runOptions>

/**
 * The run's settings as the command line gives them (its flags' names in messages), with what
 * `resolve` found and the sampling checked, when known.
 */
const runSpec = (
  args: RunArgs,
  known: { readonly resolved?: RolloutOptions.Resolved; readonly sampling?: SamplingParams }
) =>
  RunSpec.decode({
    defaultEnv: known.resolved?.defaultEnv,
    numGenerations: args.numGenerations,
    maxTurns: args.maxTurns,
    concurrency: args.concurrency,
    seed: args.seed,
    retries: args.trajectoryRetries,
    timeouts: known.resolved?.timeouts,
    sampling: known.sampling,
    schedulerOptions: known.resolved?.schedulerOptions,
    rewardWeights: known.resolved?.rewardWeights
  }, "flags")

/** The exit code of a run: interrupted, stopped by an error (its backend down too), with failures, or clean. */
const exitCode = (summary: Summary.Summary, stopped: boolean): number =>
  summary.interrupted !== null
    ? signalExitCode(summary.interrupted)
    : stopped
    ? 3
    : summary.failures > 0 || summary.badRows > 0
    ? 1
    : 0

/**
 * The `run` job: everything a command-line run does, for reuse by tests and other front ends. Gives
 * the summary and the exit code (0 clean, 1 with failures or bad rows, 3 stopped by an error after
 * writing what finished, 130/143 interrupted).
 *
 * @since 0.1.0
 * @category commands
 */
export const runJob = (args: RunArgs, view?: RunView.Handle) =>
  Effect.gen(function*() {
    // The sizes first (as a run of the library checks them), before plugins load or files are read.
    yield* Effect.fromResult(runSpec(args, {}))
    if (Option.isNone(args.cluster) && Option.isSome(args.runId)) {
      return yield* new OptionError({ option: "--run-id", detail: "only with --cluster (a local run is resumed by its --output)" })
    }
    if (args.resumeForce && !args.resume) {
      return yield* new OptionError({ option: "--resume-force", detail: "only with --resume" })
    }
    if (args.resume && args.overwrite) {
      return yield* new OptionError({ option: "--resume", detail: "cannot be combined with --overwrite" })
    }
    const resolved = yield* RolloutOptions.resolve(args, { isolate: args.isolateEnvs })
    const { columns, registry, scheduler: definition, schedulerOptions } = resolved
    const sampling = yield* InferenceOptions.sampling(args)
    const spec = yield* Effect.fromResult(runSpec(args, { resolved, sampling }))

    // The output: never the dataset, never replaced by accident; resumed only by the same run.
    const mode: RunLog.OutputMode = args.resume ? "resume" : args.overwrite ? "overwrite" : "new"
    // A coordinator's options that cannot work are said first (as a wrong invocation, not as a log in use).
    if (Option.isSome(args.cluster)) {
      const ClusterRun = yield* Effect.promise(() => import("./ClusterRun.js"))
      yield* ClusterRun.refuseRunnerOptions(args)
      // The scheduler's options checked here, at start (the runners make the run's instance).
      yield* Effect.scoped(definition.make({ options: schedulerOptions }))
    }
    // One writer per log, for the whole run: held before the output is looked at.
    yield* OutputLock.hold(args.output)
    yield* RunLog.checkDataset(args.dataset)
    const first = yield* Preflight.firstRow(args.dataset)
    const checkFirst = (row: Row.Row) =>
      Preflight.checkFirstRow(row, {
        defaultEnv: resolved.defaultEnv ?? definition.envs?.[0]?.name,
        openEnvBrought: (definition.envs ?? []).some((brought) => brought.name === "openenv"),
        // (on a cluster the runners connect, not this process)
        connects: Option.isNone(args.cluster),
        // (the scheduler's own envs first, then the registry's, as a row's env is found)
        unknownEnv: Option.isSome(args.cluster) ? undefined : (name: string) =>
          (definition.envs ?? []).some((brought) => brought.name === name)
            ? undefined
            : Result.match(Registry.env(registry, name), { onFailure: (error) => error.message, onSuccess: () => undefined })
      })
    if (first !== undefined) yield* checkFirst(first)
    const existing = yield* RunLog.checkOutput(args.dataset, args.output, mode)
    const scan = yield* RunLog.scanDataset(args.dataset)
    const clustered = Option.isSome(args.cluster)
    const local = RunLog.identityOf(args, { sha256: scan.sha256, schedulerOptions, sampling, columns })
    // On a cluster, inference is the runners': the log records the cluster run instead.
    const identity = clustered ? { ...local, mode: "cluster", policy: null, model: null, base_url: null } : local
    // Checks the log against this run and cuts its torn tail (after the checks that write nothing).
    const resumeLog = mode === "resume" && existing.size > 0 ? resume(args, identity, scan) : Effect.succeed(undefined)

    if (Option.isSome(args.cluster)) {
      // The coordinator: no scheduler, no inference here (both are the runners').
      const ClusterRun = yield* Effect.promise(() => import("./ClusterRun.js"))
      const url = args.cluster.value
      // The run id: on --resume the log's record's (also for a log still empty).
      const runId = yield* ClusterRun.runId(args, mode === "resume")
      // Its shape checked, the database asked and the run id taken before anything is written
      // (a bad --cluster, an unreachable database, a run id in use write nothing, trim nothing).
      yield* ClusterRun.checkUrl(url)
      return yield* Effect.scoped(Effect.gen(function*() {
        const session = yield* ClusterRun.open(url, runId, mode === "resume", identity)
        const resumed = yield* resumeLog
        yield* session.register
        const record: RunLog.Identity & { readonly cluster_run_id: string } = { ...identity, cluster_run_id: runId }
        // The runners' inference (see ClusterRun.coordinate): the record's, on --resume.
        const recorded = mode === "resume" ? (yield* RunLog.readIdentity(args.output))?.inference : undefined
        const fileSystem = yield* FileSystem.FileSystem
        const { accumulator, outputError: _, writer } = yield* openLog(args, record, resumed, existing)
        const until = Option.getOrUndefined(onFirstSignal(
          yield* Effect.serviceOption(Signals),
          accumulator,
          (signal) =>
            `\n${signal}: stopping: no more groups are sent, the replies received are written; the runners ` +
            `finish the groups sent, --resume collects them (${hardStop(signal)} exits at once)`
        ))
        const done = resumed?.done
        const cluster = ClusterRun.newReport(runId)
        const { outcome, summary } = yield* underProgress(
          args,
          view,
          { accumulator, writer, scan, done },
          ClusterRun.coordinate(args, {
            url,
            session,
            runId,
            resolved,
            spec,
            done,
            writer,
            accumulator,
            until,
            report: cluster,
            inference: {
              recorded: recorded === undefined || recorded === null ? undefined : canonical(recorded),
              // The record names what produced the log: the runners' mode, model, policy and options.
              record: (inference) =>
                existing.regular
                  ? RunLog.writeIdentity(args.output, { ...record, inference: Json.parse(inference) }, version()).pipe(
                    Effect.provideService(FileSystem.FileSystem, fileSystem)
                  )
                  : Effect.void
            }
          })
        )
        const failed = Exit.isFailure(outcome) && !Cause.hasInterruptsOnly(outcome.cause)
        const error = failed ? stopMessage(outcome.cause) : undefined
        return yield* report(args, summary, outcome, error, { json: { cluster }, text: `\ncluster run    ${runId}` })
      }))
    }

    const resumed = yield* resumeLog
    // (the scheduler's instance made here, before anything is written: options it refuses fail the run at start)
    const config = yield* Rollout.configOf(spec, { registry, scheduler: definition, rewards: resolved.rewards })
    // The composition root: the run below gets its `Inference` from the one layer the options
    // select (built here, before anything is written: a bad option or an unreachable backend fails
    // the run at start; released after the run's own scope has closed).
    const inferenceLayer = InferenceOptions.layer(args, {
      registry,
      policy: args.policy,
      policyOptions: args.policyOptions
    })
    return yield* Effect.provide(
      Effect.scoped(Effect.gen(function*() {
        const inference = yield* Inference
        // The record names the tool parser the backend reads calls with (chosen by the option or the template).
        const parser = inference.toolParser
        const record = parser === undefined ? identity : { ...identity, tool_parser: { name: parser.name, chosen_by: parser.chosenBy } }
        const { accumulator, outputError, writer } = yield* openLog(args, record, resumed, existing)
        const drift = yield* InferenceOptions.driftCheck(args, inference)
        let toolsOffered = false

        // The run stops gracefully (what is complete is written) on the first SIGINT/SIGTERM/SIGHUP (a second
        // SIGINT/SIGTERM ends the process at once), or when its backend is declared down (`Service.halted`).
        const onSignal = onFirstSignal(
          yield* Effect.serviceOption(Signals),
          accumulator,
          (signal) =>
            `\n${signal}: stopping: the trajectories in flight are cut and their envs closed, the groups finished ` +
            `are written (${hardStop(signal)} exits at once)`
        )
        let backendDown: InferenceError | undefined
        const halted = inference.halted === undefined
          ? Option.none()
          : Option.some(Effect.catch(inference.halted, (error) => Effect.sync(() => void (backendDown = error))))
        const stops = [...Option.toArray(onSignal), ...Option.toArray(halted)]
        const until = stops.length === 0 ? undefined : Effect.raceAll(stops)

        const fs = yield* FileSystem.FileSystem
        const done = resumed?.done
        const rows = Row.decodeStream(
          args.dataset,
          datasetBytes(fs, args.dataset, scan.sha256 === null),
          { skip: done === undefined ? undefined : (index) => done.has(index) }
        ).pipe(
          Stream.mapError((error) => new FileError({ option: "--dataset", file: args.dataset, detail: errorDetail(error) })),
          // (a pipe's first row, checked as it comes: a file's was checked above)
          (decoded) => scan.sha256 === null ? Preflight.checkFirstOfStream(decoded, checkFirst) : decoded
        )
        const run = yield* underProgress(
          args,
          view,
          { accumulator, writer, scan, done },
          Rollout.stream(config, rows, { until }).pipe(
            // The groups of each chunk the run hands over are written in one write (each group
            // whole), at once: a chunk holds what came while the last write was under way, so
            // writes batch by themselves when groups come fast. `groupedWithin(256, 200 ms)`
            // batched here before: without it the 4000x8 job took 0.79x the CPU (BENCHMARKS.md,
            // workload 10, "Per-turn work").
            Stream.runForEachArray((items) =>
              Effect.gen(function*() {
                const groups: Array<Rollout.Group> = []
                const texts: Array<string> = []
                for (const item of items) {
                  if (item._tag === "RowFailure") {
                    accumulator.add(item)
                    yield* Console.error(`bad row: ${item.error.message}`)
                    continue
                  }
                  // Encoded here, so that a line JSON cannot write after all (past V8's stack or its
                  // longest string) is its trajectory's EncodeError in the log and in the summary.
                  const encoded = CompletionsLog.encodeGroup(item, args.failedGroups)
                  groups.push(encoded.group)
                  for (const text of encoded.texts) texts.push(text)
                }
                // Counted once written, with no stop in between: a write that fails (a full disk) is
                // cut back, and its groups are not in the log (the summary counted them).
                yield* Effect.uninterruptible(Effect.andThen(
                  Effect.mapError(writer.writeJsonLines(texts), outputError),
                  Effect.sync(() => {
                    for (const group of groups) {
                      accumulator.add(group)
                      if (args.failedGroups === "drop" && CompletionsLog.hasFailure(group)) accumulator.droppedGroups++
                    }
                  })
                ))
                for (const group of groups) {
                  yield* drift.add(group)
                  if (!toolsOffered) toolsOffered = group.records.some((record) => record.result.tools !== undefined)
                }
              })
            )
          )
        )
        const { outcome } = run
        // A piped dataset's first row refused as it came (Preflight.checkFirstOfStream): the same
        // invocation error as a file's (exit 2, no summary), nothing having run
        if (Exit.isFailure(outcome)) {
          const refused = Cause.findErrorOption(outcome.cause)
          if (Option.isSome(refused) && refused.value._tag === "OptionError" && run.summary.trajectories === 0) {
            return yield* refused.value
          }
        }
        const drifted = drift.into(run.summary)
        const summary = toolsOffered && parser !== undefined ? { ...drifted, toolParser: parser } : drifted
        const failed = Exit.isFailure(outcome) && !Cause.hasInterruptsOnly(outcome.cause)
        const error = failed ? stopMessage(outcome.cause) : backendDown?.message
        return yield* report(args, summary, outcome, error)
      })),
      inferenceLayer
    )
  }).pipe(Effect.scoped)

/**
 * The log a run writes, in the run's scope: its record written first (so that a log killed at any
 * moment can be resumed; not next to a pipe or a device: there is nothing to resume there), then
 * opened (appended to on --resume) and flushed to disk at least every second; with the run's
 * accumulator.
 */
const openLog = (
  args: RunArgs,
  record: RunLog.Identity & { readonly cluster_run_id?: string; readonly tool_parser?: unknown },
  resumed: { readonly done: RunLog.RowSet } | undefined,
  existing: { readonly regular: boolean }
) =>
  Effect.gen(function*() {
    if (resumed === undefined && existing.regular) yield* RunLog.writeIdentity(args.output, record, version())
    const outputError = (error: { readonly message: string }) =>
      new FileError({ option: "--output", file: args.output, detail: errorDetail(error) })
    const writer = yield* Effect.mapError(
      // A pipe, FIFO or terminal is opened to append: a write at a position (what the file does
      // when it is not appending) fails there with ESPIPE.
      CompletionsLog.open(args.output, { append: resumed !== undefined || !existing.regular, failedGroups: args.failedGroups }),
      outputError
    )
    // At least every second, what was written goes to disk (not only to the OS).
    yield* Effect.forkScoped(Effect.repeat(Effect.ignore(writer.flush), Schedule.spaced("1 second")))
    const accumulator = new Summary.Accumulator()
    accumulator.resumedGroups = resumed?.done.size ?? 0
    return { writer, outputError, accumulator }
  })

/**
 * Runs the job's work under the progress line (and `--view`'s page), then writes out the log and
 * takes the summary: what a local run and a cluster run share.
 */
const underProgress = <A, E, R>(
  args: RunArgs,
  view: RunView.Handle | undefined,
  log: {
    readonly accumulator: Summary.Accumulator
    readonly writer: CompletionsLog.Writer
    readonly scan: RunLog.DatasetScan
    readonly done: RunLog.RowSet | undefined
  },
  work: Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    const { accumulator, done, scan, writer } = log
    const total = scan.rows === undefined ? 0 : (scan.rows - (done?.size ?? 0)) * args.numGenerations
    const started = performance.now()
    const snapshot = () => ({ accumulator, total, elapsedMs: performance.now() - started })
    if (view !== undefined) yield* view.attach(args.output, snapshot)
    const outcome = yield* Progress.whileRunning(snapshot, Effect.exit(work))
    yield* Effect.ignore(writer.flush)
    const summary = accumulator.summary(performance.now() - started)
    if (view !== undefined) yield* view.finish
    return { outcome, summary }
  })

/**
 * Prints the summary (or the `--json` object, with `extra.json` added) and says why a run stopped
 * early; gives the exit code, or the run's failure when it failed without stopping early.
 */
const report = <A, E>(
  args: RunArgs,
  summary: Summary.Summary,
  outcome: Exit.Exit<A, E>,
  error: string | undefined,
  extra: { readonly json?: Record<string, unknown>; readonly text?: string } = {}
) =>
  Effect.gen(function*() {
    yield* Console.log(
      args.json
        ? Json.stringify({ ...Summary.toJson(summary), output: args.output, error: error ?? null, ...extra.json })
        : `${Summary.format(summary)}\ncompletions    ${args.output}${extra.text ?? ""}`
    )
    if (error !== undefined) {
      yield* Console.error(`error: the run stopped early: ${error} (the groups finished before are written)`)
    } else if (Exit.isFailure(outcome)) {
      return yield* Effect.failCause(outcome.cause)
    }
    return { summary, exitCode: exitCode(summary, error !== undefined) }
  })

/** What ends the process at once after `signal`: another of it, or after a hangup (sent more than once) SIGINT or SIGTERM. */
const hardStop = (signal: string): string => (signal === "SIGHUP" ? "a SIGINT or SIGTERM" : `a second ${signal}`)

/** The graceful stop: the first SIGINT/SIGTERM/SIGHUP marks the run interrupted and says what happens (a second SIGINT/SIGTERM ends the process at once). */
const onFirstSignal = (
  signals: Option.Option<Context.Service.Shape<typeof Signals>>,
  accumulator: Summary.Accumulator,
  message: (signal: string) => string
) =>
  Option.map(signals, (s) => {
    s.handle()
    return Effect.flatMap(s.received, (signal) =>
      Effect.andThen(
        Effect.sync(() => void (accumulator.interrupted = signal)),
        Console.error(message(signal))
      ))
  })

/**
 * The dataset's bytes. A pipe, a FIFO or `/dev/stdin` cannot be read at positions (the platform's
 * file stream fails with ESPIPE there), so it is read as a Node stream, in order, once.
 *
 * A FIFO or pipe is read through a pipe handle (non-blocking, driven by the event loop), not a file
 * stream: a file stream's read waits in libuv's thread pool, and a process cannot exit while one of
 * those reads waits (Node joins the pool's threads at exit), so a stopped run on a FIFO whose writer
 * stayed open exited only when the writer closed. Opened with `O_NONBLOCK` so that a FIFO with no
 * writer yet does not block the open either (the handle waits for one).
 */
const datasetBytes = (fs: FileSystem.FileSystem, file: string, pipe: boolean) =>
  pipe
    ? NodeStream.fromReadable<Uint8Array, Error>({
      evaluate: () => pipeReadable(file),
      onError: (error) => error instanceof Error ? error : new Error(String(error))
    })
    : fs.stream(file, { chunkSize: 256 * 1024 })

/**
 * A readable for a file that is not a regular file: a pipe handle for FIFOs and pipes, a terminal's
 * handle for a terminal, else a file stream. `/dev/stdin` (or `/dev/fd/N`) that is a socket, as a
 * parent written in Node gives its child (`spawn` with `stdio: "pipe"`), cannot be opened (ENXIO):
 * its descriptor is read directly.
 */
const pipeReadable = (file: string): NodeJS.ReadableStream => {
  let fd: number | undefined
  try {
    fd = NodeFs.openSync(file, NodeFs.constants.O_RDONLY | NodeFs.constants.O_NONBLOCK)
    if (NodeFs.fstatSync(fd).isFIFO()) {
      const socket = new NodeNet.Socket({ fd, readable: true, writable: false })
      fd = undefined
      return socket
    }
    if (NodeTty.isatty(fd)) {
      // a terminal (`--dataset /dev/stdin` typed in): its handle too, for the same reason
      const terminal = untilHangUp(new NodeTty.ReadStream(fd), fd)
      fd = undefined
      return terminal
    }
  } catch (error) {
    const inherited = RunLog.inheritedFd(file)
    if ((error as NodeJS.ErrnoException).code === "ENXIO" && inherited !== undefined && isSocket(inherited)) {
      return new NodeNet.Socket({ fd: inherited, readable: true, writable: false })
    }
    // not openable this way (or not a pipe): the file stream below says why, if anything is wrong
  } finally {
    if (fd !== undefined) NodeFs.closeSync(fd)
  }
  return NodeFs.createReadStream(file, { highWaterMark: 256 * 1024 })
}

/**
 * A terminal's input, which ends with Ctrl-D and fails when the terminal hangs up: a hung-up
 * terminal reads as the end of input too, so a run whose rows were being typed when its terminal
 * closed ended as complete (exit 0, not interrupted), the rows never typed not missed. At the end,
 * the descriptor is still a terminal after Ctrl-D and not after a hangup.
 */
const untilHangUp = (terminal: NodeTty.ReadStream, fd: number): NodeJS.ReadableStream => {
  const out = new PassThrough()
  terminal.on("data", (chunk: Buffer) => {
    if (!out.write(chunk)) terminal.pause()
  })
  out.on("drain", () => terminal.resume())
  terminal.on("end", () => {
    if (NodeTty.isatty(fd)) out.end()
    else out.destroy(new Error("the terminal hung up: the input ended there, not with Ctrl-D"))
  })
  terminal.on("error", (error) => out.destroy(error))
  // the run stopped reading (or the input ended): the terminal is let go
  out.on("close", () => terminal.destroy())
  return out
}

const isSocket = (fd: number): boolean => {
  try {
    return NodeFs.fstatSync(fd).isSocket()
  } catch {
    return false
  }
}

const stopMessage = (cause: Cause.Cause<{ readonly message: string }>): string => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) return failure.value.message
  const defect = Cause.findDefect(cause)
  if (Result.isSuccess(defect)) {
    const value = defect.success
    return `internal error: ${value instanceof Error ? value.stack ?? value.message : String(value)}`
  }
  return Cause.pretty(cause)
}

/** Checks a log against this run and cuts its torn tail; what it holds. */
const resume = (args: RunArgs, identity: RunLog.Identity, scan: RunLog.DatasetScan) =>
  Effect.gen(function*() {
    const recorded = yield* RunLog.readIdentity(args.output)
    if (recorded === undefined) {
      return yield* new OptionError({
        option: "--resume",
        detail: `${args.output} has no run record (${RunLog.identityFile(args.output)}), so it cannot be checked ` +
          `to come from this run; start again with --overwrite`
      })
    }
    if (scan.sha256 === null) {
      return yield* new OptionError({
        option: "--resume",
        detail: `the dataset ${args.dataset} is not a regular file: it cannot be checked against the log's run`
      })
    }
    const differences = RunLog.differences(recorded, identity, version())
    const other = differences.find((d) => !d.forceable)
    if (other !== undefined) {
      return yield* new OptionError({ option: "--resume", detail: `${args.output} was written by another run: ${other.text}` })
    }
    // Other code than the log's run (an edited env mixed rewards of two envs in one log): refused
    // unless forced, and a forced resume is recorded with the run.
    if (differences.length > 0 && !args.resumeForce) {
      return yield* new OptionError({
        option: "--resume",
        detail: `${args.output} was written by other code: ${differences.map((d) => d.text).join("; ")} (pass ` +
          `--resume-force to resume it anyway: the log would mix results of both)`
      })
    }
    if (differences.length > 0) {
      yield* RunLog.recordForcedResume(args.output, recorded, {
        version: version(),
        plugins_sha256: identity.plugins_sha256,
        differences: differences.map((d) => d.text)
      })
      yield* Console.error(`--resume-force: resuming though ${differences.map((d) => d.text).join("; ")}`)
    }
    const log = yield* RunLog.scanLog(args.output, args.numGenerations)
    if (log.droppedBytes > 0) yield* RunLog.truncate(args.output, log.keepBytes)
    yield* Console.error(
      `resuming ${args.output}: ${log.done.size} complete groups (${log.lines} lines) kept` +
        (log.droppedBytes > 0
          ? `; an unfinished tail dropped (${log.droppedLines} lines, ${log.droppedBytes} bytes)`
          : "")
    )
    return log
  })

/** The `run` command. */
export const command = Command.make("run", documentedAll(runOptions)).pipe(
  Command.withDescription("Run rollouts over a dataset and write the completions log"),
  Command.withHandler((args) =>
    Effect.gen(function*() {
      // --view: the page lives in the command's scope, so it outlives the run.
      const view = yield* RunView.make(args)
      const { exitCode, summary } = yield* runJob(args, view)
      yield* setExitCode(exitCode)
      // A run stopped by a signal ends there (its page said it stays, and the process exited).
      if (summary.interrupted !== null) return
      // The page stays up until Ctrl-C: the run took over SIGINT/SIGTERM (`Signals.handle`), so the
      // hold ends on the next one, with the run's exit code.
      const signals = yield* Effect.serviceOption(Signals)
      yield* Option.match(signals, { onNone: () => view.hold, onSome: (s) => Effect.race(view.hold, s.received) })
    }).pipe(Effect.scoped))
)
