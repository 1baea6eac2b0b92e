// airflow-provider-gpusched UI pages: a plain ES module using the host UI's React (no build step).
// The Airflow UI imports this file and renders globalThis[<react app name>] with {dagId, runId, taskId, mapIndex}.
const React = globalThis.React;
const h = React.createElement;
const { useEffect, useState } = React;

// this file is served at <prefix>/gpusched/static/gpusched.js: the API and the UI share <prefix>
const HERE = new URL(import.meta.url).pathname;
const API = HERE.replace(/\/static\/gpusched\.js$/, "") + "/api";
const UI = HERE.replace(/\/gpusched\/static\/gpusched\.js$/, "");

const COLORS = {
  idle: "#8e6ccf", normal: "#2b7bd6", high: "#d9822b", succeeded: "#2f9e44", failed: "#e03131",
  invalid: "#c2255c", running: "#1c7ed6", waiting: "#868e96", skipped: "#74b816", defined: "#495057",
  pruned: "#f08c00",
};
const S = {
  page: { padding: "12px 16px", fontSize: "14px", lineHeight: 1.45, maxWidth: "1400px" },
  h1: { fontSize: "20px", fontWeight: 600, margin: "0 0 4px" },
  h2: { fontSize: "16px", fontWeight: 600, margin: "18px 0 6px" },
  muted: { opacity: 0.7, fontSize: "12px" },
  card: { border: "1px solid rgba(128,128,128,0.35)", borderRadius: "8px", padding: "10px 12px", margin: "10px 0" },
  table: { borderCollapse: "collapse", width: "100%", fontSize: "13px" },
  th: { textAlign: "left", padding: "4px 8px", borderBottom: "1px solid rgba(128,128,128,0.45)", whiteSpace: "nowrap" },
  td: { padding: "4px 8px", borderBottom: "1px solid rgba(128,128,128,0.2)", verticalAlign: "top" },
  pre: { background: "rgba(128,128,128,0.12)", padding: "8px", borderRadius: "6px", overflowX: "auto",
         fontSize: "12px", maxHeight: "420px", whiteSpace: "pre-wrap" },
  a: { color: "#2b7bd6", textDecoration: "underline" },
};

function badge(text, color, title) {
  return h("span", { title: title || text, "data-badge": text, style: {
    background: color || "#868e96", color: "white", borderRadius: "10px", padding: "1px 8px", fontSize: "12px",
    marginRight: "4px", whiteSpace: "nowrap", display: "inline-block" } }, text);
}

function useJson(url, everyMs) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  useEffect(() => {
    let alive = true;
    const load = () => fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(async (r) => {
        const body = await r.json().catch(() => ({}));
        if (!r.ok) throw new Error(`${r.status} ${r.statusText}: ${body.detail || ""}`);
        return body;
      })
      .then((data) => alive && setState({ data, error: null, loading: false }))
      .catch((e) => alive && setState((s) => ({ data: s.data, error: String(e.message || e), loading: false })));
    load();
    const timer = everyMs ? setInterval(load, everyMs) : null;
    return () => { alive = false; if (timer) clearInterval(timer); };
  }, [url, everyMs]);
  return state;
}

const enc = encodeURIComponent;
function tiHref(dag, run, task, mapIndex) {
  let p = `${UI}/dags/${enc(dag)}/runs/${enc(run)}/tasks/${enc(task)}`;
  if (mapIndex !== null && mapIndex !== undefined && mapIndex >= 0) p += `/mapped/${mapIndex}`;
  return p;
}
function tiLink(r) {
  if (!r.run_id) return h("span", { style: S.muted }, r.dag_id || "(another DAG)");
  const label = `${r.dag_id} › ${r.task_id}${r.map_index >= 0 ? `[${r.map_index}]` : ""}`;
  return h("a", { href: tiHref(r.dag_id, r.run_id, r.task_id, r.map_index), style: S.a, title: r.run_id }, label);
}
function gib(bytes) { return bytes ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : "0"; }
function dur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.round(s);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
function when(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function status(state) { return h("div", { style: { ...S.muted, margin: "4px 0" } }, state); }
function errorBox(e) {
  return e ? h("div", { role: "alert", style: { ...S.card, borderColor: "#e03131", color: "#e03131" } }, e) : null;
}
function Table({ head, rows, testid }) {
  return h("table", { style: S.table, "data-testid": testid },
    h("thead", null, h("tr", null, head.map((c) => h("th", { key: c, style: S.th }, c)))),
    h("tbody", null, rows.map((r, i) => h("tr", { key: i, style: r.style },
      r.cells.map((c, j) => h("td", { key: j, style: S.td }, c))))));
}

// ---------------------------------------------------------------------------------------------------- GPU board
function MemoryBar({ gpu }) {
  const total = gpu.memory_total || 1;
  const leased = gpu.whole_taken ? total : Math.min(gpu.memory_leased, total);
  return h("div", { title: `${gib(gpu.memory_leased)} leased of ${gib(gpu.memory_total)}`,
                    style: { width: "160px", height: "10px", background: "rgba(128,128,128,0.25)", borderRadius: "5px" } },
    h("div", { style: { width: `${(100 * leased) / total}%`, height: "10px", borderRadius: "5px",
                        background: leased >= total ? "#e03131" : "#2b7bd6" } }));
}

function highlightFromQuery() {
  const q = new URLSearchParams(window.location.search);
  if (!q.get("task_id")) return null;
  return { dag_id: q.get("dag_id"), run_id: q.get("run_id"), task_id: q.get("task_id"),
           map_index: Number(q.get("map_index") ?? -1) };
}
function same(a, b) {
  return a && b && a.dag_id === b.dag_id && a.run_id === b.run_id && a.task_id === b.task_id && a.map_index === b.map_index;
}

function GpuBoard() {
  const { data, error } = useJson(`${API}/gpus`, 5000);
  const mark = highlightFromQuery();
  if (!data) return h("div", { style: S.page }, h("h1", { style: S.h1 }, "GPU board"), errorBox(error) || status("loading…"));
  const anySimulated = data.hosts.some((x) => x.simulated);
  const classes = Object.keys(data.gpu_time.day || {}).sort();
  return h("div", { style: S.page, "data-testid": "gpu-board" },
    h("h1", { style: S.h1 }, "GPU board ", anySimulated ? badge("SIMULATED GPUs", "#c92a2a",
      "No NVML GPU on these hosts: the inventory is simulated ([gpusched] simulate_gpus)") : null),
    h("div", { style: S.muted }, `Leases of running tasks as they published them; refreshes every 5 s · `,
      `updated ${new Date(data.generated * 1000).toLocaleTimeString()} · api-server ${data.api_server_host}`),
    errorBox(error),
    data.hosts.length === 0 ? h("div", { style: S.card, "data-testid": "no-leases" },
      "No task holds a GPU lease now.") : null,
    data.hosts.map((host) => h("div", { key: host.host, style: S.card, "data-testid": `host-${host.host}` },
      h("div", { style: { fontWeight: 600, marginBottom: "6px" } }, `Host ${host.host} `,
        host.simulated ? badge("simulated", "#c92a2a") : badge("NVML", "#2f9e44")),
      h(Table, { testid: "gpus", head: ["GPU", "model", "memory", "free", "leases"],
        rows: host.gpus.map((g) => ({ cells: [
          `${g.index}`, h("span", { title: g.uuid }, g.name + (g.simulated ? " (simulated)" : "")),
          h("div", null, h(MemoryBar, { gpu: g }), h("span", { style: S.muted },
            `${gib(g.memory_leased)} / ${gib(g.memory_total)}${g.whole_taken ? " · whole GPU" : ""}`)),
          gib(g.memory_free),
          g.leases.length === 0 ? h("span", { style: S.muted }, "free") : g.leases.map((l) => h("div", {
            key: l.lease_id, "data-testid": "lease", style: same(l, mark) ?
              { outline: "2px solid #f59f00", borderRadius: "4px", padding: "2px" } : { padding: "2px" } },
            badge(l.job_class, COLORS[l.job_class]), tiLink(l),
            h("span", { style: S.muted }, ` · since ${new Date(l.started * 1000).toLocaleTimeString()} (${dur(l.seconds)})`,
              l.whole ? " · whole GPU" : ` · ${gib(l.memory)}`),
            l.yielding_to ? h("span", null, " ", badge("yielding", "#d9480f", `asked to yield to ${l.yielding_to}`),
              h("span", { style: S.muted }, `to ${l.yielding_to}`)) : null)),
        ] })) }))),
    h("h2", { style: S.h2 }, `Waiting for GPUs (${data.waiting.length})`),
    data.waiting.length === 0 ? h("div", { style: S.muted }, "Nothing waits for a GPU.") :
      h(Table, { testid: "waiting", head: ["class", "priority", "task", "asks for", "host", "waiting", "why"],
        rows: data.waiting.map((w) => ({ cells: [badge(w.job_class, COLORS[w.job_class]), `${w.priority}`,
          tiLink(w), w.request, w.host, dur(data.generated - w.since), h("span", { style: S.muted }, w.why)] })) }),
    h("h2", { style: S.h2 }, "GPU time by class"),
    classes.length === 0 ? h("div", { style: S.muted }, "No GPU work in the last day.") :
      h(Table, { testid: "gpu-time", head: ["class", "used, last hour", "lost, last hour", "used, last day",
                                             "lost, last day", "preemptions (day)", "running"],
        rows: classes.map((c) => {
          const hr = data.gpu_time.hour[c] || {}, d = data.gpu_time.day[c] || {};
          const g = (x) => `${((x || 0) / 3600).toFixed(2)} GPU-h`;
          return { cells: [badge(c, COLORS[c]), g(hr.gpu_seconds), g(hr.lost_gpu_seconds), g(d.gpu_seconds),
                           g(d.lost_gpu_seconds), `${d.preemptions || 0}`, `${d.running || 0}`] };
        }) }),
    data.problems.length ? h("div", null, h("h2", { style: S.h2 }, "Records that could not be read"),
      h("ul", null, data.problems.map((p, i) => h("li", { key: i }, p)))) : null);
}

function GpuSummary() {
  const { data, error } = useJson(`${API}/gpus`, 10000);
  if (!data) return h("div", { style: S.card }, errorBox(error) || status("GPUs: loading…"));
  const gpus = data.hosts.flatMap((x) => x.gpus);
  const busy = gpus.filter((g) => g.leases.length).length;
  return h("div", { style: { ...S.card, fontSize: "14px" }, "data-testid": "gpu-summary" },
    h("b", null, "GPUs "), data.hosts.some((x) => x.simulated) ? badge("simulated", "#c92a2a") : null,
    h("span", null, `${busy} of ${gpus.length} in use on ${data.hosts.length} host(s) · ${data.waiting.length} task(s) waiting · `),
    h("a", { href: `${UI}/plugin/gpusched-gpus`, style: S.a }, "GPU board"));
}

// ---------------------------------------------------------------------------------------------------- sweeps
function Scatter({ points, line, xLabel, yLabel, width = 420, height = 240, testid }) {
  const pad = { l: 56, r: 10, t: 10, b: 34 };
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y).concat((line || []).map((p) => p.y));
  if (!xs.length) return null;
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 1; y1 += 1; }
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const Y = (y) => height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b);
  const fmt = (v) => (Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(1) : +v.toPrecision(3));
  // ends and middle; on an axis of whole numbers (trial index, num_zmode) the middle is a whole number too
  const ticks = (a, b, whole) => {
    const mid = whole ? Math.round((a + b) / 2) : a + (b - a) / 2;
    return mid > a && mid < b ? [a, mid, b] : [a, b];
  };
  return h("svg", { width, height, "data-testid": testid, role: "img", "aria-label": `${yLabel} against ${xLabel}`,
                    style: { overflow: "visible", margin: "4px 12px 4px 0" } },
    h("line", { x1: pad.l, y1: height - pad.b, x2: width - pad.r, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    h("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    ticks(x0, x1, xs.every(Number.isInteger)).map((t, i) => h("text", { key: `x${i}`, x: X(t), y: height - pad.b + 14, fontSize: 10,
                                             textAnchor: "middle", fill: "currentColor" }, fmt(t))),
    ticks(y0, y1).map((t, i) => h("text", { key: `y${i}`, x: pad.l - 4, y: Y(t) + 3, fontSize: 10, textAnchor: "end",
                                             fill: "currentColor" }, fmt(t))),
    h("text", { x: (pad.l + width - pad.r) / 2, y: height - 4, fontSize: 11, textAnchor: "middle", fill: "currentColor" }, xLabel),
    h("text", { x: 12, y: (pad.t + height - pad.b) / 2, fontSize: 11, textAnchor: "middle", fill: "currentColor",
                transform: `rotate(-90 12 ${(pad.t + height - pad.b) / 2})` }, yLabel),
    line && line.length > 1 ? h("polyline", { fill: "none", stroke: "#f59f00", strokeWidth: 2,
      points: line.map((p) => `${X(p.x)},${Y(p.y)}`).join(" ") }) : null,
    points.map((p, i) => h("circle", { key: i, cx: X(p.x), cy: Y(p.y), r: p.best ? 6 : 4,
      fill: p.best ? "#f59f00" : p.color || "#2b7bd6", stroke: p.best ? "black" : "none", opacity: 0.85 },
      h("title", null, p.title))));
}

// intermediate reports: one line per trial, coloured by its state (running trials drawn last, on top)
function Curves({ curves, metric, width = 560, height = 260, testid }) {
  const pad = { l: 56, r: 10, t: 10, b: 34 };
  const all = curves.flatMap((c) => c.points);
  if (!all.length) return null;
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 1; y1 += 1; }
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const Y = (y) => height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b);
  const fmt = (v) => (Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(1) : +v.toPrecision(3));
  const drawn = [...curves].sort((a, b) => (a.state === "running") - (b.state === "running"));
  return h("svg", { width, height, "data-testid": testid, role: "img", "aria-label": `${metric} by step`,
                    style: { overflow: "visible", margin: "4px 12px 4px 0" } },
    h("line", { x1: pad.l, y1: height - pad.b, x2: width - pad.r, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    h("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    [x0, x1].map((t, i) => h("text", { key: `x${i}`, x: X(t), y: height - pad.b + 14, fontSize: 10, textAnchor: "middle",
                                       fill: "currentColor" }, fmt(t))),
    [y0, y1].map((t, i) => h("text", { key: `y${i}`, x: pad.l - 4, y: Y(t) + 3, fontSize: 10, textAnchor: "end",
                                       fill: "currentColor" }, fmt(t))),
    h("text", { x: (pad.l + width - pad.r) / 2, y: height - 4, fontSize: 11, textAnchor: "middle", fill: "currentColor" }, "step"),
    h("text", { x: 12, y: (pad.t + height - pad.b) / 2, fontSize: 11, textAnchor: "middle", fill: "currentColor",
                transform: `rotate(-90 12 ${(pad.t + height - pad.b) / 2})` }, metric),
    drawn.map((c) => h("g", { key: c.index, "data-state": c.state },
      h("title", null, `trial ${c.index} ${c.label} (${c.state}): ${metric} ${fmt(c.points[c.points.length - 1][1])} at step ${c.points[c.points.length - 1][0]}`),
      c.points.length > 1 ? h("polyline", { fill: "none", stroke: COLORS[c.state] || "#868e96", strokeWidth: c.state === "running" ? 2 : 1.2,
        opacity: c.state === "running" ? 0.95 : 0.6, points: c.points.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ") }) : null,
      h("circle", { cx: X(c.points[c.points.length - 1][0]), cy: Y(c.points[c.points.length - 1][1]), r: 2.5,
                    fill: COLORS[c.state] || "#868e96" }))));
}

const ROUND_COLORS = ["#2b7bd6", "#2f9e44", "#8e6ccf", "#d9480f", "#0c8599", "#e64980", "#5c940d", "#495057"];

function SweepCard({ sweep, dagId, focus }) {
  const obj = sweep.objective;
  const better = obj && obj.maximize ? (a, b) => a > b : (a, b) => a < b;
  const several = obj && obj.several;
  const fmtv = (v) => (typeof v === "number" ? `${+v.toPrecision(6)}` : "–");
  const pts = [...sweep.points].sort((a, b) => a.index - b.index);
  let best = null;
  const line = pts.map((p) => { if (best === null || better(p.score, best)) best = p.score; return { x: p.index, y: best }; });
  const bestIndex = sweep.best ? sweep.best.index : null;
  const scatter = pts.map((p) => ({ x: p.index, y: p.score, best: p.index === bestIndex,
    color: ROUND_COLORS[(p.round || 0) % ROUND_COLORS.length], title: `trial ${p.index} ${p.label}: ${p.score}` }));
  const counts = sweep.counts;
  return h("div", { style: { ...S.card, ...(focus ? { outline: "2px solid #f59f00" } : {}) },
                    id: `sweep-${sweep.group}`, "data-testid": `sweep-${sweep.group}` },
    h("div", { style: { fontSize: "16px", fontWeight: 600 } }, `Sweep ${sweep.sweep} `,
      h("span", { style: S.muted }, `${sweep.search} search on ${sweep.backend}` +
        (sweep.rounds ? ` · ${sweep.rounds} round(s) so far` : "") +
        (obj ? ` · ${obj.describe}` : " · no objective") + (obj && obj.weights ? ` · ranked by ${obj.score_label}` : ""))),
    h("div", { style: { margin: "6px 0" }, "data-testid": "counts" },
      ["defined", "waiting", "running", "succeeded", "failed", "invalid", "pruned", "skipped"].map((k) =>
        h("span", { key: k, "data-count": k }, badge(`${k} ${counts[k] || 0}`, COLORS[k])))),
    sweep.best ? h("div", { "data-testid": "best", style: { margin: "6px 0" } }, "Best: ",
      h("b", null, several && !obj.weights
        ? obj.metrics.map((m) => `${m} = ${fmtv((sweep.best.values || {})[m])}`).join(", ") + " (Pareto front, best " + obj.metrics[0] + ")"
        : `${obj.score_label} = ${fmtv(sweep.best.score)}`), ` — trial ${sweep.best.index} ${sweep.best.label} `,
      sweep.best.task_id ? h("a", { href: tiHref(dagId, sweep.run, sweep.best.task_id, sweep.best.map_index), style: S.a },
        "task instance") : h("span", { style: S.muted }, "(succeeded in an earlier run)")) : null,
    scatter.length ? h("div", { style: { display: "flex", flexWrap: "wrap" }, "data-testid": "plots" },
      several ? h("div", null, h("div", { style: S.muted }, `${obj.metrics[1]} against ${obj.metrics[0]} (orange: the Pareto front)`),
        h(Scatter, { points: pts.map((p) => ({ x: p.values[0], y: p.values[1], best: p.front,
          title: `trial ${p.index} ${p.label}: ${obj.metrics[0]} ${fmtv(p.values[0])}, ${obj.metrics[1]} ${fmtv(p.values[1])}` })),
          line: pts.filter((p) => p.front).map((p) => ({ x: p.values[0], y: p.values[1] })).sort((a, b) => a.x - b.x || a.y - b.y),
          xLabel: obj.metrics[0], yLabel: obj.metrics[1], testid: "plot-pareto" })) : null,
      h("div", null, h("div", { style: S.muted }, `${obj.score_label} by trial (orange line: best so far; colour: round)`),
        h(Scatter, { points: scatter, line, xLabel: "trial", yLabel: obj.score_label, testid: "plot-progress" })),
      sweep.numeric_params.map((name) => h("div", { key: name },
        h("div", { style: S.muted }, `${obj.score_label} against ${name}`),
        h(Scatter, { points: pts.filter((p) => name in p.params).map((p) => ({ x: p.params[name], y: p.score,
          best: p.index === bestIndex, title: `trial ${p.index} ${p.label}: ${p.score}` })),
          xLabel: name, yLabel: obj.score_label, width: 300, height: 200, testid: `plot-${name}` })))) : null,
    obj ? h("div", null, h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Leaderboard"),
      sweep.leaderboard.length === 0 ? h("div", { style: S.muted }, "No trial has a score yet.") :
        h(Table, { testid: "leaderboard", head: ["rank"].concat(several ? ["front", ...obj.metrics] : [],
            several && !obj.weights ? [] : [obj.score_label], ["trial", "parameters", "time", ""]),
          rows: sweep.leaderboard.map((r) => ({ cells: [`${r.rank}`].concat(
            several ? [r.front ? `${r.front}` : "–", ...obj.metrics.map((m) => fmtv((r.values || {})[m]))] : [],
            several && !obj.weights ? [] : [`${r.score}`], [`${r.index} ${r.label}`,
            h("code", { style: { fontSize: "12px", wordBreak: "break-word" } }, JSON.stringify(r.params)), dur(r.seconds),
            r.task_id ? h("a", { href: tiHref(dagId, sweep.run, r.task_id, r.map_index), style: S.a }, "task")
              : h("span", { style: S.muted }, "earlier run")]) })) })) : null,
    sweep.curves && sweep.curves.length ? h("div", { "data-testid": "reports" },
      h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Intermediate reports"),
      h("div", { style: S.muted }, `${sweep.curve_metric} by step, one line per trial (colour: state; ` +
        `${sweep.curves.length} trial(s) with reports)`),
      h(Curves, { curves: sweep.curves, metric: sweep.curve_metric, testid: "plot-reports" }),
      sweep.latest_reports.length ? h(Table, { testid: "latest-reports", head: ["running trial", "step", "latest metrics", "checkpoint", ""],
        rows: sweep.latest_reports.map((r) => ({ cells: [`${r.index} ${r.label}`, `${r.step}`,
          Object.entries(r.metrics).map(([k, v]) => `${k} ${typeof v === "number" ? +v.toPrecision(6) : v}`).join(", "),
          r.checkpoint || "", r.task_id ? h("a", { href: tiHref(dagId, sweep.run, r.task_id, r.map_index), style: S.a }, "task") : ""] })) })
        : null) : null,
    sweep.reports_note ? h("div", { style: S.muted }, sweep.reports_note) : null,
    sweep.truncated ? h("div", { style: S.muted }, `${sweep.truncated} trials are not listed (too many to publish).`) : null,
    sweep.problems.length ? h("div", null, h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Failed or invalid"),
      h(Table, { testid: "problems", head: ["trial", "state", "error", ""], rows: sweep.problems.map((p) => ({
        cells: [`${p.index} ${p.label}`, badge(p.state, COLORS[p.state]), p.error || "",
                p.task_id ? h("a", { href: tiHref(dagId, sweep.run, p.task_id, p.map_index), style: S.a }, "task") : ""] })) }))
      : null);
}

function Sweeps({ dagId }) {
  const q = new URLSearchParams(window.location.search);
  const [runId, setRunId] = useState(q.get("run_id") || "");
  const url = `${API}/dags/${enc(dagId)}/sweeps` + (runId ? `?run_id=${enc(runId)}` : "");
  const { data, error } = useJson(url, 10000);
  if (!data) return h("div", { style: S.page }, errorBox(error) || status("loading…"));
  return h("div", { style: S.page, "data-testid": "sweeps" },
    h("h1", { style: S.h1 }, `Sweeps of ${dagId}`),
    data.runs.length ? h("label", null, "DAG run ", h("select", { value: data.run_id || "", "data-testid": "run",
      onChange: (e) => setRunId(e.target.value) }, data.runs.map((r) => h("option", { key: r, value: r }, r))),
      h("span", { style: S.muted }, " · refreshes every 10 s")) : null,
    errorBox(error),
    data.sweeps.length === 0 ? h("div", { style: S.card }, "No sweep has been planned in this DAG yet.") : null,
    data.sweeps.map((s) => h(SweepCard, { key: s.group, sweep: s, dagId, focus: q.get("sweep") === s.sweep })),
    data.problems.length ? h("ul", null, data.problems.map((p, i) => h("li", { key: i }, p))) : null);
}

// ---------------------------------------------------------------------------------------------------- Slurm job
const PHASE_COLORS = { succeeded: "#2f9e44", completed: "#2f9e44", requeued: "#d9480f", running: "#1c7ed6", pending: "#868e96", failed: "#e03131",
  timeout: "#e8590c", cancelled: "#495057", preempted: "#d9480f", out_of_memory: "#c2255c", node_fail: "#c92a2a" };

function SlurmJob({ dagId, runId, taskId, mapIndex }) {
  const mi = mapIndex === undefined || mapIndex === null ? -1 : mapIndex;
  const url = `${API}/dags/${enc(dagId)}/runs/${enc(runId)}/tasks/${enc(taskId)}/slurm?map_index=${mi}`;
  const { data, error } = useJson(url, 5000);
  const [shown, setShown] = useState(null);
  if (!data) return h("div", { style: S.page }, errorBox(error) || status("loading…"));
  const keys = Object.keys(data.tails);
  const key = shown !== null && keys.includes(shown) ? shown : keys[0];
  const field = (k, v) => h("tr", { key: k }, h("th", { style: S.th }, k), h("td", { style: S.td, "data-field": k }, v));
  return h("div", { style: S.page, "data-testid": "slurm-job" },
    h("h1", { style: S.h1 }, `Slurm job ${data.job_id} `, badge(data.state, PHASE_COLORS[data.phase])),
    h("div", { style: S.muted }, `${data.source} · refreshes every 5 s · task ${data.task_state}`),
    errorBox(error),
    data.problem ? errorBox(data.problem) : null,
    h("table", { style: { ...S.table, width: "auto", margin: "8px 0" } }, h("tbody", null,
      field("state", data.state + (data.reason && data.reason !== "None" ? ` (${data.reason})` : "")),
      field("exit code", data.exit_code === null || data.exit_code === undefined ? "–" : `${data.exit_code}` +
        (data.signal ? ` (signal ${data.signal})` : "")),
      field("node", data.nodes || "–"), field("partition", data.partition || "–"),
      field("requeues / preemptions", `${data.requeues}`), field("elapsed", dur(data.elapsed)),
      field("submitted", when(data.submitted)), field("cluster", data.via),
      field("output", h("code", null, data.output_path)),
      data.array ? field("array", data.array) : null)),
    data.tasks.length ? h("div", null, h("h2", { style: S.h2 }, `Array tasks (${data.tasks.length})`),
      h(Table, { testid: "array-tasks", head: ["task", "state", "exit code", "node", "elapsed", "requeues"],
        rows: data.tasks.map((t) => ({ cells: [t.task, badge(t.state || "?", PHASE_COLORS[(t.state || "").toLowerCase()]),
          t.exit_code === null ? "–" : `${t.exit_code}`, t.nodes || "–", dur(t.elapsed), `${t.requeues || 0}`] })) })) : null,
    data.preemption_events.length ? h("div", null, h("h2", { style: S.h2 }, "Preemptions"),
      h("ul", null, data.preemption_events.map((e, i) => h("li", { key: i }, e)))) : null,
    h("h2", { style: S.h2 }, "Output ", h("span", { style: S.muted }, `(${data.tail_source})`)),
    keys.length > 1 ? h("select", { value: key, onChange: (e) => setShown(e.target.value), "data-testid": "tail-task" },
      keys.map((k) => h("option", { key: k, value: k }, `array task ${k}`))) : null,
    keys.length ? h("pre", { style: S.pre, "data-testid": "output-tail" }, data.tails[key]) :
      h("div", { style: S.muted }, "No output yet."));
}

globalThis["GPU board"] = GpuBoard;
globalThis["GPUs"] = GpuSummary;
globalThis["Sweeps"] = Sweeps;
globalThis["Slurm job"] = SlurmJob;
globalThis.AirflowPlugin = GpuBoard;
export default GpuBoard;
