/**
 * Workload 7: the rollout server under load. Starts `effect-gym serve` (the built binary, in its own
 * process, the frozen-lake-solver policy with no latency, so the figures are the server's own
 * overhead: HTTP, decoding, admission, the run, encoding), then `clients` concurrent clients each
 * send a request (one FrozenLake row x `generations` trajectories, JSON array response), wait for
 * the whole answer and send the next, for `seconds` after a warm-up. Reports trajectories per
 * second and the p50 / p99 request latency.
 *
 *   --clients 16  --generations 8  --seconds 3  --warmup 1  --stream (NDJSON instead of a JSON array)
 */
import * as http from "node:http"
import { flags, percentile, report, spawnCli } from "../lib.js"

const args = flags()
const clients = Number(args.clients ?? 16)
const generations = Number(args.generations ?? 8)
const seconds = Number(args.seconds ?? 3)
const warmup = Number(args.warmup ?? 1)
const stream = args.stream === "true"

/** Starts the server; resolves with its URL and a way to stop it (SIGTERM, as in production). */
const startServer = async () => {
  const { child, url } = await spawnCli([
    "serve", "--port", "0", "--env", "frozen_lake", "--policy", "frozen-lake-solver",
    "--concurrency", String(Math.max(256, clients * generations)), "--shutdown-grace", "1"
  ], /http:\/\/127\.0\.0\.1:\d+/)
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)))
  return {
    url,
    stop: () => {
      child.kill("SIGTERM")
      return exited
    }
  }
}

const agent = new http.Agent({ keepAlive: true, maxSockets: clients })

/** One request; resolves with its latency in ms and the trajectories it returned. */
const post = (url: string, seed: number) =>
  new Promise<{ ms: number; trajectories: number }>((resolve, reject) => {
    const body = JSON.stringify({ requests: [{ env_config: { seed, size: 6 }, num_generations: generations }] })
    const started = performance.now()
    const req = http.request(`${url}/v1/rollouts`, {
      method: "POST",
      agent,
      headers: {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        accept: stream ? "application/x-ndjson" : "application/json"
      }
    }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`))
        const trajectories = stream
          ? text.split("\n").filter((l) => l !== "").length
          : (JSON.parse(text) as Array<unknown>).length
        resolve({ ms: performance.now() - started, trajectories })
      })
      res.on("error", reject)
    })
    req.on("error", reject)
    req.end(body)
  })

const main = async () => {
  const server = await startServer()
  let seed = 0
  const load = async (forMs: number) => {
    const latencies: Array<number> = []
    let trajectories = 0
    let errors = 0
    const deadline = performance.now() + forMs
    const client = async () => {
      while (performance.now() < deadline) {
        try {
          const result = await post(server.url, seed++ % 10_000)
          latencies.push(result.ms)
          trajectories += result.trajectories
        } catch {
          errors++
        }
      }
    }
    const started = performance.now()
    await Promise.all(Array.from({ length: clients }, client))
    return { latencies, trajectories, errors, seconds: (performance.now() - started) / 1000 }
  }
  await load(warmup * 1000)
  const run = await load(seconds * 1000)
  const exitCode = await server.stop()
  agent.destroy()
  const sorted = [...run.latencies].sort((a, b) => a - b)
  report({
    clients,
    generations,
    requests: run.latencies.length,
    trajectories: run.trajectories,
    errors: run.errors,
    seconds: run.seconds,
    trajectoriesPerSecond: run.trajectories / run.seconds,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    serverExitCode: exitCode ?? -1
  })
}

main()
