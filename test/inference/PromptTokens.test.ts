/** The token-in prompt builder with a toy template and a one-token-per-character tokenizer. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import type { ChatRequest, Completion } from "../../src/Inference.js"
import { tokenState } from "../../src/Inference.js"
import * as ChatTemplate from "../../src/inference/ChatTemplate.js"
import * as PromptTokens from "../../src/inference/PromptTokens.js"
import * as Message from "../../src/Message.js"

// `#` is the end-of-turn "special token": id 35.
const TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}#{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
const END = "#".charCodeAt(0)
const encode = (text: string) => Array.from(text, (c) => c.codePointAt(0)!)
const decode = (ids: ReadonlyArray<number>) => String.fromCodePoint(...ids)

const renderer = (source = TEMPLATE, isSpecial: ((id: number) => boolean) | undefined = (id) => id === END) =>
  PromptTokens.local({
    name: "toy",
    backend: "test",
    template: Result.getOrThrow(ChatTemplate.make(source)),
    encode,
    isSpecial
  })

const first: ChatRequest = { messages: [Message.user("hi")], sampling: {}, trajectoryId: "t", turn: 1, seed: 1 }

/** Turn 1's prompt, a reply sampled as `sampled`, then turn 2's prompt after `observation`. */
const twoTurns = (r: PromptTokens.Renderer, sampled: string, finishReason: Completion["finishReason"] = "stop", observation = "ok") =>
  Effect.gen(function*() {
    const p1 = yield* PromptTokens.prompt(r, first, undefined)
    const completion: Completion = { text: sampled.replace("#", ""), finishReason, tokenIds: encode(sampled), prompt: p1 }
    const covered = [...first.messages, Message.assistant(completion.text)]
    const previous = tokenState(completion, covered)!
    const p2 = yield* PromptTokens.prompt(r, { ...first, turn: 2, messages: [...covered, Message.user(observation)], previous }, undefined)
    return { p1: decode(p1.tokenIds), p2: decode(p2.tokenIds), reused: p2.reused, restarted: p2.restarted, previous }
  })

describe("PromptTokens", () => {
  it.effect("the next prompt is the previous prompt + the sampled tokens + what the template adds after the reply", () =>
    Effect.gen(function*() {
      // the model sampled its end of turn: kept once (the model's), not twice
      const a = yield* twoTurns(renderer(), "yo#")
      expect(a.p1).toBe("<user>hi#<assistant>")
      expect(a.p2).toBe("<user>hi#<assistant>yo#<user>ok#<assistant>")
      expect(a.reused).toBe(a.previous.tokenIds.length)
      // cut by max tokens: the template's end of turn is added
      const b = yield* twoTurns(renderer(), "yo", "length")
      expect(b.p2).toBe("<user>hi#<assistant>yo#<user>ok#<assistant>")
      // what the model sampled stays as sampled, even when the text would render otherwise
      const c = yield* twoTurns(renderer("{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}#{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"), "yo#")
      expect(c.restarted).toContain("does not render an assistant message's content as it is")
    }))

  it.effect("the end-of-turn token is deduplicated only when it is special (or, unknown, the turn stopped)", () =>
    Effect.gen(function*() {
      // `o` sampled last, the template adding `#`: nothing to drop
      const a = yield* twoTurns(renderer(), "yo")
      expect(a.p2).toBe("<user>hi#<assistant>yo#<user>ok#<assistant>")
      // not special: the sampled `#` is text the model wrote, and the template's `#` follows it
      const b = yield* twoTurns(renderer(TEMPLATE, () => false), "yo#")
      expect(b.p2).toBe("<user>hi#<assistant>yo##<user>ok#<assistant>")
      // unknown: a stopped turn's last token equal to the template's next one is the end of turn
      const c = yield* twoTurns(renderer(TEMPLATE, undefined), "yo#", "stop")
      expect(c.p2).toBe("<user>hi#<assistant>yo#<user>ok#<assistant>")
    }))

  it.effect("a marker already in the conversation, or nothing sampled: rendered afresh, with the reason", () =>
    Effect.gen(function*() {
      const a = yield* twoTurns(renderer(), "yo#", "stop", `look: ${PromptTokens.MARKER}`)
      expect(a.reused).toBe(0)
      expect(a.restarted).toContain("does not render an assistant message's content as it is")
      expect(a.p2).toBe(`<user>hi#<assistant>yo#<user>look: ${PromptTokens.MARKER}#<assistant>`)
      const b = yield* twoTurns(renderer(), "")
      expect(b.restarted).toBe("the previous turn sampled no tokens")
    }))
})
