/** Hostile-user regressions for the inference options' messages. */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, tmp } from "../cli.js"

describe("options of another mode, with --mode swift-rollout", () => {
  const dir = tmp()

  it.live("--tito-check and --model name both modes that take them (colocate takes them too)", () =>
    Effect.gen(function*() {
      const dataset = path.join(dir, "rows.jsonl")
      fs.writeFileSync(dataset, `{"env_config":{"seed":1}}\n`)
      for (const extra of [["--tito-check"], ["--model", "m.gguf"]]) {
        const result = yield* cli(
          "run", "--dataset", dataset, "--env", "frozen_lake", "--output", path.join(dir, "out.jsonl"),
          "--mode", "swift-rollout", "--base-url", "http://127.0.0.1:1", ...extra
        )
        expect(result.code).toBe(2)
        expect(result.stderr).toBe(`error: ${extra[0]}: only with --mode server or --mode colocate (this run has --mode swift-rollout)`)
      }
    }))
})

describe("--wizard without a terminal (it waited forever for input at end of stdin)", () => {
  const binPath = path.resolve(import.meta.dirname, "../../bin/effect-gym.js")
  for (const [name, args] of [["run", ["run", "--wizard"]], ["the top level", ["--wizard"]], ["envs", ["envs", "--wizard"]]] as const) {
    it(`${name}: refused at once (exit 2, the option named), stdin at its end or a pipe`, () => {
      for (const input of ["", "\n\n\n"]) {
        const result = spawnSync(process.execPath, [binPath, ...args], { input, timeout: 30_000, encoding: "utf8" })
        expect(result.signal, `${name}: still waiting after 30 s`).toBeNull()
        expect(result.status).toBe(2)
        expect(result.stderr).toContain("--wizard: asks its questions on a terminal, and stdin is not one")
      }
    })
  }

  const refusal = "--wizard: asks its questions on a terminal, and stdin is not one"
  const spawnBin = (args: ReadonlyArray<string>) => spawnSync(process.execPath, [binPath, ...args], { input: "", timeout: 30_000, encoding: "utf8" })

  // (hostile pass: `--wizard=true` started the wizard and waited forever, as before the refusal)
  for (
    const args of [
      ["envs", "--wizard=true"],
      ["openenv", "serve", "--wizard"],
      ["runner", "--wizard"],
      ["run", "--log-level", "debug", "--wizard"],
      ["--log-level=debug", "envs", "--wizard"],
      ["--version", "--wizard"],
      ["run", "--wizard", "--no-such-option"],
      // (Effect 4: effect/cli never takes a word that starts with "--" as an option's value, and
      // starts the wizard for --wizard with any value: these start it, so they are refused too)
      ["run", "--dataset", "--wizard"],
      ["envs", "--wizard=false"]
    ]
  ) {
    it(`${args.join(" ")}: the wizard would start, refused (exit 2)`, () => {
      const result = spawnBin(args)
      expect(result.signal, "still waiting after 30 s").toBeNull()
      expect(result.status).toBe(2)
      expect(result.stderr).toContain(refusal)
    })
  }

  // (hostile pass: these were refused with the wizard's message, a search of the words finding "--wizard")
  for (
    const [args, code, says] of [
      [["run", "--", "--wizard"], 2, "Expected to find option: '--dataset'"],
      [["envs", "--help", "--wizard"], 0, "List the registered envs"],
      [["envs", "--wizard", "--help"], 0, "List the registered envs"]
    ] as const
  ) {
    it(`${args.join(" ")}: no wizard to start (after --, --help first): what the command line says without one`, () => {
      const result = spawnBin(args)
      expect(result.signal, "still waiting after 30 s").toBeNull()
      expect(result.status).toBe(code)
      expect(result.stdout + result.stderr).toContain(says)
      expect(result.stderr).not.toContain(refusal)
    })
  }

  it("a closed stdin: refused (exit 2)", () => {
    const result = spawnSync("sh", ["-c", `exec "$0" "$1" envs --wizard <&-`, process.execPath, binPath], { timeout: 30_000, encoding: "utf8" })
    expect(result.signal, "still waiting after 30 s").toBeNull()
    expect(result.status).toBe(2)
    expect(result.stderr).toContain(refusal)
  })

  const hasScript = process.platform === "linux" && spawnSync("script", ["--version"]).status === 0
  for (const [name, key] of [["Ctrl-C", "\x03"], ["Ctrl-D", "\x04"]] as const) {
    it.skipIf(!hasScript)(`in a pseudo-terminal, ${name} at the first question: exit 130 (it was 0, as if all went well)`, async () => {
      const child = spawn("script", ["-qec", `"${process.execPath}" "${binPath}" envs --wizard`, "/dev/null"], {
        detached: true,
        stdio: ["pipe", "pipe", "pipe"]
      })
      let out = ""
      let typed = false
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString("utf8")
        if (!typed && out.includes("--plugin")) {
          typed = true
          setTimeout(() => child.stdin.write(key), 200)
        }
      })
      const code = await new Promise<number | null>((resolve) => {
        const timer = setTimeout(() => resolve(null), 30_000)
        child.on("close", (code) => {
          clearTimeout(timer)
          resolve(code)
        })
      })
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {
        // gone already
      }
      expect(out).toContain("Wizard cancelled.")
      expect(code, out).toBe(130)
    })
  }

  it.skipIf(!hasScript)("in a pseudo-terminal with stdout sent to a file: refused (exit 2; its questions went into the file)", () => {
    const dir = tmp()
    const file = path.join(dir, "rows.jsonl")
    const result = spawnSync("script", ["-qec", `"${process.execPath}" "${binPath}" dataset frozen-lake --wizard > "${file}"`, "/dev/null"], {
      input: "",
      timeout: 30_000,
      encoding: "utf8"
    })
    expect(result.status).toBe(2)
    expect(result.stdout).toContain("--wizard: asks its questions on a terminal, and stdout is not one")
    expect(fs.readFileSync(file, "utf8")).toBe("")
  })

  it.skipIf(!hasScript)("in a pseudo-terminal (script(1)): the wizard starts, its first question asked", async () => {
    const child = spawn("script", ["-qec", `"${process.execPath}" "${binPath}" envs --wizard`, "/dev/null"], {
      detached: true,
      stdio: ["pipe", "pipe", "pipe"]
    })
    let out = ""
    const seen = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 30_000)
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString("utf8")
        if (out.includes("--plugin")) {
          clearTimeout(timer)
          resolve(true)
        }
      })
      child.on("exit", () => {
        clearTimeout(timer)
        resolve(out.includes("--plugin"))
      })
    })
    try {
      process.kill(-child.pid!, "SIGKILL")
    } catch {
      // gone already
    }
    expect(out).not.toContain(refusal)
    expect(out).toContain("· Command wizard")
    expect(seen, out).toBe(true)
  })
})
