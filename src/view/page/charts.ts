/** The overview's charts, drawn with uPlot (canvas; fast with many points). */
import uPlot from "uplot"
import type { RowSeries } from "../Model.js"
import { h } from "./dom.js"

const COLORS = { main: "#2563eb", band: "rgba(37, 99, 235, 0.15)", alt: "#dc2626", grid: "#e5e7eb", ok: "#16a34a" }

const WIDTH = 520
const HEIGHT = 220

/** Tick steps for an axis of whole numbers (rows, turns): no 2.5 turns. */
const WHOLE = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000]

const axes = (x: string, y: string, wholeX = false): Array<uPlot.Axis> => [
  { label: x, grid: { stroke: COLORS.grid }, size: 36, ...(wholeX ? { incrs: WHOLE } : {}) },
  { label: y, grid: { stroke: COLORS.grid }, size: 56 }
]

/** A chart's box: title, the plot, a caption; `data-points` says how many points it draws (for tests). */
export const box = (testId: string, title: string, caption: string | null, points: number) => {
  const plot = h("div", { class: "plot" })
  const el = h("figure", { class: "chart", "data-testid": testId, "data-points": points }, h("figcaption", null, title), plot)
  if (caption !== null) el.appendChild(h("p", { class: "caption" }, caption))
  return { el, plot }
}

/** The plot's laid-out width (charts are drawn once their box is in the document). */
const width = (plot: HTMLElement) => Math.max(300, plot.clientWidth > 0 ? plot.clientWidth : WIDTH)

/** Bars at x with the given counts. */
export const bars = (plot: HTMLElement, x: ReadonlyArray<number>, counts: ReadonlyArray<number>, barWidth: number, xLabel: string, wholeX = false) => {
  if (x.length === 0) return plot.appendChild(h("p", { class: "empty" }, "no data"))
  const pad = barWidth / 2
  return new uPlot(
    {
      width: width(plot),
      height: HEIGHT,
      legend: { show: false },
      scales: { x: { time: false, range: [x[0] - pad, x[x.length - 1] + pad] }, y: { range: (_u, _min, max) => [0, max * 1.1 || 1] } },
      axes: axes(xLabel, "trajectories", wholeX),
      series: [
        {},
        {
          label: "trajectories",
          stroke: COLORS.main,
          fill: COLORS.band,
          paths: uPlot.paths.bars!({ size: [0.9, 80], align: 0 }),
          points: { show: false }
        }
      ]
    },
    [x as Array<number>, counts as Array<number>],
    plot
  )
}

/** A mean line with a min-max band, by row. */
export const band = (plot: HTMLElement, series: RowSeries, xLabel: string, yLabel: string) => {
  if (series.x.length === 0) return plot.appendChild(h("p", { class: "empty" }, "no data"))
  return new uPlot(
    {
      width: width(plot),
      height: HEIGHT,
      scales: { x: { time: false }, y: { range: yRange } },
      axes: axes(xLabel, yLabel, true),
      series: [
        { label: xLabel },
        { label: "max", stroke: "transparent", points: { show: false } },
        { label: "mean", stroke: COLORS.main, width: 1.5, points: { show: series.x.length < 200 } },
        { label: "min", stroke: "transparent", points: { show: false } }
      ],
      bands: [{ series: [1, 3], fill: COLORS.band }]
    },
    [series.x as Array<number>, series.max as Array<number | null>, series.mean as Array<number | null>, series.min as Array<number | null>],
    plot
  )
}

/** A y range that shows a constant series around its value (uPlot's default puts 0 at 0..100). */
const yRange = (_u: uPlot, min: number, max: number): uPlot.Range.MinMax => {
  if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1]
  if (min === max) return [min - 1, max + 1]
  const pad = (max - min) * 0.08
  return [min - pad, max + pad]
}

/** (x, y, count) points, drawn larger for larger counts, with a mean line. */
export const scatter = (
  plot: HTMLElement,
  points: ReadonlyArray<readonly [number, number, number]>,
  means: ReadonlyArray<readonly [number, number]>,
  xLabel: string,
  yLabel: string
) => {
  if (points.length === 0) return plot.appendChild(h("p", { class: "empty" }, "no data"))
  const max = Math.max(...points.map((p) => p[2]))
  // Circle area proportional to the count: radius 3..14 px.
  const radius = (count: number) => 3 + 11 * Math.sqrt(count / max)
  const bubbles: uPlot.Series.PathBuilder = (u, seriesIdx) => {
    uPlot.orient(u, seriesIdx, (_series, dataX, dataY, scaleX, scaleY, valToPosX, valToPosY, xOff, yOff, xDim, yDim) => {
      const ctx = u.ctx
      ctx.save()
      ctx.beginPath()
      ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height)
      ctx.clip()
      ctx.fillStyle = COLORS.band
      ctx.strokeStyle = COLORS.main
      ctx.lineWidth = 1
      for (let i = 0; i < dataX.length; i++) {
        const x = valToPosX(dataX[i] as number, scaleX, xDim, xOff)
        const y = valToPosY(dataY[i] as number, scaleY, yDim, yOff)
        ctx.beginPath()
        ctx.arc(x, y, radius(points[i][2]) * devicePixelRatio, 0, 2 * Math.PI)
        ctx.fill()
        ctx.stroke()
      }
      ctx.restore()
    })
    return null
  }
  const facets: Array<uPlot.Series.Facet> = [{ scale: "x", auto: true }, { scale: "y", auto: true }]
  return new uPlot(
    {
      mode: 2,
      width: width(plot),
      height: HEIGHT,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: false, range: (_u, min, max) => [min - 0.5, max + 0.5] }, y: { range: yRange } },
      axes: axes(xLabel, yLabel, true),
      series: [
        {},
        { label: "trajectories (size: count)", facets, stroke: COLORS.main, fill: COLORS.band, paths: bubbles } as uPlot.Series,
        { label: "mean reward", facets, stroke: COLORS.alt, width: 1.5, points: { show: true, size: 5, fill: COLORS.alt } } as uPlot.Series
      ]
    },
    [null, [points.map((p) => p[0]), points.map((p) => p[1])], [means.map((m) => m[0]), means.map((m) => m[1])]] as unknown as uPlot.AlignedData,
    plot
  )
}

/** A live time series (seconds on x); `push` adds a sample and redraws. */
export const live = (plot: HTMLElement, labels: ReadonlyArray<string>, yLabel: string, keep = 300) => {
  const data: Array<Array<number>> = [[], ...labels.map(() => [])]
  const chart = new uPlot(
    {
      width: width(plot),
      height: HEIGHT,
      scales: { x: { time: true } },
      axes: axes("time", yLabel),
      series: [{}, ...labels.map((label, i) => ({ label, stroke: [COLORS.main, COLORS.alt, COLORS.ok][i % 3], width: 1.5 }))]
    },
    data as uPlot.AlignedData,
    plot
  )
  return {
    chart,
    push: (at: number, values: ReadonlyArray<number>) => {
      data[0].push(at / 1000)
      values.forEach((v, i) => data[i + 1].push(v))
      if (data[0].length > keep) for (const column of data) column.shift()
      chart.setData(data as uPlot.AlignedData)
      plot.parentElement?.setAttribute("data-points", String(data[0].length))
    }
  }
}
