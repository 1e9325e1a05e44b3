/**
 * Workload 4 at the setting the OpenAiCompat unit test used to time (32 requests in flight): the
 * server-mode client's completions per second. Speed is measured here, not in the test suite.
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

export const cases: ReadonlyArray<Case> = [{
  name: "server-mode client c=32",
  file: path.resolve(import.meta.dirname, "../server_client.ts"),
  args: ["--concurrency", "32", "--seconds", "3"],
  figures: (rs) => [
    {
      workload: "4. --mode server client (OpenAiCompat.layerUndici) -> zero-latency OpenAI-compatible server (own process, loopback), concurrency 32",
      figure: "chat completions/s",
      unit: "1/s",
      values: pick(rs, "completionsPerSecond")
    }
  ]
}]
