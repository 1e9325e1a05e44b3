/**
 * The page: one HTML document with the page's script and styles inlined (built by
 * `npm run build` into `dist/view/assets/`) and its start-up configuration as JSON.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as Json from "../internal/Json.js"
import type { PageConfig } from "./Protocol.js"

/**
 * The page's built script and styles are missing.
 *
 * @since 0.1.0
 * @category errors
 */
export class AssetsError extends Schema.TaggedError<AssetsError>("effect-gym/view/AssetsError")("AssetsError", {
  detail: Schema.String
}) {
  override get message(): string {
    return this.detail
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Assets {
  readonly js: string
  readonly css: string
}

// Next to the compiled module (dist/view/assets), beside the bundle (dist/bundle -> dist/view/assets),
// or, when running from the sources, in dist.
const CANDIDATES = ["./assets/", "../view/assets/", "../../dist/view/assets/"]

let cached: Assets | undefined

/**
 * Reads the built page (once per process).
 *
 * @since 0.1.0
 * @category loading
 */
export const assets: Effect.Effect<Assets, AssetsError> = Effect.suspend(() => {
  if (cached !== undefined) return Effect.succeed(cached)
  for (const candidate of CANDIDATES) {
    const dir = fileURLToPath(new URL(candidate, import.meta.url))
    if (fs.existsSync(`${dir}page.js`) && fs.existsSync(`${dir}page.css`)) {
      cached = { js: fs.readFileSync(`${dir}page.js`, "utf8"), css: fs.readFileSync(`${dir}page.css`, "utf8") }
      return Effect.succeed(cached)
    }
  }
  return Effect.fail(
    new AssetsError({ detail: "the viewer's page is not built (dist/view/assets/page.js): run npm run build" })
  )
})

/**
 * JSON that is safe inside a `<script>` element: no `</` (which could close it) and no `<!--`;
 * both are rewritten with JSON escapes, which parse back to the same text.
 */
const scriptJson = (text: string): string => text.replace(/<\//g, "<\\/").replace(/<!--/g, "\\u003c!--")

const escapeHtml = (text: string): string =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

/**
 * The page's HTML. `configJson` is the {@link PageConfig} as JSON text (a report's can be large and
 * is written once).
 *
 * @since 0.1.0
 * @category rendering
 */
export const page = (assets: Assets, configJson: string, title: string): string =>
  "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">" +
  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">" +
  `<title>${escapeHtml(title)}</title><style>${assets.css}</style></head>` +
  `<body><div id="app"><p class="loading">Loading…</p></div>` +
  `<script type="application/json" id="effect-gym-config">${scriptJson(configJson)}</script>` +
  `<script>${assets.js.replace(/<\/script/gi, "<\\/script")}</script></body></html>\n`

/**
 * @since 0.1.0
 * @category rendering
 */
export const configJson = (config: PageConfig): string => Json.stringify(config)
