/**
 * Options that take several values after one flag (`--reward-funcs format length`,
 * `--reward-weights 0.2 1.0`), as the reference's command line does, are rewritten into repeated
 * flags (`--reward-weights 0.2 --reward-weights 1.0`) before parsing. Comma-separated lists work
 * too. Values stop at the next token that starts with `--`.
 */

const MULTI_VALUE = new Set(["--reward-funcs", "--reward-weights", "--plugin"])

/** Rewrites multi-value options of a full argv (node, script, arguments). */
export const normalizeArgv = (argv: ReadonlyArray<string>): Array<string> => {
  const out: Array<string> = []
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]
    const eq = token.indexOf("=")
    const flag = eq > 0 ? token.slice(0, eq) : token
    if (!MULTI_VALUE.has(flag) || i < 2) {
      out.push(token)
      continue
    }
    const values: Array<string> = []
    if (eq > 0) values.push(token.slice(eq + 1))
    while (i + 1 < argv.length && !argv[i + 1].startsWith("--") && (eq < 0 || values.length === 0)) {
      values.push(argv[++i])
    }
    const split = values.flatMap((v) => (flag === "--plugin" ? [v] : v.split(",").filter((s) => s !== "")))
    if (split.length === 0) out.push(flag)
    for (const value of split) out.push(flag, value)
  }
  return out
}

/**
 * The arguments without `--no-color` (a switch of the whole command line, for its help: any
 * command takes it), and whether it was given; one after `--` is an argument, left as it is.
 */
export const withoutNoColor = (args: ReadonlyArray<string>): { readonly args: Array<string>; readonly noColor: boolean } => {
  const end = args.indexOf("--")
  const out: Array<string> = []
  let noColor = false
  args.forEach((arg, i) => {
    if (arg === "--no-color" && (end < 0 || i < end)) noColor = true
    else out.push(arg)
  })
  return { args: out, noColor }
}

/** Options renamed so that one word means one thing on every command (issue 29): the old names still work, with a warning. */
const RENAMED: ReadonlyArray<{ readonly commands: ReadonlyArray<string>; readonly old: string; readonly now: string }> = [
  { commands: ["run", "serve"], old: "--gym-env", now: "--env" },
  { commands: ["run", "runner"], old: "--api-key-env", now: "--model-api-key-env" },
  { commands: ["serve"], old: "--inference-api-key-env", now: "--model-api-key-env" },
  { commands: ["openenv serve"], old: "--max-concurrent-envs", now: "--max-sessions" }
]

/**
 * The warnings for the old names of renamed options among `args` (the arguments after the
 * script): one per old name given, before `--`.
 */
export const renamedOptions = (args: ReadonlyArray<string>): Array<string> => {
  const words = args.slice(0, args.indexOf("--") < 0 ? undefined : args.indexOf("--"))
  // (past the flags before a command word: `--log-level debug run`, `openenv --log-level debug serve`)
  const next = (from: number): number => {
    let i = from
    while (i < words.length && words[i].startsWith("-")) i += words[i] === "--log-level" ? 2 : 1
    return i
  }
  const at = next(0)
  const sub = words[at] === "openenv" ? next(at + 1) : at
  const command = words[at] === "openenv" ? `openenv ${words[sub] ?? ""}` : words[at]
  if (command === undefined) return []
  const given = new Set(words.slice(at + 1).filter((_, i) => at + 1 + i !== sub).map((word) => word.split("=")[0]))
  return RENAMED.filter((r) => r.commands.includes(command) && given.has(r.old)).map((r) =>
    `warning: ${r.old} is an old name: use ${r.now} (${r.old} will be removed in a later release)`
  )
}

/** The old names of an option (`env` → `--gym-env`), on any command. */
export const oldNamesOf = (option: string): Array<string> =>
  [...new Set(RENAMED.filter((r) => r.now === `--${option}`).map((r) => r.old))]

/**
 * The name to suggest for `option` (`--gym-env`) on `command` (`run`, `openenv serve`): its new
 * name when it is an old one there (a did-you-mean pointed at the old name: `--gym_env` got
 * `--gym-env`), else itself.
 */
export const currentName = (option: string, command: string): string =>
  RENAMED.find((r) => r.old === option && r.commands.includes(command))?.now ?? option

/**
 * Options of one command given to another, where the other has its own word for it: `--max-sessions`
 * (openenv serve's cap) on run and serve, whose limit per OpenEnv server is `--max-concurrent-envs`.
 */
const ELSEWHERE: ReadonlyArray<{ readonly option: string; readonly commands: ReadonlyArray<string>; readonly meant: string; readonly why: string }> = [
  {
    option: "--max-sessions",
    commands: ["run", "serve"],
    meant: "--max-concurrent-envs",
    why: "--max-sessions is openenv serve's cap; here the limit of sessions per OpenEnv server is --max-concurrent-envs"
  }
]

/** What `option`, unknown on `command`, is called there, and why, when it is another command's word for it. */
export const elsewhere = (option: string, command: string): { readonly meant: string; readonly why: string } | undefined =>
  ELSEWHERE.find((e) => e.option === option && e.commands.includes(command))
