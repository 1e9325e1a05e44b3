import { describe, expect, it } from "@effect/vitest"
import * as TokenSequence from "../src/TokenSequence.js"

const sequence: TokenSequence.TokenSequence = {
  promptTokenIds: [1, 2, 3],
  tokenIds: [10, 11, 4, 5, 12, 6],
  lossMask: [1, 1, 0, 0, 1, 0],
  logprobs: [-1, -1, null, null, -1, null]
}

describe("TokenSequence drift check", () => {
  it("no drift when the re-tokenized conversation equals the sequence, or only goes on past it", () => {
    const check = new TokenSequence.DriftCheck()
    check.add("a", sequence, [1, 2, 3, 10, 11, 4, 5, 12, 6])
    check.add("b", sequence, [1, 2, 3, 10, 11, 4, 5, 12, 6, 99, 98])
    check.add("c", undefined, undefined)
    expect(check.report()).toEqual({ checked: 2, drifted: 0, unavailable: 1, tokens: 18 })
  })

  it("the first mismatch: its position, the turn whose prompt or reply holds it, and the tokens around it", () => {
    const at = (retokenized: Array<number>) => {
      const check = new TokenSequence.DriftCheck()
      check.add("x", sequence, retokenized)
      return check.report().first
    }
    expect(at([1, 2, 9])).toMatchObject({ index: 2, turn: 1 }) // in the first prompt
    expect(at([1, 2, 3, 10, 7])).toMatchObject({ index: 4, turn: 1 }) // in reply 1
    expect(at([1, 2, 3, 10, 11, 4, 7])).toMatchObject({ index: 6, turn: 2 }) // in turn 2's prompt
    expect(at([1, 2, 3, 10, 11, 4, 5, 7])).toMatchObject({ index: 7, turn: 2, expected: [11, 4, 5, 12, 6], retokenized: [11, 4, 5, 7] })
    expect(at([1, 2, 3, 10])).toMatchObject({ index: 4 }) // shorter: drifted where it stops
    const check = new TokenSequence.DriftCheck()
    check.add("y", sequence, [1, 2, 3, 10, 7])
    expect(TokenSequence.formatDrift(check.report())).toBe(
      "1 of 1 trajectories would drift if re-tokenized; first: y at token 4 (turn 1): [2, 3, 10, 11, 4, 5, 12, 6] vs re-tokenized [2, 3, 10, 7]"
    )
  })

  it("firstMismatch", () => {
    expect(TokenSequence.firstMismatch([1, 2], [1, 2])).toBeUndefined()
    expect(TokenSequence.firstMismatch([1, 2], [1, 2, 3])).toBeUndefined()
    expect(TokenSequence.firstMismatch([1, 2], [1])).toBe(1)
    expect(TokenSequence.firstMismatch([1, 2], [0, 2])).toBe(0)
  })
})
