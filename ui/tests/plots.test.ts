// What each plot asks ECharts to draw.
import { describe, expect, it } from "vitest";

import { echarts } from "src/charts/echarts";
import { importanceOption, jitter, parallelOption, scatterOption, stripOption } from "src/charts/plots";
import { ink } from "src/charts/theme";
import { timelineHeight, timelineOption } from "src/charts/timeline";
import { barItems, layout } from "src/lib/timeline";

import { timeline } from "./fixtures";

type Any = Record<string, any>;  // eslint-disable-line @typescript-eslint/no-explicit-any

describe("plots", () => {
  const light = ink("light");
  it("draws a scatter on log axes with a best-so-far line under the points", () => {
    const o = scatterOption({ points: [{ x: 1, y: 0.1, title: "a", best: true }, { x: 2, y: 0.01, title: "b", id: "t2" }], line: [{ x: 1, y: 0.1 }, { x: 2, y: 0.01 }],
      xLabel: "trial", yLabel: "loss", yScale: "log", wholeX: true }, light) as Any;
    expect(o.yAxis.type).toBe("log");
    expect(o.yAxis.min({ min: 0.0123 })).toBeCloseTo(0.01, 8);  // whole decades
    expect(o.yAxis.max({ max: 0.0100000001 })).toBeCloseTo(0.01, 8);
    expect(o.yAxis.max({ max: 0.02 })).toBeCloseTo(0.1, 8);
    expect(o.yAxis.name).toBe("loss (log)");
    expect(o.xAxis.minInterval).toBe(1);
    expect(o.series.map((s: Any) => s.type)).toEqual(["line", "scatter"]);
    expect(o.series[1].data[0].symbolSize).toBe(12);
    expect(o.series[1].data[1].id).toBe("t2");
    expect(o.tooltip.formatter({ data: { title: "<b>x</b>" } })).toBe("<b>x</b>");  // text: EChart.tsx escapes it (tests/xss.test.tsx)
  });
  it("labels each decade of a log axis once, however the values fall", () => {
    for (const [lo, hi, want] of [[1e-4, 0.01, ["1e-4", "0.001", "0.01"]], [2e-5, 0.0031, ["1e-5", "1e-4", "0.001", "0.01"]]] as const) {
      const el = document.createElement("div");
      const c = echarts.init(el, null, { renderer: "svg", width: 300, height: 300 });
      c.setOption(scatterOption({ points: [{ x: lo, y: 1, title: "" }, { x: hi, y: 2, title: "" }], xLabel: "lr", yLabel: "y", xScale: "log" }, light));
      const model = (c as unknown as { getModel: () => Any }).getModel();
      const labels = model.getComponent("xAxis", 0).axis.getViewLabels().map((l: Any) => l.formattedLabel);
      expect(labels).toEqual(want);
      c.dispose();
    }
  });
  it("keeps a large cloud's dots small", () => {
    const points = Array.from({ length: 2000 }, (_, i) => ({ x: i, y: i, title: "" }));
    expect((scatterOption({ points, xLabel: "x", yLabel: "y" }, light) as Any).series[0].data[5].symbolSize).toBe(5);
  });
  it("spreads a strip's points beside their value, the same place for the same trial", () => {
    const o = stripOption([{ category: 1, y: 2, index: 7, title: "" }], ["a", "b"], "act", "loss", light) as Any;
    expect(o.series[0].data[0].value[0]).toBeCloseTo(1 + jitter(7));
    expect(Math.abs(jitter(7))).toBeLessThanOrEqual(0.25);
    expect(o.xAxis[0]).toMatchObject({ type: "category", data: ["a", "b"], boundaryGap: true });
    expect(o.xAxis[1]).toMatchObject({ type: "value", min: -0.5, max: 1.5 });  // value i in the middle of category i
    expect(o.series[0].xAxisIndex).toBe(1);
  });
  it("puts the most important parameter on top", () => {
    const o = importanceOption([{ name: "lr", value: 0.7, label: "70%" }, { name: "wd", value: 0.3, label: "30%" }], light) as Any;
    expect(o.yAxis.data).toEqual(["wd", "lr"]);
  });
  it("makes a categorical parallel axis of its values and selectable ranges on every axis", () => {
    const o = parallelOption([{ name: "lr", kind: "num", scale: "log" }, { name: "act", kind: "cat", scale: "linear", categories: ["a", "b"] },
      { name: "loss", kind: "score", scale: "linear" }], [{ values: [0.1, "a", 1], color: "red", id: "t", title: "t" }], light) as Any;
    expect(o.parallelAxis.map((a: Any) => a.type)).toEqual(["log", "category", "value"]);
    expect(o.parallelAxis[1].data).toEqual(["a", "b"]);
    expect(o.parallel.parallelAxisDefault.areaSelectStyle.width).toBeGreaterThan(0);
    expect(o.series[0].data[0]).toMatchObject({ value: [0.1, "a", 1], id: "t" });
  });
  it("draws a timeline's bars with their links and a label per GPU, in the dark mode's ink too", () => {
    const t = timeline();
    const { rows, height } = layout(t);
    const items = barItems(t, rows);
    const o = timelineOption(t.since, t.until, items, rows, height, ink("dark")) as Any;
    expect(o.series[1].data.map((d: Any) => d.outcome)).toEqual(["succeeded", "preempted", "running"]);
    expect(o.series[1].data[0].href).toBe("/dags/d/runs/r/tasks/t");
    expect(o.series[0].data).toHaveLength(3);
    expect(o.xAxis.axisLabel.color).toBe(ink("dark").text);
    expect(timelineHeight(height)).toBe(Math.ceil(28 + height * 14 + 8));
  });
});
