/**
 * A small least-recently-used cache of values that are costly to make and never change once made
 * (generated maps and puzzles, shared by every generation of a GRPO group).
 */
export class Lru<V> {
  private readonly entries = new Map<string, V>()

  constructor(readonly capacity: number) {}

  /** The value of `key`, made by `make` the first time (and again after it was evicted). */
  get(key: string, make: () => V): V {
    const cached = this.entries.get(key)
    if (cached !== undefined) {
      // refresh its place in the LRU order
      this.entries.delete(key)
      this.entries.set(key, cached)
      return cached
    }
    const value = make()
    if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!)
    this.entries.set(key, value)
    return value
  }
}
