// Loaded with `node --import` by the cluster benchmark: at its exit, the process writes the CPU time
// it used (user + system, all threads, in milliseconds) to $EFFECT_GYM_CPU_PROBE.
import { writeFileSync } from "node:fs"

const file = process.env.EFFECT_GYM_CPU_PROBE
if (file !== undefined && file !== "") {
  process.on("exit", () => {
    const usage = process.cpuUsage()
    writeFileSync(file, String((usage.user + usage.system) / 1000))
  })
}
