/**
 * Seed derivation: every trajectory and every model call gets its own seed from the run's seed and
 * its coordinates (row, generation, turn), so results do not depend on the order in which
 * concurrent trajectories happen to run.
 */

/** murmur3's 32-bit finalizer: a bijective avalanche of a 32-bit integer. */
const fmix32 = (h: number): number => {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** Combines a seed with a value into a new non-negative 31-bit seed. */
export const mixSeed = (seed: number, value: number): number =>
  fmix32((Math.imul(fmix32(seed >>> 0) ^ 0x9e3779b9, 31) + (value >>> 0)) >>> 0) & 0x7fffffff

/** A small, fast, seeded generator (mulberry32) for scripted policies. */
export class Rng {
  private state: number
  constructor(seed: number) {
    this.state = seed >>> 0
  }
  /** A float in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0
    let t = this.state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }
}
