// Bundles the viewer's page (src/view/page, TypeScript + uPlot) into dist/view/assets/page.js and
// page.css with esbuild: one script and one stylesheet, inlined by the viewer into every page and
// report, so the page needs no network. Run by `npm run build`.
import * as esbuild from "esbuild"
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "..")
const out = path.join(root, "dist/view/assets")
fs.mkdirSync(out, { recursive: true })

await esbuild.build({
  entryPoints: [path.join(root, "src/view/page/main.ts")],
  bundle: true,
  format: "iife",
  target: ["es2022"],
  minify: true,
  legalComments: "none",
  outfile: path.join(out, "page.js"),
  logLevel: "warning"
})

const uplotCss = fs.readFileSync(path.join(root, "node_modules/uplot/dist/uPlot.min.css"), "utf8")
const own = fs.readFileSync(path.join(root, "src/view/page/style.css"), "utf8")
const css = await esbuild.transform(`${uplotCss}\n${own}`, { loader: "css", minify: true })
fs.writeFileSync(path.join(out, "page.css"), css.code)
const size = (f) => `${(fs.statSync(path.join(out, f)).size / 1024).toFixed(0)} KB`
console.log(`view page: dist/view/assets/page.js ${size("page.js")}, page.css ${size("page.css")}`)
