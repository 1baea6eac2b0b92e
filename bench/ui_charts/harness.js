// The chart libraries drawing the UI's two heaviest plots on the same data (bench/ui_charts.py drives this page in
// headless Chromium): the 10,000-trial Sweeps progress plot (score on a log axis, a best-so-far line) and a day of
// 10,000 leases on 64 GPUs (the timeline). Each draw is timed from the call until the browser has painted it
// (two animation frames after the library says it is done); then a zoom to a tenth of the x range is timed the same way.
/* global Plotly, echarts, uPlot, vegaEmbed */
const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

function rng(seed) { let s = seed >>> 0; return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32); }
export function sweepData(n = 10000) {
  const r = rng(1); const x = [], y = [], best = []; let b = Infinity;
  for (let i = 0; i < n; i++) { const v = 10 ** (-3 + 3 * r() * r()) ; x.push(i); y.push(v); b = Math.min(b, v); best.push(b); }
  return { x, y, best };
}
export function timelineData(n = 10000, gpus = 64) {
  const r = rng(2); const day = 86400; const leases = []; const free = new Array(gpus).fill(0);
  for (let i = 0; i < n; i++) {
    const g = Math.floor(r() * gpus); const start = Math.max(free[g], r() * day * 0.98); const len = 30 + r() * 600;
    free[g] = Math.min(day, start + len); leases.push({ row: g, start, end: Math.min(day, start + len), cls: i % 3 });
  }
  return { leases, rows: gpus };
}
const CLASS = ["#8e6ccf", "#2b7bd6", "#d9822b"];

const libs = {
  echarts: {
    async sweep(el, d) {
      const c = echarts.init(el, null, { renderer: "canvas" });
      c.setOption({ animation: false, grid: { left: 50, right: 10, top: 10, bottom: 30 },
        xAxis: { type: "value" }, yAxis: { type: "log" }, tooltip: { trigger: "item" },
        dataZoom: [{ type: "inside", xAxisIndex: 0 }],
        series: [{ type: "scatter", symbolSize: 3, data: d.x.map((x, i) => [x, d.y[i]]), large: false },
                 { type: "line", showSymbol: false, data: d.x.map((x, i) => [x, d.best[i]]) }] });
      return { zoom: () => c.dispatchAction({ type: "dataZoom", startValue: 0, endValue: 1000 }) };
    },
    async timeline(el, d) {
      const c = echarts.init(el, null, { renderer: "canvas" });
      c.setOption({ animation: false, grid: { left: 50, right: 10, top: 10, bottom: 30 }, tooltip: { trigger: "item" },
        xAxis: { type: "value", min: 0, max: 86400 }, yAxis: { type: "category", data: [...Array(d.rows).keys()].map(String) },
        dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "weakFilter" }],
        series: [{ type: "custom", encode: { x: [1, 2], y: 0 }, data: d.leases.map((l) => [l.row, l.start, l.end, l.cls]),
          renderItem: (p, api) => { const a = api.coord([api.value(1), api.value(0)]), b = api.coord([api.value(2), api.value(0)]);
            const h = api.size([0, 1])[1] * 0.7;
            return { type: "rect", shape: echarts.graphic.clipRectByRect({ x: a[0], y: a[1] - h / 2, width: Math.max(1, b[0] - a[0]), height: h },
              { x: p.coordSys.x, y: p.coordSys.y, width: p.coordSys.width, height: p.coordSys.height }), style: { fill: CLASS[api.value(3)] } }; } }] });
      return { zoom: () => c.dispatchAction({ type: "dataZoom", startValue: 0, endValue: 8640 }) };
    },
  },
  uplot: {
    async sweep(el, d) {
      const u = new uPlot({ width: 800, height: 400, mode: 2, scales: { x: { time: false }, y: { distr: 3 } },
        series: [{}, { stroke: "#2b7bd6", paths: () => null, points: { show: true, size: 3, fill: "#2b7bd6" } },
                 { stroke: "#f59f00" }] , axes: [{}, {}] }, [null, [d.x, d.y], [d.x, d.best]], el);
      return { zoom: () => u.setScale("x", { min: 0, max: 1000 }) };
    },
    async timeline(el, d) {
      const xs = [0, 86400];
      const u = new uPlot({ width: 800, height: 400, scales: { x: { time: false }, y: { range: [0, d.rows] } },
        series: [{}, { show: false }],
        hooks: { draw: [(u) => { const { ctx } = u; ctx.save(); const bb = u.bbox; ctx.beginPath(); ctx.rect(bb.left, bb.top, bb.width, bb.height); ctx.clip();
          const hgt = (u.valToPos(0, "y", true) - u.valToPos(1, "y", true)) * 0.7;
          for (const l of d.leases) { const x0 = u.valToPos(l.start, "x", true), x1 = u.valToPos(l.end, "x", true);
            if (x1 < bb.left || x0 > bb.left + bb.width) continue;
            ctx.fillStyle = CLASS[l.cls]; ctx.fillRect(x0, u.valToPos(l.row + 0.5, "y", true) - hgt / 2, Math.max(1, x1 - x0), hgt); }
          ctx.restore(); }] } }, [xs, [0, 0]], el);
      return { zoom: () => u.setScale("x", { min: 0, max: 8640 }) };
    },
  },
  plotly: {
    async sweep(el, d) {
      await Plotly.newPlot(el, [{ type: "scattergl", mode: "markers", x: d.x, y: d.y, marker: { size: 3 } },
        { type: "scattergl", mode: "lines", x: d.x, y: d.best }],
        { width: 800, height: 400, yaxis: { type: "log" }, showlegend: false, margin: { l: 50, r: 10, t: 10, b: 30 } }, { staticPlot: false });
      return { zoom: () => Plotly.relayout(el, { "xaxis.range": [0, 1000] }) };
    },
    async timeline(el, d) {
      const traces = [0, 1, 2].map((k) => { const ls = d.leases.filter((l) => l.cls === k);
        return { type: "bar", orientation: "h", base: ls.map((l) => l.start), x: ls.map((l) => l.end - l.start), y: ls.map((l) => l.row),
                 marker: { color: CLASS[k] } }; });
      await Plotly.newPlot(el, traces, { width: 800, height: 400, barmode: "overlay", showlegend: false, margin: { l: 50, r: 10, t: 10, b: 30 } });
      return { zoom: () => Plotly.relayout(el, { "xaxis.range": [0, 8640] }) };
    },
  },
  vegalite: {
    async sweep(el, d) {
      const values = d.x.map((x, i) => ({ x, y: d.y[i], best: d.best[i] }));
      const r = await vegaEmbed(el, { $schema: "https://vega.github.io/schema/vega-lite/v6.json", width: 740, height: 360, data: { values },
        layer: [{ params: [{ name: "grid", select: "interval", bind: "scales" }], mark: { type: "point", size: 6, filled: true }, encoding: { x: { field: "x", type: "quantitative" }, y: { field: "y", type: "quantitative", scale: { type: "log" } } } },
                { mark: "line", encoding: { x: { field: "x", type: "quantitative" }, y: { field: "best", type: "quantitative" } } }] },
        { renderer: "canvas", actions: false });
      return { zoom: () => r.view.signal("grid_x", [0, 1000]).runAsync() };
    },
    async timeline(el, d) {
      const r = await vegaEmbed(el, { $schema: "https://vega.github.io/schema/vega-lite/v6.json", width: 740, height: 360,
        data: { values: d.leases }, params: [{ name: "grid", select: "interval", bind: "scales" }],
        mark: "bar", encoding: { x: { field: "start", type: "quantitative" }, x2: { field: "end" }, y: { field: "row", type: "ordinal" },
          color: { field: "cls", type: "nominal" } } }, { renderer: "canvas", actions: false });
      return { zoom: () => r.view.signal("grid_start", [0, 8640]).runAsync() };
    },
  },
};

// one measurement: { draw_ms, zoom_ms } of library `lib` on workload `which`
globalThis.measure = async (lib, which) => {
  const el = document.getElementById("chart"); el.innerHTML = ""; el.style.width = "800px"; el.style.height = "400px";
  const data = which === "sweep" ? sweepData() : timelineData();
  await frames();
  const t0 = performance.now();
  const handle = await libs[lib][which](el, data);
  await frames();
  const t1 = performance.now();
  await handle.zoom();
  await frames();
  const t2 = performance.now();
  return { draw_ms: t1 - t0, zoom_ms: t2 - t1 };
};
