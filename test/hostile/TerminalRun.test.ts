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
  options: {
    readonly keys?: ReadonlyArray<readonly [after: number, keys: string]>
    readonly limit?: number
    readonly env?: Record<string, string>
  } = {}
) =>
  new Promise<{ readonly code: number | null; readonly screen: string }>((resolve) => {
    const quoted = [process.execPath, binPath, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ")
    const child = spawn("script", ["-qec", quoted, "/dev/null"], {
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...options.env }
    })
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
    // "close", not "exit": what the terminal printed last can arrive after the process's exit
    child.on("close", (code) => {
      clearTimeout(limit)
      resolve({ code, screen })
    })
  })

describe.skipIf(!hasScript)("run in a terminal (it never exited)", () => {
  const dir = tmp()
  const dataset = path.join(dir, "rows.jsonl")
  fs.writeFileSync(dataset, Array.from({ length: 400 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
  const common = ["--env", "frozen_lake", "--policy", "random", "--num-generations", "2"]

  it("runs to its end: the progress line drawn, then cleared, the summary printed, exit 0", async () => {
    const output = path.join(dir, "all.jsonl")
    // a policy slow enough for the progress line to be drawn (every 250 ms)
    const { code, screen } = await inTerminal(["run", "--dataset", dataset, ...common, "--policy-option", "latency_ms=1", "--output", output])
    expect(code, screen).toBe(0)
    expect(screen).toContain("traj/s")
    expect(screen).toContain(`completions    ${output}`)
    expect(readLines(output)).toHaveLength(800)
  })

  it("TERM=dumb (a terminal that shows escapes as they are): the progress line is cleared with spaces, no escape", async () => {
    const output = path.join(dir, "dumb.jsonl")
    const { code, screen } = await inTerminal(["run", "--dataset", dataset, ...common, "--policy-option", "latency_ms=1", "--output", output], { env: { TERM: "dumb" } })
    expect(code, screen).toBe(0)
    expect(screen).toContain("traj/s")
    expect(screen).not.toContain("\x1b")
    expect(screen).toMatch(/\r {20,}\r/)
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
 * The terminal closes under a command (an SSH session drops, a window is closed): SIGHUP. Node's
 * default ended the process at once (envs in flight not closed); a process that handled it still
 * died at exit (Node aborts restoring a hung-up terminal's settings: exit 134/139) or at the
 * progress line's next write (EIO).
 *
 * As a shell does it: the session's leader (`sh`) dies of the hangup, and the kernel then sends
 * SIGHUP to the foreground group, where effect-gym runs under a subshell that ignores it, to record
 * the exit code (Node resets an ignored SIGHUP to the default at start, so effect-gym still gets it).
 * effect-gym's stdin is the terminal, opened read-only (a background subshell's would be /dev/null;
 * read-only, a check that wrote nothing to it to see whether it had hung up missed it: 134/139), its
 * stderr too, its stdout a file. The terminal hangs up when `hangUp` says so: script(1) is killed, which
 * closes the terminal's master side.
 */
const underHangUp = async (
  args: ReadonlyArray<string>,
  options: {
    readonly dir: string
    readonly hangUp: () => boolean
    readonly keys?: ReadonlyArray<readonly [after: number, keys: string]>
    readonly env?: Record<string, string>
    /** stdout to the terminal too (the wizard asks there), else to a file. */
    readonly stdoutOnTerminal?: boolean
  }
) => {
  const q = (a: string) => `'${a.replace(/'/g, "'\\''")}'`
  const rc = path.join(options.dir, "rc")
  const stdout = path.join(options.dir, "stdout")
  const command = [process.execPath, binPath, ...args].map(q).join(" ")
  const toStdout = options.stdoutOnTerminal === true ? "" : ` > ${q(stdout)}`
  const shell = `(trap '' HUP; ${command}${toStdout} < /dev/tty; echo $? > ${q(rc)}) & wait`
  const child = spawn("script", ["-qec", `sh -c ${q(shell)}`, "/dev/null"], {
    detached: true,
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, ...options.env }
  })
  child.stdout.resume()
  for (const [after, keys] of options.keys ?? []) setTimeout(() => child.stdin.write(keys), after)
  const waitFor = async (done: () => boolean, ms: number, what: string) => {
    const deadline = Date.now() + ms
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  try {
    await waitFor(options.hangUp, 60_000, "the moment to hang up")
    child.kill("SIGKILL")
    await waitFor(() => fs.existsSync(rc) && fs.readFileSync(rc, "utf8").endsWith("\n"), 30_000, "the command to exit")
  } finally {
    try {
      process.kill(-child.pid!, "SIGKILL")
    } catch {
      // gone already
    }
  }
  return { code: Number(fs.readFileSync(rc, "utf8")), stdout: fs.existsSync(stdout) ? fs.readFileSync(stdout, "utf8") : "" }
}

describe.skipIf(!hasScript)("the terminal closes (SIGHUP)", () => {
  const faults = path.resolve(import.meta.dirname, "../fixtures/plugins/faults.mjs")
  const lines = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").length - 1 : 0)

  it("under a run: stops gracefully, the groups finished written, every env closed, the summary says SIGHUP, exit 129", async () => {
    const dir = tmp()
    const data = path.join(dir, "rows.jsonl")
    fs.writeFileSync(data, Array.from({ length: 200 }, () => JSON.stringify({ env_config: { fault: "slow_step", ms: 30, length: 3 } })).join("\n") + "\n")
    const output = path.join(dir, "out.jsonl")
    const envLog = path.join(dir, "envs.log")
    const { code, stdout } = await underHangUp(
      ["run", "--dataset", data, "--plugin", faults, "--env", "faulty", "--num-generations", "4", "--concurrency", "16", "--output", output, "--json"],
      { dir, hangUp: () => lines(output) >= 20, env: { EFFECT_GYM_ENV_LOG: envLog } }
    )
    expect(code).toBe(129)
    expect(JSON.parse(stdout)).toMatchObject({ interrupted: "SIGHUP" })
    const written = readLines(output)
    expect(written.length).toBeGreaterThanOrEqual(20)
    expect(written.length).toBeLessThan(800)
    expect(written.length % 4).toBe(0)
    const envs = fs.readFileSync(envLog, "utf8").split("\n")
    expect(envs.filter((l) => l === "close").length).toBe(envs.filter((l) => l === "create").length)
  })

  it("under rows typed in (--dataset /dev/stdin): not a complete run (a hung-up terminal reads as end of input: it exited 0)", async () => {
    const dir = tmp()
    const output = path.join(dir, "typed.jsonl")
    const typed = `${JSON.stringify({ env_config: { seed: 1 } })}\r${JSON.stringify({ env_config: { seed: 2 } })}\r`
    const { code, stdout } = await underHangUp(
      ["run", "--dataset", "/dev/stdin", "--env", "frozen_lake", "--policy", "random", "--num-generations", "2", "--output", output, "--json"],
      { dir, keys: [[1_000, typed]], hangUp: () => lines(output) >= 4 }
    )
    // the end of input or the SIGHUP, whichever the run sees first: never a clean end
    expect([3, 129]).toContain(code)
    const summary = JSON.parse(stdout)
    if (code === 3) expect(summary.error).toContain("the terminal hung up")
    else expect(summary.interrupted).toBe("SIGHUP")
    expect(readLines(output)).toHaveLength(4)
  })

  it("under the wizard: exit 129 (its next prompt failed on the gone terminal: an internal error, exit 3)", async () => {
    const dir = tmp()
    const started = Date.now()
    const { code } = await underHangUp(["--wizard"], { dir, stdoutOnTerminal: true, hangUp: () => Date.now() - started > 2_500 })
    expect(code).toBe(129)
  })
})
