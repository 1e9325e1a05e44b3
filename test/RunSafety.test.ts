/**
 * Nothing lost, nothing hangs (issue 11), as a user meets it: `effect-gym run` in-process with a
 * full argv, and the built binary in child processes for signals, kill -9 and the output channels.
 * Each test names the defect of the issue it covers.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { bin, cli, readLines, tmp as makeTmp } from "./cli.js"
import { withoutTimings } from "./helpers.js"

const root = path.resolve(import.meta.dirname, "..")
const faults = path.join(root, "test/fixtures/plugins/faults.mjs")
const frozenLake = path.join(root, "examples/frozen_lake.jsonl")
const tmp = () => makeTmp("effect-gym-safety-")

/** Fails (instead of hanging) when the command does not end. */
const within = <A, E, R>(effect: Effect.Effect<A, E, R>, seconds = 60) =>
  Effect.timeoutOrElse(effect, {
    duration: `${seconds} seconds`,
    orElse: () => Effect.fail(new Error(`did not end within ${seconds} s`))
  })

const run = (...args: Array<string>) => within(cli("run", ...args))

const writeRows = (file: string, rows: ReadonlyArray<unknown>) =>
  fs.writeFileSync(file, rows.map((row) => JSON.stringify(row)).join("\n") + "\n")

/** A log's lines without their timings, sorted: what two runs of the same rows must share. */
const stable = (file: string): Array<string> =>
  fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) =>
    JSON.stringify(withoutTimings(JSON.parse(line)))
  ).sort()

const countLines = (file: string, what: string): number =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line === what).length : 0

/** The built binary as a child process, with its output collected. */
const start = (args: ReadonlyArray<string>, cwd: string, env: Record<string, string> = {}) => {
  const child = spawn(process.execPath, [path.join(root, "bin/effect-gym.js"), ...args], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const out = { stdout: "", stderr: "" }
  child.stdout!.on("data", (chunk) => void (out.stdout += chunk))
  child.stderr!.on("data", (chunk) => void (out.stderr += chunk))
  const exited = new Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal }))
  )
  return { child, out, exited }
}

/** Waits until `done()` (polling), or throws after `ms`. */
const until = async (done: () => boolean, ms = 60_000, what = "the condition") => {
  const deadline = Date.now() + ms
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

const lineCount = (file: string): number =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").length - 1 : 0

/** Every group of a log is whole: `n` lines of one row, generations 0..n-1. */
const groupsWhole = (file: string, n: number): boolean => {
  const byRow = new Map<number, Array<number>>()
  for (const line of readLines(file)) byRow.set(line.row, [...(byRow.get(line.row) ?? []), line.generation])
  return [...byRow.values()].every((gens) => gens.length === n && gens.every((g, i) => g === i))
}

describe("run: defects become records, the run ends, the summary explains (issue 11: defects 1 and 2)", () => {
  it.live("a dying finalizer, a throwing close, a reward that dies, a hook that throws, unencodable infos: every line is written", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      const output = path.join(dir, "out.jsonl")
      const faultsOf = ["close_throws", "cycle", "nan", "function", "bigint", "throw_step", "none"]
      writeRows(dataset, [
        { env_config: { name: "finalizer_dies" } },
        ...faultsOf.map((fault) => ({ env_config: { fault } }))
      ])
      const base = ["--dataset", dataset, "--plugin", faults, "--env", "faulty", "--num-generations", "2"]
      const first = yield* run(...base, "--output", output)
      expect(first.code).toBe(1)
      const lines = readLines(output)
      expect(lines.length).toBe(16)
      const errorOf = (row: number) => lines.find((l) => l.row === row)!.error
      expect(errorOf(0)).toMatchObject({ _tag: "UnexpectedError", phase: "close", detail: "finalizer died" })
      expect(errorOf(1)).toMatchObject({ _tag: "EnvError", phase: "close", detail: "close exploded" })
      expect(errorOf(2)).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.reset_info.state.self" })
      expect(errorOf(3)).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.reset_info.score" })
      expect(errorOf(4)).toMatchObject({ _tag: "EncodeError", path: "rollout_infos.reset_info.callback" })
      expect(errorOf(5)).toBeNull()
      expect(fs.readFileSync(output, "utf8")).toContain(`"reset_info":{"id":${2n ** 70n}}`)
      expect(errorOf(6)).toMatchObject({ _tag: "EnvError", phase: "step", detail: "step exploded" })
      expect(errorOf(7)).toBeNull()
      // the summary: failures by tag, one example message each
      // the summary: failures by tag (in the order met), one example message each
      expect(first.stdout).toMatch(/^failures {7}12 \(.*\)$/m)
      for (const count of ["UnexpectedError 2", "EnvError 4", "EncodeError 6"]) expect(first.stdout).toContain(count)
      expect(first.stdout).toMatch(/^ {2}UnexpectedError: r0-g[01]: unexpected error in close: finalizer died$/m)
      expect(first.stdout).toMatch(/^ {2}EnvError: r[16]-g[01]: env faulty: (close|step) failed: (close|step) exploded$/m)
      expect(first.stdout).toMatch(/^ {2}EncodeError: r[234]-g[01]: cannot write the log line: rollout_infos\.reset_info\./m)

      const rewards = yield* run(...base, "--output", path.join(dir, "r.jsonl"), "--reward-funcs", "reward_throws", "reward_dies")
      expect(rewards.code).toBe(1)
      expect(readLines(path.join(dir, "r.jsonl")).length).toBe(16)
      expect(rewards.stdout).toContain("RewardError: r")
      const hooks = yield* run(...base, "--output", path.join(dir, "h.jsonl"), "--scheduler", "hook_throws")
      expect(hooks.code).toBe(1)
      expect(readLines(path.join(dir, "h.jsonl")).every((l) => l.error?.message === "unexpected error in turn_end: onTurnEnd exploded"))
        .toBe(true)
    }))

  it.live("an output that cannot be written stops the run with a message and the summary, exit 3", () =>
    Effect.gen(function*() {
      const { code, stderr, stdout } = yield* run("--dataset", frozenLake, "--env", "frozen_lake", "--output", "/dev/full")
      expect(code).toBe(3)
      expect(stderr).toMatch(/error: the run stopped early: --output \/dev\/full: .*(ENOSPC|no space)/i)
      expect(stdout).toContain("trajectories")
      // no run record next to a device
      expect(fs.existsSync("/dev/full.run.json")).toBe(false)
    }))
})

describe("run: timeouts, retries and group policies", () => {
  it.live("a hung reset, step or close ends its trajectory with a Timeout naming the phase; its env is closed", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      const output = path.join(dir, "out.jsonl")
      const envLog = path.join(dir, "envs.log")
      process.env.EFFECT_GYM_ENV_LOG = envLog
      writeRows(dataset, [{ env_config: { fault: "hang_reset" } }, { env_config: { fault: "hang_step" } }, { env_config: { fault: "hang_close" } }, {}])
      const { code, stdout } = yield* run(
        "--dataset", dataset, "--plugin", faults, "--env", "faulty", "--num-generations", "1", "--output", output,
        "--reset-timeout", "0.3", "--step-timeout", "0.3", "--close-timeout", "0.3"
      ).pipe(Effect.ensuring(Effect.sync(() => delete process.env.EFFECT_GYM_ENV_LOG)))
      expect(code).toBe(1)
      const lines = readLines(output).sort((a, b) => a.row - b.row)
      expect(lines.map((l) => l.error === null ? "ok" : `${l.error._tag} ${l.error.phase}`)).toEqual([
        "Timeout reset",
        "Timeout step",
        "Timeout close",
        "ok"
      ])
      expect(lines[1].error!.message).toBe("the env step took longer than the step timeout (0.3 s)")
      expect(stdout).toContain("Timeout 3")
      // 4 envs created; the 3 that did not hang in close were closed
      expect([countLines(envLog, "create"), countLines(envLog, "close")]).toEqual([4, 3])
    }))

  it.live("--trajectory-retries runs a transient failure again (attempts in the log); --failed-groups keep, drop, mask", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      writeRows(dataset, [{ env_config: { fault: "transient", fails: 1 } }, { env_config: { fault: "throw_step", at: 1 } }, {}])
      const base = ["--dataset", dataset, "--plugin", faults, "--env", "faulty", "--num-generations", "2"]
      const retried = path.join(dir, "retried.jsonl")
      // (the plugin counts attempts per trajectory and seed: this run's seed is its own)
      expect((yield* run(...base, "--output", retried, "--trajectory-retries", "1", "--seed", "1")).code).toBe(1)
      const byRow = (file: string, row: number) => readLines(file).filter((l) => l.row === row)
      for (const line of byRow(retried, 0)) {
        expect([line.error, line.attempts, line.attempt_errors?.map((e) => e.message)]).toEqual([
          null,
          2,
          ["env faulty: step failed: connection reset"]
        ])
      }
      // policies: row 1 fails (step throws); row 0 fails without retries
      const keep = path.join(dir, "keep.jsonl")
      const drop = path.join(dir, "drop.jsonl")
      const mask = path.join(dir, "mask.jsonl")
      yield* run(...base, "--output", keep, "--seed", "2")
      const dropped = yield* run(...base, "--output", drop, "--failed-groups", "drop", "--seed", "3")
      yield* run(...base, "--output", mask, "--failed-groups", "mask", "--seed", "4")
      expect(readLines(keep).length).toBe(6)
      expect(readLines(drop).map((l) => l.row)).toEqual([2, 2])
      expect(dropped.stdout).toContain("dropped groups 2")
      expect(readLines(mask).length).toBe(6)
      expect(readLines(mask).filter((l) => l.row !== 2).every((l) => l.advantage === null)).toBe(true)
      expect(readLines(mask).filter((l) => l.row === 2).every((l) => l.advantage === 0)).toBe(true)
    }))
})

describe("run: the output never destroys data (issue 11: defect 6)", () => {
  it.live("refuses an output that is the dataset: same path, symbolic link, hard link", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dataset = path.join(dir, "d.jsonl")
      fs.copyFileSync(frozenLake, dataset)
      const before = fs.readFileSync(dataset, "utf8")
      fs.symlinkSync(dataset, path.join(dir, "link.jsonl"))
      fs.linkSync(dataset, path.join(dir, "hard.jsonl"))
      for (const output of [dataset, path.join(dir, "link.jsonl"), path.join(dir, "hard.jsonl")]) {
        for (const extra of [[], ["--overwrite"], ["--resume"]]) {
          const { code, stderr } = yield* run("--dataset", dataset, "--env", "frozen_lake", "--output", output, ...extra)
          expect(code, output).toBe(2)
          expect(stderr).toContain(`error: --output: ${output} is the dataset ${dataset} (the same file)`)
        }
      }
      expect(fs.readFileSync(dataset, "utf8")).toBe(before)
    }))

  it.live("refuses an existing non-empty output unless --overwrite or --resume; an empty one is fine", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const output = path.join(dir, "out.jsonl")
      fs.writeFileSync(output, "precious\n")
      const args = ["--dataset", frozenLake, "--env", "frozen_lake", "--num-generations", "1", "--output", output]
      const refused = yield* run(...args)
      expect(refused.code).toBe(2)
      expect(refused.stderr).toContain(`exists and is not empty (9 bytes): pass --resume to continue that run, or --overwrite`)
      expect(fs.readFileSync(output, "utf8")).toBe("precious\n")
      expect((yield* run(...args, "--overwrite")).code).toBe(0)
      expect(readLines(output).length).toBe(128)
      fs.writeFileSync(output, "")
      expect((yield* run(...args)).code).toBe(0)
      expect((yield* run(...args, "--resume", "--overwrite")).stderr).toContain("--resume: cannot be combined with --overwrite")
    }))

  it.live("an output in a folder that does not exist, or that it may not write in, is refused naming --output and the folder (it named the run record's temporary file)", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const folder = path.join(dir, "no", "such", "folder")
      const output = path.join(folder, "a.jsonl")
      const args = ["--dataset", frozenLake, "--env", "frozen_lake", "--num-generations", "1", "--output", output]
      const refused = yield* run(...args)
      expect(refused.code).toBe(2)
      expect(refused.stderr).toContain(`error: --output ${output}: its folder ${folder} does not exist`)
      expect(refused.stderr).not.toContain(".tmp")
      // a file where the folder should be is not a folder
      fs.writeFileSync(path.join(dir, "plain"), "")
      const underFile = yield* run(...args.slice(0, -1), path.join(dir, "plain", "a.jsonl"))
      expect(underFile.code).toBe(2)
      expect(underFile.stderr).toContain(`error: --output ${path.join(dir, "plain", "a.jsonl")}: ${path.join(dir, "plain")} is not a folder`)
      // nothing was written
      expect(fs.readdirSync(dir)).toEqual(["plain"])
      // a trailing slash, a folder, a path under a file, an empty path: said so, nothing written (session 41's hostile pass)
      for (const [given, said] of [
        [path.join(dir, "a.jsonl") + "/", "names a folder (it ends with a slash), not the log's file"],
        [dir, "is a folder, not the log's file"],
        [path.join(dir, "plain", "x", "a.jsonl"), `its folder ${path.join(dir, "plain", "x")} is not a folder (a part of its path is a file)`],
        ["", "is empty: it names the log's file"]
      ] as const) {
        const refusedHere = yield* run(...args.slice(0, -1), given)
        expect(refusedHere.code, given).toBe(2)
        expect(refusedHere.stderr, given).toContain(`error: --output ${given}: ${said}`)
      }
      expect(fs.readdirSync(dir)).toEqual(["plain"])
      // a folder it may not write in (sysfs refuses new files even to root): named, not the run record's temporary file
      if (fs.existsSync("/sys/kernel")) {
        const denied = yield* run(...args.slice(0, -1), "/sys/a.jsonl")
        expect(denied.code).toBe(2)
        expect(denied.stderr).toContain("error: --output /sys/a.jsonl: cannot write in its folder /sys (permission denied)")
        expect(denied.stderr).not.toContain(".tmp")
      }
    }))
})

describe("run --resume (issue 11: defect 3, and the resume requirement)", () => {
  const dataset = (dir: string, rows = 24) => {
    const file = path.join(dir, "d.jsonl")
    fs.writeFileSync(file, fs.readFileSync(frozenLake, "utf8").split("\n").slice(0, rows).join("\n") + "\n")
    return file
  }
  const argsOf = (data: string, output: string, change: Record<string, string> = {}) =>
    Object.entries({
      "--dataset": data,
      "--env": "frozen_lake",
      "--policy": "random",
      "--num-generations": "4",
      "--seed": "5",
      "--output": output,
      ...change
    }).flat()

  it.live("a torn last line and a cut group are dropped; the resumed log equals an uninterrupted run", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const data = dataset(dir)
      const full = path.join(dir, "full.jsonl")
      expect((yield* run(...argsOf(data, full))).code).toBe(0)
      const text = fs.readFileSync(full, "utf8")
      const lines = text.split("\n")
      for (const keep of [0, 4, 9, 13]) {
        const cut = path.join(dir, `cut${keep}.jsonl`)
        // `keep` whole lines (9 and 13 cut a group), then half of the next line: a kill in a write
        const half = lines[keep].slice(0, Math.floor(lines[keep].length / 2))
        fs.writeFileSync(cut, lines.slice(0, keep).map((l) => l + "\n").join("") + half)
        fs.copyFileSync(`${full}.run.json`, `${cut}.run.json`)
        const resumed = yield* run(...argsOf(data, cut), "--resume")
        expect(resumed.code).toBe(0)
        const groups = Math.floor(keep / 4)
        expect(resumed.stderr).toContain(`resuming ${cut}: ${groups} complete groups (${groups * 4} lines) kept; an unfinished tail dropped`)
        expect(resumed.stdout).toContain(`trajectories   ${96 - groups * 4}`)
        expect(stable(cut)).toEqual(stable(full))
      }
      // resuming a complete log runs nothing
      const again = yield* run(...argsOf(data, full), "--resume", "--json")
      expect(JSON.parse(again.stdout)).toMatchObject({ trajectories: 0, resumed_groups: 24 })
      expect(stable(full)).toEqual(stable(path.join(dir, "cut0.jsonl")))
    }))

  it.live("the run's identity is checked field by field, the dataset's content included", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const data = dataset(dir, 8)
      const output = path.join(dir, "out.jsonl")
      expect((yield* run(...argsOf(data, output))).code).toBe(0)
      const before = fs.readFileSync(output, "utf8")
      const cases: ReadonlyArray<[Record<string, string>, string]> = [
        [{ "--seed": "6" }, "--seed is 6 here, 5 in the log's run"],
        [{ "--num-generations": "3" }, "--num-generations is 3 here, 4 in the log's run"],
        [{ "--max-turns": "3" }, "--max-turns is 3 here, 10 in the log's run"],
        [{ "--policy": "frozen-lake-solver" }, "--policy is \"frozen-lake-solver\" here, \"random\" in the log's run"],
        [{ "--reward-funcs": "format" }, "--reward-funcs is [\"format\"] here, [] in the log's run"],
        [{ "--temperature": "0.5" }, "sampling is {\"temperature\":0.5} here, {} in the log's run"],
        [{ "--failed-groups": "drop" }, "--failed-groups is \"drop\" here, \"keep\" in the log's run"]
      ]
      for (const [change, message] of cases) {
        const extra = Object.entries(change).flat()
        const { code, stderr } = yield* run(...argsOf(data, output, change), "--resume")
        expect(code, extra.join(" ")).toBe(2)
        expect(stderr).toContain(`error: --resume: ${output} was written by another run: ${message}`)
      }
      fs.appendFileSync(data, JSON.stringify({ env_config: { seed: 99 } }) + "\n")
      const changed = yield* run(...argsOf(data, output), "--resume")
      expect(changed.stderr).toMatch(/the dataset's content changed since the log was written \(sha256 "[0-9a-f]+" then, "[0-9a-f]+" now\)/)
      fs.rmSync(`${output}.run.json`)
      const unrecorded = yield* run(...argsOf(data, output), "--resume")
      expect(unrecorded.stderr).toContain(`has no run record (${output}.run.json)`)
      expect(fs.readFileSync(output, "utf8")).toBe(before)
    }))

  it("kill -9 at random moments, again and again, then --resume: the same lines as an uninterrupted run", async () => {
    const dir = tmp()
    const data = dataset(dir, 48)
    const args = (output: string) => [...argsOf(data, output), "--policy-option", "latency_ms=20", "--concurrency", "8"]
    const full = path.join(dir, "full.jsonl")
    const clean = start(["run", ...args(full)], dir)
    expect((await clean.exited).code).toBe(0)
    // a seeded choice of moments, so a failure can be replayed
    let state = 20251201
    const random = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
    const output = path.join(dir, "killed.jsonl")
    let kills = 0
    for (let round = 0; round < 12 && kills < 6; round++) {
      const proc = start(["run", ...args(output), ...(round === 0 ? [] : ["--resume"])], dir)
      const done = lineCount(output)
      // kill once the log has grown by a random amount (or at a random moment after start)
      const target = done + 1 + Math.floor(random() * 60)
      const byTime = random() < 0.3 ? 300 + random() * 1500 : Infinity
      const started = Date.now()
      let exited = false
      void proc.exited.then(() => void (exited = true))
      await until(() => exited || lineCount(output) >= target || Date.now() - started > byTime, 120_000, "a kill point")
      if (exited) break
      proc.child.kill("SIGKILL")
      const ended = await proc.exited
      // the run may have finished between the check above and the kill: then it exited 0 on its own
      if (ended.signal === null) {
        expect(ended.code, proc.out.stderr).toBe(0)
        break
      }
      expect(ended.signal).toBe("SIGKILL")
      kills++
    }
    expect(kills).toBeGreaterThanOrEqual(3)
    const last = start(["run", ...args(output), "--resume"], dir)
    const end = await last.exited
    expect(end.code, last.out.stderr).toBe(0)
    expect(lineCount(output)).toBe(192)
    expect(stable(output)).toEqual(stable(full))
  })
})

describe("run: signals keep every finished group (issue 11: defect 3)", () => {
  const slowRun = (dir: string, output: string, extra: ReadonlyArray<string> = []) => {
    const data = path.join(dir, "d.jsonl")
    writeRows(data, Array.from({ length: 200 }, () => ({ env_config: { fault: "slow_step", ms: 30, length: 3 } })))
    return [
      "run", "--dataset", data, "--plugin", faults, "--env", "faulty", "--num-generations", "4",
      "--concurrency", "16", "--output", output, ...extra
    ]
  }

  it("SIGINT: the groups finished are written, envs closed, summary marked interrupted, exit 130; --resume finishes the run", async () => {
    const dir = tmp()
    const output = path.join(dir, "out.jsonl")
    const envLog = path.join(dir, "envs.log")
    const proc = start(slowRun(dir, output), dir, { EFFECT_GYM_ENV_LOG: envLog })
    await until(() => lineCount(output) >= 20, 120_000, "20 lines written")
    proc.child.kill("SIGINT")
    const { code } = await proc.exited
    expect(code, proc.out.stderr).toBe(130)
    expect(proc.out.stdout).toContain("interrupted    by SIGINT: the groups finished are written; --resume runs the rest")
    expect(proc.out.stderr).toContain("SIGINT: stopping")
    const written = readLines(output)
    expect(written.length % 4).toBe(0)
    expect(groupsWhole(output, 4)).toBe(true)
    expect(proc.out.stdout).toContain(`trajectories   ${written.length} (${written.length / 4} groups)`)
    // every env the run created was closed
    expect(countLines(envLog, "close")).toBe(countLines(envLog, "create"))
    const resumed = start([...slowRun(dir, output), "--resume"], dir)
    expect((await resumed.exited).code).toBe(0)
    expect(readLines(output).length).toBe(800)
    expect(groupsWhole(output, 4)).toBe(true)
  })

  it("SIGTERM: exit 143, --json says so; a second signal exits at once", async () => {
    const dir = tmp()
    const output = path.join(dir, "out.jsonl")
    const proc = start([...slowRun(dir, output), "--json"], dir)
    await until(() => lineCount(output) >= 8, 120_000, "8 lines written")
    proc.child.kill("SIGTERM")
    const { code } = await proc.exited
    expect(code).toBe(143)
    expect(JSON.parse(proc.out.stdout)).toMatchObject({ interrupted: "SIGTERM" })

    // closing an env takes 30 s here: the first SIGINT waits for it, the second does not
    const slowClose = path.join(dir, "slow.jsonl")
    const data = path.join(dir, "slow-close.jsonl")
    writeRows(data, Array.from({ length: 50 }, () => ({ env_config: { fault: "slow_close", ms: 30_000 } })))
    const stuck = start([
      "run", "--dataset", data, "--plugin", faults, "--env", "faulty", "--num-generations", "1", "--output", slowClose,
      "--close-timeout", "120"
    ], dir)
    await until(() => stuck.out.stderr !== "" || fs.existsSync(`${slowClose}.run.json`), 120_000, "the run to start")
    await new Promise((resolve) => setTimeout(resolve, 500))
    stuck.child.kill("SIGINT")
    await until(() => stuck.out.stderr.includes("SIGINT: stopping"), 30_000, "the first signal to be handled")
    // (the same signal within 100 ms of the first is that one, sent twice: timeout and systemd do)
    await new Promise((resolve) => setTimeout(resolve, 150))
    const second = Date.now()
    stuck.child.kill("SIGINT")
    const end = await stuck.exited
    expect(end.code).toBe(130)
    expect(Date.now() - second).toBeLessThan(10_000)
    expect(stuck.out.stderr).toContain("SIGINT again: exiting now")
  })
})

describe("run: output channels (issue 11: WARN lines on stdout)", () => {
  it("stdout carries only the summary: --json parses; warnings and bad rows go to stderr", async () => {
    const dir = tmp()
    const data = path.join(dir, "d.jsonl")
    fs.writeFileSync(data, `${JSON.stringify({ env_config: { fault: "warn" } })}\nnot json\n`)
    const { code, stderr, stdout } = await bin(
      ["run", "--dataset", data, "--plugin", faults, "--env", "faulty", "--num-generations", "2", "--json", "--output", "o.jsonl"],
      dir
    )
    expect(code).toBe(1)
    expect(JSON.parse(stdout)).toMatchObject({ trajectories: 2, bad_rows: 1 })
    expect(stderr).toContain("faulty: a warning from the env")
    expect(stderr).toContain(`bad row: ${data}:2: malformed JSON`)
  })
})

describe("run: options and rows say what is wrong, and where (issue 11: defects 5 and 7)", () => {
  it.live("parse errors name their option; sizes have bounds with the reason; unknown scheduler options are refused", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const base = ["--dataset", frozenLake, "--env", "frozen_lake", "--output", path.join(dir, "o.jsonl")]
      const cases: ReadonlyArray<[ReadonlyArray<string>, string]> = [
        [["--num-generations", "1.5"], "--num-generations: \"1.5\" is not a whole number"],
        [["--seed", "abc"], "--seed: \"abc\" is not a whole number"],
        [["--mode", "bogus"], "--mode: \"bogus\" is not one of scripted, server, colocate"],
        [["--failed-groups", "some"], "--failed-groups: \"some\" is not one of keep, drop, mask"],
        [["--step-timeout", "soon"], "--step-timeout: must be a number of seconds > 0 and <= 1e9, or none; got \"soon\""],
        [["--step-timeout", "2e9"], "--step-timeout: must be a number of seconds > 0 and <= 1e9, or none; got \"2e9\""],
        // (the env workers' call timeout has the same cap as every timeout: 1e300 was taken)
        [["--isolate-envs", "--env-timeout", "1e300"], "--env-timeout: must be a number of seconds > 0 and <= 1e9, got 1e+300"],
        [["--isolate-envs", "--env-timeout", "0"], "--env-timeout: must be a number of seconds > 0 and <= 1e9, got 0"],
        [["--top-k", "2.5"], "--top-k: \"2.5\" is not a whole number"],
        [["--num-generations", "1e9"], "--num-generations: must be at most 4096, got 1000000000: a group's trajectories"],
        [["--concurrency", "10000000"], "--concurrency: must be at most 100000, got 10000000: each trajectory in flight"],
        [["--max-turns", "100000"], "--max-turns: must be at most 10000, got 100000: a trajectory holds its whole conversation"],
        // (one check, the run spec's, for the command line and the library alike)
        [["--trajectory-retries", "-1"], "--trajectory-retries: must be a whole number >= 0, got -1"],
        [["--trajectory-retries", "101"], "--trajectory-retries: must be at most 100, got 101: each attempt can take up to the sum of the timeouts"],
        [["--scheduler-option", "typo=1"], "--scheduler-option typo: unknown option; gym_scheduler takes none"]
      ]
      for (const [extra, message] of cases) {
        const { code, stderr } = yield* run(...base, ...extra)
        expect(code, extra.join(" ")).toBe(2)
        expect(stderr, extra.join(" ")).toContain(message)
      }
      expect(fs.existsSync(path.join(dir, "o.jsonl"))).toBe(false)
    }))

  it.live("invalid UTF-8 and numbers too large for a double are row errors at their line and field", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const data = path.join(dir, "d.jsonl")
      fs.writeFileSync(data, Buffer.concat([
        Buffer.from(`{"env_config":{"seed":1e400}}\n{"env_config":{"seed":2},"note":"`),
        Buffer.from([0xc3, 0x28]),
        Buffer.from(`"}\n{"env_config":{"seed":3},"note":"caf\u00e9"}\n`)
      ]))
      const { code, stderr } = yield* run("--dataset", data, "--env", "frozen_lake", "--num-generations", "1", "--output", path.join(dir, "o.jsonl"))
      expect(code).toBe(1)
      expect(stderr).toContain(`bad row: ${data}:1: env_config.seed: the number is too large (beyond ±1.8e308, it would be Infinity)`)
      expect(stderr).toContain(`bad row: ${data}:2: invalid UTF-8 (byte 34 of the line)`)
      expect(readLines(path.join(dir, "o.jsonl")).map((l) => l.row)).toEqual([2])
    }))

  it.live("dataset frozen-lake checks its options as run checks rows; README's flags are the CLI's", () =>
    Effect.gen(function*() {
      const size = yield* cli("dataset", "frozen-lake", "--rows", "2", "--size", "1")
      expect([size.code, size.stderr]).toEqual([2, "error: --size: must be between 2 and 256, got 1"])
      const p = yield* cli("dataset", "frozen-lake", "--rows", "2", "-p", "1.5")
      expect([p.code, p.stderr]).toEqual([2, "error: -p: must be a probability in [0, 1], got 1.5"])
      const ok = yield* cli("dataset", "frozen-lake", "--rows", "3", "--size", "2", "-p", "0.5")
      expect(ok.stdout.split("\n").length).toBe(3)
      // every flag the CLI reference (docs/cli.md) gives for run and dataset frozen-lake is in the command's help
      const readme = fs.readFileSync(path.join(root, "docs/cli.md"), "utf8")
      const reference = readme.slice(readme.indexOf("## CLI reference"))
      for (const [command, help] of [["effect-gym run ", ["run", "--help"]], ["effect-gym dataset frozen-lake ", ["dataset", "frozen-lake", "--help"]]] as const) {
        const start = reference.indexOf(command)
        const block = reference.slice(start, reference.indexOf("\neffect-gym ", start + 1))
        const text = (yield* cli(...help)).stdout
        const flags = [...new Set(block.match(/(?<![\w-])--?[a-z][a-z-]*/g) ?? [])]
        expect(flags.length).toBeGreaterThanOrEqual(5)
        for (const flag of flags) expect(text, `${command}${flag}`).toMatch(new RegExp(`(^|[\\s\\[])${flag}( |,|\\]|$)`, "m"))
      }
    }))
})

describe("plugins load from any folder (issue 11: the plugin gap)", () => {
  it.live(".ts, .mts, .cts, .js and .mjs plugins, no package.json, and a CommonJS-nested default export", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const example = fs.readFileSync(path.join(root, "examples/frozen_lake_plugin.ts"), "utf8")
      const js = fs.readFileSync(path.join(root, "test/fixtures/plugins/js_plugin.mjs"), "utf8")
      const files: ReadonlyArray<[string, string, string]> = [
        ["p.ts", example, "slippery_frozen_lake"],
        ["p.mts", example, "slippery_frozen_lake"],
        ["p.cts", example, "slippery_frozen_lake"],
        ["p.js", js, "countdown"],
        ["p.mjs", js, "countdown"]
      ]
      for (const [name, text, env] of files) {
        fs.writeFileSync(path.join(dir, name), text)
        const { code, stderr, stdout } = yield* cli("envs", "--plugin", path.join(dir, name), "--json")
        expect(code, `${name}: ${stderr}`).toBe(0)
        expect(JSON.parse(stdout).envs.map((e: { name: string }) => e.name)).toContain(env)
      }
      // a CommonJS package (as a user project without "type": "module"): the README's plugin as is
      const project = path.join(dir, "project")
      fs.mkdirSync(project)
      fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "my-project", type: "commonjs" }))
      fs.writeFileSync(path.join(project, "plugin.ts"), example)
      const listed = yield* cli("envs", "--plugin", path.join(project, "plugin.ts"), "--json")
      expect(listed.code, listed.stderr).toBe(0)
      expect(JSON.parse(listed.stdout).schedulers.map((e: { name: string }) => e.name)).toContain("frozen_lake_hints")
      // module.exports = { default: plugin }, as CommonJS interop nests it
      fs.writeFileSync(
        path.join(project, "nested.cts"),
        `import { Env, Plugin } from "effect-gym"\nmodule.exports = { default: Plugin.make({ envs: [Env.make({ name: "nested", create: () => ({ reset: () => ["hi", {}], step: () => ["bye", 1, true, {}] }) })] }) }\n`
      )
      const nested = yield* cli("envs", "--plugin", path.join(project, "nested.cts"), "--json")
      expect(nested.code, nested.stderr).toBe(0)
      expect(JSON.parse(nested.stdout).envs.map((e: { name: string }) => e.name)).toContain("nested")
    }))
})

describe("startup loads only what the command needs (issue 11: startup)", () => {
  it("--help and envs load neither node-llama-cpp, tsx nor undici, nor does a TypeScript plugin load tsx (EFFECT_GYM_TS_LOADER=tsx does)", async () => {
    const dir = tmp()
    const traced = async (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
      const file = path.join(dir, `trace-${args.join("-").replace(/\W/g, "_")}.txt`)
      const child = spawn(
        process.execPath,
        ["--import", path.join(root, "test/fixtures/trace-imports.mjs"), path.join(root, "bin/effect-gym.js"), ...args],
        { cwd: dir, env: { ...process.env, ...env, EFFECT_GYM_TRACE_IMPORTS: file }, stdio: "ignore" }
      )
      const code = await new Promise<number | null>((resolve) => child.on("exit", resolve))
      expect(code).toBe(0)
      return fs.readFileSync(file, "utf8")
    }
    const heavy = /node_modules\/(node-llama-cpp|tsx|undici)\/|require:(node-llama-cpp|tsx|undici)\b/
    for (const args of [["--help"], ["envs"], ["envs", "--json"]]) {
      const trace = await traced(args)
      expect(trace, args.join(" ")).toContain("effect-gym.js")
      expect(trace.match(heavy), args.join(" ")).toBeNull()
    }
    // a TypeScript plugin is compiled by Node's own transform (src/node/internal/typescript.ts)
    const plugin = ["envs", "--plugin", path.join(root, "examples/frozen_lake_plugin.ts")]
    const trace = await traced(plugin)
    expect(trace).toContain("examples/frozen_lake_plugin.ts")
    expect(trace.match(heavy)).toBeNull()
    // the control: asked for, tsx is loaded, and the trace sees it
    expect(await traced(plugin, { EFFECT_GYM_TS_LOADER: "tsx" })).toMatch(/node_modules\/tsx\//)
  })
})
