// Preloaded with `node --import` into a process under measurement: samples the V8 heap every 20 ms
// and, when the process exits, writes the largest heap used and the peak RSS to the file named by
// EFFECT_GYM_HEAP_PROBE.
import * as fs from "node:fs"

const file = process.env.EFFECT_GYM_HEAP_PROBE
let peakHeap = 0
const sample = () => {
  const heap = process.memoryUsage().heapUsed
  if (heap > peakHeap) peakHeap = heap
}
setInterval(sample, 20).unref()
process.on("exit", () => {
  sample()
  fs.writeFileSync(file, JSON.stringify({ peakHeapBytes: peakHeap, peakRssBytes: process.resourceUsage().maxRSS * 1024 }))
})
