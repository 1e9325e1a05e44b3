/** Where the page's data comes from: the viewer's API, or the data embedded in a report. */
import type { Detail } from "../Detail.js"
import * as Model from "../Model.js"
import type { Embedded, Meta } from "../Protocol.js"
import { unpack } from "../Protocol.js"

export interface State {
  readonly versions: ReadonlyArray<number>
  readonly indexing: boolean
  readonly progress: Meta["progress"]
}

export interface Source {
  readonly kind: "server" | "report"
  readonly meta: () => Promise<Meta>
  readonly overview: (log: number) => Promise<Model.Overview>
  readonly trajectories: (log: number, query: Model.Query) => Promise<Model.Page & { readonly note?: string }>
  readonly trajectory: (log: number, line: number) => Promise<Detail>
  readonly compare: (options: ReturnType<typeof Model.parseCompareOptions>) => Promise<Model.Comparison>
  /** Live updates (the server's `/api/events`); returns how to stop. */
  readonly subscribe: (onState: (state: State) => void, onConnection: (open: boolean) => void) => () => void
}

const get = async <A>(url: string): Promise<A> => {
  const response = await fetch(url, { headers: { accept: "application/json" } })
  const text = await response.text()
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw new Error(`${url}: ${response.status} ${text.slice(0, 200)}`)
  }
  if (!response.ok) {
    const message = (body as { error?: { message?: string } }).error?.message
    throw new Error(message ?? `${url}: HTTP ${response.status}`)
  }
  return body as A
}

export const server = (api: string): Source => ({
  kind: "server",
  meta: () => get(`${api}/meta`),
  overview: (log) => get(`${api}/overview?log=${log}`),
  trajectories: (log, query) => {
    const params = Model.queryParams(query)
    params.set("log", String(log))
    params.set("offset", String(query.offset))
    params.set("limit", String(query.limit))
    return get(`${api}/trajectories?${params}`)
  },
  trajectory: (log, line) => get(`${api}/trajectory?log=${log}&line=${line}`),
  compare: (options) =>
    get(`${api}/compare?sort=${options.sort}&dir=${options.dir}&offset=${options.offset}&limit=${options.limit}`),
  subscribe: (onState, onConnection) => {
    const events = new EventSource(`${api}/events`)
    events.addEventListener("state", (event) => onState(JSON.parse((event as MessageEvent<string>).data) as State))
    events.onopen = () => onConnection(true)
    events.onerror = () => onConnection(false)
    return () => events.close()
  }
})

/** Lowercases ASCII letters only, as the server's search does (see LogIndex.searchNeedle). */
const asciiLower = (text: string) => text.replace(/[A-Z]+/g, (m) => m.toLowerCase())
const needle = (query: string) => asciiLower(JSON.stringify(query).slice(1, -1))

export const report = (data: Embedded): Source => {
  const summaries = data.summaries.map((list) => list.map(unpack))
  const texts = new Map<string, string>()
  const text = (key: string): string | undefined => {
    const detail = data.details[key]
    if (detail === undefined) return undefined
    let t = texts.get(key)
    if (t === undefined) texts.set(key, t = asciiLower(JSON.stringify(detail.line)))
    return t
  }
  const missing = (what: string) => Promise.reject(new Error(what))
  return {
    kind: "report",
    meta: () => Promise.resolve(data.meta),
    overview: (log) => (data.overviews[log] === undefined ? missing(`no log ${log}`) : Promise.resolve(data.overviews[log])),
    trajectories: (log, query) => {
      const list = summaries[log]
      if (list === undefined) return missing(`no log ${log}`)
      const q = query.q
      const match = q === undefined ? undefined : (s: Model.Summary) => text(`${log}:${s.line}`)?.includes(needle(q)) === true
      const page = Model.page(Model.select(list, query, match), list.length, query)
      const meta = data.meta.logs[log]
      const note = q !== undefined && meta !== undefined && meta.detailed < meta.browsable
        ? `text search covers the ${meta.detailed} trajectories this report holds in full`
        : undefined
      return Promise.resolve(note === undefined ? page : { ...page, note })
    },
    trajectory: (log, line) => {
      const detail = data.details[`${log}:${line}`]
      return detail === undefined
        ? missing(`line ${line} is not held in full in this report (size cap); open the log with effect-gym view to see it`)
        : Promise.resolve(detail)
    },
    compare: (options) =>
      summaries.length < 2
        ? missing("comparing needs two logs")
        : Promise.resolve(Model.compare(summaries[0], summaries[1], options)),
    subscribe: () => () => {}
  }
}
