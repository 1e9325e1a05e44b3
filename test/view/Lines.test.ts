import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import { isProblem, skim, summarize, summarizeValue } from "../../src/view/Lines.js"
import type { Summary } from "../../src/view/Model.js"

/** A log line in the writer's key order (token fields before timings, as `CompletionsLog.toLine` writes them). */
const line = (over: Record<string, unknown> = {}) => {
  const { timings, ...rest } = base(over)
  return { ...rest, timings }
}

const base = (over: Record<string, unknown>) => ({
  row: 3,
  generation: 1,
  id: "r3-g1",
  env: "frozen_lake",
  env_config: { seed: 3 },
  messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "<action>up</action>" }],
  rewards: { gym_reward: 1 },
  reward: 1,
  advantage: 0.5,
  rollout_infos: { gym_done: true, total_reward: 1, step_rewards: [1], num_turns: 1, reset_info: null, step_infos: [{}] },
  end_reason: "done",
  error: null,
  finish_reasons: ["stop"],
  timings: { total_ms: 4, reset_ms: 1, turns: [{ model_ms: 2, env_ms: 1 }] },
  ...over
})

const summary = (text: string) => {
  const s = summarize(text, "log.jsonl", 7)
  if (isProblem(s)) throw new Error(s.detail)
  return s
}

describe("a log line's summary", () => {
  it("reads the fields the browser needs", () => {
    expect(summary(JSON.stringify(line()))).toEqual<Summary>({
      line: 7,
      id: "r3-g1",
      row: 3,
      generation: 1,
      env: "frozen_lake",
      endReason: "done",
      reward: 1,
      envReward: 1,
      advantage: 0.5,
      turns: 1,
      totalMs: 4,
      modelMs: 2,
      envMs: 1,
      errorTag: null,
      errorMessage: null,
      tokens: false,
      config: "{\"seed\":3}",
      waitMs: 0,
      solved: null,
      rewards: { gym_reward: 1 },
      truncated: null,
      completionTokens: null,
      completionChars: "<action>up</action>".length
    })
  })

  it("solved, wait, reward columns, truncation and completion length: what the run's summary counts (issue 29)", () => {
    const s = summary(JSON.stringify(line({
      messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "a\n\"é✓\u0001" }, { role: "user", content: "x" }, {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{\"role\":\"assistant\"}" } }]
      }],
      rewards: { format: 0.5, gym_reward: 1 },
      rollout_infos: { total_reward: 1, step_rewards: [0, 1], num_turns: 2, reset_info: null, step_infos: [{ is_success: false }, { is_success: true }] },
      finish_reasons: ["stop", "length"],
      response_token_ids: [[1, 2, 3], [40, 5]],
      timings: { total_ms: 9, reset_ms: 1, reset_wait_ms: 2, turns: [{ model_ms: 1, env_ms: 1, wait_ms: 3 }, { model_ms: 1, env_ms: 0 }] }
    })))
    expect(s).toMatchObject({
      waitMs: 5,
      envMs: 1,
      solved: true,
      rewards: { format: 0.5, gym_reward: 1 },
      truncated: "length",
      completionTokens: 5,
      // (the model's text and its tool call's name and arguments, as the run's summary counts them)
      completionChars: "a\n\"é✓\u0001".length + "f".length + "{\"role\":\"assistant\"}".length
    })
    // a log written before wait_ms, a turn without ids, a failed trajectory (not solved, no columns)
    const old = summary(JSON.stringify(line({ response_token_ids: [[1], null], end_reason: "max_turns" })))
    expect([old.waitMs, old.completionTokens, old.truncated]).toEqual([0, null, "max_turns"])
    const failed = summary(JSON.stringify(line({
      reward: null,
      end_reason: "error",
      error: { _tag: "EnvError", message: "x" },
      rollout_infos: { total_reward: null, step_rewards: null, num_turns: 1, reset_info: null, step_infos: [{ is_success: true }] }
    })))
    expect([failed.solved, failed.rewards]).toEqual([false, null])
  })

  it("a failed trajectory has no reward; its error's tag and message are kept", () => {
    const s = summary(JSON.stringify(line({ reward: null, advantage: null, end_reason: "error", error: { _tag: "EnvError", message: "boom", phase: "step" } })))
    expect(s).toMatchObject({ reward: null, advantage: null, errorTag: "EnvError", errorMessage: "boom", endReason: "error" })
  })

  it("names the line and the field of what is wrong", () => {
    const problem = (text: string) => {
      const s = summarize(text, "log.jsonl", 7)
      if (!isProblem(s)) throw new Error("expected a problem")
      return `${s.kind} ${s.file}:${s.line}: ${s.detail}`
    }
    expect(problem("{\"row\": 1,")).toMatch(/^malformed log\.jsonl:7: not JSON: /)
    expect(problem("[1, 2]")).toBe("shape log.jsonl:7: not a JSON object (a completions log line is one object per line)")
    expect(problem(JSON.stringify(line({ row: "3" })))).toBe("shape log.jsonl:7: row: expected an integer")
    expect(problem(JSON.stringify(line({ end_reason: "bored" })))).toBe("shape log.jsonl:7: end_reason: expected \"done\", \"max_turns\" or \"error\", got \"bored\"")
    expect(problem(JSON.stringify(line({ rollout_infos: { total_reward: 1 } })))).toBe("shape log.jsonl:7: rollout_infos.num_turns: expected a number")
    expect(problem(JSON.stringify(line({ reward: "1" })))).toBe("shape log.jsonl:7: reward: expected a number or null")
    const { messages: _messages, ...noMessages } = line()
    expect(problem(JSON.stringify(noMessages))).toBe("shape log.jsonl:7: messages: missing")
  })

  it("the token arrays are noticed without being parsed", () => {
    const text = JSON.stringify(line({ response_token_ids: [[1, 2, 3]], response_loss_mask: [[1, 1, 1]], rollout_logprobs: [[-0.1, -0.2, -0.3]] }))
    const skimmed = skim(text)!
    expect(skimmed.__token_ids).toBe(true)
    expect(skimmed.response_token_ids).toBeUndefined()
    expect(skimmed.rollout_logprobs).toBeUndefined()
    expect(summary(text).tokens).toBe(true)
    // the token path's sequence, or its absence
    const sequence = JSON.stringify(line({ prompt_token_ids: [1, 2], token_ids: [3, 4], loss_mask: [1, 0], logprobs: [-0.5, null] }))
    expect(skim(sequence)!.__token_ids).toBe(true)
    expect(summary(sequence).tokens).toBe(true)
    const unavailable = JSON.stringify(line({ token_ids: null, token_ids_unavailable: "no token path" }))
    expect(skim(unavailable)!.__token_ids).toBe(false)
    expect(summary(unavailable).tokens).toBe(false)
  })

  // The fast path must never change a summary: lines whose strings and nested keys look like the
  // cut points (`"messages":[`, `],"rewards":`, `"timings":`) give the summary of a whole parse.
  const tricky = Schema.Literals([
    "],\"rewards\":",
    ",\"messages\":[",
    ",\"timings\":{",
    ",\"response_token_ids\":[",
    "\\\"",
    "\\\\",
    "\"",
    "}",
    "]",
    "é✓",
    "\n"
  ])
  const text = Arbitrary.array(
    Arbitrary.schema(Schema.Union([tricky, Schema.String.check(Schema.isMaxLength(5))])),
    { maxLength: 6 }
  ).pipe(Arbitrary.map((parts) => parts.join("")))
  const key = Arbitrary.schema(Schema.Union([
    Schema.Literals(["messages", "rewards", "timings", "response_token_ids", "reward", "num_turns"]),
    Schema.String.check(Schema.isMaxLength(4))
  ]))
  const ints = Arbitrary.schema(Schema.Array(Schema.Int).check(Schema.isMaxLength(3)))
  // one of text, an integer or an array of integers
  const value = Arbitrary.schema(Schema.Literals([0, 1, 2])).pipe(
    Arbitrary.flatMap((which): Arbitrary.Arbitrary<unknown> =>
      which === 0 ? text : which === 1 ? Arbitrary.schema(Schema.Int) : ints
    )
  )
  const nested = Arbitrary.array(Arbitrary.all([key, value]), { maxLength: 4 }).pipe(
    Arbitrary.map((entries) => Object.fromEntries(entries))
  )
  it.prop("the fast path gives the summary of a whole parse", [text, nested, nested, Schema.Literals([0, 1, 2, 3, 4])], ([content, config, info, withTokens]) => {
    const value = line({
      env_config: config,
      messages: [{ role: "user", content }, { role: "assistant", content: content + "!" }, { role: "assistant", content, tool_calls: [] }],
      rollout_infos: { gym_done: false, total_reward: 0.5, step_rewards: [0.5], num_turns: 1, reset_info: info, step_infos: [info] },
      error: { _tag: "EnvError", message: content, ...info },
      ...(withTokens === 1
        ? { response_token_ids: [[1, 2]], response_loss_mask: [[1, 1]], rollout_logprobs: [[-1, -2]] }
        : withTokens === 2
        ? { prompt_token_ids: [5], token_ids: [1, 9, 2], loss_mask: [1, 0, 1], logprobs: [-1, null, -2] }
        : withTokens === 3
        ? { token_ids: null, token_ids_unavailable: "the backend gave no prompt ids" }
        : withTokens === 4
        ? { response_token_ids: [[1, 2], null, [-3, 40, 5]], rollout_logprobs: [[-1, -2], null, [-1, -2, -3]] }
        : {})
    })
    const text = JSON.stringify(value)
    const whole = summarizeValue(JSON.parse(text), "f", 1)
    const fast = summarize(text, "f", 1)
    expect(fast).toEqual(whole)
    expect(isProblem(fast)).toBe(false)
    const s = fast as Summary
    expect(s.errorMessage).toBe(content.length > 300 ? content.slice(0, 300) + "…" : content)
    expect(s.config).toBe(JSON.stringify(config))
    expect(s.tokens).toBe(withTokens === 1 || withTokens === 2 || withTokens === 4)
    expect(s.envReward).toBe(0.5)
    expect(s.completionChars).toBe(content.length * 2 + 1)
    expect(s.completionTokens).toBe(withTokens === 1 ? 2 : null)
  })
})
