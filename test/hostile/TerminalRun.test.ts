/**
 * `run` in a terminal, as a user starts it (a pseudo-terminal from script(1)): the progress line is
 * drawn on stderr, and the run ends. Every run whose stderr was a terminal never exited (the
 * progress fiber, forked where it could not be interrupted, was waited for forever), and no test ran
 * the CLI in a terminal.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { readLines, tmp } from "../cli.js"

const binPath = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
const hasScript = process.platform === "linux" && spawnSync("script", ["--version"]).status === 0

/**
 * `effect-gym ARGS` in a pseudo-terminal; each of `keys` typed into it at its time, in ms from the
 * start (Ctrl-C is "\x03", Ctrl-D "\x04").
 * Resolves with its exit code (script -e gives the command's) and what the terminal showed, or
 * `null` as the code when it has not ended within `limit` ms (then it is killed).
 */
const inTerminal = (
  args: ReadonlyArray<string>,
  options: { readonly keys?: ReadonlyArray<readonly [after: number, keys: string]>; readonly limit?: number } = {}
) =>
  new Promise<{ readonly code: number | null; readonly screen: string }>((resolve) => {
    const quoted = [process.execPath, binPath, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ")
    const child = spawn("script", ["-qec", quoted, "/dev/null"], { detached: true, stdio: ["pipe", "pipe", "pipe"] })
    let screen = ""
    child.stdout.on("data", (chunk: Buffer) => void (screen += chunk.toString("utf8")))
    const limit = setTimeout(() => {
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {
        // gone already
      }
      resolve({ code: null, screen })
    }, options.limit ?? 30_000)
    for (const [after, keys] of options.keys ?? []) setTimeout(() => child.stdin.write(keys), after)
    child.on("exit", (code) => {
      clearTimeout(limit)
      resolve({ code, screen })
    })
  })

describe.skipIf(!hasScript)("run in a terminal (it never exited)", () => {
  const dir = tmp()
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, Array.from({ length: 400 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
  const common = ["--gym-env", "frozen_lake", "--policy", "random", "--num-generations", "2"]

  it("runs to its end: the progress line drawn, then cleared, the summary printed, exit 0", async () => {
    const output = path.join(dir, "all.jsonl")
    // a policy slow enough for the progress line to be drawn (every 250 ms)
    const { code, screen } = await inTerminal(["run", "--dataset", dataset, ...common, "--policy-option", "latency_ms=1", "--output", output])
    expect(code, screen).toBe(0)
    expect(screen).toContain("traj/s")
    expect(screen).toContain(`completions    ${output}`)
    expect(readLines(output)).toHaveLength(800)
  })

  it("a bad row's message starts on a line of its own (it was glued onto the progress line); no total shown when unknown", async () => {
    const bad = path.join(dir, "bad.jsonl")
    fs.writeFileSync(bad, Array.from({ length: 60 }, (_, seed) => (seed % 20 === 19 ? "{oops" : JSON.stringify({ env_config: { seed } }))).join("\n") + "\n")
    const output = path.join(dir, "bad-out.jsonl")
    const { code, screen } = await inTerminal(["run", "--dataset", bad, ...common, "--policy-option", "latency_ms=5", "--concurrency", "2", "--output", output])
    expect(code, screen).toBe(1)
    expect(screen.match(/\r\x1b\[2Kbad row: /g)?.length).toBe(3)
    expect(screen).not.toMatch(/failures \d+bad row/)
    // from a pipe the row count is not known: "12 ..." rather than "12/0"
    const piped = await inTerminal(["run", "--dataset", "/dev/stdin", ...common, "--output", path.join(dir, "piped.jsonl")], {
      keys: [[500, `${JSON.stringify({ env_config: { seed: 1 } })}\r\x04`]]
    })
    expect(piped.code, piped.screen).toBe(0)
    expect(piped.screen).not.toMatch(/\d+\/0 /)
  })

  it("Ctrl-C: stops gracefully, the groups finished written, the summary marked interrupted, exit 130", async () => {
    const output = path.join(dir, "stopped.jsonl")
    const { code, screen } = await inTerminal(
      ["run", "--dataset", dataset, ...common, "--policy-option", "latency_ms=20", "--concurrency", "4", "--output", output],
      { keys: [[2_500, "\x03"]] }
    )
    expect(code, screen).toBe(130)
    expect(screen).toContain("interrupted    by SIGINT")
    const lines = readLines(output)
    expect(lines.length).toBeGreaterThan(0)
    expect(lines.length).toBeLessThan(800)
    expect(lines.length % 2).toBe(0)
  })

  // rows typed in (a terminal sends a line on Enter, "\r"), then Ctrl-C or Ctrl-D (end of input)
  const typed = `${JSON.stringify({ env_config: { seed: 1 } })}\r${JSON.stringify({ env_config: { seed: 2 } })}\r`
  const typing = (output: string) => ["run", "--dataset", "/dev/stdin", ...common, "--output", output, "--json"]

  it("--dataset /dev/stdin typed in, then Ctrl-C: the run ends at once (it waited for another line)", async () => {
    const output = path.join(dir, "typed-stopped.jsonl")
    // Ctrl-C well after the rows have run (a row runs in milliseconds)
    const { code, screen } = await inTerminal(typing(output), { keys: [[1_000, typed], [3_000, "\x03"]], limit: 20_000 })
    expect(code, screen).toBe(130)
    expect(readLines(output).map((l) => l.env_config.seed).sort()).toEqual([1, 1, 2, 2])
  })

  it("--dataset /dev/stdin typed in, then Ctrl-D: the rows typed run, exit 0", async () => {
    const output = path.join(dir, "typed.jsonl")
    const { code, screen } = await inTerminal(typing(output), { keys: [[1_000, `${typed}\x04`]] })
    expect(code, screen).toBe(0)
    expect(readLines(output).map((l) => l.env_config.seed).sort()).toEqual([1, 1, 2, 2])
  })
})

describe.skipIf(!hasScript)("other commands in a terminal: Ctrl-C is seen (a loop that never gave the event loop a turn ran to its end)", () => {
  it("dataset frozen-lake writing to the terminal: Ctrl-C exits 130 at once", async () => {
    const started = Date.now()
    const { code } = await inTerminal(["dataset", "frozen-lake", "--rows", "3000000"], { keys: [[1_500, "\x03"]], limit: 60_000 })
    expect(code).toBe(130)
    expect(Date.now() - started).toBeLessThan(15_000)
  })

  it("check-env with many seeds: Ctrl-C exits 130 at once", async () => {
    const started = Date.now()
    const { code } = await inTerminal(["check-env", "frozen_lake", "--seeds", "400", "--runs", "20", "--max-steps", "200"], {
      keys: [[2_000, "\x03"]],
      limit: 60_000
    })
    expect(code).toBe(130)
    expect(Date.now() - started).toBeLessThan(15_000)
  })
})


/**
 * The terminal closes under a run (an SSH session drops, a window is closed): SIGHUP. Node's default
 * ended the process at once (envs in flight not closed), and a process that handled it still died
 * at exit (Node aborts restoring a hung-up terminal's settings: exit 134/139) or at the progress
 * line's next write (EIO).
 *
 * As a shell does it: the session's leader (`sh`) dies of the hangup, and the kernel then sends
 * SIGHUP to the foreground group, where effect-gym runs under a subshell that ignores it (to record
 * the exit code; Node resets an ignored SIGHUP to the default at start, so effect-gym still gets it).
 */
describe.skipIf(!hasScript)("the terminal closes under a run (SIGHUP)", () => {
  const faults = path.resolve(import.meta.dirname, "../fixtures/plugins/faults.mjs")

  it("stops gracefully: the groups finished written, every env closed, the summary says SIGHUP, exit 129", async () => {
    const dir = tmp()
    const data = path.join(dir, "rows.jsonl")
    fs.writeFileSync(data, Array.from({ length: 200 }, () => JSON.stringify({ env_config: { fault: "slow_step", ms: 30, length: 3 } })).join("\n") + "\n")
    const output = path.join(dir, "out.jsonl")
    const envLog = path.join(dir, "envs.log")
    const rc = path.join(dir, "rc")
    const summary = path.join(dir, "summary.json")
    const q = (a: string) => `'${a.replace(/'/g, "'\\''")}'`
    const command = [
      process.execPath, binPath, "run", "--dataset", data, "--plugin", faults, "--gym-env", "faulty",
      "--num-generations", "4", "--concurrency", "16", "--output", output, "--json"
    ].map(q).join(" ")
    // stdout to a file (the summary), stderr stays the terminal (the progress line, the stop message)
    const shell = `(trap '' HUP; ${command} > ${q(summary)}; echo $? > ${q(rc)}) & wait`
    const child = spawn("script", ["-qec", `sh -c ${q(shell)}`, "/dev/null"], {
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, EFFECT_GYM_ENV_LOG: envLog }
    })
    child.stdout.resume()
    const lines = () => (fs.existsSync(output) ? fs.readFileSync(output, "utf8").split("\n").length - 1 : 0)
    const waitFor = async (done: () => boolean, ms: number, what: string) => {
      const deadline = Date.now() + ms
      while (!done()) {
        if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    }
    try {
      await waitFor(() => lines() >= 20, 60_000, "20 lines written")
      // the terminal goes: its master side closes with script
      child.kill("SIGKILL")
      await waitFor(() => fs.existsSync(rc) && fs.readFileSync(rc, "utf8").endsWith("\n"), 30_000, "the run to exit")
    } finally {
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {
        // gone already
      }
    }
    expect(fs.readFileSync(rc, "utf8").trim()).toBe("129")
    expect(JSON.parse(fs.readFileSync(summary, "utf8"))).toMatchObject({ interrupted: "SIGHUP" })
    const written = readLines(output)
    expect(written.length).toBeGreaterThanOrEqual(20)
    expect(written.length).toBeLessThan(800)
    expect(written.length % 4).toBe(0)
    const envs = fs.readFileSync(envLog, "utf8").split("\n")
    expect(envs.filter((l) => l === "close").length).toBe(envs.filter((l) => l === "create").length)
  })
})
