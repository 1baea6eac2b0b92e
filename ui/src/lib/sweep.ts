// What the Sweeps tab draws, made from one sweep's answer: the progress plot, slices, strips, the Pareto front,
// the parallel coordinates and their range selection.
import { PICKED, type PlotPoint, type XY, type ParallelAxis, type ParallelLine, type StripPoint } from "src/charts/plots";
import type { Objective, Sweep, SweepPoint } from "src/api/types";
import { roundColor, scoreColor, trialColor } from "src/lib/colors";
import { fmtValue } from "src/lib/format";

export const MAX_PARAM_COLUMNS = 10;
export const MAX_PC_AXES = 12;
export const COUNT_ORDER = ["defined", "waiting", "running", "succeeded", "failed", "invalid", "timeout", "pruned", "stopped", "not_started"];
export const COUNT_TITLES: Record<string, string> = {
  stopped: "started by this run and stopped (gpusched queue stop) before an outcome; an earlier outcome it had stands",
  not_started: "planned by this run but never started (it was stopped or failed first); their earlier records stand",
};

export function flatParams(params: Record<string, unknown> | null | undefined, prefix = "", out: Record<string, unknown> = {}): Record<string, unknown> {
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v && typeof v === "object" && !Array.isArray(v)) flatParams(v as Record<string, unknown>, `${prefix}${k}.`, out);
    else out[`${prefix}${k}`] = v;
  }
  return out;
}

export function better(obj: Objective | null): (a: number, b: number) => boolean {
  return obj && obj.maximize ? (a, b) => a > b : (a, b) => a < b;
}

export const sortedPoints = (sweep: Sweep): SweepPoint[] => [...sweep.points].sort((a, b) => a.index - b.index);

export const pointTitle = (p: { index: number; label: string }, score: number) => `trial ${p.index} ${p.label}: ${fmtValue(score)}`;

/** the progress plot: every drawn trial by its number, coloured by its round, the best one marked */
export function progressPoints(pts: SweepPoint[], bestIndex: number | null, picked: string | null): PlotPoint[] {
  return pts.map((p) => ({ x: p.index, y: p.score, best: p.index === bestIndex, id: p.trial_id, picked: p.trial_id === picked,
                           color: roundColor(p.round), title: pointTitle(p, p.score) }));
}

/** the best score so far by trial: the server's line over every trial (the points may be a sample), else from the points */
export function bestLine(sweep: Sweep, pts: SweepPoint[]): XY[] {
  if (sweep.best_so_far && sweep.best_so_far.length) return sweep.best_so_far.map(([x = 0, y = 0]) => ({ x, y }));
  const isBetter = better(sweep.objective);
  let best: number | null = null;
  return pts.map((p) => {
    if (best === null || isBetter(p.score, best)) best = p.score;
    return { x: p.index, y: best };
  });
}

export function rounds(pts: SweepPoint[]): number[] {
  return [...new Set(pts.map((p) => p.round ?? 0))].sort((a, b) => a - b);
}

/** two metrics: every trial by the first two, the Pareto front marked and joined */
export function paretoPlot(pts: SweepPoint[], obj: Objective): { points: PlotPoint[]; line: XY[] } {
  const [m0 = "", m1 = ""] = obj.metrics;
  const withValues = pts.filter((p) => p.values && p.values.length >= 2);
  return {
    points: withValues.map((p) => ({ x: p.values?.[0] ?? 0, y: p.values?.[1] ?? 0, best: !!p.front,
      title: `trial ${p.index} ${p.label}: ${m0} ${fmtValue(p.values?.[0])}, ${m1} ${fmtValue(p.values?.[1])}` })),
    line: withValues.filter((p) => p.front).map((p) => ({ x: p.values?.[0] ?? 0, y: p.values?.[1] ?? 0 })).sort((a, b) => a.x - b.x || a.y - b.y),
  };
}

/** a numeric parameter's slice: the score against it, earlier trials light and later ones dark */
export function slicePoints(pts: SweepPoint[], name: string, bestIndex: number | null, picked: string | null): PlotPoint[] {
  const last = pts.length ? (pts[pts.length - 1] as SweepPoint).index : 0;
  return pts.filter((p) => name in p.params).map((p) => ({ x: p.params[name] as number, y: p.score, best: p.index === bestIndex, id: p.trial_id,
    picked: p.trial_id === picked, color: trialColor(p.index, last), title: pointTitle(p, p.score) }));
}

/** a categorical parameter: the scores by its value */
export function stripPoints(pts: SweepPoint[], name: string, values: string[], bestIndex: number | null): StripPoint[] {
  return pts.filter((p) => name in p.categories).map((p) => ({ category: values.indexOf(p.categories[name] as string), y: p.score, index: p.index,
    best: p.index === bestIndex, id: p.trial_id, title: pointTitle(p, p.score) }));
}

/** the parallel coordinates' axes: numeric parameters on their scale, categorical ones by value, the score last */
export function parallelAxes(sweep: Sweep): ParallelAxis[] {
  const obj = sweep.objective as Objective;
  const params: ParallelAxis[] = [
    ...sweep.numeric_params.map((name): ParallelAxis => ({ name, kind: "num", scale: sweep.param_scales[name] === "log" ? "log" : "linear" })),
    ...Object.entries(sweep.categorical_params).map(([name, values]): ParallelAxis => ({ name, kind: "cat", scale: "linear", categories: values })),
  ].slice(0, MAX_PC_AXES - 1);
  return [...params, { name: obj.score_label, kind: "score", scale: "linear" }];
}

export function axisValue(p: SweepPoint, a: ParallelAxis): number | string | null {
  if (a.kind === "score") return p.score;
  if (a.kind === "num") return p.params[a.name] ?? null;
  const v = p.categories[a.name];
  return v === undefined ? null : v;
}

/** 0 (worst) .. 1 (best) */
export function goodness(pts: SweepPoint[], obj: Objective): (score: number) => number {
  const scores = pts.map((p) => p.score);
  const lo = Math.min(...scores), hi = Math.max(...scores);
  return (v) => (hi === lo ? 1 : obj.maximize ? (v - lo) / (hi - lo) : (hi - v) / (hi - lo));
}

/** the ranges selected on the axes: axis name -> intervals (values; a categorical axis's by value index) */
export type Selection = Record<string, number[][]>;

export function inSelection(p: SweepPoint, axes: ParallelAxis[], selection: Selection): boolean {
  return Object.entries(selection).every(([name, intervals]) => {
    if (!intervals.length) return true;
    const a = axes.find((x) => x.name === name);
    if (!a) return true;
    const raw = axisValue(p, a);
    if (raw === null) return false;
    const v = a.kind === "cat" ? (a.categories ?? []).indexOf(String(raw)) : Number(raw);
    if (a.kind === "cat" && v < 0) return false;
    return intervals.some(([x = -Infinity, y = Infinity]) => v >= Math.min(x, y) - 1e-9 && v <= Math.max(x, y) + 1e-9);
  });
}

/** a line per trial, coloured by its score (ECharts greys those outside a selected range itself), the best on top
 * and the picked one above them all, in the text's colour and wider */
export function parallelLines(pts: SweepPoint[], axes: ParallelAxis[], obj: Objective, picked: string | null): ParallelLine[] {
  const good = goodness(pts, obj);
  const order = (p: SweepPoint) => (p.trial_id === picked ? 2 : good(p.score));
  return [...pts].sort((a, b) => order(a) - order(b)).map((p) => ({
    values: axes.map((a) => axisValue(p, a)), id: p.trial_id, title: pointTitle(p, p.score),
    color: p.trial_id === picked ? PICKED : scoreColor(good(p.score)), width: p.trial_id === picked ? 3 : 1.2,
  }));
}

export function keptCount(pts: SweepPoint[], axes: ParallelAxis[], selection: Selection): number {
  return pts.filter((p) => inSelection(p, axes, selection)).length;
}
