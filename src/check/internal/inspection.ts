/**
 * What the checker concludes from what it saw: the shape of reset and step results, the problems of
 * one lifecycle (failures, timeouts, close), the first difference between two episodes, and the
 * collector that keeps the first failure of each check per env_config.
 */
import { Duration } from "effect"
import { canonical, isRecord, jsonProblem, show, toJsonSafe, truncate, typeName } from "../../internal/inspect.js"
import type { CloseResult, Context, Lifecycle, Scenario } from "./lifecycle.js"
import { type CheckName, Failure, Warning } from "./report.js"

/** A reply as shown in a report. */
export const cut = (text: string): string => truncate(text, 300)

export const RESULT_FIELDS = ["observation", "systemPrompt", "reward", "done", "info"] as const

/** Canonical text of each field of a reset or step result, taken when it was returned. */
export const fieldsSnapshot = (value: unknown): Readonly<Record<string, string>> | undefined => {
  if (!isRecord(value)) return undefined
  const out: Record<string, string> = {}
  for (const field of RESULT_FIELDS) out[field] = canonical(value[field])
  return out
}

interface ResetProblems {
  readonly reset?: string
  readonly info?: string
}

export const resetProblems = (value: unknown): ResetProblems => {
  if (!isRecord(value)) return { reset: `reset returned ${typeName(value)}, not a result object` }
  const problems: { reset?: string; info?: string } = {}
  if (typeof value.observation !== "string") {
    problems.reset = `reset returned a non-text observation (${typeName(value.observation)})`
  } else if (value.systemPrompt !== undefined && value.systemPrompt !== null && typeof value.systemPrompt !== "string") {
    problems.reset = `reset returned a system prompt that is not text (${typeName(value.systemPrompt)})`
  }
  const info = infoProblem("reset info", value.info)
  if (info !== undefined) problems.info = info
  return problems
}

interface StepProblems {
  readonly step?: string
  readonly reward?: string
  readonly done?: string
  readonly info?: string
}

const infoProblem = (what: string, info: unknown): string | undefined => {
  if (info === undefined) return undefined
  if (!isRecord(info)) return `${what} must be an object, got ${typeName(info)}`
  const problem = jsonProblem(info, "info")
  return problem === undefined ? undefined : `${what} is not JSON: ${problem}`
}

export const stepProblems = (label: string, value: unknown): StepProblems => {
  if (!isRecord(value)) return { step: `${label} returned ${typeName(value)}, not a result object` }
  const problems: { step?: string; reward?: string; done?: string; info?: string } = {}
  if (typeof value.observation !== "string") {
    problems.step = `${label} returned a non-text observation (${typeName(value.observation)})`
  }
  if (typeof value.reward !== "number" || !Number.isFinite(value.reward)) {
    problems.reward = `${label} returned reward ${show(value.reward)} (${typeName(value.reward)}): ` +
      "a reward must be a finite number"
  }
  if (typeof value.done !== "boolean") {
    problems.done = `${label} returned done ${show(value.done)} (${typeName(value.done)}): done must be a boolean`
  }
  const info = infoProblem(`${label} info`, value.info)
  if (info !== undefined) problems.info = info
  return problems
}


export class Collector {
  readonly failures: Array<Failure> = []
  readonly warnings: Array<Warning> = []
  readonly exercised = new Set<CheckName>()
  readonly skipReasons = new Map<CheckName, string>()
  readonly stats = {
    envs: 0,
    resets: 0,
    steps: 0,
    episodesDone: 0,
    episodesAtMaxSteps: 0,
    episodesFailed: 0,
    finalizersRegistered: 0,
    finalizersRun: 0
  }
  private readonly seen = new Set<string>()

  ran(check: CheckName): void {
    this.exercised.add(check)
  }

  /** Records a failure; only the first failure of a check per env_config is kept. */
  fail(
    check: CheckName,
    scenario: Scenario,
    message: string,
    replies: ReadonlyArray<string>,
    output?: unknown
  ): void {
    this.exercised.add(check)
    const key = `${check}\u0000${scenario.index}`
    if (this.seen.has(key)) return
    this.seen.add(key)
    this.failures.push(
      new Failure({
        check,
        message,
        configIndex: scenario.index,
        config: toJsonSafe(scenario.config),
        replies,
        ...(output === undefined ? {} : { output: show(output, 300) })
      })
    )
  }

  warn(check: CheckName, scenario: Scenario, message: string): void {
    const key = `warn\u0000${check}\u0000${scenario.index}`
    if (this.seen.has(key)) return
    this.seen.add(key)
    this.warnings.push(new Warning({ check, message, configIndex: scenario.index, config: toJsonSafe(scenario.config) }))
  }

  hasFailure(check: CheckName, index: number): boolean {
    return this.seen.has(`${check}\u0000${index}`)
  }
}



const CRASHED = "(a defect: a throw or die inside Effect code; fail with EnvError instead)"
const MUTATED = "an object reused and mutated later: return a fresh one"

const hung = (what: string, timeout: string, outcome: { readonly interrupted: boolean }): string =>
  `${what} within ${timeout}; it was ${outcome.interrupted ? "interrupted" : "abandoned (it could not be interrupted)"}`

/**
 * Reports everything one lifecycle shows about the contract (types, infos, failures, timeouts,
 * close). `where` says which episode it was (a run, abandoned, alongside another env).
 */
export const inspectLifecycle = (context: Context, lc: Lifecycle, where: string): void => {
  const { collector, settings } = context
  const scenario = lc.scenario
  const timeout = Duration.format(settings.timeout)
  const fail = collector.fail.bind(collector)

  collector.stats.envs++
  const created = lc.created
  if (created !== undefined) {
    collector.ran("create")
    collector.ran("timeout")
    if (created._tag === "Failed") {
      const rejected = isRecord(created.error) && created.error._tag === "EnvConfigError"
      fail("create", scenario, rejected ? created.message : `creating the env failed: ${created.message}`, [])
    } else if (created._tag === "Died") {
      fail("create", scenario, `creating the env crashed: ${created.message} ${CRASHED}`, [])
    } else if (created._tag === "TimedOut") {
      fail("timeout", scenario, hung("creating the env did not finish", timeout, created), [])
    }
  }

  const reset = lc.reset
  if (reset !== undefined) {
    collector.ran("reset")
    if (reset._tag === "Ok") {
      const problems = resetProblems(reset.value)
      collector.ran("info")
      if (problems.reset !== undefined) fail("reset", scenario, problems.reset, [], reset.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, [], reset.value)
      const changed = changedFields(lc.resetSnapshot, fieldsSnapshot(reset.value))
      if (changed !== undefined) {
        const message = `the reset result's ${changed} was changed after it was returned (${MUTATED})`
        fail("info", scenario, message, lc.repliesUpTo(lc.steps.length), reset.value)
      }
    } else if (reset._tag === "Failed") {
      fail("reset", scenario, `reset failed: ${reset.message}`, [])
    } else if (reset._tag === "Died") {
      fail("reset", scenario, `reset crashed: ${reset.message} ${CRASHED}`, [])
    } else {
      fail("timeout", scenario, hung("reset did not answer", timeout, reset), [])
    }
  }

  lc.steps.forEach((s, i) => {
    const label = `step ${i + 1}`
    const replies = lc.repliesUpTo(i + 1)
    collector.ran("step")
    if (s.mutatedMessages) {
      const message = `${label} changed the messages it was given ` +
        "(the conversation belongs to the caller: copy it before changing it)"
      fail("step", scenario, message, replies)
    }
    const outcome = s.outcome
    if (outcome._tag === "Ok") {
      const problems = stepProblems(label, outcome.value)
      collector.ran("reward")
      collector.ran("done")
      collector.ran("info")
      if (problems.step !== undefined) fail("step", scenario, problems.step, replies, outcome.value)
      if (problems.reward !== undefined) fail("reward", scenario, problems.reward, replies, outcome.value)
      if (problems.done !== undefined) fail("done", scenario, problems.done, replies, outcome.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, replies, outcome.value)
      const changed = changedFields(s.snapshot, fieldsSnapshot(outcome.value))
      if (changed !== undefined) {
        const message = `the result of ${label} had its ${changed} changed after it was returned ` +
          `(an object reused and mutated by later steps or close: return a fresh one)`
        fail("info", scenario, message, replies, outcome.value)
      }
    } else if (outcome._tag === "Failed") {
      fail("step", scenario, `${label} failed: ${outcome.message}`, replies)
    } else if (outcome._tag === "Died") {
      fail("step", scenario, `${label} crashed: ${outcome.message} ${CRASHED}`, replies)
    } else {
      fail("timeout", scenario, hung(`${label} did not answer`, timeout, outcome), replies)
    }
  })

  const after = lc.afterDone
  if (after !== undefined) {
    collector.ran("step-after-done")
    const replies = [...lc.repliesUpTo(lc.steps.length), cut(after.reply)]
    const outcome = after.outcome
    if (outcome._tag === "Ok") {
      // Rewards, done and infos after done are held to the same rules as any step's.
      const problems = stepProblems("the step after done", outcome.value)
      if (problems.reward !== undefined) fail("reward", scenario, problems.reward, replies, outcome.value)
      if (problems.done !== undefined) fail("done", scenario, problems.done, replies, outcome.value)
      if (problems.info !== undefined) fail("info", scenario, problems.info, replies, outcome.value)
      if (problems.step !== undefined) {
        fail("step-after-done", scenario, problems.step, replies, outcome.value)
      } else if (isRecord(outcome.value) && outcome.value.done === false) {
        collector.warn(
          "step-after-done",
          scenario,
          "a step after done was answered with done=false: the env does not remember that the episode ended " +
            "(the gym scheduler never steps after done; other callers might)"
        )
      }
    } else if (outcome._tag === "Died") {
      fail("step-after-done", scenario, `a step after done crashed: ${outcome.message} ${CRASHED}`, replies)
    } else if (outcome._tag === "TimedOut") {
      fail("step-after-done", scenario, `a step after done did not answer within ${timeout}`, replies)
    }
  }

  const closed = lc.closed
  if (closed !== undefined) {
    collector.ran("close")
    const problem = closeProblem(closed, timeout)
    if (problem !== undefined) {
      fail("close", scenario, `${problem} (${where}, ${endText(lc)})`, lc.repliesUpTo(lc.steps.length))
    }
  }
}

const changedFields = (
  before: Readonly<Record<string, string>> | undefined,
  after: Readonly<Record<string, string>> | undefined
): string | undefined => {
  if (before === undefined || after === undefined) return undefined
  const changed = RESULT_FIELDS.filter((field) => before[field] !== after[field])
  return changed.length === 0 ? undefined : changed.join(" and ")
}

const endText = (lc: Lifecycle): string => {
  if (lc.created === undefined || lc.created._tag !== "Ok") return "after create failed"
  if (lc.reset === undefined) return "right after create"
  if (lc.reset._tag !== "Ok") return "after reset failed"
  switch (lc.end) {
    case "done":
      return `after done at step ${lc.steps.length}`
    case "max_steps":
      return `after ${lc.steps.length} steps without done`
    case "failed":
      return `after step ${lc.steps.length} failed`
    case "malformed":
      return lc.steps.length === 0 ? "after a malformed reset" : `after step ${lc.steps.length} returned a malformed result`
    case "running":
      return lc.steps.length === 0 ? "right after reset" : `after step ${lc.steps.length}`
  }
}

const closeProblem = (closed: CloseResult, timeout: string): string | undefined => {
  const problems: Array<string> = []
  const outcome = closed.outcome
  if (outcome._tag === "TimedOut") {
    const never = closed.finalizers - closed.finalizersRun
    const unrun = never > 0 ? `; ${never} of ${closed.finalizers} finalizers never ran` : ""
    problems.push(`close did not finish within ${timeout}${unrun}`)
  } else if (outcome._tag !== "Ok") {
    problems.push(`close failed: ${outcome.message}`)
  }
  const logged = closed.closeLogs.filter((line) => /close failed/.test(line))
  if (logged.length > 0) problems.push(`close failed: ${logged[0]}`)
  if (closed.lateFinalizers > 0) {
    problems.push(
      `${closed.lateFinalizers} finalizer(s) were registered after the env's scope had closed ` +
        "(work the env started outlived it)"
    )
  }
  if (closed.fibers > 0) {
    problems.push(
      `${closed.fibers} fiber(s) started by the env were still running after its scope closed ` +
        `(a resource acquired outside the scope: use Effect.forkScoped or Effect.acquireRelease)` +
        (closed.fibersStopped ? "" : "; they could not be interrupted")
    )
  }
  if (closed.resources.length > 0) {
    problems.push(
      `the env left open handles after its scope closed: ${closed.resources.join(", ")} ` +
        `(a resource acquired outside the scope, or a close that is skipped on this path)`
    )
  }
  return problems.length === 0 ? undefined : problems.join("; ")
}

/** The first difference between two episodes, in words, or `undefined` when they are the same. */
export const difference = (
  a: ReturnType<Lifecycle["signature"]>,
  b: ReturnType<Lifecycle["signature"]>
): { readonly at: number; readonly message: string; readonly output: unknown } | undefined => {
  const n = Math.max(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a[i]
    const y = b[i]
    if (x === undefined || y === undefined) {
      const longer = (x ?? y)!
      return {
        at: i,
        message: `${longer.label} happened in one and not in the other ` +
          `(one episode ${x === undefined ? "ended earlier" : "went on"})`,
        output: undefined
      }
    }
    if (x.text === y.text) continue
    const first = x.value
    const then = y.value
    if (isRecord(first) && isRecord(then)) {
      const field = RESULT_FIELDS.find((f) => canonical(first[f]) !== canonical(then[f]))
      if (field !== undefined) {
        const u = first[field]
        const v = then[field]
        return {
          at: i,
          message: `at ${x.label}, ${field} ${textDifference(u, v)}`,
          output: { first, then }
        }
      }
    }
    return { at: i, message: `at ${x.label}: ${show(x.text, 120)} vs ${show(y.text, 120)}`, output: undefined }
  }
  return undefined
}

/** `"…moved up. Now at row 1…" vs "…moved up. Now at row 2…"`: the two values around their first difference. */
const textDifference = (u: unknown, v: unknown): string => {
  if (typeof u === "string" && typeof v === "string") {
    let i = 0
    while (i < u.length && i < v.length && u[i] === v[i]) i++
    const from = Math.max(0, i - 30)
    const excerpt = (s: string) => `${from > 0 ? "…" : ""}${s.slice(from, i + 30)}${s.length > i + 30 ? "…" : ""}`
    return `${JSON.stringify(excerpt(u))} vs ${JSON.stringify(excerpt(v))}`
  }
  return `${show(u, 120)} vs ${show(v, 120)}`
}
