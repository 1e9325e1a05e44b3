import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { PyRandom, seedToKey, temper } from "../src/envs/PyRandom.js"

// Values printed by CPython 3.11: random.Random(s); [r.random(), r.randrange(4), r.randrange(7), r.getrandbits(32), r.random()]
const PYTHON: ReadonlyArray<readonly [bigint, number, number, number, number, number]> = [
  [0n, 0.8444218515250481, 3, 0, 1112038970, 0.9654648863619172],
  [1n, 0.13436424411240122, 0, 2, 506456969, 0.49543508709194095],
  [42n, 0.6394267984578837, 0, 5, 1181241943, 0.24489185380347622],
  [-7n, 0.32383276483316237, 1, 3, 2795742288, 0.04828642362681235],
  [4294967296n, 0.11299430095636409, 3, 0, 98019085, 0.6117214625782752],
  [8589934593n, 0.5845141492495678, 2, 3, 1719639555, 0.3118716830672884],
  [123456789012345678901234567890n, 0.7275084571578186, 1, 6, 50734197, 0.527044328073413]
]

describe("PyRandom", () => {
  it("reproduces CPython's random.Random for small, negative and multi-word seeds", () => {
    for (const [seed, a, b, c, d, e] of PYTHON) {
      const rng = new PyRandom(seed)
      expect([rng.random(), rng.randrange(4), rng.randrange(7), rng.getrandbits(32), rng.random()]).toEqual([a, b, c, d, e])
    }
  })

  it("splits seeds into 32-bit words, least significant first", () => {
    expect(seedToKey(0)).toEqual([0])
    expect(seedToKey(-5)).toEqual([5])
    expect(seedToKey(2n ** 32n + 7n)).toEqual([7, 1])
    expect(seedToKey(2n ** 64n)).toEqual([0, 0, 1])
  })

  it("accepts number and bigint seeds alike", () => {
    const a = new PyRandom(12345)
    const b = new PyRandom(12345n)
    for (let i = 0; i < 1000; i++) expect(a.nextUint32()).toBe(b.nextUint32())
  })

  it("rejects what CPython would not give here", () => {
    expect(() => new PyRandom(1.5)).toThrow(RangeError)
    expect(() => new PyRandom(1).randrange(0)).toThrow(RangeError)
    expect(() => new PyRandom(1).getrandbits(33)).toThrow(RangeError)
  })

  it.prop(
    "randrange(n) stays in [0, n) and random() in [0, 1), for any seed",
    [
      Schema.BigInt.check(Schema.isBetweenBigInt({ minimum: -(2n ** 96n), maximum: 2n ** 96n })),
      Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 0xffffffff }))
    ],
    ([seed, n]) => {
      const rng = new PyRandom(seed)
      for (let i = 0; i < 20; i++) {
        const r = rng.randrange(n)
        expect(Number.isInteger(r) && r >= 0 && r < n).toBe(true)
        const x = rng.random()
        expect(x >= 0 && x < 1).toBe(true)
      }
    }
  )

  it.prop("the same seed gives the same stream; abs(seed) seeds alike", [Schema.BigInt], ([seed]) => {
    const a = new PyRandom(seed)
    const b = new PyRandom(-seed)
    for (let i = 0; i < 10; i++) expect(a.random()).toBe(b.random())
  })

  it.prop(
    "rawWords skips outputs exactly: tempered, they are the next outputs, and the stream goes on alike",
    [
      Schema.BigInt.check(Schema.isBetweenBigInt({ minimum: -(2n ** 70n), maximum: 2n ** 70n })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1500 })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3000 }))
    ],
    ([seed, before, length]) => {
      const a = new PyRandom(seed)
      const b = new PyRandom(seed)
      for (let i = 0; i < before; i++) a.nextUint32()
      for (let i = 0; i < before; i++) b.nextUint32()
      const words = new Int32Array(length)
      a.rawWords(words)
      expect(Array.from(words, temper)).toEqual(Array.from({ length }, () => b.nextUint32()))
      expect([a.random(), a.random(), a.randrange(7)]).toEqual([b.random(), b.random(), b.randrange(7)])
    }
  )
})
