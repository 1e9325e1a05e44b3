/**
 * The env checker's report: the checks, the report's models (failures, warnings, skipped checks,
 * counts) and its renderings. Public through `EnvCheck`.
 */
import { Schema } from "effect"
import { show } from "../../internal/inspect.js"
import * as Json from "../../internal/Json.js"

/**
 * The checks, in the order they are reported.
 *
 * @since 0.1.0
 * @category models
 */
export const CheckName = Schema.Literals([
  "create",
  "reset",
  "step",
  "reward",
  "done",
  "info",
  "determinism",
  "step-after-done",
  "close",
  "timeout",
  "isolation",
  "tools"])

/**
 * @since 0.1.0
 * @category models
 */
export type CheckName = typeof CheckName.Type

/**
 * @since 0.1.0
 * @category constants
 */
export const CHECKS: ReadonlyArray<CheckName> = CheckName.literals

/**
 * What each check asserts, in one line.
 *
 * @since 0.1.0
 * @category constants
 */
export const DESCRIPTIONS: Readonly<Record<CheckName, string>> = {
  create: "the env is created from every env_config",
  reset: "reset answers with a text observation and a text or absent system prompt",
  step: "step answers every reply with a text observation, without failing, and leaves the conversation alone",
  reward: "rewards are finite numbers",
  done: "done is a boolean",
  info: "infos are JSON objects (no cycles, functions, NaN or Infinity) and results are not changed later",
  determinism: "the same env_config and replies give the same reset and transcript, run after run",
  "step-after-done": "a step after done is answered (a result or a typed error), not a crash",
  close: "the env is closed exactly once on every path and leaves nothing running",
  timeout: "create, reset and step each answer within the timeout",
  isolation: "two envs alive at once do not affect each other",
  tools: "tools offered at reset are valid specs; each answers a call (valid arguments, malformed JSON, the wrong shape) " +
    "and an unknown tool with a tool message, never a failed step"
}

/**
 * A check that failed for one env_config. `replies` are the replies played up to the failure;
 * `output` is the offending value, rendered.
 *
 * @since 0.1.0
 * @category models
 */
export class Failure extends Schema.Class<Failure>("effect-gym/EnvCheck/Failure")({
  check: CheckName,
  message: Schema.String,
  configIndex: Schema.Number,
  config: Schema.Unknown,
  replies: Schema.Array(Schema.String),
  output: Schema.optional(Schema.String)
}) {}

/**
 * Something questionable that does not fail the check.
 *
 * @since 0.1.0
 * @category models
 */
export class Warning extends Schema.Class<Warning>("effect-gym/EnvCheck/Warning")({
  check: CheckName,
  message: Schema.String,
  configIndex: Schema.Number,
  config: Schema.Unknown
}) {}

/**
 * A check that could not be exercised, and why (e.g. no episode ended done, so stepping after done
 * was never tried).
 *
 * @since 0.1.0
 * @category models
 */
export class Skipped extends Schema.Class<Skipped>("effect-gym/EnvCheck/Skipped")({
  check: CheckName,
  reason: Schema.String
}) {}

/**
 * @since 0.1.0
 * @category models
 */
export class Stats extends Schema.Class<Stats>("effect-gym/EnvCheck/Stats")({
  /** Envs created (each one closed). */
  envs: Schema.Number,
  resets: Schema.Number,
  steps: Schema.Number,
  /** Episodes that ended done, ran to the step limit, or ended with a failure. */
  episodesDone: Schema.Number,
  episodesAtMaxSteps: Schema.Number,
  episodesFailed: Schema.Number,
  /** Finalizers the envs registered in their scopes, and how many ran. */
  finalizersRegistered: Schema.Number,
  finalizersRun: Schema.Number
}) {}

/**
 * The result of {@link check}. `ok` is true when no check failed (skipped checks do not fail).
 *
 * @since 0.1.0
 * @category models
 */
export class Report extends Schema.Class<Report>("effect-gym/EnvCheck/Report")({
  env: Schema.String,
  ok: Schema.Boolean,
  seed: Schema.Number,
  runs: Schema.Number,
  maxSteps: Schema.Number,
  timeout: Schema.String,
  configs: Schema.Array(Schema.Unknown),
  passed: Schema.Array(CheckName),
  failures: Schema.Array(Failure),
  skipped: Schema.Array(Skipped),
  warnings: Schema.Array(Warning),
  stats: Stats
}) {
  /** The failures of one check. */
  failuresOf(check: CheckName): ReadonlyArray<Failure> {
    return this.failures.filter((failure) => failure.check === check)
  }
  /** The checks with at least one failure, in order. */
  get failed(): ReadonlyArray<CheckName> {
    return CHECKS.filter((check) => this.failures.some((failure) => failure.check === check))
  }
}

/**
 * Options of {@link check} that cannot be used.
 *
 * @since 0.1.0
 * @category errors
 */
export class CheckOptionError extends Schema.TaggedError<CheckOptionError>()(
  "CheckOptionError",
  {
    option: Schema.String,
    detail: Schema.String
  }
) {
  override get message(): string {
    return `${this.option}: ${this.detail}`
  }
}

/**
 * The report as readable text: one line per check, then the failures (message, env_config,
 * replies, output), warnings and counts.
 *
 * @since 0.1.0
 * @category rendering
 */
export const format = (report: Report): string => {
  const failed = report.failed
  const width = Math.max(...CHECKS.map((c) => c.length))
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`
  const setup = `${plural(report.configs.length, "env_config")} × ${plural(report.runs, "run")}, ` +
    `up to ${report.maxSteps} steps, timeout ${report.timeout}, seed ${report.seed}`
  const lines: Array<string> = [
    report.ok
      ? `${report.env}: passed (${setup})`
      : `${report.env}: FAILED, ${failed.length} of ${CHECKS.length} checks (${setup})`
  ]
  for (const check of CHECKS) {
    const skipped = report.skipped.find((s) => s.check === check)
    const status = failed.includes(check) ? "FAIL" : skipped !== undefined ? "skip" : "ok"
    const detail = skipped !== undefined ? skipped.reason : DESCRIPTIONS[check]
    lines.push(`  ${status.padEnd(4)}  ${check.padEnd(width)}  ${detail}`)
  }
  if (report.failures.length > 0) {
    lines.push("", "failures")
    for (const failure of report.failures) {
      lines.push(`  ${failure.check}: ${failure.message}`)
      lines.push(`    env_config #${failure.configIndex}  ${show(failure.config, 120)}`)
      if (failure.replies.length > 0) lines.push(`    replies        ${show(failure.replies, 80)}`)
      if (failure.output !== undefined) lines.push(`    output         ${failure.output}`)
    }
  }
  if (report.warnings.length > 0) {
    lines.push("", "warnings")
    for (const warning of report.warnings) {
      lines.push(`  ${warning.check}: env_config #${warning.configIndex} ${show(warning.config, 120)}: ${warning.message}`)
    }
  }
  const s = report.stats
  lines.push(
    "",
    `${s.envs} envs created and closed, ${s.resets} resets, ${s.steps} steps ` +
      `(episodes: ${s.episodesDone} done, ${s.episodesAtMaxSteps} at the step limit, ${s.episodesFailed} failed); ` +
      `finalizers: ${s.finalizersRegistered} registered, ${s.finalizersRun} ran`
  )
  return lines.join("\n")
}

/**
 * The report as one JSON document (big integers in configs kept exact).
 *
 * @since 0.1.0
 * @category rendering
 */
export const toJson = (report: Report): string => Json.stringify(Schema.encodeSync(Report)(report))

/** A record's own keys in snake_case; `config` and `configs` are the env's data and stay as they are. */
const snakeKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(snakeKeys)
  if (value === null || typeof value !== "object") return value
  return Object.fromEntries(Object.entries(value).map(([key, v]) => [
    Json.snakeCase(key),
    key === "config" || key === "configs" ? v : snakeKeys(v)
  ]))
}

/**
 * The report as `check-env --json` prints it: {@link toJson}'s document with snake_case keys
 * (`max_steps`, `stats.episodes_done`, `failures[].config_index`), as `run --json` and the
 * completions log name theirs. The env_configs inside are data and stay as they are.
 *
 * @since 0.4.0
 * @category rendering
 */
export const toCliJson = (report: Report): string => Json.stringify(snakeKeys(Schema.encodeSync(Report)(report)))
