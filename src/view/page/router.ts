/** Hash routes: every view of the page has a URL (`#/trajectories?end=error&sort=reward`). */

export interface Route {
  readonly path: ReadonlyArray<string>
  readonly params: URLSearchParams
}

export const current = (): Route => {
  const hash = location.hash.replace(/^#\/?/, "")
  const [path, query] = hash.split("?", 2) as [string, string | undefined]
  return { path: path.split("/").filter((p) => p !== "").map(decodeURIComponent), params: new URLSearchParams(query ?? "") }
}

/** The URL of a route; `params` left out when empty. */
export const href = (path: ReadonlyArray<string | number>, params?: URLSearchParams | Record<string, string | number | undefined>): string => {
  const search = params instanceof URLSearchParams ? params : new URLSearchParams()
  if (params !== undefined && !(params instanceof URLSearchParams)) {
    for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== "") search.set(key, String(value))
  }
  const query = search.toString()
  return `#/${path.map((p) => encodeURIComponent(String(p))).join("/")}${query === "" ? "" : `?${query}`}`
}

export const go = (url: string): void => {
  if (location.hash !== url) location.hash = url
}
