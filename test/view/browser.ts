/**
 * A real browser for the viewer's tests: Debian's Chromium (`/usr/bin/chromium`, installed by
 * `.ci/run` when missing) driven by playwright-core, started with the flags this closed network
 * needs and a new empty profile directory; and the viewer itself started as a user starts it (the
 * built CLI in a child process), its URL read from what it prints.
 */
import { NodeServices } from "@effect/platform-node"
import { Console, Effect, Exit, Option, Scope } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { ExitCode } from "../../src/cli/common.js"
import { viewJob } from "../../src/cli/ViewCommand.js"

export const CHROMIUM = process.env.EFFECT_GYM_CHROMIUM ?? "/usr/bin/chromium"

/**
 * Why the browser tests cannot run here, or undefined: the browser is not installed (its path:
 * `EFFECT_GYM_CHROMIUM`, default /usr/bin/chromium), or `EFFECT_GYM_SKIP_BROWSER=1` says to leave
 * them out. They are then skipped with a notice, or fail with `EFFECT_GYM_REQUIRE_SERVICES=1`
 * (CI: `.ci/run` installs Chromium); see test/services.ts.
 */
export const missing = process.env.EFFECT_GYM_SKIP_BROWSER === "1"
  ? "EFFECT_GYM_SKIP_BROWSER=1 leaves them out"
  : fs.existsSync(CHROMIUM)
  ? undefined
  : `${CHROMIUM} is missing (apt-get install -y chromium, or EFFECT_GYM_CHROMIUM=path)`

export const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

export const launch = async (): Promise<BrowserContext> => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-chromium-"))
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1400, height: 1000 }
  })
}

const bin = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")

export interface Served {
  readonly url: string
  readonly process: ChildProcess
  readonly output: () => { readonly stdout: string; readonly stderr: string }
  /** Sends SIGINT and gives the exit code. */
  readonly stop: () => Promise<number | null>
}

/**
 * Starts `effect-gym ...args` and waits until it prints a URL (`http://127.0.0.1:PORT`, on stdout
 * or stderr); the URL given ends with `/`.
 */
export const serve = (
  args: ReadonlyArray<string>,
  cwd: string,
  options: { readonly timeoutMs?: number; readonly env?: Record<string, string> } = {}
): Promise<Served> =>
  new Promise((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? 60_000
    const child = spawn(process.execPath, [bin, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...options.env } })
    let stdout = ""
    let stderr = ""
    let done = false
    const timer = setTimeout(() => {
      if (done) return
      done = true
      child.kill("SIGKILL")
      reject(new Error(`no URL within ${timeoutMs} ms: ${stdout} ${stderr}`))
    }, timeoutMs)
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)))
    const look = () => {
      const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(stdout + stderr)?.[1]
      if (url !== undefined && !done) {
        done = true
        clearTimeout(timer)
        resolve({
          url: `${url}/`,
          process: child,
          output: () => ({ stdout, stderr }),
          stop: () => {
            child.kill("SIGINT")
            return exited
          }
        })
      }
    }
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
      look()
    })
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString()
      look()
    })
    child.on("exit", (code) => {
      if (done) return
      done = true
      clearTimeout(timer)
      reject(new Error(`exited with ${code} before printing a URL: ${stdout} ${stderr}`))
    })
  })

/** Waits until the page has drawn the view its URL names (after a navigation or a redraw). */
export const rendered = async (page: Page, kind?: string) => {
  await page.waitForSelector(kind === undefined ? "main[data-rendered]" : `main[data-page="${kind}"]`)
  // drawn for the page's current URL: a goto that changes only the hash keeps the old view (and its
  // data-page) until the hashchange redraw is done (a string: the test's TypeScript has no DOM types)
  await page.waitForFunction(
    `document.querySelector("main")?.getAttribute("data-hash") === location.hash` +
      (kind === undefined ? "" : ` && document.querySelector("main")?.getAttribute("data-page") === ${JSON.stringify(kind)}`)
  )
}

/** Writes a screenshot into `dir` (and into `EFFECT_GYM_SCREENSHOTS`, when set, for the docs). */
export const screenshot = async (page: Page, dir: string, name: string, fullPage = false) => {
  const file = path.join(dir, `${name}.png`)
  await page.screenshot({ path: file, fullPage })
  const docs = process.env.EFFECT_GYM_SCREENSHOTS
  if (docs !== undefined && docs !== "") {
    fs.mkdirSync(docs, { recursive: true })
    fs.copyFileSync(file, path.join(docs, `${name}.png`))
  }
  return file
}

/** What a console-less command printed. */
const quiet = (lines: Array<string>): Console.Console => ({
  ...globalThis.console,
  log: (...xs: ReadonlyArray<unknown>) => void lines.push(xs.join(" ")),
  error: (...xs: ReadonlyArray<unknown>) => void lines.push(xs.join(" "))
})

/**
 * The `view` command's own job, in this process (no process start-up per server): serves until
 * `stop`. Options as on the command line.
 */
export const serveInProcess = async (
  files: ReadonlyArray<string>,
  options: { readonly plugins?: ReadonlyArray<string>; readonly model?: string; readonly tokenizer?: string } = {}
) => {
  const scope = await Effect.runPromise(Scope.make())
  const printed: Array<string> = []
  const result = await Effect.runPromise(
    viewJob({
      files: files as [string, ...Array<string>],
      port: 0,
      html: Option.none(),
      htmlMaxMb: 32,
      model: Option.fromUndefinedOr(options.model),
      tokenizer: Option.fromUndefinedOr(options.tokenizer),
      plugins: [...(options.plugins ?? [])]
    }).pipe(
      Scope.provide(scope),
      Effect.provide(NodeServices.layer),
      Effect.provideService(ExitCode, { set: () => {} }),
      Effect.provideService(Console.Console, quiet(printed))
    )
  )
  return { url: result.url!, printed, stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
