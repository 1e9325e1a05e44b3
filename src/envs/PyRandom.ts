/**
 * A faithful port of CPython's `random.Random` (MT19937) for the parts the reference envs use:
 * integer seeding of any size, `random()`, `getrandbits(k)` and `randrange(n)`.
 *
 * The same seed gives the same stream of numbers as Python, so envs that the reference generates
 * with `random.Random(seed)` can be reproduced seed for seed.
 *
 * @since 0.1.0
 */

const N = 624
const M = 397
// As int32 values: the state words are int32 (see PyRandom.mt).
const MATRIX_A = 0x9908b0df | 0
const UPPER_MASK = 0x80000000 | 0
const LOWER_MASK = 0x7fffffff

/**
 * The 32-bit words of `abs(seed)`, least significant first (`seed` 0 gives `[0]`), as CPython's
 * `random_seed` builds its key for `init_by_array`.
 */
export const seedToKey = (seed: bigint | number): Array<number> => {
  let n = typeof seed === "bigint" ? seed : BigInt(seed)
  if (n < 0n) n = -n
  if (n === 0n) return [0]
  const key: Array<number> = []
  while (n > 0n) {
    key.push(Number(n & 0xffffffffn))
    n >>= 32n
  }
  return key
}

/**
 * CPython's `random.Random`, seeded with an integer.
 *
 * @since 0.1.0
 * @category models
 */
export class PyRandom {
  // Int32Array rather than Uint32Array: every operation on the state is bitwise, and words read as
  // int32 stay small integers for V8 (words >= 2^31 read from a Uint32Array become doubles), which
  // makes the twist (with the branch-free mask below) about three times as fast: 56 against 166 ms of
  // CPU for 25M words, measured on the development machine.
  private readonly mt = new Int32Array(N)
  private mti = N + 1

  constructor(seed: bigint | number) {
    if (typeof seed === "number" && !Number.isInteger(seed)) {
      throw new RangeError(`PyRandom seeds are integers, got ${seed}`)
    }
    this.initByArray(seedToKey(seed))
  }

  private initGenrand(s: number): void {
    const mt = this.mt
    mt[0] = s >>> 0
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30)
      // 1812433253 * prev, modulo 2^32, without losing bits to float precision
      mt[i] = Math.imul(1812433253, prev) + i
    }
    this.mti = N
  }

  private initByArray(key: ReadonlyArray<number>): void {
    const mt = this.mt
    this.initGenrand(19650218)
    let i = 1
    let j = 0
    const keyLength = key.length
    for (let k = N > keyLength ? N : keyLength; k > 0; k--) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30)
      mt[i] = ((mt[i] ^ Math.imul(prev, 1664525)) + key[j] + j) >>> 0
      i++
      j++
      if (i >= N) {
        mt[0] = mt[N - 1]
        i = 1
      }
      if (j >= keyLength) j = 0
    }
    for (let k = N - 1; k > 0; k--) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30)
      mt[i] = ((mt[i] ^ Math.imul(prev, 1566083941)) - i) >>> 0
      i++
      if (i >= N) {
        mt[0] = mt[N - 1]
        i = 1
      }
    }
    mt[0] = UPPER_MASK
  }

  private twist(): void {
    const mt = this.mt
    let kk = 0
    for (; kk < N - M; kk++) {
      const y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK)
      mt[kk] = mt[kk + M] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A)
    }
    for (; kk < N - 1; kk++) {
      const y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK)
      mt[kk] = mt[kk + (M - N)] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A)
    }
    const y = (mt[N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK)
    mt[N - 1] = mt[M - 1] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A)
    this.mti = 0
  }

  /** The next 32-bit output of the generator (CPython's `genrand_uint32`). */
  nextUint32(): number {
    if (this.mti >= N) this.twist()
    return temper(this.mt[this.mti++])
  }

  /**
   * Advances the generator by `out.length` outputs, storing each one untempered: `temper(out[i])`
   * is what the i-th `nextUint32()` would have returned. Skipping over outputs this way costs the
   * twist and a copy, without tempering the words no one looks at.
   */
  rawWords(out: Int32Array): void {
    const mt = this.mt
    const length = out.length
    let filled = 0
    while (filled < length) {
      if (this.mti >= N) this.twist()
      const take = Math.min(N - this.mti, length - filled)
      out.set(mt.subarray(this.mti, this.mti + take), filled)
      filled += take
      this.mti += take
    }
  }

  /** A float in [0, 1) with 53 random bits, exactly as `random.random()`. */
  random(): number {
    const a = this.nextUint32() >>> 5
    const b = this.nextUint32() >>> 6
    return (a * 67108864 + b) / 9007199254740992
  }

  /** `random.getrandbits(k)` for 0 <= k <= 32. */
  getrandbits(k: number): number {
    if (!Number.isInteger(k) || k < 0 || k > 32) {
      throw new RangeError(`getrandbits supports 0..32 bits here, got ${k}`)
    }
    if (k === 0) return 0
    return this.nextUint32() >>> (32 - k)
  }

  /** `random.randrange(n)` for 0 < n < 2^32, by rejection sampling as CPython does. */
  randrange(n: number): number {
    if (!Number.isInteger(n) || n <= 0 || n > 0xffffffff) {
      throw new RangeError(`randrange supports 1..2^32-1 here, got ${n}`)
    }
    const k = bitLength(n)
    let r = this.getrandbits(k)
    while (r >= n) r = this.getrandbits(k)
    return r
  }
}

const bitLength = (n: number): number => 32 - Math.clz32(n)

/**
 * MT19937's output tempering of a state word (see {@link PyRandom.rawWords}): the output as an
 * unsigned 32-bit integer.
 *
 * @since 0.1.0
 * @category generation
 */
export const temper = (word: number): number => {
  let y = word
  y ^= y >>> 11
  y ^= (y << 7) & 0x9d2c5680
  y ^= (y << 15) & 0xefc60000
  y ^= y >>> 18
  return y >>> 0
}
