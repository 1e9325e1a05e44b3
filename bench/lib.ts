/**
 * Shared helpers of the benchmark programs: a FrozenLake run set up like the CLI's, child-process
 * orchestration, statistics.
 */
import { Effect, Layer, Result, Stream } from "effect"
import type { ChildProcess } from "node:child_process"
import { execFile, spawn } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import * as Builtins from "../dist/Builtins.js"
import * as Inference from "../dist/Inference.js"
import type * as Registry from "../dist/Registry.js"
import * as Reward from "../dist/Reward.js"
import * as Rollout from "../dist/Rollout.js"
import * as Row from "../dist/Row.js"
import * as Scheduler from "../dist/Scheduler.js"
import { random } from "../dist/inference/Scripted.js"

/** Command-line flags of a workload: `--name value`. */
export const flags = (argv: ReadonlyArray<string> = process.argv.slice(2)): Record<string, string> => {
  const out: Record<string, string> = {}
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith("--")) continue
    // `--name=value` takes a value that itself starts with "--" (e.g. --node-flags="--max-semi-space-size=64").
    const eq = argv[i].indexOf("=")
    if (eq > 2) out[argv[i].slice(2, eq)] = argv[i].slice(eq + 1)
    else out[argv[i].slice(2)] = argv[i + 1]?.startsWith("--") === false ? argv[++i] : "true"
  }
  return out
}

/** FrozenLake rows with seeds 0..n-1. */
export const frozenLakeRows = (n: number) =>
  Array.from({ length: n }, (_, i) => Row.decodeValue("bench", i, { env_config: { seed: i } }))

/** The random policy (optionally with a fixed latency per call) as a layer. */
export const randomPolicy = (latencyMs = 0): Layer.Layer<Inference.Inference> =>
  Layer.effect(Inference.Inference, Effect.orDie(random.make({ latency_ms: latencyMs })))

export interface RunFigures {
  readonly turns: number
  readonly trajectories: number
  readonly seconds: number
  readonly turnsPerSecond: number
  readonly trajectoriesPerSecond: number
  /** Turn events seen (with `events: true`). */
  readonly events: number
}

/** One FrozenLake run through `Rollout.stream`, timed. */
export const frozenLakeRun = (options: {
  readonly rows: number
  readonly generations: number
  readonly concurrency: number
  readonly maxTurns: number
  /** Run with `Rollout.streamEvents` (every turn event of the run in one stream) instead of `Rollout.stream`. */
  readonly events?: boolean
  /** The registry the rows' env (frozen_lake) is looked up in (default the built-ins'). */
  readonly registry?: Registry.Registry
  readonly onItem?: (item: Rollout.Item) => void
}) =>
  Effect.gen(function*() {
    const instance = yield* Scheduler.gym.make({ options: {} })
    const config: Rollout.Config = {
      registry: options.registry ?? Builtins.registry,
      scheduler: { definition: Scheduler.gym, instance },
      defaultEnv: "frozen_lake",
      numGenerations: options.generations,
      maxTurns: options.maxTurns,
      concurrency: options.concurrency,
      seed: 0,
      columns: Result.getOrThrow(Reward.columns([]))
    }
    const rows = frozenLakeRows(options.rows)
    let turns = 0
    let trajectories = 0
    const started = performance.now()
    let events = 0
    const run: Stream.Stream<Rollout.Event, never, Inference.Inference> = options.events === true
      ? Rollout.streamEvents(config, rows)
      : Rollout.stream(config, rows)
    yield* Stream.runForEach(run, (item) =>
      Effect.sync(() => {
        if (item._tag !== "Group" && item._tag !== "RowFailure") {
          events++
          return
        }
        options.onItem?.(item)
        if (item._tag !== "Group") return
        for (const record of item.records) {
          turns += record.result.numTurns
          trajectories++
        }
      }))
    const seconds = (performance.now() - started) / 1000
    return {
      turns,
      trajectories,
      seconds,
      turnsPerSecond: turns / seconds,
      trajectoriesPerSecond: trajectories / seconds,
      events
    } satisfies RunFigures
  }).pipe(Effect.scoped)

/** Prints a workload's figures as the last line of its output (read by the orchestrator). */
export const report = (figures: object): void => {
  process.stdout.write(`${JSON.stringify(figures)}\n`)
}

/** One figure of every run of a case (optionally scaled, e.g. ms to us). */
export const pick = (rs: ReadonlyArray<Record<string, number>>, key: string, scale = 1) =>
  rs.map((r) => r[key] * scale)

/** The `p` quantile (0..1, nearest rank) of sorted values; NaN when there are none. */
export const percentile = (sorted: ArrayLike<number>, p: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]

const root = path.resolve(import.meta.dirname, "..")

/**
 * Starts the built CLI (`bin/effect-gym.js ARGS`) in its own process; resolves with the process and
 * the URL it prints (the first group of `url`, or the whole match), rejects if it exits first.
 */
export const spawnCli = (
  args: ReadonlyArray<string>,
  url: RegExp,
  nodeFlags: ReadonlyArray<string> = []
): Promise<{ readonly child: ChildProcess; readonly url: string }> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, path.join(root, "bin/effect-gym.js"), ...args], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, NODE_ENV: "production" }
    })
    let out = ""
    child.stdout!.setEncoding("utf8")
    child.stdout!.on("data", (chunk: string) => {
      out += chunk
      const match = url.exec(out)
      if (match !== null) resolve({ child, url: match[1] ?? match[0] })
    })
    child.once("error", reject)
    child.once("exit", (code) => reject(new Error(`the server exited (${code}) before it started: ${out}`)))
  })

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2
}

export const machine = (): string => {
  const cpus = os.cpus()
  return `${cpus.length} x ${cpus[0]?.model.trim() ?? "cpu"}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ` +
    `Node ${process.version}, ${os.platform()} ${os.arch()}`
}

const exec = promisify(execFile)

/** Runs a workload program in a fresh Node process and returns its figures. */
export const runWorkload = async (
  file: string,
  args: ReadonlyArray<string>,
  nodeFlags: ReadonlyArray<string> = []
): Promise<Record<string, number>> => {
  const { stdout } = await exec(process.execPath, [...nodeFlags, "--import", "tsx", file, ...args], {
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, NODE_ENV: "production" }
  })
  const lines = stdout.trim().split("\n")
  return JSON.parse(lines[lines.length - 1]) as Record<string, number>
}
