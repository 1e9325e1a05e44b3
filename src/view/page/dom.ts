/** A few DOM helpers: elements from tags, attributes and children; formatting. */

export type Child = Node | string | number | null | undefined | false | ReadonlyArray<Child>

export type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>

/** `h("a", { href: "#/x", class: "link" }, "text", child)`: strings become text nodes (never markup). */
export const h = <K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs | null = null, ...children: Array<Child>): HTMLElementTagNameMap[K] => {
  const el = document.createElement(tag)
  if (attrs !== null) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue
      if (typeof value === "function") el.addEventListener(key.replace(/^on/, ""), value)
      else if (value === true) el.setAttribute(key, "")
      else el.setAttribute(key, String(value))
    }
  }
  append(el, children)
  return el
}

export const append = (el: Node, children: ReadonlyArray<Child>): void => {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    if (Array.isArray(child)) append(el, child)
    else el.appendChild(typeof child === "object" ? (child as Node) : document.createTextNode(String(child)))
  }
}

export const replace = (el: Element, ...children: Array<Child>): void => {
  el.replaceChildren()
  append(el, children)
}

export const num = (x: number | null | undefined, digits = 3): string => {
  if (x === null || x === undefined || Number.isNaN(x)) return "–"
  if (Number.isInteger(x)) return x.toLocaleString("en-US")
  return x.toFixed(digits)
}

export const pct = (x: number | null | undefined): string => (x === null || x === undefined ? "–" : `${(x * 100).toFixed(1)}%`)

export const ms = (x: number | null | undefined): string => {
  if (x === null || x === undefined) return "–"
  if (x < 1) return `${x.toFixed(3)} ms`
  if (x < 1000) return `${x.toFixed(1)} ms`
  if (x < 60_000) return `${(x / 1000).toFixed(2)} s`
  return `${Math.floor(x / 60_000)} min ${((x % 60_000) / 1000).toFixed(0)} s`
}

export const bytes = (n: number): string =>
  n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : n < 1024 ** 3 ? `${(n / 1024 / 1024).toFixed(1)} MB` : `${(n / 1024 ** 3).toFixed(2)} GB`

/** A link to a hash route. */
export const link = (href: string, ...children: Array<Child>) => h("a", { href }, ...children)
