/**
 * The integration project's global setup (vitest.config.ts): its tests run the built command line,
 * so `dist/` is built first, unless it was built from the sources there are now
 * (scripts/build-if-changed.mjs: a content hash of the inputs, not file times).
 */
// @ts-expect-error: a plain ES module script, without type declarations
import { ensureBuilt } from "../../scripts/build-if-changed.mjs"

export default function setup() {
  ensureBuilt()
}
