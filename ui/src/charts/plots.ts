// The ECharts options of every plot on the pages, built from plain data (src/lib/*.ts make that data from the API's
// answers). Pure functions: the unit tests check what each one asks ECharts to draw. Their tooltip formatters return
// plain text: EChart.tsx escapes it (text.ts), as it does every tooltip's.
import type { EChartsOption } from "./echarts";
import type { ChartInk } from "./theme";
import { BEST, TRIAL, memberColor } from "src/lib/colors";
import { fmtTick } from "src/lib/format";
import type { ExploitMark } from "src/lib/population";

export type Scale = "linear" | "log";

export interface XY {
  x: number;
  y: number;
}
export interface PlotPoint extends XY {
  id?: string;
  best?: boolean;
  picked?: boolean;
  color?: string;
  title: string;
}

/** a log axis over whole decades: from the decade at or below the smallest value to the one at or above the largest
 * (a value a rounding error above 0.01 does not add the decade up to 0.1). Each end a hair inside its decade: ECharts
 * takes logarithms as ln(v) / ln(10), which puts 0.01 at -1.9999999999999996, past the tick at -2, and labels the
 * end a second time; inside it, the end's own label is the decade's. */
export const decades = {
  min: (v: { min: number }) => 10 ** Math.floor(Math.log10(v.min) + 1e-6) * (1 + 1e-9),
  max: (v: { max: number }) => 10 ** Math.ceil(Math.log10(v.max) - 1e-6) * (1 - 1e-9),
};

/** the axes every plot shares: a title, ticks written short, the page's colours */
export function axis(ink: ChartInk, name: string, scale: Scale, extra: Record<string, unknown> = {}) {
  return {
    type: scale === "log" ? "log" : "value",
    name: scale === "log" ? `${name} (log)` : name,
    nameLocation: "middle",
    nameGap: 28,
    nameTextStyle: { color: ink.muted, fontSize: 11 },
    scale: true,
    axisLine: { show: true, onZero: false, lineStyle: { color: ink.line } },
    axisTick: { lineStyle: { color: ink.line } },
    axisLabel: { color: ink.text, fontSize: 10, formatter: (v: number) => fmtTick(v), hideOverlap: true },
    splitLine: { lineStyle: { color: ink.grid } },
    ...(scale === "log" ? decades : {}),
    ...extra,
  };
}

function tooltip(ink: ChartInk) {
  return {
    trigger: "item",
    confine: true,
    backgroundColor: ink.tooltip,
    borderColor: ink.line,
    textStyle: { color: ink.text, fontSize: 12 },
    formatter: (p: { data?: { title?: string } }) => p.data?.title ?? "",
  };
}

/** smaller dots when there are many, so a large sweep's cloud keeps its shape */
export const dotSize = (n: number) => (n > 500 ? 5 : 8);

export interface ScatterSpec {
  points: PlotPoint[];
  line?: XY[];
  lineColor?: string;
  xLabel: string;
  yLabel: string;
  xScale?: Scale;
  yScale?: Scale;
  wholeX?: boolean;
}

export function scatterOption(spec: ScatterSpec, ink: ChartInk): EChartsOption {
  const size = dotSize(spec.points.length);
  return {
    grid: { left: 64, right: 16, top: 12, bottom: 44 },
    tooltip: tooltip(ink),
    xAxis: axis(ink, spec.xLabel, spec.xScale ?? "linear", spec.wholeX ? { minInterval: 1 } : {}),
    yAxis: axis(ink, spec.yLabel, spec.yScale ?? "linear", { nameGap: 48 }),
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }, { type: "inside", yAxisIndex: 0, filterMode: "none", zoomOnMouseWheel: "shift" }],
    series: [
      ...(spec.line && spec.line.length > 1
        ? [{ type: "line", name: "line", silent: true, showSymbol: false, z: 1, lineStyle: { color: spec.lineColor ?? BEST, width: 2 },
             data: spec.line.map((p) => [p.x, p.y]) }]
        : []),
      {
        type: "scatter",
        name: "points",
        z: 2,
        clip: false,  // a point on the axis' end is drawn whole
        data: spec.points.map((p) => ({
          value: [p.x, p.y],
          id: p.id,
          title: p.title,
          symbolSize: p.best ? 12 : size,
          itemStyle: {
            color: p.best ? BEST : p.color ?? TRIAL,
            opacity: 0.85,
            borderColor: p.best || p.picked ? ink.text : undefined,
            borderWidth: p.picked ? 2 : p.best ? 1 : 0,
          },
          cursor: p.id ? "pointer" : "default",
        })),
      },
    ],
  };
}

export interface LineSeries {
  name: string;
  color: string;
  points: number[][];
  dashed?: boolean;
  width?: number;
  opacity?: number;
  title?: string;
  z?: number;
}

export function linesOption(series: LineSeries[], xLabel: string, yLabel: string, ink: ChartInk): EChartsOption {
  return {
    grid: { left: 64, right: 16, top: 12, bottom: 44 },
    tooltip: { ...tooltip(ink), formatter: (p: { seriesName?: string }) => p.seriesName ?? "" },
    xAxis: axis(ink, xLabel, "linear", { minInterval: 1 }),
    yAxis: axis(ink, yLabel, "linear", { nameGap: 48 }),
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
    series: series.map((s) => ({
      type: "line",
      name: s.title ?? s.name,
      showSymbol: s.points.length === 1,
      symbolSize: 5,
      z: s.z ?? 2,
      lineStyle: { color: s.color, width: s.width ?? 2, opacity: s.opacity ?? 1, type: s.dashed ? "dashed" : "solid" },
      itemStyle: { color: s.color },
      data: s.points,
    })),
  };
}

/** a PBT population: each member's curve by generation (lines), each exploit a triangle where it went on */
export function populationOption(series: LineSeries[], exploits: ExploitMark[], metric: string, ink: ChartInk): EChartsOption {
  const base = linesOption(series, "step", metric, ink) as { series: object[] } & Record<string, unknown>;
  return { ...base, series: [...base.series, {
    type: "scatter", name: "exploits", symbol: "triangle", symbolSize: 11, z: 4,
    itemStyle: { borderColor: ink.text, borderWidth: 0.8 },
    data: exploits.map((x) => ({ value: [x.step, x.value], itemStyle: { color: memberColor(x.member) }, title: x.title })),
    tooltip: { formatter: (p: { data?: { title?: string } }) => p.data?.title ?? "" },
  }] };
}

export interface StripPoint {
  category: number;
  y: number;
  index: number;
  id?: string;
  best?: boolean;
  title: string;
}

/** a point's place beside its column: the same for the same trial, spread over half the column */
export function jitter(index: number): number {
  return (((index * 7919) % 13) / 12 - 0.5) * 0.5;
}

export function stripOption(points: StripPoint[], categories: string[], xLabel: string, yLabel: string, ink: ChartInk): EChartsOption {
  const size = dotSize(points.length);
  const value = axis(ink, xLabel, "linear");
  return {
    grid: { left: 64, right: 16, top: 12, bottom: 44 },
    tooltip: tooltip(ink),
    // the values named on a category axis; the points on a hidden value axis over the same width (value i at the
    // middle of category i), so each can sit beside its column
    xAxis: [
      { ...value, type: "category", data: categories, scale: false, boundaryGap: true, splitLine: { show: false },
        axisLabel: { color: ink.text, fontSize: 10, interval: 0, width: 60, overflow: "truncate" } },
      { type: "value", show: false, min: -0.5, max: categories.length - 0.5 },
    ],
    yAxis: axis(ink, yLabel, "linear", { nameGap: 48 }),
    series: [{
      type: "scatter",
      xAxisIndex: 1,
      clip: false,
      data: points.map((p) => ({
        value: [p.category + jitter(p.index), p.y], id: p.id, title: p.title, symbolSize: p.best ? 12 : size,
        itemStyle: { color: p.best ? BEST : TRIAL, opacity: 0.8, borderColor: p.best ? ink.text : undefined, borderWidth: p.best ? 1 : 0 },
      })),
    }],
  };
}

export interface Bar {
  name: string;
  value: number;
  label: string;
}

export function importanceOption(bars: Bar[], ink: ChartInk): EChartsOption {
  const shown = [...bars].reverse();  // the most important on top
  return {
    grid: { left: 150, right: 56, top: 4, bottom: 4 },
    tooltip: { ...tooltip(ink), formatter: (p: { name?: string; data?: { label?: string } }) => `${p.name}: ${p.data?.label ?? ""}` },
    xAxis: { type: "value", show: false, max: 1 },
    yAxis: { type: "category", data: shown.map((b) => b.name), axisLabel: { color: ink.text, fontSize: 11, width: 140, overflow: "truncate" },
             axisLine: { show: false }, axisTick: { show: false } },
    series: [{
      type: "bar", barWidth: 14, itemStyle: { color: TRIAL, borderRadius: 2 },
      label: { show: true, position: "right", color: ink.text, fontSize: 10, formatter: (p: { data: { label: string } }) => p.data.label },
      data: shown.map((b) => ({ value: Math.max(0.002, b.value), label: b.label, name: b.name })),
    }],
  };
}

/** the colour of the picked trial's line: the page's text colour (black on light, white on dark) */
export const PICKED = "picked";

export interface ParallelAxis {
  name: string;
  kind: "num" | "cat" | "score";
  scale: Scale;
  categories?: string[];
}

export interface ParallelLine {
  values: (number | string | null)[];
  color: string;
  id: string;
  title: string;
  width?: number;
}

export function parallelOption(axes: ParallelAxis[], lines: ParallelLine[], ink: ChartInk): EChartsOption {
  return {
    parallel: { left: 64, right: 90, top: 40, bottom: 16, parallelAxisDefault: {
      nameLocation: "end", nameGap: 14, nameTextStyle: { color: ink.text, fontSize: 11 }, nameTruncate: { maxWidth: 110 },
      axisLine: { lineStyle: { color: ink.line } }, axisTick: { lineStyle: { color: ink.line } },
      // each label on a box of the page's colour, so the trials' lines pass behind it instead of through it
      axisLabel: { color: ink.text, fontSize: 10, formatter: (v: number | string) => (typeof v === "number" ? fmtTick(v) : v), hideOverlap: true,
                   backgroundColor: ink.background, padding: [1, 2], borderRadius: 2 },
      areaSelectStyle: { width: 16, borderColor: BEST, color: "rgba(245,159,0,0.3)", opacity: 0.6 },
      realtime: true,
    } },
    parallelAxis: axes.map((a, dim) => ({
      id: `axis-${dim}`,  // the range-selection events say the axis by its id
      dim,
      name: a.scale === "log" ? `${a.name} (log)` : a.name,
      ...(a.kind === "cat" ? { type: "category", data: a.categories } : a.scale === "log" ? { type: "log", ...decades } : { type: "value", scale: true }),
      ...(a.kind === "score" ? { nameTextStyle: { color: ink.text, fontSize: 11, fontWeight: "bold" } } : {}),
    })),
    tooltip: { ...tooltip(ink), trigger: "item" },
    series: [{
      type: "parallel",
      smooth: false,
      progressive: 2000,
      inactiveOpacity: 0.08,
      activeOpacity: 0.9,
      lineStyle: { width: 1.2, opacity: 0.85 },
      emphasis: { lineStyle: { width: 3 } },
      data: lines.map((l) => ({ value: l.values, id: l.id, title: l.title, lineStyle: { color: l.color === PICKED ? ink.text : l.color, width: l.width ?? 1.2 } })),
    }],
  };
}

export function sparklineOption(series: (number | null)[][], memoryTotal: number, ink: ChartInk): EChartsOption {
  return {
    grid: { left: 1, right: 1, top: 1, bottom: 1 },
    xAxis: { type: "value", show: false, scale: true },
    yAxis: { type: "value", show: false, min: 0, max: 1 },
    series: [
      { type: "line", silent: true, showSymbol: false, lineStyle: { color: TRIAL, width: 1.5 },
        data: series.filter((r) => r[1] !== null).map((r) => [r[0], (r[1] as number) / 100]) },
      { type: "line", silent: true, showSymbol: false, lineStyle: { color: "#e8590c", width: 1.5 },
        data: series.map((r) => [r[0], ((r[2] as number) ?? 0) / (memoryTotal || 1)]) },
    ],
    backgroundColor: ink.grid,
  };
}

