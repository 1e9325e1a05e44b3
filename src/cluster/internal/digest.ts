/**
 * A runner's registry digest: what it can run (every registered name, by kind) and the content
 * of its plugin files (not their paths: nodes keep them in different places).
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import type * as Registry from "../../Registry.js"

export const registryDigest = (registry: Registry.Registry, plugins: ReadonlyArray<string>): string => {
  const hash = createHash("sha256")
  const names = (kind: string, map: ReadonlyMap<string, unknown>) => hash.update(`${kind}:${[...map.keys()].sort().join(",")}\n`)
  names("env", registry.envs)
  names("scheduler", registry.schedulers)
  names("reward", registry.rewards)
  names("policy", registry.policies)
  const contents = plugins.map((file) => createHash("sha256").update(fs.readFileSync(file)).digest("hex")).sort()
  hash.update(`plugins:${contents.join(",")}\n`)
  return hash.digest("hex")
}
