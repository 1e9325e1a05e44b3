/** A rollout server's dashboard (`effect-gym serve` → `/dashboard`), fed by server-sent events. */
import type { DashboardSnapshot } from "../Protocol.js"
import * as Charts from "./charts.js"
import { h, num, replace } from "./dom.js"

export const dashboard = (el: HTMLElement, events: string, title: string) => {
  const value = (id: string) => h("div", { class: "stat-value", "data-testid": id }, "–")
  const cell = (id: string, label: string) => {
    const v = value(id)
    return { v, el: h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), v) }
  }
  const cells = {
    requests: cell("dash-requests", "requests in flight"),
    inFlight: cell("dash-in-flight", "trajectories in flight"),
    completed: cell("dash-completed", "trajectories completed"),
    rate: cell("dash-rate", "completed / s (10 s)"),
    admittedRate: cell("dash-admitted-rate", "admitted / s (10 s)"),
    failed: cell("dash-failed", "failed trajectories"),
    rejected: cell("dash-rejected", "requests refused (429)"),
    cancelled: cell("dash-cancelled", "trajectories cut")
  }
  const status = h("span", { class: "conn", "data-testid": "dash-status" }, "connecting…")
  const inFlightBox = Charts.box("dash-chart-in-flight", "In flight", null, 0)
  const rateBox = Charts.box("dash-chart-rate", "Rates (per second)", null, 0)
  const failures = h("tbody", null)
  const main = h("main", { class: "dashboard", "data-testid": "dashboard" })
  replace(el, main)
  replace(
    main,
    h("header", { class: "trajectory-head" }, h("h1", null, title), status),
    h("section", { class: "stats" }, Object.values(cells).map((c) => c.el)),
    h("section", { class: "charts" }, inFlightBox.el, rateBox.el),
    h("h2", null, "Recent failures"),
    h("table", { class: "table", "data-testid": "dash-failures" }, h("thead", null, h("tr", null, ["time", "trajectory", "uuid", "env", "error", "message"].map((t) => h("th", null, t)))), failures)
  )
  const inFlight = Charts.live(inFlightBox.plot, ["trajectories", "requests"], "in flight")
  const rates = Charts.live(rateBox.plot, ["completed/s", "admitted/s"], "trajectories per second")
  const source = new EventSource(events)
  source.onopen = () => replace(status, "live")
  source.onerror = () => replace(status, "disconnected (retrying)")
  source.addEventListener("snapshot", (event) => {
    const s = JSON.parse((event as MessageEvent<string>).data) as DashboardSnapshot
    replace(cells.requests.v, num(s.requestsInFlight))
    replace(cells.inFlight.v, `${num(s.trajectoriesInFlight)}${s.maxTrajectoriesInFlight === null ? "" : ` / ${num(s.maxTrajectoriesInFlight)}`}`)
    replace(cells.completed.v, num(s.completed))
    replace(cells.rate.v, s.completedPerSecond.toFixed(1))
    replace(cells.admittedRate.v, s.admittedPerSecond.toFixed(1))
    replace(cells.failed.v, num(s.failed))
    replace(cells.rejected.v, num(s.rejected))
    replace(cells.cancelled.v, num(s.cancelled))
    replace(status, s.draining ? "draining (shutting down)" : "live")
    inFlight.push(s.at, [s.trajectoriesInFlight, s.requestsInFlight])
    rates.push(s.at, [s.completedPerSecond, s.admittedPerSecond])
    replace(
      failures,
      s.recentFailures.map((f) =>
        h("tr", { "data-testid": "dash-failure" }, h("td", null, new Date(f.at).toLocaleTimeString()), h("td", null, f.id), h("td", null, f.uuid ?? ""), h("td", null, f.env ?? ""), h("td", null, h("code", null, f.tag)), h("td", { class: "message" }, f.message))
      )
    )
  })
}
