/**
 * `npm run bench`: runs every benchmark workload on this machine, each in fresh Node processes,
 * at least 5 times, and writes BENCHMARKS.md (medians, min-max, targets) and the raw figures as
 * JSON under bench/results/.
 *
 *   npm run bench                      every workload
 *   npm run bench -- --only latency    workloads whose name contains "latency"
 *   npm run bench -- --runs 7          runs per figure (default 5)
 *   npm run bench -- --render bench/results/FILE.json
 *                                      rewrites BENCHMARKS.md from recorded figures (after
 *                                      editing bench/NOTES.md), running nothing
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { flags, machine, median, pick, runWorkload } from "./lib.js"

const args = flags()
const runs = Math.max(5, Number(args.runs ?? 5))
const only = args.only
const root = path.resolve(import.meta.dirname, "..")
const workload = (name: string) => path.join(root, "bench/workloads", name)

export interface Figure {
  readonly workload: string
  readonly figure: string
  readonly unit: string
  readonly values: ReadonlyArray<number>
  readonly target?: { readonly op: ">=" | "<=" | "within"; readonly value: number } | undefined
  readonly note?: string | undefined
}

export interface Case {
  readonly name: string
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly nodeFlags?: ReadonlyArray<string>
  readonly figures: (runs: ReadonlyArray<Record<string, number>>) => ReadonlyArray<Figure>
}

const orchestration = (path: "loop" | "events" | "plain", concurrency: number): Case => ({
  name: `orchestration ${path} c=${concurrency}`,
  file: workload("orchestration.ts"),
  args: ["--path", path, "--concurrency", String(concurrency)],
  figures: (rs) => [
    {
      workload: `1. FrozenLake 1024 rows x 8, random policy, max_turns 10, concurrency ${concurrency}, ${
        path === "loop" ? "run path (Rollout)" : path === "events" ? "run path with every turn event (Rollout.streamEvents)" : "plain async JS loop, no Effect"
      }`,
      figure: "turns/s",
      unit: "turns/s",
      values: pick(rs, "turnsPerSecond"),
      target: path === "loop" && concurrency === 64 ? { op: ">=", value: 75_000 } : undefined
    },
    {
      workload: `1. same, ${path} c=${concurrency}`,
      figure: "trajectories/s",
      unit: "traj/s",
      values: pick(rs, "trajectoriesPerSecond")
    }
  ]
})

const latency = (concurrency: number): Case => ({
  name: `latency c=${concurrency}`,
  file: workload("latency.ts"),
  args: ["--concurrency", String(concurrency), "--latency-ms", "20", "--seconds", "5"],
  figures: (rs) => [
    {
      workload: `2. 20 ms policy, concurrency ${concurrency} (bound ${concurrency / 0.02} turns/s)`,
      figure: "turns/s / bound",
      unit: "ratio",
      values: pick(rs, "efficiency"),
      target: { op: ">=", value: 0.95 }
    }
  ]
})

/** What any Effect-fiber loop, and a plain async loop, achieve here: the floor under the engine's figure. */
const latencyFloor = (path: "effect-floor" | "plain-floor", concurrency: number): Case => ({
  name: `latency ${path} c=${concurrency}`,
  file: workload("latency.ts"),
  args: ["--path", path, "--concurrency", String(concurrency), "--latency-ms", "20", "--seconds", "5"],
  figures: (rs) => [
    {
      workload: `2. reference: ${
        path === "effect-floor" ? "Effect fibers that only wait 20 ms in a loop (Effect.sleep, as the policy waits)" : "plain async functions that only await a 20 ms timer"
      }, concurrency ${concurrency}`,
      figure: "waits/s / bound",
      unit: "ratio",
      values: pick(rs, "efficiency")
    }
  ]
})

const memory: Case = {
  name: "memory",
  file: workload("memory.ts"),
  args: ["--in-flight", "10000", "--latency-ms", "20"],
  nodeFlags: ["--expose-gc"],
  figures: (rs) => [
    {
      workload: "3. 10,000 FrozenLake trajectories in flight (20 ms policy)",
      figure: "live heap per in-flight trajectory (after full GC)",
      unit: "bytes",
      values: pick(rs, "liveHeapPerInFlightBytes"),
      target: { op: "<=", value: 20 * 1024 }
    },
    {
      workload: "3. same",
      figure: "peak heap per in-flight trajectory (with garbage)",
      unit: "bytes",
      values: pick(rs, "peakHeapPerInFlightBytes")
    },
    { workload: "3. same", figure: "peak RSS", unit: "MiB", values: pick(rs, "peakRssBytes").map((b) => b / 2 ** 20) }
  ]
}

const serverClient: Case = {
  name: "server-mode client c=256",
  file: workload("server_client.ts"),
  args: ["--concurrency", "256", "--seconds", "3"],
  figures: (rs) => [
    {
      workload: "4. --mode server client (OpenAiCompat.layerUndici) -> zero-latency OpenAI-compatible server (own process, loopback), concurrency 256",
      figure: "chat completions/s",
      unit: "1/s",
      values: pick(rs, "completionsPerSecond"),
      target: { op: ">=", value: 3000 }
    }
  ]
}

const scaling = (trajectories: number): Case => ({
  name: `scaling n=${trajectories}`,
  file: workload("scaling.ts"),
  args: ["--trajectories", String(trajectories)],
  nodeFlags: ["--expose-gc"],
  figures: (rs) => [
    {
      workload: `6. whole CLI job (dataset -> completions.jsonl + summary), ${trajectories.toLocaleString("en")} trajectories`,
      figure: "microseconds per turn",
      unit: "us/turn",
      values: pick(rs, "microsecondsPerTurn")
    },
    {
      workload: `6. same, ${trajectories.toLocaleString("en")}`,
      figure: "microseconds per turn, net of the job's fixed cost",
      unit: "us/turn",
      values: pick(rs, "netMicrosecondsPerTurn")
    },
    { workload: `6. same, ${trajectories.toLocaleString("en")}`, figure: "fixed cost of a job (empty dataset)", unit: "ms", values: pick(rs, "fixedMilliseconds") },
    { workload: `6. same, ${trajectories.toLocaleString("en")}`, figure: "CPU time per turn (user + system)", unit: "us/turn", values: pick(rs, "cpuMicrosecondsPerTurn") },
    { workload: `6. same, ${trajectories.toLocaleString("en")}`, figure: "turns/s", unit: "turns/s", values: pick(rs, "turnsPerSecond") }
  ]
})

const extraCases = async (): Promise<ReadonlyArray<Case>> => {
  // Workloads of later modules register themselves by file: bench/workloads/extra/*.ts export `cases`.
  const dir = path.join(root, "bench/workloads/extra")
  if (!fs.existsSync(dir)) return []
  const out: Array<Case> = []
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".cases.ts")).sort()) {
    const module = (await import(path.join(dir, file))) as { readonly cases: ReadonlyArray<Case> }
    out.push(...module.cases)
  }
  return out
}

const formatValue = (x: number, unit: string): string =>
  unit === "ratio" ? x.toFixed(3) : x >= 100 ? Math.round(x).toLocaleString("en") : x.toFixed(2)

const main = async () => {
  const cases: Array<Case> = [
    orchestration("loop", 64),
    orchestration("loop", 1024),
    orchestration("events", 64),
    orchestration("plain", 64),
    latency(256),
    latency(1024),
    latency(4096),
    latencyFloor("effect-floor", 256),
    latencyFloor("effect-floor", 1024),
    latencyFloor("effect-floor", 4096),
    latencyFloor("plain-floor", 256),
    latencyFloor("plain-floor", 4096),
    memory,
    serverClient,
    scaling(1_000),
    scaling(10_000),
    scaling(100_000),
    ...(await extraCases())
  ].filter((c) => only === undefined || c.name.includes(only))

  const figures: Array<Figure> = []
  const raw: Record<string, Array<Record<string, number>>> = {}
  for (const c of cases) {
    const results: Array<Record<string, number>> = []
    for (let i = 0; i < runs; i++) {
      process.stderr.write(`\r${c.name}: run ${i + 1}/${runs}   `)
      results.push(await runWorkload(c.file, c.args, c.nodeFlags))
    }
    process.stderr.write("\n")
    raw[c.name] = results
    figures.push(...c.figures(results))
  }

  // Scaling: the net cost per turn of each run relative to the 1,000 run: flat means within 20%
  // either way.
  const perTurn = figures.filter((f) => f.figure === "microseconds per turn, net of the job's fixed cost")
  if (perTurn.length > 1) {
    const base = median(perTurn[0].values)
    for (const f of perTurn.slice(1)) {
      figures.push({
        workload: f.workload,
        figure: "net cost per turn vs the 1,000 run",
        unit: "ratio",
        values: f.values.map((v) => v / base),
        target: { op: "within", value: 0.2 }
      })
    }
  }
  // The stretch target: the run path against the plain loop.
  const loop = figures.find((f) => f.workload.includes("run path") && f.workload.includes("concurrency 64"))
  const plain = figures.find((f) => f.workload.includes("plain async") && f.figure === "turns/s")
  if (loop !== undefined && plain !== undefined) {
    figures.push({
      workload: "1. run path / plain JS loop, concurrency 64 (stretch target: 0.5)",
      figure: "ratio of medians",
      unit: "ratio",
      values: [median(loop.values) / median(plain.values)],
      target: { op: ">=", value: 0.5 }
    })
  }

  const date = new Date().toISOString()
  const resultsDir = path.join(root, "bench/results")
  fs.mkdirSync(resultsDir, { recursive: true })
  const rawFile = path.join(resultsDir, `${date.slice(0, 19).replace(/[:T]/g, "-")}.json`)
  const recorded: Recorded = { date, machine: machine(), runs, raw, figures }
  fs.writeFileSync(rawFile, JSON.stringify(recorded, null, 2))
  process.stdout.write(render(recorded, rawFile))
}

interface Recorded {
  readonly date: string
  readonly machine: string
  readonly runs: number
  readonly raw: Record<string, Array<Record<string, number>>>
  readonly figures: ReadonlyArray<Figure>
}

/**
 * Writes BENCHMARKS.md (bench/SUMMARY.md, the table, then bench/NOTES.md) from recorded figures;
 * returns the table. The summary and the notes are written by hand: edit them there, not in
 * BENCHMARKS.md, which this rewrites.
 */
const render = (recorded: Recorded, rawFile: string): string => {
  const { date, figures, runs } = recorded
  const rows = figures.map((f) => {
    const med = median(f.values)
    const min = Math.min(...f.values)
    const max = Math.max(...f.values)
    const target = f.target
    const met = target === undefined
      ? undefined
      : target.op === ">="
      ? med >= target.value
      : target.op === "<="
      ? med <= target.value
      : Math.abs(med - 1) <= target.value
    const goal = target === undefined
      ? ""
      : target.op === "within"
      ? `1 +/- ${target.value}`
      : `${target.op} ${formatValue(target.value, f.unit)}`
    const verdict = met === undefined ? "" : `${goal}: ${met ? "met" : "**missed**"}`
    return `| ${f.workload} | ${f.figure} | ${formatValue(med, f.unit)} | ${formatValue(min, f.unit)} - ${
      formatValue(max, f.unit)
    } | ${f.values.length} | ${verdict} |`
  })
  const summaryFile = path.join(root, "bench/SUMMARY.md")
  const summary = fs.existsSync(summaryFile) ? [fs.readFileSync(summaryFile, "utf8").trimEnd(), ""] : []
  const markdown = [
    "# Benchmarks",
    "",
    ...summary,
    "## The workloads of `npm run bench`",
    "",
    `Measured ${date} on ${recorded.machine} with \`npm run bench\` (${runs} runs per figure, each in a fresh`,
    "Node process after warm-up runs; medians, min - max). Raw figures: `" + path.relative(root, rawFile) + "`.",
    "",
    "| workload | figure | median | min - max | runs | target |",
    "|---|---|---|---|---|---|",
    ...rows,
    ""
  ].join("\n")
  const notesFile = path.join(root, "bench/NOTES.md")
  const notes = fs.existsSync(notesFile) ? `\n${fs.readFileSync(notesFile, "utf8")}` : ""
  fs.writeFileSync(path.join(root, "BENCHMARKS.md"), markdown + notes)
  return markdown
}

if (args.render !== undefined) {
  const rawFile = path.resolve(args.render)
  render(JSON.parse(fs.readFileSync(rawFile, "utf8")) as Recorded, rawFile)
} else {
  main()
}
