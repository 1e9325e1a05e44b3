/**
 * Workload (issue 28, item 7): OpenEnv's own Python client against three servers of the same echo
 * env, one process each, as users start them:
 *
 * - `python`: OpenEnv's Python server (`create_app` under uvicorn; bench/workloads/python/openenv_echo.py)
 * - `isolated`: `effect-gym openenv serve --plugin bench/workloads/plugins/echo.mjs --env echo`
 *   (envs in worker threads, the default)
 * - `in-process`: the same with `--in-process-envs`
 *
 * The client is OpenEnv's `EnvClient` (async, websockets) driving `--sessions` sessions in a closed
 * loop, each resetting every 100 steps (resets are not counted). A round starts each server in
 * turn (the order rotates every round, so the machine's load weighs on each side alike), runs the
 * client for `--seconds` after `--warmup`, and stops the server. Reports per server the median
 * steps/s over rounds, and per round the ratio of each effect-gym server to the Python one; the
 * ratios' medians are the figures to read. Also the server process's CPU time per step (all its
 * threads, from /proc, sampled as the client's window opens and closes): on a machine where the
 * client saturates a core, the steps/s of all servers meet at the client's rate, and the server's
 * CPU per step is what tells them apart.
 *
 *   npm run build && node --import tsx bench/workloads/openenv_python.ts [--rounds 5] [--sessions 64]
 *     [--seconds 5] [--warmup 1] [--python /tmp/openenv-venv/bin/python] [--servers python,isolated,in-process]
 *     [--env-workers N]
 *
 * OpenEnv's Python package comes from its repository (`pip install --no-deps` of its source, plus
 * fastapi, uvicorn, pydantic, websockets, requests from the local index): see BENCHMARKS.md.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { flags, machine, median, report, spawnCli } from "../lib.js"

const args = flags()
const rounds = Number(args.rounds ?? 5)
const sessions = Number(args.sessions ?? 64)
const seconds = Number(args.seconds ?? 5)
const warmup = Number(args.warmup ?? 1)
const python = args.python ?? "python3"
const servers = (args.servers ?? "python,isolated,in-process").split(",")
const script = path.join(import.meta.dirname, "python/openenv_echo.py")
const plugin = path.join(import.meta.dirname, "plugins/echo.mjs")

interface Running {
  readonly url: string
  readonly child: ChildProcess
}

const startPython = () =>
  new Promise<Running>((resolve, reject) => {
    const child = spawn(python, [script, "--role", "server", "--max-sessions", String(sessions)], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout!.setEncoding("utf8")
    child.stdout!.on("data", (chunk: string) => {
      out += chunk
      const match = /listening (\d+)/.exec(out)
      if (match !== null) resolve({ child, url: `http://127.0.0.1:${match[1]}` })
    })
    child.once("error", reject)
    child.once("exit", (code) => reject(new Error(`the Python server exited (${code}): ${out}`)))
  })

const startProject = (inProcess: boolean) =>
  spawnCli(
    [
      "openenv", "serve", "--plugin", plugin, "--env", "echo", "--port", "0",
      "--max-sessions", String(sessions),
      ...(inProcess ? ["--in-process-envs"] : []),
      ...(args["env-workers"] === undefined ? [] : ["--env-workers", args["env-workers"]])
    ],
    /at (http:\/\/\S+)/
  )

const stop = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve()
    child.once("exit", () => resolve())
    child.kill("SIGTERM")
  })

/** A pause for uvicorn's readiness: the socket is bound before the app's startup hooks have run. */
const ready = async (url: string) => {
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(`${url}/health`).then((r) => r.ok, () => false)
    if (ok) return
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`${url} never became healthy`)
}

/** A process's CPU time (user + system, all its threads) from /proc, in ms; NaN where /proc is missing. */
const cpuMs = (pid: number | undefined): number => {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ")
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
  } catch {
    return Number.NaN
  }
}

interface Drive {
  readonly stepsPerSecond: number
  readonly steps: number
  readonly clientCpuUsPerStep: number
  readonly errors: Array<string>
  /** The server process's CPU time per step in the window (µs). */
  serverCpuUsPerStep: number
}

const drive = (url: string, server: ChildProcess) =>
  new Promise<Drive>((resolve, reject) => {
    const child = spawn(python, [
      script, "--role", "client", "--url", url, "--sessions", String(sessions),
      "--seconds", String(seconds), "--warmup", String(warmup)
    ], { stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    let opened = Number.NaN
    let closed = Number.NaN
    child.stdout!.setEncoding("utf8")
    child.stdout!.on("data", (chunk: string) => {
      out += chunk
      if (Number.isNaN(opened) && out.includes("window open")) opened = cpuMs(server.pid)
      if (Number.isNaN(closed) && out.includes("window closed")) closed = cpuMs(server.pid)
    })
    child.once("error", reject)
    child.once("exit", () => {
      let figures: Drive
      try {
        figures = JSON.parse(out.trim().split("\n").at(-1)!)
      } catch {
        return reject(new Error(`the Python client printed no result: ${out}`))
      }
      figures.serverCpuUsPerStep = ((closed - opened) * 1000) / figures.steps
      resolve(figures)
    })
  })

const main = async () => {
  const figures: Record<string, Array<number>> = Object.fromEntries(servers.map((s) => [s, []]))
  const serverCpu: Record<string, Array<number>> = Object.fromEntries(servers.map((s) => [s, []]))
  const ratios: Record<string, Array<number>> = {}
  for (let round = 0; round < rounds; round++) {
    const order = servers.map((_, i) => servers[(i + round) % servers.length])
    const thisRound: Record<string, number> = {}
    for (const server of order) {
      const running = server === "python" ? await startPython() : await startProject(server === "in-process")
      try {
        await ready(running.url)
        const out = await drive(running.url, running.child)
        if (out.errors.length > 0) throw new Error(`${server}: the client failed: ${out.errors.join("; ")}`)
        thisRound[server] = out.stepsPerSecond
        figures[server].push(out.stepsPerSecond)
        serverCpu[server].push(out.serverCpuUsPerStep)
        console.error(
          `round ${round + 1} ${server}: ${out.stepsPerSecond.toFixed(0)} steps/s, server ` +
            `${out.serverCpuUsPerStep.toFixed(0)} µs CPU/step, client ${out.clientCpuUsPerStep.toFixed(0)} µs CPU/step`
        )
      } finally {
        await stop(running.child)
      }
    }
    if (thisRound.python !== undefined) {
      for (const server of servers) {
        if (server === "python") continue
        ;(ratios[server] ??= []).push(thisRound[server] / thisRound.python)
      }
    }
  }
  report({
    workload: "openenv_python",
    machine: machine(),
    sessions,
    seconds,
    rounds,
    stepsPerSecond: Object.fromEntries(
      Object.entries(figures).map(([k, v]) => [k, { median: median(v), min: Math.min(...v), max: Math.max(...v) }])
    ),
    serverCpuUsPerStep: Object.fromEntries(Object.entries(serverCpu).map(([k, v]) => [k, median(v)])),
    ratioToPython: Object.fromEntries(
      Object.entries(ratios).map(([k, v]) => [k, { median: median(v), min: Math.min(...v), max: Math.max(...v) }])
    )
  })
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
