/**
 * Workload 8 (bench/workloads/token_path.ts): token in / token out against the chat path, through
 * the server-mode client and a zero-latency server in its own process (the figures are the client's
 * own cost per turn: template rendering and tokenizing of the new messages, longer request bodies).
 */
import * as path from "node:path"
import { pick } from "../../lib.js"
import type { Case } from "../../run.js"

const tokenPath = (which: "chat" | "tokens"): Case => ({
  name: `token path ${which}`,
  file: path.resolve(import.meta.dirname, "../token_path.ts"),
  args: ["--path", which, "--concurrency", "64", "--turns", "8", "--seconds", "3"],
  figures: (rs) => [
    {
      workload: `8. server-mode client, 8-turn FrozenLake-sized conversations, 64 in flight, ${
        which === "chat" ? "chat path (/chat/completions)" : "token path (/completions, token prompts, Qwen3 tokenizer in-process)"
      }`,
      figure: "completions/s",
      unit: "1/s",
      values: pick(rs, "completionsPerSecond")
    }
  ]
})

export const cases: ReadonlyArray<Case> = [tokenPath("chat"), tokenPath("tokens")]
