/**
 * Credentials in URLs (`http://user:pass@host/...`, `?token=...`) kept out of everything printed or
 * logged: the secrets of a URL are its user name, password and query values; `scrub` replaces each
 * occurrence of them in a text, so a message built by any library (with the URL raw, encoded or
 * decoded) comes out clean.
 */

const MASK = "***"

/**
 * What of a URL is secret: its password and query values always; its user name too, unless
 * `keepUser` (a database user says which cluster, and is no secret on its own).
 */
export interface Options {
  readonly keepUser?: boolean | undefined
}

/** The secret parts of a URL (raw, decoded and encoded), longest first; none for a URL without any. */
export const secretsOf = (url: string, options: Options = {}): ReadonlyArray<string> => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return []
  }
  const out = new Set<string>()
  const add = (value: string) => {
    if (value.length < 2) return
    out.add(value)
    try {
      const decoded = decodeURIComponent(value)
      if (decoded.length >= 2) out.add(decoded)
    } catch {
      // not percent-encoded
    }
    out.add(encodeURIComponent(value))
  }
  if (options.keepUser !== true) add(parsed.username)
  add(parsed.password)
  for (const [, value] of parsed.searchParams) add(value)
  for (const part of parsed.search.replace(/^\?/, "").split("&")) add(part.split("=").slice(1).join("="))
  return [...out].sort((a, b) => b.length - a.length)
}

/**
 * The URL as it may be shown: no password (nor user name, unless `keepUser`), query values masked.
 * A text that is not a URL is masked where a password or query values would be (between a `:` and
 * an `@`; after each `=`): it is most likely a URL mistyped.
 */
export const url = (text: string, options: Options = {}): string => {
  let parsed: URL
  try {
    parsed = new URL(text)
  } catch {
    return text.replace(/:[^:@/]*@/, `:${MASK}@`).replace(/=[^&]*/g, `=${MASK}`)
  }
  const keepUser = options.keepUser === true
  if ((keepUser || parsed.username === "") && parsed.password === "" && parsed.search === "") return text
  if (keepUser) {
    if (parsed.password !== "") parsed.password = MASK
  } else {
    parsed.username = ""
    parsed.password = ""
  }
  const keys = [...parsed.searchParams.keys()]
  parsed.search = ""
  let shown = parsed.toString()
  if (keys.length > 0) shown += "?" + keys.map((key) => `${key}=${MASK}`).join("&")
  return shown
}

/** The text with every secret replaced. */
export const scrub = (text: string, secrets: ReadonlyArray<string>): string => {
  let out = text
  for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(MASK)
  return out
}

/** A base URL taken apart for sending: credentials as Basic auth, the query for after each path. */
export interface Split {
  /** The URL without user name, password, query or fragment (and no trailing slash). */
  readonly plain: string
  /** The user name and password (decoded), sent as Basic auth; none without them. */
  readonly basic: readonly [string, string] | undefined
  /** The query's pairs, which go with every request after its path (not in the middle of it). */
  readonly query: ReadonlyArray<readonly [string, string]>
}

/** Takes a base URL apart (see {@link Split}); an unparsable URL is left as it is (validation says why). */
export const split = (baseUrl: string): Split => {
  let target: URL
  try {
    target = new URL(baseUrl)
  } catch {
    return { plain: baseUrl, basic: undefined, query: [] }
  }
  let basic: readonly [string, string] | undefined
  if (target.username !== "" || target.password !== "") {
    basic = [decodeURIComponent(target.username), decodeURIComponent(target.password)]
    target.username = ""
    target.password = ""
  }
  const query = [...target.searchParams]
  target.search = ""
  target.hash = ""
  return { plain: target.toString().replace(/\/+$/, ""), basic, query }
}
