/**
 * Every command and code block of the docs (README.md, docs/*.md and examples/ms_swift.md), run as it is written (issue 29,
 * item 2: "every command in the docs is run by a test").
 *
 * Each shell, TypeScript and Python block has a plan below, keyed by its page and first line; a block
 * without a plan (a new one) or a plan without its block fails the first test, so none is left out.
 *
 * - `shell`: the page's shell blocks run in order, in one bash script, in a fresh folder that looks like
 *   the clone's root (`examples/` and `bin/` linked), as a user follows the page in one terminal:
 *   `npx effect-gym` is `node bin/effect-gym.js`; `npm start` is the package's own script; `npm ci` and
 *   `npm test` are what CI itself runs (.ci/run), so they are not run again here. A server command
 *   (`serve`, `openenv serve`, `runner`, `view`, `run --view`) starts in the background and is waited
 *   for (its port answers); a page (`view`, `run --view`) is fetched, then stopped with SIGINT as a
 *   user's Ctrl-C would; a service stays up until the page's last block has run, then gets SIGINT.
 *   Each must end with 0 or 130. A model server the page starts (vLLM, llama.cpp, Ollama) is stood in
 *   for by the tests' OpenAI-compatible fake on the same port (test/inference/FakeOpenAi.ts), and the
 *   cluster's PostgreSQL by the tests' temporary one (test/cluster/postgres.ts) on the page's port.
 * - `plugin`: the block is saved as the file it names and loaded by the commands given.
 * - `program`: the block, in the package root (where `effect-gym` resolves as it does in a user's
 *   project), run with tsx; `wrap` puts a partial snippet inside `Effect.gen` with what the page's
 *   prose says it assumes.
 * - every TypeScript block also type-checks (tsc, strict), with `declare`s for the names the page's
 *   prose introduces.
 * - `ranBy`: another test runs it (named); `notRun`: why not, said here and on the page.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Postgres from "./cluster/postgres.js"
import * as FakeOpenAi from "./inference/FakeOpenAi.js"

const root = path.resolve(import.meta.dirname, "..")
// (examples/ms_swift.md too: the README sends ms-swift users there for its commands)
const pages = [
  "README.md",
  ...fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`),
  "examples/ms_swift.md"
]
const RUN_LANGS = new Set(["sh", "bash", "ts", "python"])

interface Block {
  readonly page: string
  readonly lang: string
  readonly line: number
  readonly body: string
  readonly key: string
}

const blocksOf = (page: string): Array<Block> => {
  const text = fs.readFileSync(path.join(root, page), "utf8")
  const out: Array<Block> = []
  // (a block may be indented, inside a list item: its lines lose that indentation)
  for (const match of text.matchAll(/^( *)```([a-z]*)[^\n]*\n([\s\S]*?)^\1```$/gm)) {
    const lang = match[2]
    if (!RUN_LANGS.has(lang)) continue
    const indent = match[1].length
    const body = match[3].split("\n").map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length))).join("\n")
    const line = text.slice(0, match.index).split("\n").length
    out.push({ page, lang, line, body, key: `${page} ${lang}: ${body.split("\n")[0].trim()}` })
  }
  return out
}
const blocks = pages.flatMap(blocksOf)

type Fake = { readonly openai: number } | { readonly postgres: number }
type Plan =
  | { readonly kind: "shell"; readonly files?: Record<string, string>; readonly env?: Record<string, string>; readonly fakes?: ReadonlyArray<Fake>; readonly expect?: ReadonlyArray<RegExp> }
  | { readonly kind: "plugin"; readonly file: string; readonly append?: string; readonly commands: ReadonlyArray<ReadonlyArray<string>>; readonly declare?: string }
  | { readonly kind: "program"; readonly wrap?: boolean; readonly expect: RegExp; readonly declare?: string }
  | { readonly kind: "typecheck"; readonly declare?: string; readonly wrap?: boolean }
  | { readonly kind: "ranBy"; readonly test: string; readonly name: string }
  | { readonly kind: "notRun"; readonly reason: string }

/** What library.md's snippets assume (its prose: run inside Effect.gen with the solver as the Inference layer). */
const LIBRARY = `import { Effect, Ref, Sink, Stream } from "effect"
import { FrozenLake, Policy, Rollout, ScriptedPolicies, Sudoku } from "effect-gym"
const lakes = (n: number) => Array.from({ length: n }, (_, seed) => ({ env_config: { seed, size: 4 } }))
`
const LIBRARY_RUN = `.pipe(Effect.provide(Policy.layer(ScriptedPolicies.frozenLakeSolver, { epsilon: 0.3 })))`

const PLANS: Record<string, Plan> = {
  "README.md sh: npm ci       # set up (installs and builds)": { kind: "shell", expect: [/trajectories {3}1024 \(128 groups\)/, /completions {4}completions-tools\.jsonl/] },
  "README.md sh: npm install effect-gym effect @effect/platform-node": { kind: "ranBy", test: "test/FreshProject.test.ts", name: "installs one copy of effect (4.x), shared with effect-gym" },
  "README.md sh: npm ci": { kind: "shell", expect: [/completions {4}random\.jsonl/, /frozen_lake/] },
  "README.md sh: npx effect-gym view completions.jsonl       # view: http://127.0.0.1:8300/ (Ctrl-C to stop)": { kind: "shell" },
  "README.md ts: import { Effect, Stream } from \"effect\"": { kind: "ranBy", test: "test/Cli.test.ts", name: "runs as it is written: one line of rewards per group" },
  "README.md sh: swift rollout --model Qwen/Qwen3-1.7B --port 8001 --vllm_use_async_engine true": { kind: "notRun", reason: "ms-swift and a GPU (docs/trainers.md says what was run)" },
  "docs/cluster.md sh: mkdir -p /tmp/pg && chown postgres /tmp/pg          # as root; or any directory you own": { kind: "notRun", reason: "starts PostgreSQL as root in /tmp/pg; the next block runs against the tests' temporary PostgreSQL on the same port (initdb and postgres as test/cluster/postgres.ts runs them)" },
  "docs/cluster.md sh: CLUSTER=postgres://postgres@127.0.0.1:5433/postgres": { kind: "shell", fakes: [{ postgres: 5433 }], expect: [/"trajectories": ?1024/] },
  "docs/envs.md ts: import { Env, Plugin } from \"effect-gym\"": {
    kind: "plugin",
    file: "guess.ts",
    commands: [["check-env", "guess", "--plugin", "guess.ts", "--seeds", "2", "--runs", "2"], ["envs", "--plugin", "guess.ts"]]
  },
  "docs/envs.md ts: import { Env, type Message, Tool } from \"effect-gym\"": {
    kind: "plugin",
    file: "adder.ts",
    append: "\nexport default Plugin.make({ envs: [adder] })\n",
    declare: "import { Plugin } from \"effect-gym\"",
    commands: [["check-env", "adder", "--plugin", "adder.ts", "--seeds", "1", "--runs", "1"]]
  },
  "docs/envs.md sh: npx effect-gym run --dataset calc.jsonl --env calculator --policy calculator-solver \\": {
    kind: "shell",
    files: { "calc.jsonl": Array.from({ length: 8 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n" },
    expect: [/completions {4}calc-out\.jsonl/, /completions {4}hints\.jsonl/, /completions {4}slippery\.jsonl/]
  },
  "docs/envs.md sh: npx effect-gym run --dataset examples/kv_store.jsonl --env kv_store --policy kv-store-solver \\": {
    kind: "shell",
    expect: [/tool calls {5}1048 \(0 answered with an error/, /completions {4}kv-out\.jsonl/, /kv_store: passed/]
  },
  "docs/envs.md sh: npx effect-gym run --dataset examples/frozen_lake.jsonl --plugin examples/frozen_lake_plugin.ts \\": { kind: "shell" },
  "docs/envs.md ts: const doubled = Scheduler.extend(Scheduler.gym, {": { kind: "typecheck", declare: "import { Effect } from \"effect\"\nimport { Scheduler } from \"effect-gym\"" },
  "docs/envs.md ts: import { Effect } from \"effect\"": {
    kind: "program",
    declare: "const myEnv = \"frozen_lake\"",
    expect: /^$/
  },
  "docs/envs.md ts: import { expect, it } from \"@effect/vitest\"": {
    kind: "typecheck",
    declare: "declare const myEnv: import(\"effect-gym\").Env.Definition\ndeclare const MyConfig: Schema.Struct<{ readonly max: Schema.Int }>"
  },
  "docs/envs.md sh: npx effect-gym check-env frozen_lake --action '<action>up</action>' --action '<action>down</action>'": {
    kind: "shell",
    // (my_env and my_plugin.ts stand for the reader's own: here a one-step env)
    files: {
      "my_plugin.ts": `import { Env, Plugin } from "effect-gym"
export default Plugin.make({ envs: [Env.make({ name: "my_env", create: () => ({
  reset: () => ({ observation: "Say hi.", info: {} }),
  step: () => ({ observation: "", reward: 1, done: true, info: {} })
}) })] })
`,
      "configs.jsonl": "{\"seed\":0}\n{\"seed\":1}\n"
    },
    expect: [/frozen_lake: passed/, /"ok": ?true/]
  },
  "docs/inference.md sh: vllm serve Qwen/Qwen2.5-1.5B-Instruct --port 8000": { kind: "shell", fakes: [{ openai: 8000 }], expect: [/completions {4}completions\.jsonl/] },
  "docs/inference.md sh: llama-server -m ./qwen2.5-1.5b-instruct-q4_k_m.gguf --port 8080 -np 8 -c 32768": { kind: "shell", fakes: [{ openai: 8080 }], expect: [/completions {4}llamacpp\.jsonl/] },
  "docs/inference.md sh: ollama pull qwen2.5:1.5b": { kind: "shell", fakes: [{ openai: 11434 }], expect: [/completions {4}ollama\.jsonl/] },
  "docs/inference.md sh: npx effect-gym run --dataset examples/frozen_lake.jsonl --env frozen_lake \\": {
    kind: "notRun",
    reason: "a 1 GB GGUF model (not in the clone); colocate mode runs with a small GGUF in test/inference/Colocate*.test.ts"
  },
  "docs/library.md ts: import { Effect, Stream } from \"effect\"": { kind: "program", expect: /row 1: rewards/ },
  "docs/library.md ts: const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake], numGenerations: 4, bufferSize: 4 })": { kind: "program", wrap: true, expect: /^$/ },
  "docs/library.md ts: const counts = yield* Ref.make<Record<string, number>>({})": { kind: "program", wrap: true, expect: /^$/ },
  "docs/library.md ts: const rollout = Rollout.make({ envs: [FrozenLake.FrozenLake, Sudoku.Sudoku], numGenerations: 2, maxTurns: 3 })": { kind: "program", wrap: true, expect: /^$/ },
  "docs/library.md ts: import { OpenEnvPool, OpenEnvScheduler } from \"effect-gym/openenv\"": {
    kind: "typecheck",
    wrap: true,
    declare: "declare const rows: Stream.Stream<{ readonly env_config: Record<string, unknown> }>"
  },
  "docs/openenv.md sh: # 1. a Sudoku server: at most 8 sessions, on 127.0.0.1 only (--host 0.0.0.0 to open it)": { kind: "shell", expect: [/completions {4}sudoku\.jsonl/] },
  "docs/server.md sh: npx effect-gym serve --port 8000 --env frozen_lake --mode server \\": { kind: "shell", fakes: [{ openai: 8001 }], env: { ROLLOUT_KEY: "docs-run-key" } },
  "docs/server.md sh: curl -s localhost:8000/v1/rollouts -H 'authorization: Bearer '\"$ROLLOUT_KEY\" \\": { kind: "shell", expect: [/"advantage"/] },
  "docs/server.md ts: import { NodeHttpClient } from \"@effect/platform-node\"": { kind: "typecheck" },
  "docs/trainers.md sh: # 1. the backend: vLLM inside ms-swift's rollout server, single-turn": { kind: "notRun", reason: "ms-swift and a GPU; --mode swift-rollout runs against a fake rollout server in test/rollout-server/Swift.test.ts" },
  "docs/trainers.md python: from effect_gym import Client, make_rollout_func": { kind: "ranBy", test: "test/clients/Python.test.ts", name: "" },
  "docs/python.md sh: node bin/effect-gym.js openenv serve --env frozen_lake --port 8000 --max-sessions 8": { kind: "ranBy", test: "test/PythonDocs.test.ts", name: "the standard-library snippet plays FrozenLake over /mcp against openenv serve" },
  "docs/python.md python: import json": { kind: "ranBy", test: "test/PythonDocs.test.ts", name: "the standard-library snippet plays FrozenLake over /mcp against openenv serve" },
  "docs/python.md python: import asyncio": { kind: "ranBy", test: "test/PythonDocs.test.ts", name: "OpenEnv's GenericEnvClient snippet plays a step against openenv serve" },
  "docs/python.md python: import random": { kind: "ranBy", test: "test/PythonDocs.test.ts", name: "effect-gym plays the page's Python OpenEnv env with --scheduler openenv" },
  "docs/python.md sh: node bin/effect-gym.js run --dataset compass.jsonl --scheduler openenv --num-generations 4 --max-turns 4 \\": { kind: "ranBy", test: "test/PythonDocs.test.ts", name: "effect-gym plays the page's Python OpenEnv env with --scheduler openenv" },
  "docs/viewer.md sh: npm start && npx effect-gym view completions.jsonl": { kind: "shell", expect: [/completions {4}live\.jsonl/] },
  "examples/ms_swift.md sh: # 1. the backend: vLLM inside ms-swift's rollout server, single-turn (no --use_gym_env, no scheduler:": { kind: "notRun", reason: "ms-swift, vLLM and a GPU (the page says what was run); --mode swift-rollout runs against a fake rollout server in test/rollout-server/Swift.test.ts" },
  "examples/ms_swift.md sh: node bin/effect-gym.js serve --port 18777 --env frozen_lake --policy frozen-lake-solver --max-turns 10": {
    kind: "shell",
    expect: [/"enable_multi_turn":true,"use_gym_env":true/, /"id":"chatcmpl-1"/, /"total_reward":1,"step_rewards":\[0,0,0,1\],"num_turns":4/]
  }
}

const planOf = (block: Block): Plan => PLANS[block.key]

describe("the docs' blocks, run (issue 29, item 2)", () => {
  it("every shell, TypeScript and Python block of the docs has a plan, and every plan its block", () => {
    expect(blocks.filter((b) => planOf(b) === undefined).map((b) => `${b.key} (line ${b.line})`)).toEqual([])
    const keys = new Set(blocks.map((b) => b.key))
    expect(Object.keys(PLANS).filter((k) => !keys.has(k))).toEqual([])
    for (const block of blocks) {
      const plan = planOf(block)
      if (plan.kind === "ranBy") {
        expect(fs.existsSync(path.join(root, plan.test)), plan.test).toBe(true)
        expect(fs.readFileSync(path.join(root, plan.test), "utf8")).toContain(plan.name)
      }
    }
  })

  it("every TypeScript block type-checks (tsc --strict, against the built package's types)", () => {
    const dir = fs.mkdtempSync(path.join(root, ".docs-check-"))
    try {
      const files: Array<string> = []
      blocks.forEach((block, i) => {
        const plan = planOf(block)
        if (block.lang !== "ts" || plan.kind === "ranBy" || plan.kind === "notRun") return
        const file = path.join(dir, `${i}-${path.basename(block.page, ".md")}-${block.line}.ts`)
        fs.writeFileSync(file, source(block, plan))
        files.push(file)
      })
      expect(files.length).toBeGreaterThanOrEqual(9)
      const tsc = spawnSync(process.execPath, [
        path.join(root, "node_modules/typescript/bin/tsc"), "--noEmit", "--strict", "--skipLibCheck", "--target", "es2022",
        "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node", "--exactOptionalPropertyTypes", ...files
      ], { cwd: root, encoding: "utf8", timeout: 120_000 })
      expect(tsc.stdout + tsc.stderr).toBe("")
      expect(tsc.status).toBe(0)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)

  for (const block of blocks.filter((b) => b.lang === "ts" && planOf(b)?.kind === "program")) {
    it(`${block.page}:${block.line} runs (tsx, in the package root)`, () => {
      const plan = planOf(block) as Extract<Plan, { kind: "program" }>
      const file = path.join(root, `.docs-run-${process.pid}-${block.line}.ts`)
      fs.writeFileSync(file, source(block, plan, true))
      try {
        const out = spawnSync(process.execPath, ["--import", "tsx", file], { cwd: root, encoding: "utf8", timeout: 90_000 })
        expect(out.status, out.stdout + out.stderr).toBe(0)
        expect(out.stderr.split("\n").filter((l) => /error|Error/.test(l))).toEqual([])
        expect(out.stdout).toMatch(plan.expect)
      } finally {
        fs.rmSync(file, { force: true })
      }
    }, 120_000)
  }

  for (const block of blocks.filter((b) => planOf(b)?.kind === "plugin")) {
    it(`${block.page}:${block.line} loads as a plugin and passes its commands`, () => {
      const plan = planOf(block) as Extract<Plan, { kind: "plugin" }>
      const dir = scratch()
      try {
        fs.writeFileSync(path.join(dir, plan.file), (plan.declare !== undefined ? plan.declare + "\n" : "") + block.body + (plan.append ?? ""))
        for (const command of plan.commands) {
          const out = spawnSync(process.execPath, [path.join(root, "bin/effect-gym.js"), ...command], { cwd: dir, encoding: "utf8", timeout: 90_000 })
          expect(out.status, `effect-gym ${command.join(" ")}\n${out.stdout}${out.stderr}`).toBe(0)
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }, 180_000)
  }

  for (const page of pages) {
    const shell = blocksOf(page).filter((b) => planOf(b)?.kind === "shell")
    if (shell.length === 0) continue
    it.effect(`${page}: its shell blocks run in order, as written`, () =>
      Effect.gen(function*() {
        const plans = shell.map((b) => planOf(b) as Extract<Plan, { kind: "shell" }>)
        const fakes = plans.flatMap((p) => p.fakes ?? [])
        for (const fake of fakes) {
          if ("openai" in fake) yield* FakeOpenAi.makeAt(fake.openai)
          else {
            yield* Effect.acquireRelease(Effect.promise(() => Postgres.start(fake.postgres)), (pg) => Effect.promise(() => pg.stop()))
          }
        }
        const dir = scratch()
        yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
        for (const plan of plans) for (const [name, content] of Object.entries(plan.files ?? {})) fs.writeFileSync(path.join(dir, name), content)
        const script = path.join(dir, ".docs.sh")
        fs.writeFileSync(script, PRELUDE + shell.map((b) => `echo "### ${b.page}:${b.line}"\n${commandsOf(b.body)}\n`).join("") + "__end\n")
        const env: Record<string, string> = { ...process.env as Record<string, string>, NO_COLOR: "1", ...Object.assign({}, ...plans.map((p) => p.env ?? {})) }
        delete env.EFFECT_GYM_RERUN
        const out = yield* Effect.promise(() =>
          new Promise<{ status: number | null; output: string }>((resolve) => {
            const child = execFile(script, dir, env)
            let output = ""
            child.stdout.on("data", (c: Buffer) => void (output += c.toString("utf8")))
            child.stderr.on("data", (c: Buffer) => void (output += c.toString("utf8")))
            const limit = setTimeout(() => child.kill("SIGKILL"), 240_000)
            child.on("close", (status) => {
              clearTimeout(limit)
              resolve({ status, output })
            })
          })
        )
        expect(out.status, out.output).toBe(0)
        for (const pattern of plans.flatMap((p) => p.expect ?? [])) expect(out.output, out.output).toMatch(pattern)
        expect(out.output).not.toMatch(/^(error|internal error):/m)
      }).pipe(Effect.scoped), 300_000)
  }
})

/** A fresh folder that looks like the clone's root. */
const scratch = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-docs-"))
  for (const name of ["examples", "bin"]) fs.symlinkSync(path.join(root, name), path.join(dir, name))
  return dir
}

const execFile = (script: string, cwd: string, env: Record<string, string>) =>
  spawn("bash", [script], { cwd, env, stdio: ["ignore", "pipe", "pipe"] })

/** The TypeScript to check or run for a block. */
const source = (block: Block, plan: Plan, run = false): string => {
  const declare = "declare" in plan && plan.declare !== undefined ? plan.declare + "\n" : ""
  const wrap = "wrap" in plan && plan.wrap === true
  if (block.page === "docs/library.md" && wrap) {
    const lines = block.body.split("\n")
    const imports = lines.filter((l) => l.startsWith("import ")).map((l) => l + "\n").join("")
    const body = lines.filter((l) => !l.startsWith("import ")).map((l) => "  " + l).join("\n")
    return `${LIBRARY}${imports}${declare}const program = Effect.gen(function*() {\n${body}\n})${run ? LIBRARY_RUN : ""}\n` +
      (run ? "Effect.runPromise(program)\n" : "void program\n")
  }
  const tail = run && plan.kind === "program" && !/Effect\.runPromise\(/.test(block.body) ? "\nEffect.runPromise(program)\n" : "\n"
  return `${declare}${block.body}${tail}` + (run ? "" : "export {}\n")
}

/** A block's commands for bash: servers go to the background (see the top of this file). */
const commandsOf = (body: string): string =>
  body.replace(/\\\n\s*/g, " ").split("\n").map((raw) => {
    const line = raw.replace(/\s+&\s*$/, "").trimEnd()
    if (/^\s*(vllm serve|llama-server|ollama pull)\b/.test(line)) return `echo "(stood in for by the tests' OpenAI-compatible server: ${line.replace(/"/g, "'")})"`
    const isEffectGym = /(npx effect-gym|bin\/effect-gym\.js)\s/.test(line)
    if (isEffectGym && /\s(view)\s/.test(line) && !/--html/.test(line)) return `__page ${quote(line)}`
    if (isEffectGym && /\srun\s.*--view\b/.test(line)) return `__page ${quote(line)} live`
    if (isEffectGym && /\s(serve|runner)\s/.test(line)) return `__service ${quote(line)}`
    return line
  }).join("\n")

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`

// (set -a: a variable the page sets, such as CLUSTER=..., reaches the servers' shells, as it would
// the user's one shell)
const PRELUDE = `set -eo pipefail -a
npx() { if [ "$1" = effect-gym ]; then shift; node bin/effect-gym.js "$@"; else echo "npx $1: not run by the docs test" >&2; return 1; fi; }
npm() {
  case "$*" in
    ci|test|"run test:unit"|"run test:docs") echo "(npm $*: CI runs it, .ci/run)" ;;
    start) node bin/effect-gym.js run --dataset examples/frozen_lake.jsonl --env frozen_lake --policy frozen-lake-solver --num-generations 8 --max-turns 10 --output completions.jsonl --overwrite ;;
    "run start:tools") node bin/effect-gym.js run --dataset examples/calculator.jsonl --env calculator --policy calculator-solver --num-generations 4 --max-turns 8 --output completions-tools.jsonl --overwrite ;;
    *) echo "npm $*: not run by the docs test" >&2; return 1 ;;
  esac
}
export -f npx npm
__services=""
__n=0
# Waits (90 s at most) for the port the command names (--port N, --view-port N), or the URL it prints.
__wait() {
  local pid=$1 log=$2 cmd=$3 port url
  port=$(printf '%s' "$cmd" | grep -oE -- '--(view-)?port [0-9]+' | tail -1 | grep -oE '[0-9]+$' || true)
  for _ in $(seq 1 900); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "exited before it served: $cmd"; cat "$log"; exit 1; fi
    url=$(grep -oE 'http://127\\.0\\.0\\.1:[0-9]+' "$log" | head -1 || true)
    if [ -n "$port" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "http://127.0.0.1:$port"; return 0; fi
    if [ -z "$port" ] && [ -n "$url" ]; then echo "$url"; return 0; fi
    sleep 0.1
  done
  echo "not served in 90 s: $cmd"; cat "$log"; exit 1
}
__stop() {
  local pid=$1 log=$2 code=0
  kill -INT -- "-$pid" 2>/dev/null || true
  wait "$pid" || code=$?
  cat "$log"
  if [ "$code" != 0 ] && [ "$code" != 130 ]; then echo "exit $code after SIGINT"; exit 1; fi
}
# A page: fetched (200), then stopped (a user's Ctrl-C); "live": a run with --view, stopped once the run is done.
__page() {
  __n=$((__n + 1)); local log=".server-$__n.log"
  # (setsid: a process group of its own, which a SIGINT reaches whole, as a terminal's Ctrl-C does)
  setsid bash -c "$1" > "$log" 2>&1 &
  local pid=$! url; url=$(__wait "$pid" "$log" "$1") || { echo "$url"; exit 1; }
  if [ "$2" = live ]; then
    for _ in $(seq 1 1200); do grep -q "the run is done" "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  curl -sf -o /dev/null "$url/" || { echo "GET $url/ failed"; cat "$log"; exit 1; }
  echo "(served $url)"
  __stop "$pid" "$log"
}
# A service: up until the page's end.
__service() {
  __n=$((__n + 1)); local log=".server-$__n.log"
  setsid bash -c "$1" > "$log" 2>&1 &
  local pid=$! url; url=$(__wait "$pid" "$log" "$1") || { echo "$url"; exit 1; }
  echo "(serving $url)"
  __services="$__services $pid:$log"
}
__end() { for s in $__services; do __stop "\${s%%:*}" "\${s#*:}"; done; }
trap 'for s in $__services; do kill -KILL -- "-\${s%%:*}" 2>/dev/null || true; done' EXIT
`
