/**
 * A runner's inference identity (issue 28, item 6): what the runners of one run must share. The
 * refusal itself runs on PostgreSQL in Cluster.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { inferenceIdentity, type RunnerArgs } from "../../src/cli/RunnerCommand.js"
import { canonical } from "../../src/internal/inspect.js"

const args = (over: Partial<RunnerArgs>): RunnerArgs =>
  ({
    mode: "server",
    model: Option.some("Qwen/Qwen3-0.6B"),
    baseUrl: Option.some("http://10.0.0.1:8000/v1"),
    policy: Option.none(),
    policyOptions: {},
    seededSampling: false,
    noLogprobs: false,
    strictOpenai: false,
    tokenPath: Option.none(),
    toolParser: Option.none(),
    tokenizer: Option.none(),
    ...over
  }) as RunnerArgs

const id = (over: Partial<RunnerArgs>, kwargs?: Record<string, unknown>) => canonical(inferenceIdentity(args(over), kwargs))

describe("a runner's inference identity", () => {
  it("the same for what does not change samples: the server's URL, latency_ms, the order of the template kwargs", () => {
    expect(id({ baseUrl: Option.some("http://10.0.0.2:9000/v1") })).toBe(id({}))
    expect(id({ tokenPath: Option.some("auto") })).toBe(id({}))
    expect(id({ mode: "scripted", policy: Option.some("random"), policyOptions: { latency_ms: "20" } }))
      .toBe(id({ mode: "scripted", policy: Option.some("random") }))
    expect(id({}, { a: 1, b: { c: 2, d: 3 } })).toBe(id({}, { b: { d: 3, c: 2 }, a: 1 }))
    // a GGUF by its file name: each node has its own path
    expect(id({ mode: "colocate", model: Option.some("/a/qwen3.gguf") })).toBe(id({ mode: "colocate", model: Option.some("/b/qwen3.gguf") }))
  })

  it("differs for what does: mode, model, policy and its options, seeding, logprobs, strictness, kwargs", () => {
    const base = id({})
    for (
      const other of [
        id({ mode: "colocate" }),
        id({ model: Option.some("Qwen/Qwen3-1.7B") }),
        id({ seededSampling: true }),
        id({ noLogprobs: true }),
        id({ strictOpenai: true }),
        id({ tokenPath: Option.some("off") }),
        id({}, { enable_thinking: false })
      ]
    ) expect(other).not.toBe(base)
    expect(id({ mode: "scripted", policy: Option.some("random") })).not.toBe(id({ mode: "scripted", policy: Option.some("frozen-lake-solver") }))
    expect(id({ mode: "scripted", policy: Option.none() })).toBe(id({ mode: "scripted", policy: Option.some("random") }))
    expect(id({ mode: "scripted", policyOptions: { epsilon: "0.1" } })).not.toBe(id({ mode: "scripted" }))
  })
})

describe("a runner's inference identity (issue 28 item 6, hostile)", () => {
  // Runners with another --tool-parser, or a --tokenizer folder of another model, shared a run.
  it("differs for the tool parser and the tokenizer's content, not the tokenizer's path", () => {
    expect(id({ toolParser: Option.some("mistral") })).not.toBe(id({}))
    expect(id({ toolParser: Option.some("hermes") })).toBe(id({}))
    const folder = (tokenizer: string) => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-gym-tokenizer-"))
      fs.writeFileSync(path.join(dir, "tokenizer.json"), tokenizer)
      fs.writeFileSync(path.join(dir, "tokenizer_config.json"), "{}")
      return dir
    }
    const a = folder("{\"model\": \"a\"}")
    const sameAsA = folder("{\"model\": \"a\"}")
    const b = folder("{\"model\": \"b\"}")
    expect(id({ tokenizer: Option.some(a) })).toBe(id({ tokenizer: Option.some(sameAsA) }))
    expect(id({ tokenizer: Option.some(a) })).not.toBe(id({ tokenizer: Option.some(b) }))
    expect(id({ tokenizer: Option.some(a) })).not.toBe(id({}))
    for (const dir of [a, sameAsA, b]) fs.rmSync(dir, { recursive: true, force: true })
  })
})
