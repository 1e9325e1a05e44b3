/**
 * The viewer in a real browser (Debian's Chromium through playwright-core): the overview, the
 * trajectory browser's filters and URLs, the FrozenLake and Sudoku boards stepped through, the token
 * view, two logs compared, bad input, the self-contained report opened from disk. Assertions are on
 * the DOM, never on pixels; screenshots go to the test's temp dir.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { BrowserContext, Page } from "playwright-core"
import { cli } from "../cli.js"
import { needs } from "../services.js"
import * as Browser from "./browser.js"
import * as Logs from "./logs.js"

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

const chromium = needs("Chromium", Browser.missing)

describe.runIf(chromium)("the viewer in Chromium", () => {
  const dir = Logs.tmp()
  const shots = path.join(dir, "screenshots")
  let context: BrowserContext
  let page: Page
  let logs: {
    solver: { file: string; summary: Record<string, unknown> }
    random: { file: string; summary: Record<string, unknown> }
    mixed: { file: string; summary: Record<string, unknown> }
    sudoku: { file: string; summary: Record<string, unknown> }
    tokens: { file: string; summary: Record<string, unknown> }
  }
  const stops: Array<() => Promise<unknown>> = []
  /** The view command's job in this process (as `effect-gym view FILES [--plugin P]`). */
  const serve = async (...args: Array<string>) => {
    const plugins = args.flatMap((a, i) => (args[i - 1] === "--plugin" ? [a] : []))
    const files = args.filter((a, i) => a !== "--plugin" && args[i - 1] !== "--plugin")
    const served = await Browser.serveInProcess(files, { plugins })
    stops.push(served.stop)
    return served
  }
  /** The built command in a child process, as a user starts it. */
  const spawn = async (...args: Array<string>) => {
    const served = await Browser.serve(["view", ...args, "--port", "0"], dir)
    stops.push(async () => (served.process.exitCode === null ? served.stop() : undefined))
    return served
  }

  /** Navigates and waits for the view to be drawn. */
  const open = async (url: string, kind?: string) => {
    await page.goto(url)
    await Browser.rendered(page, kind)
  }
  /** Runs an action that redraws the view (a click that changes the URL), and waits for the redraw. */
  const redraw = async (action: () => Promise<unknown>) => {
    const before = await page.getAttribute("main", "data-rendered")
    await action()
    // (a string: the test's own TypeScript has no DOM types)
    await page.waitForFunction(`document.querySelector("main")?.getAttribute("data-rendered") !== ${JSON.stringify(before)}`)
  }
  const text = async (selector: string) => (await page.textContent(selector))?.trim() ?? ""
  const count = (selector: string) => page.locator(selector).count()

  beforeAll(async () => {
    fs.mkdirSync(shots, { recursive: true })
    logs = {
      solver: await run(Logs.frozenLake(dir, { rows: 16, policy: "frozen-lake-solver", generations: 8 })),
      random: await run(Logs.frozenLake(dir, { rows: 16, policy: "random", generations: 4 })),
      mixed: await run(Logs.mixed(dir)),
      sudoku: await run(Logs.sudoku(dir)),
      tokens: await run(Logs.tokens(dir))
    }
    context = await Browser.launch()
    page = await context.newPage()
    page.on("pageerror", (error) => {
      throw error
    })
  }, 120_000)

  afterAll(async () => {
    await context?.close()
    for (const stop of stops) await stop()
  })

  it("the overview of a run: its summary's figures, end reasons, failures by tag with links, charts", async () => {
    const server = await serve(logs.mixed.file, "--plugin", Logs.viewPlugin)
    await open(server.url, "overview")
    const summary = logs.mixed.summary as {
      trajectories: number
      groups: number
      failures: number
      success_rate: number
      solved: number
      solved_rate: number
      truncation_rate: number
      truncated_by_max_turns: number
      truncated_by_length: number
      mean_completion_chars: number
      mean_rewards: Record<string, number>
    }
    expect(await text("[data-testid=stat-trajectories] .stat-value")).toBe(String(summary.trajectories))
    expect(await text("[data-testid=stat-trajectories] .stat-sub")).toBe(`${summary.groups} groups`)
    expect(await text("[data-testid=stat-success] .stat-value")).toBe(`${(summary.success_rate * 100).toFixed(1)}%`)
    // issue 29: solved apart from a positive reward, truncation, completion length, each reward column's mean
    expect(await text("[data-testid=stat-solved] .stat-value")).toBe(`${(summary.solved_rate * 100).toFixed(1)}%`)
    expect(await text("[data-testid=stat-solved] .stat-sub")).toBe(`${summary.solved} of ${summary.trajectories}: the env's is_success`)
    expect(await text("[data-testid=stat-truncated] .stat-value")).toBe(`${(summary.truncation_rate * 100).toFixed(1)}%`)
    expect(await text("[data-testid=stat-truncated] .stat-sub")).toBe(
      `max_turns ${summary.truncated_by_max_turns} · length ${summary.truncated_by_length}`
    )
    // (as the page writes numbers: whole ones without decimals)
    const n = (x: number, digits: number) => (Number.isInteger(x) ? x.toLocaleString("en-US") : x.toFixed(digits))
    expect(await text("[data-testid=stat-completion] .stat-value")).toBe(`${n(summary.mean_completion_chars, 1)} chars`)
    const columns = await page.locator("[data-testid=reward-columns] tbody tr").allTextContents()
    expect(columns).toEqual(Object.entries(summary.mean_rewards).map(([column, mean]) => `${column}${n(mean, 4)}`))
    expect(await text("[data-testid=stat-failures] .stat-value")).toBe(String(summary.failures))
    expect(await text("[data-testid=stat-time] .stat-value")).toMatch(/^\d+\.\d% model$/)
    // failures grouped by error tag, with an example message and links to each example
    const row = page.locator("[data-testid=failure-EnvError]")
    expect(await row.locator("td").nth(1).textContent()).toBe(String(summary.failures))
    expect(await row.locator(".message").textContent()).toContain("the counter jammed at 2")
    expect(await row.locator("a").count()).toBeGreaterThan(1)
    // charts: uPlot canvases with their points
    for (const chart of ["chart-reward-histogram", "chart-reward-by-row", "chart-advantage", "chart-turns-reward", "chart-turns"]) {
      expect(await count(`[data-testid=${chart}] .uplot canvas`), chart).toBe(1)
      expect(Number(await page.getAttribute(`[data-testid=${chart}]`, "data-points")), chart).toBeGreaterThan(0)
    }
    await Browser.screenshot(page, shots, "view-overview", true)
    // an example link opens that trajectory, with its error
    await redraw(() => row.locator("a").first().click())
    expect(page.url()).toMatch(/#\/trajectory\/\d+$/)
    expect(await text("[data-testid=error] code")).toBe("EnvError")
    // the failure link lists all of them: a filtered browser
    await open(server.url, "overview")
    await redraw(() => row.locator("a", { hasText: "all" }).click())
    expect(page.url()).toContain("#/trajectories?tag=EnvError")
    expect(await count("[data-testid=trajectory-row]")).toBe(summary.failures)
  })

  it("the trajectory browser: filters, sort, text search, paging; every view has its URL", async () => {
    const server = await serve(logs.mixed.file)
    await open(`${server.url}#/trajectories`, "trajectories")
    expect(await text("[data-testid=matched]")).toBe("1–48 of 48 matched (48 trajectories)")
    await page.selectOption("[data-testid=filter-env]", "frozen_lake")
    await page.selectOption("[data-testid=filter-end]", "done")
    await page.fill("[data-testid=filter-min]", "0.5")
    await page.selectOption("[data-testid=filter-sort]", "turns")
    await redraw(() => page.click("[data-testid=apply]"))
    const url = page.url()
    expect(url).toContain("env=frozen_lake")
    expect(url).toContain("end=done")
    expect(url).toContain("min=0.5")
    expect(url).toContain("sort=turns")
    const rows = page.locator("[data-testid=trajectory-row]")
    const n = await rows.count()
    expect(n).toBeGreaterThan(0)
    const turns: Array<number> = []
    for (let i = 0; i < n; i++) {
      const cells = rows.nth(i).locator("td")
      expect(await cells.nth(2).textContent()).toBe("frozen_lake")
      expect(await cells.nth(3).textContent()).toBe("done")
      expect(Number(await cells.nth(4).textContent())).toBeGreaterThanOrEqual(0.5)
      turns.push(Number(await cells.nth(7).textContent()))
    }
    expect(turns).toEqual([...turns].sort((a, b) => b - a))
    // the same URL in a fresh page gives the same view
    const again = await context.newPage()
    await again.goto(url)
    await Browser.rendered(again, "trajectories")
    expect(await again.locator("[data-testid=trajectory-row]").count()).toBe(n)
    expect(await again.inputValue("[data-testid=filter-min]")).toBe("0.5")
    await again.close()
    // text search, case-insensitive
    await open(`${server.url}#/trajectories`, "trajectories")
    await page.fill("[data-testid=filter-q]", "JAMMED")
    await redraw(() => page.click("[data-testid=apply]"))
    expect(page.url()).toContain("q=JAMMED")
    expect(await count("[data-testid=trajectory-row]")).toBe((logs.mixed.summary as { failures: number }).failures)
    // a search that finds nothing says so
    await open(`${server.url}#/trajectories?q=no-such-text-anywhere`, "trajectories")
    expect(await count("[data-testid=no-match]")).toBe(1)
    // paging
    await open(`${server.url}#/trajectories?limit=20`, "trajectories")
    expect(await text("[data-testid=matched]")).toBe("1–20 of 48 matched (48 trajectories)")
    await redraw(() => page.click("text=next →"))
    expect(page.url()).toContain("offset=20")
    expect(await text("[data-testid=matched]")).toBe("21–40 of 48 matched (48 trajectories)")
    await Browser.screenshot(page, shots, "view-trajectories")
  })

  it("a FrozenLake trajectory: the conversation with each turn's step, the board stepped through to the end", async () => {
    const server = await serve(logs.solver.file)
    // a trajectory with several turns
    await open(`${server.url}#/trajectories?sort=turns`, "trajectories")
    const first = page.locator("[data-testid=trajectory-row]").first()
    const turns = Number(await first.locator("td").nth(7).textContent())
    expect(turns).toBeGreaterThan(2)
    await redraw(() => first.locator("a").first().click())
    expect(await count("[data-testid=step]")).toBe(turns)
    expect(await text("[data-testid=step] >> nth=-1")).toContain("done yes")
    const board = page.locator("[data-testid=board]")
    expect(await board.getAttribute("data-renderer")).toBe("frozen_lake")
    expect(Number(await board.getAttribute("data-frames"))).toBe(turns + 1)
    const player = async () => {
      const cells = page.locator("[data-testid=board-grid] td")
      const n = await cells.count()
      for (let i = 0; i < n; i++) if ((await cells.nth(i).getAttribute("title"))?.startsWith("player")) return i
      return -1
    }
    const positions = [await player()]
    for (let frame = 1; frame <= turns; frame++) {
      await redraw(() => page.click("[data-testid=board] >> text=next →"))
      expect(page.url()).toContain(`step=${frame}`)
      expect(Number(await board.getAttribute("data-frame"))).toBe(frame)
      positions.push(await player())
      // the cells walked so far are marked
      expect(await count("[data-testid=board-grid] td[data-tone=path]")).toBeGreaterThanOrEqual(frame > 1 ? 1 : 0)
      if (frame === 2) await Browser.screenshot(page, shots, "view-frozen-lake")
    }
    expect(new Set(positions).size).toBeGreaterThan(1)
    // the solver reaches the goal: the last frame has the player on it
    expect(await count("[data-testid=board-grid] td[data-tone=goal][title^=player]")).toBe(1)
    expect(await text("[data-testid=frame-notes]")).toContain("goal")
    // the "board" link of turn 1 goes back to that frame
    await redraw(() => page.click("[data-testid=message-assistant][data-turn='1'] >> text=board"))
    expect(Number(await board.getAttribute("data-frame"))).toBe(1)
  })

  it("a Sudoku trajectory: moves marked valid and invalid on the board", async () => {
    const server = await serve(logs.sudoku.file)
    await open(`${server.url}#/trajectories?sort=turns`, "trajectories")
    await redraw(() => page.locator("[data-testid=trajectory-row] a").first().click())
    const board = page.locator("[data-testid=board]")
    expect(await board.getAttribute("data-renderer")).toBe("sudoku")
    const frames = Number(await board.getAttribute("data-frames"))
    let valid = 0
    let invalid = 0
    for (let frame = 1; frame < frames; frame++) {
      await redraw(() => page.click("[data-testid=board] >> text=next →"))
      valid += await count("[data-testid=board-grid] td[data-tone=valid]")
      invalid += await count("[data-testid=board-grid] td[data-tone=invalid]")
      expect(await count("[data-testid=board-grid] td")).toBe(81)
    }
    expect(valid + invalid).toBe(frames - 1)
    expect(valid).toBeGreaterThan(0)
    await Browser.screenshot(page, shots, "view-sudoku")
  })

  it("the token view: each token, trained tokens highlighted, logprob as colour; ids only without a tokenizer, and it says so", async () => {
    const server = await serve(logs.tokens.file)
    await open(`${server.url}#/trajectory/1`, "trajectory")
    await redraw(() => page.click("[data-testid=tab-tokens]"))
    expect(page.url()).toContain("tab=tokens")
    expect(await text("[data-testid=tokens-note]")).toContain("--model FILE.gguf")
    const tokens = page.locator("[data-testid=token]")
    const n = await tokens.count()
    expect(n).toBeGreaterThan(5)
    // the fake server's ids are the reply's bytes: "<action>..." starts with 60 ("<")
    expect(await tokens.first().textContent()).toBe("60")
    expect(await tokens.first().getAttribute("class")).toContain("trained")
    expect(await tokens.first().getAttribute("data-logprob")).toBe("-0.01")
    const colours = new Set<string>()
    for (let i = 0; i < Math.min(n, 40); i++) colours.add((await tokens.nth(i).getAttribute("style")) ?? "")
    expect([...colours].every((c) => /^background:hsla\(\d+, /.test(c)), [...colours].join(" ")).toBe(true)
    expect(colours.size).toBeGreaterThan(1) // logprobs differ, so do the colours
    // With the run's own tokenizer (--tokenizer DIR): each token's text, each turn checked against
    // its message, and the token path's whole sequence with its loss mask.
    const qwen3 = await run(Logs.qwen3Tokens(dir))
    const decoded = await Browser.serveInProcess([qwen3.file], { tokenizer: qwen3.tokenizer })
    stops.push(decoded.stop)
    await open(`${decoded.url}#/trajectory/1?tab=tokens`, "trajectory")
    expect(await text("[data-testid=tokens-note]")).toContain("Token text decoded with")
    const badges = page.locator("[data-testid=token-match]")
    expect(await badges.count()).toBeGreaterThan(0)
    for (let i = 0; i < (await badges.count()); i++) expect(await badges.nth(i).textContent()).toBe("decoded = message")
    const first = page.locator("[data-testid=token-turn] [data-testid=token]").first()
    expect(await first.getAttribute("class")).not.toContain("id-only")
    expect(await count("[data-testid=token-sequence]")).toBe(1)
    expect(await count("[data-testid=token-sequence] > .token-row [data-testid=token][data-mask='1']")).toBeGreaterThan(0)
    await Browser.screenshot(page, shots, "view-tokens")
  })

  it("two logs compared: per-row change, the rows that changed most first, links into each log", async () => {
    const server = await serve(logs.solver.file, logs.random.file)
    await open(`${server.url}#/compare`, "compare")
    const rows = page.locator("[data-testid=compare-row]")
    expect(await rows.count()).toBe(16)
    const deltas: Array<number> = []
    for (let i = 0; i < 16; i++) deltas.push(Math.abs(Number((await rows.nth(i).locator("td").nth(4).textContent())!.replace("–", "NaN"))))
    const known = deltas.filter((d) => !Number.isNaN(d))
    expect(known).toEqual([...known].sort((a, b) => b - a))
    expect(await text("[data-testid=compare-a] .stat-value")).toBe("1")
    expect(Number(await page.getAttribute("[data-testid=chart-delta]", "data-points"))).toBe(16)
    await redraw(() => rows.first().locator("a", { hasText: "B" }).click())
    expect(page.url()).toMatch(/#\/trajectories\?log=1&row=\d+/)
    expect(await text("[data-testid=log-name] strong")).toContain("B: random.jsonl")
  })

  it("bad input: a torn last line and a file that is not JSONL are explained on the page (and on the command line)", async () => {
    const lines = fs.readFileSync(logs.random.file, "utf8").trim().split("\n")
    const torn = path.join(dir, "torn.jsonl")
    fs.writeFileSync(torn, lines.slice(0, 10).join("\n") + "\n" + lines[10].slice(0, 120))
    const server = await serve(torn)
    await open(server.url, "overview")
    expect(await text("[data-testid=problems]")).toContain("torn.jsonl:11: the last line is cut off (120 bytes without a newline")
    expect(await text("[data-testid=stat-trajectories] .stat-value")).toBe("10")
    const notes = path.join(dir, "notes.md")
    fs.writeFileSync(notes, "# my notes\n\nnot a log\n")
    const bad = await spawn(notes)
    await open(bad.url)
    expect(await text("[data-testid=problems] strong")).toBe("notes.md: nothing to show")
    expect(await text("[data-testid=problems]")).toContain("is this an effect-gym completions.jsonl?")
    expect(await count("[data-testid=nothing]")).toBe(1)
    await Browser.screenshot(page, shots, "view-bad-input")
    expect(await bad.stop()).toBe(1)
    expect(bad.output().stderr).toContain(`error: ${notes}: no line is a completions log line`)
  })

  it("a live run (effect-gym run --view): the page follows its progress and its log as they grow, then says it finished", async () => {
    const dataset = path.join(dir, "live-dataset.jsonl")
    fs.writeFileSync(dataset, Array.from({ length: 32 }, (_, seed) => JSON.stringify({ env_config: { seed } })).join("\n") + "\n")
    const output = path.join(dir, "live.jsonl")
    const run = await Browser.serve([
      "run", "--dataset", dataset, "--env", "frozen_lake", "--policy", "random", "--policy-option", "latency_ms=50",
      "--num-generations", "4", "--concurrency", "4", "--max-turns", "6", "--output", output, "--view", "--view-port", "0"
    ], dir)
    stops.push(async () => (run.process.exitCode === null ? run.stop() : undefined))
    await open(run.url, "overview")
    const live = "[data-testid=live]"
    const done = Number(await page.getAttribute(live, "data-done"))
    expect(await page.getAttribute(live, "data-finished")).toBe("no")
    await page.waitForFunction(`Number(document.querySelector(${JSON.stringify(live)})?.getAttribute("data-done")) > ${done}`)
    // the overview is redrawn as the log grows
    const shown = async () => Number((await text("[data-testid=stat-trajectories] .stat-value")).replace(/,/g, ""))
    const before = await shown()
    await page.waitForFunction(
      `Number(document.querySelector("[data-testid=stat-trajectories] .stat-value")?.textContent.replace(/,/g, "")) > ${before}`
    )
    await Browser.screenshot(page, shots, "view-live")
    await page.waitForSelector(`${live}[data-finished=yes]`, { timeout: 60_000 })
    await page.waitForFunction(`document.querySelector("[data-testid=stat-trajectories] .stat-value")?.textContent === "128"`)
    expect(await text(`${live} [data-testid=live-done]`)).toBe("128 / 128 trajectories")
    // the page stays up after the run; Ctrl-C ends the command with the run's exit code
    expect(run.output().stderr).toContain("view: the run is done; its page stays at")
    expect(await run.stop()).toBe(0)
    expect(run.output().stdout).toContain("trajectories   128 (32 groups)")
  })

  it("a rollout server's /dashboard behind its key: requests, in flight, rates and failures pushed as they happen", async () => {
    const key = "dashboard-test-key"
    const server = await Browser.serve(
      ["serve", "--port", "0", "--api-key-env", "VIEW_TEST_KEY", "--plugin", Logs.viewPlugin, "--env", "flaky_counter",
        "--policy", "random", "--policy-option", "latency_ms=20", "--num-generations", "4"],
      dir,
      { env: { VIEW_TEST_KEY: key } }
    )
    stops.push(async () => (server.process.exitCode === null ? server.stop() : undefined))
    // without the key: 401, with the header that makes a browser ask for it
    const anonymous = await fetch(`${server.url}dashboard`)
    expect(anonymous.status).toBe(401)
    expect(anonymous.headers.get("www-authenticate")).toContain("Basic")
    // the key as the password of HTTP Basic authentication, as a browser sends it after asking
    await page.setExtraHTTPHeaders({ authorization: `Basic ${Buffer.from(`me:${key}`).toString("base64")}` })
    try {
      await page.goto(`${server.url}dashboard`)
      await page.waitForSelector("[data-testid=dash-status]:has-text('live')")
      // a trainer sends batches; a third of the flaky env's trajectories fail
      const batches = Array.from({ length: 6 }, (_, i) =>
        fetch(`${server.url}v1/rollouts`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}` },
          body: JSON.stringify({ requests: [{ uuid: `batch-${i}`, env_config: { steps: 3 } }, { uuid: `batch-${i}b`, env_config: { steps: 2 } }], seed: i })
        }).then((r) => r.json() as Promise<Array<{ error: unknown }>>)
      )
      const results = (await Promise.all(batches)).flat()
      const failed = results.filter((r) => r.error !== null).length
      expect(results.length).toBe(48)
      expect(failed).toBeGreaterThan(0)
      await page.waitForFunction(`document.querySelector("[data-testid=dash-completed]")?.textContent === "48"`)
      await page.waitForFunction(`document.querySelector("[data-testid=dash-failed]")?.textContent === "${failed}"`)
      expect(await count("[data-testid=dash-failure]")).toBe(Math.min(failed, 50))
      expect(await text("[data-testid=dash-failure] >> nth=0")).toContain("the counter jammed at 2")
      expect(Number(await page.getAttribute("[data-testid=dash-chart-in-flight]", "data-points"))).toBeGreaterThan(1)
      await Browser.screenshot(page, shots, "view-dashboard")
    } finally {
      await page.setExtraHTTPHeaders({})
    }
    expect(await server.stop()).toBe(0)
  })

  it("a tool trajectory (calculator): each call shown under its reply, each tool message labelled with its call", async () => {
    const dataset = path.join(dir, "calc.jsonl")
    fs.writeFileSync(dataset, JSON.stringify({ env_config: { seed: 3 } }) + "\n")
    const file = path.join(dir, "calc-out.jsonl")
    const ran = await run(cli(
      "run", "--dataset", dataset, "--env", "calculator", "--policy", "calculator-solver", "--num-generations", "1",
      "--max-turns", "8", "--output", file
    ))
    expect(ran.code).toBe(0)
    const server = await serve(file)
    await open(`${server.url}#/trajectory/1`, "trajectory")
    // 3 lookups, 3 products, 2 sums
    expect(await count("[data-testid=tool-call]")).toBe(8)
    expect(await text("[data-testid=message-assistant][data-turn='1'] [data-testid=tool-call] >> nth=0"))
      .toMatch(/^→ lookup\(\{"item": "[a-z]+"\}\)  \[call_r0-g0_1_0\]$/)
    expect(await count("[data-testid=message-tool]")).toBe(8)
    // a reply that is only calls shows no empty text; the last reply, the answer, is text
    expect(await count("[data-testid=message-assistant] .content")).toBe(1)
    expect(await text("[data-testid=message-tool] .message-head >> nth=0")).toBe("tool lookup answers call_r0-g0_1_0")
    expect(await count("[data-testid=step]")).toBe(5)
    await Browser.screenshot(page, shots, "view-calculator")
  })

  it("hostile text in a log (markup in messages, env names, errors, infos) is shown as text, never run", async () => {
    const line = JSON.parse(fs.readFileSync(logs.mixed.file, "utf8").split("\n")[0]) as Record<string, unknown>
    const evil = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>"
    const hostile = {
      ...line,
      env: `"><svg onload=window.__pwned=1>`,
      messages: [{ role: "user", content: evil }, { role: "assistant", content: `</script>${evil}` }],
      end_reason: "error",
      reward: null,
      advantage: null,
      error: { _tag: "<b>EnvError</b>", message: evil },
      rollout_infos: { ...(line.rollout_infos as object), step_infos: [{ note: evil }] }
    }
    const file = path.join(dir, "hostile.jsonl")
    fs.writeFileSync(file, JSON.stringify(hostile) + "\n")
    let dialogs = 0
    page.on("dialog", (dialog) => {
      dialogs++
      void dialog.dismiss()
    })
    const server = await serve(file)
    for (const route of ["#/overview", "#/trajectories", "#/trajectory/1", "#/trajectory/1?tab=json"]) {
      await open(`${server.url}${route}`)
      expect(await page.evaluate("window.__pwned")).toBeUndefined()
    }
    await open(`${server.url}#/trajectory/1`, "trajectory")
    expect(await text("[data-testid=error]")).toContain(evil)
    expect(await text("[data-testid=message-user] .content")).toBe(evil)
    // the same in a report opened from disk (its data sits inside a script element)
    const out = path.join(dir, "hostile.html")
    expect((await run(cli("view", file, "--html", out))).code).toBe(0)
    await open(`file://${out}#/trajectory/1`, "trajectory")
    expect(await text("[data-testid=message-assistant] .content")).toBe(`</script>${evil}`)
    expect(await page.evaluate("window.__pwned")).toBeUndefined()
    expect(dialogs).toBe(0)
  })

  it("the --html report works from disk with no server: overview, filters, a trajectory's board", async () => {
    const out = path.join(dir, "report.html")
    const result = await run(cli("view", logs.mixed.file, "--html", out, "--plugin", Logs.viewPlugin))
    expect(result.code).toBe(0)
    await open(`file://${out}`, "overview")
    expect(await text("[data-testid=stat-trajectories] .stat-value")).toBe("48")
    expect(await count("[data-testid=connection]")).toBe(1)
    await open(`file://${out}#/trajectories?tag=EnvError`, "trajectories")
    expect(await count("[data-testid=trajectory-row]")).toBe((logs.mixed.summary as { failures: number }).failures)
    await page.fill("[data-testid=filter-q]", "counter jammed")
    await redraw(() => page.click("[data-testid=apply]"))
    expect(await count("[data-testid=trajectory-row]")).toBe((logs.mixed.summary as { failures: number }).failures)
    await open(`file://${out}#/trajectories?env=flaky_counter&end=done`, "trajectories")
    await redraw(() => page.locator("[data-testid=trajectory-row] a").first().click())
    expect(await page.getAttribute("[data-testid=board]", "data-renderer")).toBe("flaky_counter")
  })
})
