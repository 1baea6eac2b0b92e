// The data transforms: formats, colours, links, the sweep's plot data and range selection, the timeline's layout.
import { describe, expect, it } from "vitest";

import { bases } from "src/api/client";
import { classColor, groupColor, NO_GROUP } from "src/lib/colors";
import { dur, fmtTick, fmtValue, gib, hoursLabel } from "src/lib/format";
import { markFromQuery, sameTask, taskName, tiHref } from "src/lib/links";
import { populationSeries } from "src/lib/population";
import {
  bestLine, flatParams, inSelection, keptCount, paretoPlot, parallelAxes, parallelLines, progressPoints, slicePoints, sortedPoints, stripPoints,
} from "src/lib/sweep";
import { barColor, barItems, barTitle, layout, timelineKey } from "src/lib/timeline";
import { amount, boardCounts, gpuTileColor } from "src/lib/board";

import { board, sweep, timeline } from "./fixtures";

describe("formats", () => {
  it("writes ticks short and values with 4 significant digits", () => {
    expect([0, 1e-4, 0.25, 123456, 3].map(fmtTick)).toEqual(["0", "1e-4", "0.25", "1.2e5", "3"]);
    expect([1 / 3, 12, 1.23456e-5, null, "x"].map(fmtValue)).toEqual(["0.3333", "12", "1.235e-5", "–", "x"]);
  });
  it("writes durations, memory and windows", () => {
    expect([5, 75, 3725, null].map(dur)).toEqual(["5s", "1m 15s", "1h 2m", "–"]);
    expect(gib(3 * 2 ** 30)).toBe("3.0 GiB");
    expect([0.25, 6, 48].map(hoursLabel)).toEqual(["15 min", "6 h", "2 d"]);
    expect(amount(2 * 2 ** 30, "gpu_memory")).toBe("2.0 GiB");
    expect(amount(1.256, "gpus")).toBe("1.26");
  });
});

describe("links", () => {
  it("finds the API and the host UI from where the bundle is served, under a base_url prefix too", () => {
    expect(bases("/af/gpusched/static/gpusched.js")).toEqual({ api: "/af/gpusched/api", ui: "/af" });
    expect(bases("/gpusched/static/gpusched.js")).toEqual({ api: "/gpusched/api", ui: "" });
    expect(bases("/src/dev.tsx")).toEqual({ api: "/gpusched/api", ui: "" });
  });
  it("links a task instance, mapped ones by index, names escaped", () => {
    expect(tiHref("d 1", "r/1", "t", 3, "/af")).toBe("/af/dags/d%201/runs/r%2F1/tasks/t/mapped/3");
    expect(tiHref("d", "r", "t", -1, "")).toBe("/dags/d/runs/r/tasks/t");
    expect(taskName({ dag_id: "d", task_id: "t", map_index: 2 })).toBe("d › t[2]");
    expect(taskName({ dag_id: "d" })).toBe("d");
  });
  it("reads the highlighted task from the address", () => {
    const mark = markFromQuery("?dag_id=d&run_id=r&task_id=t&map_index=4");
    expect(mark).toEqual({ dag_id: "d", run_id: "r", task_id: "t", map_index: 4 });
    expect(sameTask({ dag_id: "d", run_id: "r", task_id: "t", map_index: 4 }, mark)).toBe(true);
    expect(sameTask({ dag_id: "d", run_id: "r", task_id: "t", map_index: 3 }, mark)).toBe(false);
    expect(markFromQuery("?hours=6")).toBeNull();
  });
});

describe("colours", () => {
  it("gives a group the same colour whatever the order the groups come in", () => {
    expect(groupColor("nlp", ["vision", "nlp"])).toBe(groupColor("nlp", ["nlp", "vision"]));
    expect(groupColor("nlp", ["vision", "nlp"])).not.toBe(groupColor("vision", ["vision", "nlp"]));
    expect(classColor("idle", [])).toBe("#8e6ccf");
    expect(classColor("batch", ["batch", "urgent"])).not.toBe(classColor("urgent", ["batch", "urgent"]));
  });
});

describe("the board", () => {
  it("counts GPUs and colours each tile by what holds it", () => {
    const b = board();
    expect(boardCounts(b.hosts)).toEqual({ gpus: 3, leased: 1 });
    const [a0, a1] = b.hosts[0]!.gpus;
    expect(gpuTileColor(a0!)).toBe("#2b7bd6");
    expect(gpuTileColor(a1!)).toBe("rgba(128,128,128,0.3)");
    expect(gpuTileColor({ ...a1!, whole_taken: true })).toBe("#e03131");
    expect(gpuTileColor({ ...a1!, held_by_others: true })).toBe("#d9480f");
  });
});

describe("a sweep's plots", () => {
  const s = sweep();
  const pts = sortedPoints(s);
  it("draws each trial by its number, the best one marked, coloured by round", () => {
    const p = progressPoints(pts, 3, "id1");
    expect(p.map((x) => x.best)).toEqual([false, false, false, true, false, false]);
    expect(p[1]!.picked).toBe(true);
    expect(p[0]!.color).not.toBe(p[4]!.color);
    expect(p[3]!.title).toBe("trial 3 t3: 0.2");
  });
  it("takes the server's best-so-far line (it counts every trial), else makes it from the points", () => {
    expect(bestLine(s, pts).map((q) => q.y)).toEqual([0.9, 0.5, 0.2, 0.2]);
    expect(bestLine({ ...s, best_so_far: [] }, pts).map((q) => q.y)).toEqual([0.9, 0.5, 0.5, 0.2, 0.2, 0.2]);
    const max = { ...s, best_so_far: [], objective: { ...s.objective!, maximize: true } };
    expect(bestLine(max, pts).map((q) => q.y)).toEqual([0.9, 0.9, 0.9, 0.9, 0.9, 0.9]);
  });
  it("draws a slice per numeric parameter and a strip per categorical one", () => {
    expect(slicePoints(pts, "lr", 3, null).map((q) => q.x)).toEqual([1, 2, 3, 4, 1, 2].map((k) => 10 ** -k));
    const strip = stripPoints(pts, "act", ["gelu", "relu"], 3);
    expect(strip.map((q) => q.category)).toEqual([0, 1, 0, 1, 0, 1]);
  });
  it("joins the Pareto front of two metrics in order", () => {
    const two = { ...s.objective!, metrics: ["loss", "size"], several: true };
    const withValues = pts.map((p, i) => ({ ...p, values: [p.score, 10 - i], front: [3, 5].includes(i) }));
    const { points, line } = paretoPlot(withValues, two);
    expect(points.filter((p) => p.best)).toHaveLength(2);
    expect(line).toEqual([{ x: 0.2, y: 7 }, { x: 0.3, y: 5 }]);
  });
  it("puts the parameters on parallel axes, the score last, and keeps only the trials in every selected range", () => {
    const axes = parallelAxes(s);
    expect(axes.map((a) => `${a.name}:${a.kind}:${a.scale}`)).toEqual(["lr:num:log", "wd:num:linear", "act:cat:linear", "loss:score:linear"]);
    expect(keptCount(pts, axes, {})).toBe(6);
    expect(keptCount(pts, axes, { loss: [[0, 0.35]] })).toBe(2);
    expect(keptCount(pts, axes, { loss: [[0, 0.35]], act: [[1, 1]] })).toBe(2);
    expect(keptCount(pts, axes, { act: [[0, 0]] })).toBe(3);
    expect(inSelection(pts[0]!, axes, { loss: [[0.35, 0]] })).toBe(false);  // a range dragged upwards
    const lines = parallelLines(pts, axes, s.objective!, "id1");
    expect(lines[lines.length - 1]!.id).toBe("id1");  // the picked trial on top
    expect(lines[lines.length - 2]!.id).toBe("id3");  // then the best
    expect(lines[0]!.values).toEqual([0.1, 0, "gelu", 0.9]);
  });
  it("flattens nested parameters", () => {
    expect(flatParams({ opt: { lr: 1, betas: [0.9, 0.99] }, x: 2 })).toEqual({ "opt.lr": 1, "opt.betas": [0.9, 0.99], x: 2 });
  });
});

describe("a population", () => {
  it("cuts each member's curve at its generations and marks each exploit at the donor's value", () => {
    const { series, exploits } = populationSeries({
      metric: "acc", params: ["lr"],
      members: [
        { member: 0, curve: [[1, 0.1], [2, 0.2], [3, 0.3], [4, 0.4]], generations: [
          { generation: 0, step: 2, trial_id: "a", index: 0, hyper: { lr: 0.1 }, from_member: null, score: 0.2 },
          { generation: 1, step: 4, trial_id: "b", index: 2, hyper: { lr: 0.2 }, from_member: 1, score: 0.4 }] },
        { member: 1, curve: [[1, 0.5], [2, 0.6]], generations: [{ generation: 0, step: 2, trial_id: "c", index: 1, hyper: { lr: 0.3 }, from_member: null, score: 0.6 }] },
      ],
      exploits: [{ generation: 1, step: 2, member: 0, from_member: 1, old: { lr: 0.1 }, new: { lr: 0.2 }, score: 0.2, donor_score: 0.6 }],
    });
    expect(series.filter((x) => !x.dashed).map((x) => x.points.length)).toEqual([2, 2, 2]);
    expect(exploits).toHaveLength(1);
    expect(exploits[0]).toMatchObject({ member: 0, from: 1, step: 2, value: 0.6 });
    expect(exploits[0]!.title).toContain("lr=0.1 → lr=0.2");
    expect(series.filter((x) => x.dashed)[0]!.points).toEqual([[2, 0.6], [3, 0.3]]);
  });
});

describe("the timeline", () => {
  const t = timeline();
  it("stacks each GPU's lanes under its host's name", () => {
    const { rows, height } = layout(t);
    expect(rows.map((r) => [r.host, r.gpu, r.top, r.firstOfHost])).toEqual([["a", 0, 1.4, true], ["a", 1, 3.8, false], ["b", 0, 6.6, true]]);
    expect(height).toBeCloseTo(8);
    const items = barItems(t, rows);
    expect(items.map((b) => b.value[2])).toEqual([1.4, 2.4, 3.8]);  // the overlapping lease in the second lane
    expect(items.map((b) => b.href)).toEqual(["/dags/d/runs/r/tasks/t", "/dags/d/runs/r/tasks/fill/mapped/1", null]);
  });
  it("colours by class, or by quota group when there are groups (no group grey)", () => {
    const bar = t.rows[0]!.bars[1]!;
    expect(barColor(bar, t)).toBe("#8e6ccf");
    expect(barColor({ ...bar, group: "nlp" }, { ...t, groups: ["nlp"] })).toBe(groupColor("nlp", ["nlp"]));
    expect(barColor(bar, { ...t, groups: ["nlp"] })).toBe(NO_GROUP);
    expect(timelineKey({ ...t, groups: ["nlp"] })[0]).toEqual(["group nlp", groupColor("nlp", ["nlp"])]);
    expect(timelineKey(t).map((k) => k[0])).toContain("stopped by gpusched queue stop (a bar across its end)");
    expect(timelineKey(t, "#e4e4e7")).toContainEqual(["failed (outlined)", "#e4e4e7"]);  // the dark mode's text colour
  });
  it("says what a bar was on hover, merged short leases too", () => {
    expect(barTitle(t.rows[0]!.bars[1]!)).toMatch(/^d › fill\[1\] · idle class · .* · preempted$/);
    expect(barTitle({ start: 0, end: 60, map_index: -1, count: 3, busy: 30, outcomes: { succeeded: 3 }, classes: { idle: 3 }, dag_id: "d" }))
      .toMatch(/^3 short leases, .* 30s of GPU time: 3 succeeded · classes: 3 idle · first: d\./);
  });
});
