/**
 * Tests that need a program installed on the machine, outside `npm ci`: the viewer's browser tests
 * (Chromium, test/view/browser.ts) and the cluster's tests (PostgreSQL's server, test/cluster/postgres.ts).
 * Where it is missing, they are skipped with a notice that says what to install; with
 * `EFFECT_GYM_REQUIRE_SERVICES=1` (CI sets it: `.ci/run`, which installs both) a missing one fails
 * the suite instead.
 */
import { describe, expect, it } from "@effect/vitest"

export const REQUIRE_SERVICES = "EFFECT_GYM_REQUIRE_SERVICES"

/** Whether a missing service fails the suite (`EFFECT_GYM_REQUIRE_SERVICES=1`) instead of skipping its tests. */
export const required = process.env[REQUIRE_SERVICES] === "1"

/**
 * Called at the top level of a test file whose tests need `service`: `missing` says why it cannot
 * be used here (undefined: it can). Gives whether the file's tests can run. When they cannot, it
 * adds one test in their place: skipped with the reason as its name and a notice on stderr, or,
 * with `EFFECT_GYM_REQUIRE_SERVICES=1`, one that fails with the reason.
 */
export const needs = (service: string, missing: string | undefined): boolean => {
  if (missing === undefined) return true
  describe(`needs ${service}`, () => {
    if (required) {
      it(`${service} is installed (${REQUIRE_SERVICES}=1)`, () => {
        expect.fail(`${service}: ${missing}`)
      })
    } else {
      console.warn(`NOTICE: the tests that need ${service} are SKIPPED: ${missing} (${REQUIRE_SERVICES}=1 makes this a failure)`)
      it.skip(`SKIPPED: ${missing}`, () => {})
    }
  })
  return false
}
