/**
 * Workload 5: OpenEnv step round trips. The project's OpenEnv server runs in its own process
 * (`effect-gym openenv serve --env frozen_lake --port 0`, as a user starts it), so client and server
 * do not share an event loop; `sessions` sessions of the project's client (`OpenEnvClient.connectAndReset`
 * with the openenv scheduler's default timeouts, then `session.step`, as the scheduler drives it)
 * do step round trips back to back. It prints p50 / p99 / mean latency per step, steps/s and the
 * CPU time per step of the client and of the server process (from /proc; steadier than wall time
 * on a shared machine) over the measured window as one JSON line. Profile the client with
 * `node --cpu-prof --import tsx bench/workloads/openenv.ts ...`, the server with --server-cpu-prof.
 *
 * The env: FrozenLake with a reply that holds no move. Each step is FrozenLake's invalid-action
 * branch (parse the reply, render the 4x4 board, reward 0, done false), which costs a few
 * microseconds and never ends the episode, so the figure is the protocol path: client encode and
 * send, server decode, the `Env` step through the served-env adapter, the observation frame, client
 * decode. The server keeps each session's whole conversation (the `Env` contract hands it to
 * `step`, a copy per step), so a session resets every `--reset-every` steps (100, the length of a
 * long episode: TextArena Sudoku's turn limit) as a real episode would end; resets are not counted
 * as steps and not timed.
 *
 *   --sessions N        sessions stepping at once (1)
 *   --seconds S         measured window (3); --warmup S before it (1)
 *   --client effect|raw the project's client, or a bare `ws` client (JSON text frames, no Effect)
 *   --server project|raw the project's server, or a bare `ws` server that answers every frame with
 *                       a FrozenLake-sized observation frame (JSON.parse + JSON.stringify)
 *   --server-cpu-prof DIR  profile the server process (`node --cpu-prof`) into DIR
 *
 * `--client raw --server raw` is the floor: what one WebSocket round trip over loopback costs on this
 * machine with two processes and nothing else.
 */
import { Effect, Fiber } from "effect"
import { type ChildProcess, fork } from "node:child_process"
import * as fs from "node:fs"
import type * as net from "node:net"
import { WebSocket, WebSocketServer } from "ws"
import * as OpenEnvClient from "../../dist/openenv/OpenEnvClient.js"
import { flags, percentile, report, spawnCli } from "../lib.js"

const args = flags()

/** The action: text with no `<action>` tag and no direction word, so FrozenLake's invalid branch. */
const ACTION = { message: "I am not sure what to do here." }

// ---------------------------------------------------------------------------------------------
// The bare `ws` server (its own process): the floor
// ---------------------------------------------------------------------------------------------

const rawServer = () => {
  const board = ["P F F F", "F H F H", "F F F H", "H F F G"].join("\n")
  const text = `Invalid response: could not find a move. Reply with <action>up|down|left|right</action>.\n\n${board}`
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
  server.on("connection", (ws) => {
    let steps = 0
    ws.on("message", (data, isBinary) => {
      const frame = JSON.parse(isBinary ? "{}" : data.toString()) as { readonly type?: string }
      if (frame.type === "close") return ws.close(1000)
      if (frame.type === "step") steps++
      ws.send(JSON.stringify({
        type: "observation",
        data: {
          observation: {
            prompt: text,
            messages: [{ sender_id: -1, content: text, category: "MESSAGE" }],
            current_player_id: 0,
            legal_players: [0],
            info: { seed: null, step: steps, parsed_action: null, status: "invalid_action" }
          },
          reward: 0,
          done: false
        }
      }))
    })
  })
  server.on("listening", () => process.send?.({ port: (server.address() as net.AddressInfo).port }))
  process.on("disconnect", () => process.exit(0))
  process.on("SIGINT", () => process.exit(0))
}

// ---------------------------------------------------------------------------------------------
// Starting and stopping the server process
// ---------------------------------------------------------------------------------------------

interface ServerProcess {
  readonly url: string
  readonly stop: () => Promise<void>
  /** CPU time (user + system, ms) the server process has used so far; NaN where /proc is missing. */
  readonly cpuMs: () => number
}

/** A process's CPU time from /proc (Linux), in ms. */
const processCpuMs = (pid: number | undefined) => (): number => {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ")
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
  } catch {
    return Number.NaN
  }
}

const stopper = (child: ChildProcess) => () =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve()
    child.once("exit", () => resolve())
    // SIGINT: the CLI interrupts its fibers and exits, so a --cpu-prof profile gets written
    child.kill("SIGINT")
  })

const startProjectServer = async (sessions: number, nodeFlags: ReadonlyArray<string>): Promise<ServerProcess> => {
  const { child, url } = await spawnCli(
    ["openenv", "serve", "--env", "frozen_lake", "--port", "0", "--max-sessions", String(sessions)],
    /at (http:\/\/\S+)/,
    nodeFlags
  )
  return { url, stop: stopper(child), cpuMs: processCpuMs(child.pid) }
}

const startRawServer = (nodeFlags: ReadonlyArray<string>) =>
  new Promise<ServerProcess>((resolve, reject) => {
    const child = fork(import.meta.filename, ["--role", "raw-server"], {
      execArgv: [...process.execArgv.filter((flag) => !flag.startsWith("--cpu-prof")), ...nodeFlags],
      stdio: ["ignore", "inherit", "inherit", "ipc"]
    })
    child.once("message", (message) =>
      resolve({
        url: `http://127.0.0.1:${(message as { port: number }).port}`,
        stop: stopper(child),
        cpuMs: processCpuMs(child.pid)
      }))
    child.once("error", reject)
  })

// ---------------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------------

interface Window {
  /** Round-trip times (ms) of the steps completed in the measured window. */
  readonly latencies: Array<number>
  seconds: number
  /** CPU time (ms) of this process and of the server process during the window. */
  clientCpuMs: number
  serverCpuMs: number
}

/** Starts the measured window; the function it returns ends it. */
const openWindow = (window: Window, serverCpuMs: () => number) => {
  const started = performance.now()
  const client = process.cpuUsage()
  const server = serverCpuMs()
  return () => {
    window.seconds = (performance.now() - started) / 1000
    const used = process.cpuUsage(client)
    window.clientCpuMs = (used.user + used.system) / 1000
    window.serverCpuMs = serverCpuMs() - server
  }
}

interface Plan {
  readonly url: string
  readonly sessions: number
  readonly warmupMs: number
  readonly measureMs: number
  readonly resetEvery: number
  readonly serverCpuMs: () => number
}

/** The project's client, as the openenv scheduler uses it. */
const effectDriver = (plan: Plan): Promise<Window> => {
  const window: Window = { latencies: [], seconds: 0, clientCpuMs: 0, serverCpuMs: 0 }
  let measuring = false
  let stop = false
  const worker = (index: number) =>
    Effect.gen(function*() {
      const { session } = yield* OpenEnvClient.connectAndReset(plan.url, { seed: index, episode_id: `bench-${index}` }, {})
      let steps = 0
      while (!stop) {
        if (++steps % plan.resetEvery === 0) yield* session.reset({ seed: index })
        const started = performance.now()
        yield* session.step(ACTION)
        const elapsed = performance.now() - started
        if (measuring) window.latencies.push(elapsed)
      }
    }).pipe(Effect.scoped)
  const program = Effect.gen(function*() {
    const fibers = yield* Effect.forEach(
      Array.from({ length: plan.sessions }, (_, i) => i),
      (i) => Effect.forkChild(worker(i))
    )
    yield* Effect.sleep(plan.warmupMs)
    measuring = true
    const close = openWindow(window, plan.serverCpuMs)
    yield* Effect.sleep(plan.measureMs)
    measuring = false
    close()
    stop = true
    for (const fiber of fibers) yield* Fiber.await(fiber)
    return window
  })
  return Effect.runPromise(program.pipe(Effect.provide(OpenEnvClient.layerWebSocketConstructor)))
}

/** A bare `ws` client: JSON text frames, one outstanding request per connection, no Effect. */
const rawDriver = async (plan: Plan): Promise<Window> => {
  const window: Window = { latencies: [], seconds: 0, clientCpuMs: 0, serverCpuMs: 0 }
  let measuring = false
  let stop = false
  const stepFrame = JSON.stringify({ type: "step", data: ACTION })
  const worker = (index: number) =>
    new Promise<void>((resolve, reject) => {
      const ws = new WebSocket(`${plan.url.replace(/^http/, "ws")}/ws`)
      let steps = 0
      let started = 0
      let resetting = true
      const next = () => {
        if (stop) {
          ws.send(JSON.stringify({ type: "close" }))
          return
        }
        if (++steps % plan.resetEvery === 0) {
          resetting = true
          ws.send(JSON.stringify({ type: "reset", data: { seed: index } }))
          return
        }
        started = performance.now()
        ws.send(stepFrame)
      }
      ws.on("open", () => ws.send(JSON.stringify({ type: "reset", data: { seed: index, episode_id: `raw-${index}` } })))
      ws.on("message", (data) => {
        const elapsed = performance.now() - started
        const reply = JSON.parse(String(data)) as { readonly type: string }
        if (reply.type !== "observation") return reject(new Error(`unexpected reply: ${String(data)}`))
        if (resetting) resetting = false
        else if (measuring) window.latencies.push(elapsed)
        next()
      })
      ws.on("close", () => resolve())
      ws.on("error", reject)
    })
  const all = Promise.all(Array.from({ length: plan.sessions }, (_, i) => worker(i)))
  await new Promise((r) => setTimeout(r, plan.warmupMs))
  measuring = true
  const close = openWindow(window, plan.serverCpuMs)
  await new Promise((r) => setTimeout(r, plan.measureMs))
  measuring = false
  close()
  stop = true
  await all
  return window
}

const main = async () => {
  const sessions = Number(args.sessions ?? 1)
  const client = args.client ?? "effect"
  const serverKind = args.server ?? "project"
  const profile = args["server-cpu-prof"]
  const serverFlags = profile === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profile}`]
  const server = serverKind === "raw"
    ? await startRawServer(serverFlags)
    : await startProjectServer(sessions, serverFlags)
  try {
    const plan: Plan = {
      url: server.url,
      sessions,
      warmupMs: Number(args.warmup ?? 1) * 1000,
      measureMs: Number(args.seconds ?? 3) * 1000,
      resetEvery: Number(args["reset-every"] ?? 100),
      serverCpuMs: server.cpuMs
    }
    const window = client === "raw" ? await rawDriver(plan) : await effectDriver(plan)
    const sorted = Float64Array.from(window.latencies).sort()
    const total = window.latencies.reduce((a, b) => a + b, 0)
    report({
      sessions,
      steps: sorted.length,
      seconds: window.seconds,
      stepsPerSecond: sorted.length / window.seconds,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      // CPU per step: less sensitive than wall time to other load on a shared machine
      clientCpuUsPerStep: (window.clientCpuMs * 1000) / sorted.length,
      serverCpuUsPerStep: (window.serverCpuMs * 1000) / sorted.length,
      meanMs: total / sorted.length
    })
  } finally {
    await server.stop()
  }
}

if (args.role === "raw-server") rawServer()
else main()
