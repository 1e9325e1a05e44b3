/**
 * The command line's help: every option with its default and whether it may be repeated
 * ({@link documented}, applied to each command's options), long option lists in groups, colour
 * only on a terminal ({@link formatter}), and a "did you mean" for a mistyped command
 * ({@link closest}).
 */
import { Option } from "effect"
import type { CliOutput, HelpDoc } from "effect/cli"
import { Param } from "effect/cli"

type AnyParam = Param.Param<Param.ParamKind, unknown>

/** What help says of a default: plain numbers and words; nothing for an off switch, an empty list or `none`. */
const shownDefault = (value: unknown): string | undefined => {
  if (typeof value === "number" && Number.isFinite(value)) return String(value)
  if (typeof value === "string" && value !== "") return value
  return undefined
}

/** What help reads of an option: its one description, its default (`withDefault`'s value), whether it may be repeated. */
interface Facts {
  readonly description: Option.Option<string> | undefined
  readonly singles: number
  readonly hasFallback: boolean
  readonly fallback: unknown
  readonly repeatable: boolean
}

/** {@link Facts} of an option, read from its public structure (effect/cli's `Param` models). */
const facts = (param: AnyParam): Facts => {
  let description: Option.Option<string> | undefined
  let singles = 0
  let hasFallback = false
  let fallback: unknown
  let repeatable = false
  const walk = (node: AnyParam): void => {
    switch (node._tag) {
      case "Single":
        singles++
        description = (node as Param.Single<Param.ParamKind, unknown>).description
        return
      case "Transform": {
        const transform = node as Param.Transform<Param.ParamKind, unknown, unknown>
        if (!hasFallback && transform.fallback?._tag === "Default") {
          hasFallback = true
          fallback = transform.fallback.value
        }
        return walk(transform.param)
      }
      case "Variadic": {
        const variadic = node as Param.Variadic<Param.ParamKind, unknown>
        const max = Option.getOrUndefined(variadic.max)
        if (max === undefined || max > 1) repeatable = true
        return walk(variadic.param)
      }
      case "Map":
        return walk((node as Param.Map<Param.ParamKind, unknown, unknown>).param)
      case "Optional":
        return walk((node as Param.Optional<Param.ParamKind, unknown>).param)
    }
  }
  walk(param)
  return { description, singles, hasFallback, fallback, repeatable }
}

/**
 * An option whose description says its default (`(default 8)`) and that it may be repeated
 * (`(repeatable)`), read from the option itself, so that help cannot disagree with what a run
 * uses. A description that already says either keeps its own words.
 */
export const documented = <P extends AnyParam>(param: P): P => {
  const { description, fallback, hasFallback, repeatable, singles } = facts(param)
  if (singles !== 1 || description === undefined) return param
  const text = Option.getOrElse(description, () => "")
  let extra = ""
  if (repeatable && !/repeatable/i.test(text)) extra += " (repeatable)"
  const shown = hasFallback ? shownDefault(fallback) : undefined
  if (shown !== undefined && !/\bdefault\b/i.test(text)) extra += ` (default ${shown})`
  return extra === "" ? param : Param.withDescription(param, `${text}${extra}`.trim()) as P
}

/** Each option of a command's options (a record, nested records included) {@link documented}. */
export const documentedAll = <C extends Record<string, unknown>>(config: C): C => {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(config)) {
    out[key] = Param.isParam(value)
      ? documented(value as AnyParam)
      : typeof value === "object" && value !== null && !Array.isArray(value)
      ? documentedAll(value as Record<string, unknown>)
      : value
  }
  return out as C
}

/**
 * The groups of a long option list (`run`, `serve`, `runner`), in order; an option in none goes
 * under "Other". A command with fewer options than {@link GROUPED_FROM} lists them as they are.
 */
const GROUPS: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
  ["DATASET AND ENV", [
    "dataset", "gym-env", "env", "scheduler", "scheduler-option", "max-concurrent-envs", "plugin", "reward-funcs",
    "reward-weights", "isolate-envs", "env-workers", "env-timeout"
  ]],
  ["GENERATION", [
    "seed", "num-generations", "max-turns", "policy", "policy-option", "temperature", "top-p", "top-k", "max-tokens",
    "stop", "presence-penalty", "frequency-penalty", "seeded-sampling"
  ]],
  ["INFERENCE", [
    "mode", "base-url", "model", "model-api-key-env", "strict-openai", "no-logprobs", "request-timeout",
    "retries", "inference-concurrency", "context-size", "gpu-layers", "threads", "token-path", "tokenizer",
    "chat-template-kwargs", "tito-check", "max-transport-failures", "tool-parser"
  ]],
  ["OUTPUT AND RESUME", ["output", "resume", "resume-force", "overwrite", "failed-groups", "json", "cluster"]],
  ["LIMITS AND TIMEOUTS", [
    "concurrency", "reset-timeout", "step-timeout", "close-timeout", "trajectory-timeout", "trajectory-retries"
  ]]
]
// (no "api-key-env" among INFERENCE: it is the model server's key only as the old alias of
// --model-api-key-env; an option of that name is a server's own key (serve), among its options)
const GROUPED_FROM = 16
const groupOf = new Map<string, string>(GROUPS.flatMap(([title, names]) => names.map((name) => [name, title] as const)))

/** Columns of plain text (ASCII: no grapheme segmentation, which cost a tenth of `--help`'s start-up). */
const width = (text: string): number => {
  // (wide or combining characters are rare in help; counted as one column each but for combining marks)
  // eslint-disable-next-line no-control-regex
  return /^[\x00-\x7f]*$/.test(text) ? text.length : [...text.replace(/\p{Mark}/gu, "")].length
}

interface Style {
  readonly bold: (text: string) => string
  readonly dim: (text: string) => string
  readonly cyan: (text: string) => string
  readonly green: (text: string) => string
}
const plain: Style = { bold: (t) => t, dim: (t) => t, cyan: (t) => t, green: (t) => t }
const ansi: Style = {
  bold: (t) => `\x1b[1m${t}\x1b[0m`,
  dim: (t) => `\x1b[2m${t}\x1b[0m`,
  cyan: (t) => `\x1b[36m${t}\x1b[0m`,
  green: (t) => `\x1b[32m${t}\x1b[0m`
}

/**
 * Rows of two columns, the left one padded to `column` (default: the widest left, at most `cap`)
 * plus two spaces; a left wider than that puts its description on the next line.
 */
const table = (
  rows: ReadonlyArray<readonly [string, string, number]>,
  cap: number,
  column = Math.min(cap, Math.max(0, ...rows.map(([, , w]) => w)))
): Array<string> => {
  return rows.map(([left, right, w]) =>
    right === "" ? `  ${left}` : w > column ? `  ${left}\n  ${" ".repeat(column + 2)}${right}` : `  ${left}${" ".repeat(column - w + 2)}${right}`
  )
}

/** A text without control characters (a description may come from a plugin: no escapes into the terminal). */
// eslint-disable-next-line no-control-regex
const clean = (text: string): string => text.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "")

const flagRows = (flags: ReadonlyArray<HelpDoc.FlagDoc>, style: Style): Array<readonly [string, string, number]> =>
  flags.map((flag) => {
    // (a one-letter option as it is typed: `-p`)
    const names = [flag.name.length === 1 ? `-${flag.name}` : `--${flag.name}`, ...flag.aliases]
    const type = flag.type === "boolean" ? "" : ` ${flag.type}`
    const left = names.join(", ") + type
    const description = clean(Option.getOrElse(flag.description, () => ""))
    // (effect/cli calls a repeatable option required: it may be given no times; its description says
    // so, "(repeatable)" or "(repeatable; ...)": --cors-origin's was shown as required)
    const required = flag.required && !/\(repeatable\b/.test(description) ? " (required)" : ""
    return [style.green(names.join(", ")) + (type === "" ? "" : style.dim(type)), description + required, width(left)] as const
  })

/**
 * effect/cli's help document as text: description, usage, arguments, options (in groups when
 * there are many), global options, subcommands and examples. Plain unless `color`.
 */
export const formatHelp = (doc: HelpDoc.HelpDoc, color: boolean): string => {
  const style = color ? ansi : plain
  const out: Array<string> = []
  const section = (title: string, lines: ReadonlyArray<string>) => {
    if (lines.length === 0) return
    out.push(style.bold(title), ...lines, "")
  }
  if (doc.description) section("DESCRIPTION", [`  ${clean(doc.description)}`])
  section("USAGE", [`  ${style.cyan(doc.usage)}`])
  if (doc.args !== undefined && doc.args.length > 0) {
    section("ARGUMENTS", table(doc.args.map((arg) => {
      const left = `${arg.name}${arg.variadic ? "..." : ""} ${arg.type}`
      const description = clean(Option.getOrElse(arg.description, () => "")) + (arg.required ? "" : " (optional)")
      return [style.green(`${arg.name}${arg.variadic ? "..." : ""}`) + style.dim(` ${arg.type}`), description, width(left)] as const
    }), 30))
  }
  if (doc.flags.length >= GROUPED_FROM) {
    const rows = flagRows(doc.flags, style)
    const cap = 40
    const byGroup = new Map<string, Array<readonly [string, string, number]>>()
    doc.flags.forEach((flag, i) => {
      const title = groupOf.get(flag.name) ?? "OTHER"
      const list = byGroup.get(title) ?? []
      list.push(rows[i])
      byGroup.set(title, list)
    })
    // (one column for every group, so the descriptions line up down the page)
    const column = Math.min(cap, Math.max(...rows.map(([, , w]) => w)))
    for (const title of [...GROUPS.map(([t]) => t), "OTHER"]) {
      const list = byGroup.get(title)
      if (list !== undefined) section(`${title} OPTIONS`, table(list, cap, column))
    }
  } else {
    section("FLAGS", table(flagRows(doc.flags, style), 40))
  }
  if (doc.inheritedFlags !== undefined && doc.inheritedFlags.length > 0) {
    section("INHERITED FLAGS", table(flagRows(doc.inheritedFlags, style), 40))
  }
  if (doc.globalFlags !== undefined && doc.globalFlags.length > 0) {
    section("GLOBAL FLAGS", table(flagRows(doc.globalFlags, style), 40))
  }
  for (const group of doc.subcommands ?? []) {
    section(
      group.group === undefined ? "SUBCOMMANDS" : `${group.group.toUpperCase()}:`,
      table(group.commands.map((sub) => {
        const name = sub.alias === undefined ? sub.name : `${sub.name}, ${sub.alias}`
        return [style.cyan(name), clean(sub.shortDescription ?? sub.description), width(name)] as const
      }), 20)
    )
  }
  if (doc.examples !== undefined && doc.examples.length > 0) {
    section("EXAMPLES", doc.examples.flatMap((example) => [
      ...(example.description === undefined ? [] : [`  ${style.dim(`# ${clean(example.description)}`)}`]),
      `  ${style.cyan(example.command)}`
    ]))
  }
  if (out[out.length - 1] === "") out.pop()
  return out.join("\n")
}

/**
 * The command line's formatter: effect/cli's for everything but help, which is {@link formatHelp}.
 * Colour only when `color` (stdout a terminal, no `NO_COLOR`, no `--no-color`).
 */
export const formatter = (base: CliOutput.Formatter, color: boolean): CliOutput.Formatter => ({
  ...base,
  formatHelpDoc: (doc) => formatHelp(doc, color)
})

/** Edit distance (insertions, deletions, substitutions, adjacent swaps) of two short words. */
const distance = (a: string, b: string): number => {
  const rows: Array<Array<number>> = []
  for (let i = 0; i <= a.length; i++) {
    rows.push([i])
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        rows[0].push(j)
        continue
      }
      let d = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2][j - 2] + 1)
      rows[i].push(d)
    }
  }
  return rows[a.length][b.length]
}

/**
 * The candidate closest to a mistyped `word` (`rnu` → `run`, `check-envs` → `check-env`), when it
 * is close enough to be what was meant (at most a third of its letters off, at least one), else
 * `undefined`.
 */
export const closest = (word: string, candidates: ReadonlyArray<string>): string | undefined => {
  if (word.length > 64) return undefined
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    // (case aside: `RUN` is `run` typed with caps lock on, three letters off as they are)
    const d = distance(word.toLowerCase(), candidate.toLowerCase())
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return best !== undefined && bestDistance <= Math.max(1, Math.floor(best.length / 3)) ? best : undefined
}
