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
  invalid: "#c2255c", timeout: "#9c36b5", running: "#1c7ed6", waiting: "#868e96", skipped: "#74b816", defined: "#495057",
  pruned: "#f08c00", stopped: "#495057", not_started: "#adb5bd",
};
// what a count means, on hover (the per-run states of a stopped run: docs/queue.md)
const COUNT_TITLES = {
  stopped: "started by this run and stopped (gpusched queue stop) before an outcome; an earlier outcome it had stands",
  not_started: "planned by this run but never started (it was stopped or failed first); their earlier records stand",
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
    if (!url) return undefined;
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
    h("thead", null, h("tr", null, head.map((c, i) => h("th", { key: i, style: S.th }, c)))),
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

// measured use of one GPU (its host's sampler: every 10 s, the last 10 minutes): utilisation and memory in use now,
// a sparkline of both, temperature and power; the processes on it, those not ours marked
function Sparkline({ series, total, width = 120, height = 26 }) {
  if (!series || series.length < 2) return null;
  const t0 = series[0][0], t1 = series[series.length - 1][0], span = Math.max(1, t1 - t0);
  const X = (t) => ((t - t0) / span) * (width - 2) + 1;
  const Y = (f) => height - 1 - Math.max(0, Math.min(1, f)) * (height - 2);
  const line = (pick) => series.filter((r) => pick(r) !== null).map((r) => `${X(r[0]).toFixed(1)},${Y(pick(r)).toFixed(1)}`).join(" ");
  return h("svg", { width, height, "data-testid": "gpu-sparkline", style: { display: "inline-block", verticalAlign: "middle" } },
    h("title", null, `last ${dur(span)}: utilisation (blue) and memory in use (orange)`),
    h("rect", { x: 0, y: 0, width, height, fill: "rgba(128,128,128,0.08)", rx: 2 }),
    h("polyline", { points: line((r) => (r[1] === null ? null : r[1] / 100)), fill: "none", stroke: "#2b7bd6", strokeWidth: 1.5 }),
    h("polyline", { points: line((r) => r[2] / (total || 1)), fill: "none", stroke: "#e8590c", strokeWidth: 1.5 }));
}

function Measured({ gpu }) {
  const m = gpu.measured;
  if (!m) return h("span", { style: S.muted }, "not sampled");
  const others = m.processes.filter((p) => !p.ours && !p.unattributed);
  const over = gpu.leases.filter((l) => l.over_reservation);
  return h("div", { "data-testid": "measured", "data-utilization": m.utilization ?? "", "data-memory-used": m.memory_used,
                    style: { minWidth: "340px" } },
    h("div", { style: { whiteSpace: "nowrap" } }, h(Sparkline, { series: m.series, total: m.memory_total }), " ",
      h("b", null, m.utilization === null ? "–" : `${m.utilization}%`), ` · ${gib(m.memory_used)} in use`,
      m.temperature !== null ? ` · ${m.temperature} °C` : "", m.power_watts !== null ? ` · ${Math.round(m.power_watts)} W` : "",
      m.simulated ? h("span", null, " ", badge("simulated", "#c92a2a", "made-up figures of a simulated GPU, not a real one")) : null,
      m.stale ? h("span", null, " ", badge(`${dur(m.age)} old`, "#868e96", "the host has not sampled lately")) : null),
    over.map((l) => h("div", { key: l.lease_id, "data-testid": "over-reservation", style: { color: "#e03131" } },
      `${l.task_id ? `${l.task_id}${l.map_index >= 0 ? `[${l.map_index}]` : ""}` : l.dag_id} uses ${gib(l.memory_used)}, `,
      `more than the ${gib(l.memory)} it reserved`)),
    others.length ? h("div", { "data-testid": "foreign-processes", style: { color: "#d9480f" } },
      `not ours: ${others.map((p) => `pid ${p.pid}${p.user ? ` (${p.user})` : ""}${p.used_memory !== null ? ` ${gib(p.used_memory)}` : ""}`).join(", ")}`) : null);
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

// several hosts: one line per host, one square per GPU (red: taken whole or full, blue: partly leased, orange: held
// by others' processes, grey: free), so a fleet of 64 GPUs fits on a screen; a square links to its host's table
function FleetOverview({ hosts }) {
  const tile = (host, g) => {
    const total = g.memory_total || 1;
    const leased = g.whole_taken ? total : Math.min(g.memory_leased, total);
    const colour = g.held_by_others ? "#d9480f" : leased >= total ? "#e03131" : leased > 0 ? "#2b7bd6" : "rgba(128,128,128,0.3)";
    const who = g.leases.map((l) => `${l.dag_id} › ${l.task_id}${l.map_index >= 0 ? `[${l.map_index}]` : ""}`).join(", ");
    return h("a", { key: g.index, href: `#host-${host.host}`, "data-testid": "gpu-tile",
      title: `${host.host} GPU ${g.index}: ${gib(g.memory_leased)} of ${gib(g.memory_total)} leased` + (who ? ` (${who})` : ""),
      style: { display: "inline-block", width: "16px", height: "16px", margin: "1px", borderRadius: "3px",
               background: colour } });
  };
  const key = [["taken whole or full", "#e03131"], ["partly leased", "#2b7bd6"], ["held by others' processes", "#d9480f"],
               ["free", "rgba(128,128,128,0.3)"]];
  return h("div", { style: S.card, "data-testid": "fleet-overview" },
    h("div", { style: { fontWeight: 600, marginBottom: "6px" } }, `${hosts.length} hosts, `,
      `${hosts.reduce((n, x) => n + x.gpus.length, 0)} GPUs, `,
      `${hosts.reduce((n, x) => n + x.gpus.filter((g) => g.leases.length).length, 0)} leased`,
      h("span", { style: { ...S.muted, fontWeight: 400, marginLeft: "12px" }, "data-testid": "tile-key" },
        key.map(([label, colour]) => h("span", { key: label, style: { marginRight: "10px" } },
          h("span", { style: { display: "inline-block", width: "10px", height: "10px", borderRadius: "2px",
                               background: colour, marginRight: "4px", verticalAlign: "middle" } }), label)))),
    h(Table, { testid: "fleet-hosts", head: ["host", "GPUs", "leased", "free memory"],
      rows: hosts.map((host) => ({ cells: [
        h("a", { href: `#host-${host.host}`, style: S.a }, host.host),
        h("div", { style: { lineHeight: 0 } }, host.gpus.map((g) => tile(host, g))),
        `${host.gpus.filter((g) => g.leases.length).length} of ${host.gpus.length}`,
        gib(host.gpus.reduce((n, g) => n + (g.memory_free || 0), 0))] })) }));
}

// ---------------------------------------------------------------------------------------------------- team quotas
// a group has one colour on every page: its place among the group names sorted (none is the job classes' blue/grey)
const GROUP_COLORS = ["#7048e8", "#e8590c", "#2f9e44", "#c2255c", "#f08c00", "#0c8599", "#5c940d", "#862e9c"];
function groupColor(name, groups) {
  const sorted = [...groups].sort();
  const i = sorted.indexOf(name);
  return GROUP_COLORS[(i < 0 ? sorted.length : i) % GROUP_COLORS.length];
}
const NO_GROUP = "#adb5bd";  // leases with no quota group, on a timeline coloured by group
function quotaGroups(board) { return board.quotas ? board.quotas.groups.map((g) => g.group) : []; }
function amount(v, resource) {
  if (v === null || v === undefined) return "–";
  return resource === "gpu_memory" ? gib(v) : `${+v.toFixed(2)}`;
}
// one group's use against its quota: its own part solid, what it borrows hatched beyond the quota mark
function QuotaBar({ g, most, color, width = 260 }) {
  const X = (v) => (most > 0 ? (v / most) * width : 0);
  return h("svg", { width: width + 2, height: 16, "data-testid": "quota-bar", role: "img",
                    "aria-label": `${g.group}: ${g.used} used of a quota of ${g.quota}` },
    h("rect", { x: 0, y: 3, width, height: 10, fill: "currentColor", opacity: 0.08, rx: 2 }),
    h("rect", { x: 0, y: 3, width: X(g.in_quota), height: 10, fill: color, rx: 2 }),
    h("rect", { x: X(g.in_quota), y: 3, width: X(g.borrowed), height: 10, fill: color, opacity: 0.45, rx: 2 }),
    h("line", { x1: X(g.quota), x2: X(g.quota), y1: 0, y2: 16, stroke: "currentColor", strokeWidth: 2 }));
}
function Quotas({ quotas }) {
  const groups = quotas.groups.map((g) => g.group);
  const most = Math.max(quotas.capacity, ...quotas.groups.map((g) => Math.max(g.used, g.quota)));
  const r = quotas.resource;
  const waiters = quotas.groups.flatMap((g) => g.waiters.map((w) => ({ ...w, group: g.group })));
  return h("div", { "data-testid": "quotas" },
    h("h2", { style: S.h2 }, "Team quotas"),
    h("div", { style: S.muted }, `${quotas.source} · ${amount(quotas.capacity, r)} ${r === "gpus" ? "GPUs" : ""} in the fleet · ` +
      "solid: within the quota (the mark), pale: borrowed from groups that do not use theirs (given back when they need it)"),
    h(Table, { testid: "quota-groups", head: ["group", "use", "quota", "used", "within", "borrowed", "lent", "waiting", "weight"],
      rows: quotas.groups.map((g) => ({ cells: [
        badge(g.group, groupColor(g.group, groups)),
        h(QuotaBar, { g, most, color: groupColor(g.group, groups) }),
        amount(g.quota, r) + (g.borrowing_limit !== null ? ` (+${amount(g.borrowing_limit, r)} at most)` : ""),
        amount(g.used, r), amount(g.in_quota, r), amount(g.borrowed, r), amount(g.lent, r),
        g.waiting ? h("span", { style: { color: "#d9480f" } }, amount(g.waiting, r)) : "0", `${g.weight}`] })) }),
    waiters.length ? h("div", { "data-testid": "quota-waiting" }, h("b", null, "Who waits on whom"),
      h(Table, { testid: "quota-waiters", head: ["group", "request", "asks for", "on", "waiting", "why"],
        rows: waiters.map((w) => ({ cells: [badge(w.group, groupColor(w.group, groups)), w.owner,
          `${amount(w.amount, r)} ${w.kind === "quota" ? "within its quota" : "to borrow"}`, w.host, dur(w.for_s),
          h("span", { "data-testid": "quota-why" }, w.reason)] })) })) : null,
    quotas.problems.length ? h("ul", { "data-testid": "quota-problems" },
      quotas.problems.map((p, i) => h("li", { key: i, style: { color: "#e03131" } }, p))) : null);
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
    h("div", { style: S.muted }, `GPU hosts and the leases their running tasks published; refreshes every 5 s · `,
      `updated ${new Date(data.generated * 1000).toLocaleTimeString()} · api-server ${data.api_server_host} · `,
      h("a", { href: `${UI}/plugin/gpusched-timeline`, style: S.a, "data-testid": "timeline-link" }, "GPU timeline")),
    errorBox(error),
    mark ? h(TaskLease, { mark, board: data }) : null,
    data.hosts.length === 0 ? h("div", { style: S.card, "data-testid": "no-hosts" },
      "No GPU host is known yet: no task published a lease in the last day, and this api-server's host has no GPU " +
      "(set [gpusched] simulate_gpus on a machine without NVIDIA GPUs).") : null,
    data.hosts.length > 1 ? h(FleetOverview, { hosts: data.hosts }) : null,
    data.hosts.map((host) => h("div", { key: host.host, style: S.card, "data-testid": `host-${host.host}`,
                                        id: `host-${host.host}` },
      h("div", { style: { fontWeight: 600, marginBottom: "6px" } }, `Host ${host.host} `,
        host.simulated ? badge("simulated", "#c92a2a") : badge("NVML", "#2f9e44"),
        host.fleet ? h("span", { "data-testid": "host-fleet" }, " ", host.fleet.up ?
          badge("fleet: up", "#2f9e44", `published its record ${dur(host.fleet.age)} ago`) :
          badge("fleet: DOWN", "#e03131", `no record for ${dur(host.fleet.age)}: its worker or the host is down`),
          host.fleet.foreign_busy.length ? badge(`${host.fleet.foreign_busy.length} GPU(s) held by others`, "#d9480f",
            "processes that are not this provider's hold these GPUs: the host takes no work on them") : null) : null,
        h("span", { style: { ...S.muted, fontWeight: 400 }, "data-testid": "host-seen" },
          ` ${host.gpus.filter((g) => g.leases.length).length} of ${host.gpus.length} GPU(s) leased · known from ${host.seen}`)),
      host.telemetry ? h("div", { style: S.muted, "data-testid": "telemetry-note" },
        `Measured use: sampled every ${host.telemetry.resolution} s by ${host.telemetry.sampled_by}, the last ` +
        `${Math.round(host.telemetry.window / 60)} minutes drawn (blue: utilisation, orange: memory in use)`,
        host.telemetry.error ? h("span", { style: { color: "#e03131" } }, ` · sampling failed: ${host.telemetry.error}`) : null) : null,
      h(Table, { testid: "gpus", head: ["GPU", "model", "leased memory", "free", "measured use", "leases"],
        rows: host.gpus.map((g) => ({ cells: [
          `${g.index}`, h("span", { title: g.uuid }, g.name + (g.simulated ? " (simulated)" : "")),
          h("div", null, h(MemoryBar, { gpu: g }), h("span", { style: S.muted },
            `${gib(g.memory_leased)} / ${gib(g.memory_total)}${g.whole_taken ? " · whole GPU" : ""}`)),
          gib(g.memory_free), h(Measured, { gpu: g }),
          g.leases.length === 0 ? (g.held_by_others ? h("span", { "data-testid": "held-by-others",
            style: { color: "#d9480f" } }, "held by processes of others") :
            h("span", { style: S.muted }, "free")) : g.leases.map((l) => h("div", {
            key: l.lease_id, "data-testid": "lease", style: same(l, mark) ?
              { outline: "2px solid #f59f00", borderRadius: "4px", padding: "2px" } : { padding: "2px" } },
            badge(l.job_class, COLORS[l.job_class]),
            l.group ? h("span", { "data-testid": "lease-group" }, badge(l.group, groupColor(l.group, quotaGroups(data)),
              l.quota === "borrowed" ? `group ${l.group}: beyond its quota, on GPUs it borrowed (given back when their group needs them)`
                : `group ${l.group}: within its quota`),
              l.quota === "borrowed" ? badge("borrowed", "#d9480f", "reclaimable: SIGTERM, its grace period, relaunched later") : null)
              : null,
            tiLink(l),
            h("span", { style: S.muted }, ` · since ${new Date(l.started * 1000).toLocaleTimeString()} (${dur(l.seconds)})`,
              l.whole ? " · whole GPU" : ` · ${gib(l.memory)}`,
              l.memory_used !== undefined && l.memory_used !== null ? ` · uses ${gib(l.memory_used)}` : ""),
            l.over_reservation ? h("span", null, " ", badge("over its reservation", "#e03131",
              `its processes use ${gib(l.memory_used)} of this GPU; it reserved ${gib(l.memory)}`)) : null,
            l.yielding_to ? h("span", null, " ", badge("yielding", "#d9480f", `asked to yield to ${l.yielding_to}`),
              h("span", { style: S.muted }, `to ${l.yielding_to}`)) : null)),
        ] })) }))),
    data.quotas ? h(Quotas, { quotas: data.quotas }) : null,
    h("h2", { style: S.h2 }, `Waiting for GPUs (${data.waiting.length})`),
    data.waiting_shared && data.waiting_shared.length ? h("div", { style: S.muted, "data-testid": "waiting-shared" },
      "All of them see: ", data.waiting_shared.join("; ")) : null,
    data.waiting.length === 0 ? h("div", { style: S.muted }, "Nothing waits for a GPU.") :
      h(Table, { testid: "waiting", head: ["class", "priority", "task", "asks for", "host", "waiting", "why"],
        rows: data.waiting.map((w) => ({ cells: [badge(w.job_class, COLORS[w.job_class]), `${w.priority}`,
          tiLink(w), w.request, w.host, dur(data.generated - w.since), h("div", { title: w.why, "data-testid": "wait-why" },
            h("div", null, w.reason), (w.details || []).map((d, i) => h("div", { key: i, style: S.muted }, d)))] })) }),
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
    cutNote(data.cut),
    data.problems.length ? h("div", null, h("h2", { style: S.h2 }, "Records that could not be read"),
      h("ul", null, data.problems.map((p, i) => h("li", { key: i }, p)))) : null);
}

// what a bounded answer left out (issue 53: every answer has bounds, and says when it reached them)
function cutNote(cut) {
  return cut && cut.length ? h("div", { style: { ...S.muted, color: "#a15c00" }, "data-testid": "cut-note" },
    "Not everything is shown: ", cut.join("; ")) : null;
}

// the task the "GPU lease" link points at: its lease on the board while it runs, else what it published
function TaskLease({ mark, board }) {
  const running = board.hosts.some((host) => host.gpus.some((g) => g.leases.some((l) => same(l, mark))));
  const url = `${API}/dags/${enc(mark.dag_id)}/runs/${enc(mark.run_id)}/tasks/${enc(mark.task_id)}/lease?map_index=${mark.map_index}`;
  const { data, error } = useJson(running ? null : url, 10000);
  const name = `${mark.dag_id} › ${mark.task_id}${mark.map_index >= 0 ? `[${mark.map_index}]` : ""}`;
  if (running) return h("div", { style: { ...S.card, borderColor: "#f59f00" }, "data-testid": "task-lease" },
    "Highlighted below: the lease that ", h("b", null, name), " holds now.");
  if (!data) return error ? h("div", { style: S.card, "data-testid": "task-lease" }, `${name}: ${error}`) : null;
  const lease = data.lease;
  const link = h("a", { href: tiHref(mark.dag_id, mark.run_id, mark.task_id, mark.map_index), style: S.a }, name);
  let body;
  if (lease) {
    const gpus = lease.gpus.map((i) => {
      const g = (lease.inventory || []).find((x) => x.index === i);
      return `GPU ${i}` + (lease.whole ? " (whole)" : ` (${gib(lease.memory[String(i)] || lease.memory[i])}` +
        (g ? ` of ${gib(g.memory_total)})` : ")"));
    }).join(", ");
    const ended = data.end_date ? `ended ${when(data.end_date)}` : `task ${data.task_state}`;
    body = [h("b", { key: "t" }, data.end_date ? "This task's lease has ended. " : `This task is ${data.task_state}; it holds no lease now. `),
      `It ran on host ${lease.host}, ${gpus}, class ${lease.job_class}, from ${when(lease.started)}; ${ended}`,
      ` (task ${data.task_state}, try ${data.try_number})`,
      data.gpu_time ? `; ${(data.gpu_time.gpu_seconds / 3600).toFixed(3)} GPU-h used` +
        (data.gpu_time.preemptions ? `, ${data.gpu_time.preemptions} preemption(s)` : "") : "", "."];
  } else if (data.wait) {
    body = [h("b", { key: "t" }, "This task has not held a lease. "), `It waited for GPUs on ${data.wait.host} since `,
      when(data.wait.since), ` (${data.wait.request}): ${data.wait.why}; task ${data.task_state}.`];
  } else {
    body = [h("b", { key: "t" }, "This task published no GPU lease"), ` (task ${data.task_state}` +
      (data.hostname ? ` on ${data.hostname}` : "") + ").", ];
  }
  return h("div", { style: { ...S.card, borderColor: "#f59f00" }, "data-testid": "task-lease" }, link, ": ", ...body,
    data.problems.length ? h("div", { style: S.muted }, data.problems.join("; ")) : null);
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

// ---------------------------------------------------------------------------------------------------- GPU timeline
const EXTRA_CLASS_COLORS = ["#0c8599", "#e64980", "#5c940d", "#862e9c", "#a61e4d", "#364fc7"];
function classColor(name, classes) {
  if (COLORS[name] && ["idle", "normal", "high"].includes(name)) return COLORS[name];
  const others = classes.filter((c) => !["idle", "normal", "high"].includes(c));
  return EXTRA_CLASS_COLORS[Math.max(0, others.indexOf(name)) % EXTRA_CLASS_COLORS.length];
}
const MARKS = { preempted: ["#e03131", "preempted (gave its GPU back)"], oom: ["#c2255c", "GPU out of memory (retried bigger)"],
  failed: ["#212529", "failed"], timeout: ["#9c36b5", "stopped at its time limit"], stopped: ["#f59f00", "stopped"] };
function clock(t, span, step = 60) {
  const d = new Date(t * 1000);
  const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: step < 60 ? "2-digit" : undefined, hour12: false });
  return span > 86400 ? `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${hm}` : hm;
}
function timeTicks(since, until, width) {
  const span = until - since;
  const steps = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  const most = Math.max(2, Math.floor(width / (span > 86400 ? 110 : 70)));
  const step = steps.find((s) => span / s <= most) || 86400;
  const offset = new Date().getTimezoneOffset() * 60;  // ticks on the local clock's round times
  const ticks = [];
  for (let t = Math.ceil((since - offset) / step) * step + offset; t <= until; t += step) ticks.push(t);
  return { ticks, step };
}
function barTitle(b) {
  const who = b.task_id ? `${b.dag_id} › ${b.task_id}${b.map_index >= 0 ? `[${b.map_index}]` : ""}` : b.dag_id;
  const times = `${new Date(b.start * 1000).toLocaleTimeString()}–${new Date(b.end * 1000).toLocaleTimeString()} (${dur(b.end - b.start)})`;
  if (b.count) return `${b.count} short leases, ${times}, ${dur(b.busy)} of GPU time: ` +
    Object.entries(b.outcomes).map(([o, n]) => `${n} ${o}`).join(", ") + " · classes: " +
    Object.entries(b.classes || {}).map(([c, n]) => `${n} ${c}`).join(", ") + ` · first: ${who}. Choose a shorter window to see each.`;
  return `${who} · ${b.job_class} class${b.group ? ` · group ${b.group}` : ""}${b.label ? ` · ${b.label}` : ""} · ${times} · ${b.outcome}` +
    (b.attempt > 1 ? ` (attempt ${b.attempt})` : "") + (b.request ? ` · ${b.request}` : "") + (b.detail ? ` · ${b.detail}` : "");
}

function TimelineChart({ data, width = 1300 }) {
  const label = 210, top = 28, lane = 14, gap = 6;
  const span = data.until - data.since;
  const { ticks, step } = timeTicks(data.since, data.until, width - label - 30);
  // a tick may sit at the window's right end: room for half its label (CHAR: a 10 px label's width per character)
  const right = Math.max(30, Math.ceil((clock(data.until, span, step).length * CHAR) / 2) + 4);
  const X = (t) => label + ((t - data.since) / span) * (width - label - right);
  const hostOf = (i) => (i === 0 || data.rows[i - 1].host !== data.rows[i].host);
  const head = 20;  // a host's name on a line of its own above its GPUs' rows
  let y = top;
  const rows = data.rows.map((row, i) => {
    if (hostOf(i)) y += head;
    const at = y; y += row.lanes * lane + gap; return { row, at };
  });
  const height = Math.max(y + 4, top + 30);
  return h("svg", { width, height, "data-testid": "plot-timeline", role: "img", "aria-label": "GPU leases over time" },
    ticks.map((t) => h("g", { key: t },
      h("line", { x1: X(t), x2: X(t), y1: top - 4, y2: height, stroke: "currentColor", opacity: 0.12 }),
      h("text", { x: X(t), y: 16, style: { fontSize: "10px" }, textAnchor: "middle", fill: "currentColor", "data-tick": "x" }, clock(t, span, step)))),
    rows.map(({ row, at }, i) => h("g", { key: `${row.host}-${row.gpu}`, "data-testid": "timeline-row",
                                           "data-host": row.host, "data-gpu": row.gpu },
      hostOf(i) && i > 0 ? h("line", { x1: 0, x2: width, y1: at - head - gap / 2, y2: at - head - gap / 2,
                                       stroke: "currentColor", opacity: 0.3 }) : null,
      hostOf(i) ? h("text", { x: 4, y: at - 7, style: { fontSize: "11px" }, fontWeight: 600, fill: "currentColor", "data-testid": "timeline-host" },
        row.host.length > 80 ? `${row.host.slice(0, 79)}…` : row.host) : null,
      h("text", { x: label - 6, y: at + 11, style: { fontSize: "11px" }, textAnchor: "end", fill: "currentColor" },
        `GPU ${row.gpu} · ${(100 * row.busy_fraction).toFixed(0)}%`,
        h("title", null, `${row.host} GPU ${row.gpu}: busy ${(100 * row.busy_fraction).toFixed(0)}% of the window`)),
      h("rect", { x: label, y: at, width: width - label - right, height: row.lanes * lane, fill: "currentColor", opacity: 0.04 }),
      row.bars.map((b, k) => {
        const x1 = X(b.start), w = Math.max(2, X(b.end) - x1), by = at + (b.lane || 0) * lane + 1;
        const colour = data.groups && data.groups.length ? (b.group ? groupColor(b.group, data.groups) : NO_GROUP)
          : classColor(b.job_class, data.classes);
        const mark = MARKS[b.outcome];
        const bar = h("rect", { x: x1, y: by, width: w, height: lane - 2, rx: 2, fill: colour,
          opacity: b.count ? 0.55 : b.outcome === "running" ? 0.95 : 0.8,
          stroke: mark ? mark[0] : "none", strokeWidth: mark ? 1.5 : 0,
          strokeDasharray: b.outcome === "running" ? "3 2" : undefined });
        const flag = mark && (b.outcome === "preempted" || b.outcome === "oom" || b.outcome === "stopped")
          ? h("path", { "data-testid": "timeline-mark", "data-outcome": b.outcome, fill: mark[0],
              d: b.outcome === "oom" ? `M${x1 + w} ${by - 1} l4 ${lane / 2 - 1} l-4 ${lane / 2 - 1} l-4 ${-(lane / 2 - 1)} z`
                : b.outcome === "stopped" ? `M${x1 + w - 2} ${by - 1} h5 v${lane} h-5 z`  // a bar across its end
                : `M${x1 + w - 4} ${by - 1} h8 l-4 ${lane - 1} z` }) : null;
        const content = [h("title", { key: "t" }, barTitle(b)), bar, flag];
        const attrs = { key: k, "data-testid": "timeline-bar", "data-outcome": b.outcome, "data-class": b.job_class,
                        "data-group": b.group || "", "data-count": b.count || 1 };
        return b.run_id ? h("a", { ...attrs, href: tiHref(b.dag_id, b.run_id, b.task_id, b.map_index) }, ...content)
          : h("g", attrs, ...content);
      }))));
}

function GpuTimeline() {
  const q = new URLSearchParams(window.location.search);
  const [hours, setHours] = useState(Number(q.get("hours")) || 6);
  const { data, error } = useJson(`${API}/timeline?hours=${hours}`, hours > 6 ? 60000 : 15000);
  // the windows the server offers (and the one the address asked for, if another)
  const windows = [...new Set([...(data ? data.windows : []), hours])].sort((a, b) => a - b);
  const pick = h("span", { "data-testid": "timeline-window" }, "Last ",
    windows.map((x) => h("button", { key: x, onClick: () => setHours(x), "aria-pressed": x === hours,
      style: { margin: "0 3px", padding: "1px 8px", borderRadius: "6px", cursor: "pointer",
               border: "1px solid rgba(128,128,128,0.5)", fontWeight: x === hours ? 700 : 400,
               background: x === hours ? "rgba(43,123,214,0.18)" : "transparent", color: "inherit" } },
      x < 1 ? `${+(x * 60).toFixed(1)} min` : x < 24 ? `${x} h` : `${+(x / 24).toFixed(2)} d`)));
  if (!data) return h("div", { style: S.page }, h("h1", { style: S.h1 }, "GPU timeline"), pick,
    errorBox(error) || status("loading…"));
  const c = data.counts;
  const leases = Object.values(c).reduce((n, v) => n + v, 0);
  const byGroup = data.groups && data.groups.length > 0;  // with team quotas: coloured by group
  const key = (byGroup ? data.groups.map((name) => [`group ${name}`, groupColor(name, data.groups)])
    .concat([["no group (work from before the quotas, or outside Airflow)", NO_GROUP]])
    : data.classes.map((name) => [`${name} class`, classColor(name, data.classes)]))
    .concat([["merged short leases", "rgba(43,123,214,0.45)"]]);
  return h("div", { style: S.page, "data-testid": "gpu-timeline" },
    h("h1", { style: S.h1 }, "GPU timeline"),
    h("div", { style: S.muted }, `Who held which GPU: one bar per lease, coloured by ${byGroup ? "quota group" : "job class"}; a bar links to its task ` +
      `instance · refreshes every ${hours > 6 ? "minute" : "15 s"} · updated ${new Date(data.until * 1000).toLocaleTimeString()} · `,
      h("a", { href: `${UI}/plugin/gpusched-gpus`, style: S.a }, "GPU board")),
    h("div", { style: { margin: "8px 0" } }, pick),
    errorBox(error),
    h("div", { style: { margin: "6px 0" }, "data-testid": "timeline-counts" },
      `${leases} lease(s) in the window: `, `${c.running} running, ${c.succeeded} succeeded, ${c.failed} failed, `,
      `${c.preempted} preempted, ${c.oom} out of GPU memory, ${c.timeout} at their time limit, ${c.stopped} stopped`),
    h(Legend, { testid: "timeline-key", items: key.concat(Object.entries(MARKS).filter(([o]) => o === "preempted" || o === "oom")
      .map(([, [colour, text]]) => [text, colour])).concat([["stopped by gpusched queue stop (a bar across its end)", MARKS.stopped[0]],
        ["failed (outlined)", MARKS.failed[0]], ["at its time limit (outlined)", MARKS.timeout[0]], ["running (dashed)", "#2b7bd6"]]) }),
    data.rows.length === 0 ? h("div", { style: S.card, "data-testid": "timeline-empty" },
      "No lease in this window, and no GPU host is known to this api-server.") :
      h("div", { style: { overflowX: "auto" } }, h(TimelineChart, { data })),
    data.dropped ? h("div", { style: S.muted }, `${data.dropped} older lease(s) of long-running tasks are not kept ` +
      "(each task keeps its newest 2,000).") : null,
    cutNote(data.cut),
    data.problems.length ? h("div", null, h("h2", { style: S.h2 }, "Records that could not be read"),
      h("ul", null, data.problems.map((p, i) => h("li", { key: i }, p)))) : null);
}

// ---------------------------------------------------------------------------------------------------- plots
// number formats: ticks short ("1e-4", "0.25", "1.2e+5" as "1.2e5"); values with 4 significant digits
function fmtTick(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) {
    const [m, e] = v.toExponential(1).split("e");
    return `${m.replace(/\.0$/, "")}e${e.replace("+", "")}`;
  }
  return `${+v.toPrecision(3)}`;
}
function fmtValue(v) {
  if (typeof v !== "number") return v === null || v === undefined ? "–" : String(v);
  if (Number.isInteger(v)) return `${v}`;
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e").replace("+", "");
  return `${+v.toPrecision(4)}`;
}
function niceStep(span, n) {
  const raw = span / n, p = 10 ** Math.floor(Math.log10(raw)), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}
// an axis: its domain (widened to round ticks), the ticks, and where a value falls (0..1)
function linearAxis(values, whole) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { const d = Math.abs(lo) * 0.1 || 1; lo -= d; hi += d; }
  let step = niceStep(hi - lo, 4);
  if (whole) step = Math.max(1, Math.round(step));
  const a = Math.floor(lo / step) * step, b = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let t = a; t <= b + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return { scale: "linear", ticks, labels: ticks.map(fmtTick), at: (v) => (v - a) / (b - a) };
}
function logAxis(values) {
  const positive = values.filter((v) => v > 0);
  if (!positive.length) return linearAxis(values, false);
  const a = Math.floor(Math.log10(Math.min(...positive)));
  const b = Math.max(Math.ceil(Math.log10(Math.max(...positive))), a + 1);
  let ticks = [];
  for (let e = a; e <= b; e++) ticks.push(+(10 ** e).toPrecision(12));
  if (b - a === 1) ticks = [1, 2, 5, 10].map((m) => +(m * 10 ** a).toPrecision(12));
  const every = Math.ceil(ticks.length / 6);
  ticks = ticks.filter((_, i) => i % every === 0);
  return { scale: "log", ticks, labels: ticks.map(fmtTick),
           at: (v) => (Math.log10(Math.max(v, 10 ** a)) - a) / (b - a) };
}
function categoryAxis(names, maxChars) {
  const k = names.length;
  return { scale: "category", ticks: names.map((_, i) => i),
           labels: names.map((n) => (n.length > maxChars ? `${n.slice(0, maxChars - 1)}…` : n)), full: names,
           at: (i) => (i + 0.5) / k };
}
// px per character of a 10 px tick label, at most (Chromium draws a digit 5.6 px wide; room for wider letters). Text sizes are set in each text's
// style: the Airflow UI's stylesheet overrides an SVG font-size attribute (labels were drawn at 14 px)
const CHAR = 9;

// the frame every plot shares: axes, ticks that never overlap the titles or leave the picture, and the marks
// that draw(X, Y) returns; margins are computed from the labels
function Frame({ x, y, xLabel, yLabel, width, height, testid, label, draw }) {
  const yChars = Math.max(...y.labels.map((l) => l.length));
  const lastX = x.labels[x.labels.length - 1] || "";
  // a 10 px label's box is 16 px high (13 above its baseline): x ticks sit below the lowest y tick's box, the x
  // title below them, the y title left of the widest y tick
  const pad = { l: 26 + Math.ceil(yChars * CHAR), r: Math.max(12, Math.ceil((lastX.length * CHAR) / 2) + 4), t: 12, b: 40 };
  const firstX = x.labels[0] || "";
  pad.l = Math.max(pad.l, Math.ceil((firstX.length * CHAR) / 2) + 2);
  const X = (v) => pad.l + x.at(v) * (width - pad.l - pad.r);
  const Y = (v) => height - pad.b - y.at(v) * (height - pad.t - pad.b);
  const fit = (text, room) => {  // an 11 px title cut to its room (the whole one on hover)
    const most = Math.max(4, Math.floor(room / 6.9));
    return text.length > most ? `${text.slice(0, most - 1)}…` : text;
  };
  const xTitle = xLabel + (x.scale === "log" ? " (log)" : "");
  return h("svg", { width, height, "data-testid": testid, "data-xscale": x.scale, "data-yscale": y.scale, role: "img",
                    "aria-label": label || `${yLabel} against ${xLabel}`, style: { margin: "4px 12px 4px 0" } },
    h("line", { x1: pad.l, y1: height - pad.b, x2: width - pad.r, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    h("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, stroke: "currentColor", opacity: 0.4 }),
    x.ticks.map((t, i) => h("text", { key: `x${i}`, x: X(t), y: height - pad.b + 19, style: { fontSize: "10px" }, textAnchor: "middle",
                                      fill: "currentColor", "data-tick": "x" }, x.labels[i],
      x.full ? h("title", null, x.full[i]) : null)),
    y.ticks.map((t, i) => h("text", { key: `y${i}`, x: pad.l - 4, y: Y(t) + 3, style: { fontSize: "10px" }, textAnchor: "end",
                                      fill: "currentColor", "data-tick": "y" }, y.labels[i])),
    h("text", { x: (pad.l + width - pad.r) / 2, y: height - 4, style: { fontSize: "11px" }, textAnchor: "middle", fill: "currentColor",
                "data-title": "x" }, fit(xTitle, width - pad.l - pad.r), h("title", null, xTitle)),
    h("text", { x: 14, y: (pad.t + height - pad.b) / 2, style: { fontSize: "11px" }, textAnchor: "middle", fill: "currentColor",
                "data-title": "y", transform: `rotate(-90 14 ${(pad.t + height - pad.b) / 2})` },
      fit(yLabel, height - pad.t - pad.b), h("title", null, yLabel)),
    draw(X, Y));
}

function Legend({ items, testid }) {
  if (!items.length) return null;
  return h("div", { "data-testid": testid || "legend", style: { ...S.muted, display: "flex", flexWrap: "wrap", gap: "10px",
                                                                 margin: "0 0 4px 56px" } },
    items.map(([label, color, shape]) => h("span", { key: label, "data-legend": label, "data-shape": shape || "dot" },
      h("span", { style: shape === "triangle"
        ? { display: "inline-block", width: 0, height: 0, borderLeft: "5px solid transparent", borderRight: "5px solid transparent",
            borderBottom: `9px solid ${color}`, marginRight: "4px", verticalAlign: "middle" }
        : { display: "inline-block", width: shape === "line" ? "14px" : "9px", height: shape === "line" ? "3px" : "9px",
            borderRadius: shape === "line" ? "0" : "50%", background: color, marginRight: "4px", verticalAlign: "middle" } }), label)));
}

function axisFor(values, scale, whole) {
  return scale === "log" ? logAxis(values) : linearAxis(values, whole);
}

// smaller dots when there are many, so a large sweep's cloud keeps its shape
const dot = (points) => (points.length > 500 ? 2.5 : 4);

function Scatter({ points, line, xLabel, yLabel, xScale, yScale, width = 420, height = 240, testid, onPick, lineColor }) {
  if (!points.length) return null;
  const x = axisFor(points.map((p) => p.x), xScale, points.every((p) => Number.isInteger(p.x)));
  const y = axisFor(points.map((p) => p.y).concat((line || []).map((p) => p.y)), yScale, false);
  return h(Frame, { x, y, xLabel, yLabel: yLabel + (y.scale === "log" ? " (log)" : ""), width, height, testid, draw: (X, Y) => [
    line && line.length > 1 ? h("polyline", { key: "line", fill: "none", stroke: lineColor || "#f59f00", strokeWidth: 2,
      points: line.map((p) => `${X(p.x)},${Y(p.y)}`).join(" ") }) : null,
    ...points.map((p, i) => h("circle", { key: i, cx: X(p.x), cy: Y(p.y), r: p.best ? 6 : dot(points),
      fill: p.best ? "#f59f00" : p.color || "#2b7bd6", stroke: p.best || p.picked ? "black" : "none",
      strokeWidth: p.picked ? 2 : 1, opacity: 0.85, "data-trial": p.id,
      style: onPick && p.id ? { cursor: "pointer" } : undefined, onClick: onPick && p.id ? () => onPick(p.id) : undefined },
      h("title", null, p.title)))] });
}

// several lines on one frame (two runs' best-so-far)
function Lines({ series, xLabel, yLabel, width = 420, height = 240, testid }) {
  const all = series.flatMap((s) => s.points);
  if (!all.length) return null;
  const x = linearAxis(all.map((p) => p[0]), true);
  const y = linearAxis(all.map((p) => p[1]), false);
  return h(Frame, { x, y, xLabel, yLabel, width, height, testid, draw: (X, Y) => series.map((s) =>
    h("polyline", { key: s.name, fill: "none", stroke: s.color, strokeWidth: 2, "data-series": s.name,
      points: s.points.map(([a, b]) => `${X(a)},${Y(b)}`).join(" ") }, h("title", null, s.name))) });
}

// earlier trials light, later ones dark (as Optuna's slice plots colour by trial number)
function trialColor(index, last) {
  const f = last > 0 ? Math.min(1, Math.max(0, index / last)) : 1;
  return `hsl(${210 - 20 * f}, 70%, ${78 - 45 * f}%)`;
}
// a score's colour in the parallel coordinates: worst pale yellow, best deep blue
function scoreColor(f) { return `hsl(${55 + 170 * f}, ${60 + 20 * f}%, ${62 - 30 * f}%)`; }

// scores by the value of a categorical parameter: one column of points per value, spread sideways
function Strip({ points, categories, xLabel, yLabel, width = 300, height = 200, testid, onPick }) {
  if (!points.length) return null;
  const step = (width - 80) / categories.length;  // the room of one value, at most (margins take the rest)
  const x = categoryAxis(categories, Math.max(2, Math.min(12, Math.floor(step / CHAR) - 1)));
  const y = linearAxis(points.map((p) => p.y), false);
  return h(Frame, { x, y, xLabel, yLabel, width, height, testid, draw: (X, Y) =>
    points.map((p, i) => h("circle", { key: i, cx: X(p.x) + (((p.index * 7919) % 13) / 12 - 0.5) * Math.min(24, step * 0.5),
      cy: Y(p.y), r: p.best ? 6 : dot(points), fill: p.best ? "#f59f00" : "#2b7bd6", stroke: p.best ? "black" : "none",
      opacity: 0.8, "data-trial": p.id, style: onPick && p.id ? { cursor: "pointer" } : undefined,
      onClick: onPick && p.id ? () => onPick(p.id) : undefined }, h("title", null, p.title))) });
}

// intermediate reports: one line per trial, coloured by its state (running trials drawn last, on top)
function Curves({ curves, metric, width = 560, height = 260, testid }) {
  const all = curves.flatMap((c) => c.points);
  if (!all.length) return null;
  const x = linearAxis(all.map((p) => p[0]), true);
  const y = linearAxis(all.map((p) => p[1]), false);
  const drawn = [...curves].sort((a, b) => (a.state === "running") - (b.state === "running"));
  const last = (c) => c.points[c.points.length - 1];
  return h(Frame, { x, y, xLabel: "step", yLabel: metric, width, height, testid, label: `${metric} by step`,
    draw: (X, Y) => drawn.map((c) => h("g", { key: c.index, "data-state": c.state },
      h("title", null, `trial ${c.index} ${c.label} (${c.state}): ${metric} ${fmtValue(last(c)[1])} at step ${last(c)[0]}`),
      c.points.length > 1 ? h("polyline", { fill: "none", stroke: COLORS[c.state] || "#868e96", strokeWidth: c.state === "running" ? 2 : 1.2,
        opacity: c.state === "running" ? 0.95 : 0.6, points: c.points.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ") }) : null,
      h("circle", { cx: X(last(c)[0]), cy: Y(last(c)[1]), r: 2.5, fill: COLORS[c.state] || "#868e96" }))) });
}

// ---------------------------------------------------------------------------------------------------- sweeps
const ROUND_COLORS = ["#2b7bd6", "#2f9e44", "#8e6ccf", "#d9480f", "#0c8599", "#e64980", "#5c940d", "#495057"];
const MAX_PARAM_COLUMNS = 10;

function flatParams(params, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(params || {})) {
    if (v && typeof v === "object" && !Array.isArray(v)) flatParams(v, `${prefix}${k}.`, out);
    else out[`${prefix}${k}`] = v;
  }
  return out;
}
function paramCell(v) {
  const text = Array.isArray(v) ? JSON.stringify(v) : fmtValue(v);
  const shown = text.length > 24 ? `${text.slice(0, 23)}…` : text;
  return h("span", { title: typeof v === "number" ? `${v}` : text, style: { whiteSpace: "nowrap" } }, shown);
}
function trialCell(r) {
  return h("span", { title: r.label, style: { whiteSpace: "nowrap" } }, `${r.index}`);
}

// parallel coordinates: one axis per parameter (numeric on its scale, categorical by value) and the score last; one
// line per trial coloured by its score; drag along an axis to keep the trials in that range (the others go grey)
const MAX_PC_AXES = 12;
const MAX_PC_LINES = 400;  // above this, lines are drawn in colour bands
const GREY = "rgba(128,128,128,0.25)";
// a label drawn over lines keeps a rim of the page's own background (light or dark theme)
const HALO = { paintOrder: "stroke", stroke: "Canvas", strokeWidth: 3, strokeLinejoin: "round" };
function ParallelCoordinates({ sweep, points, onPick, picked }) {
  const obj = sweep.objective;
  const cats = sweep.categorical_params || {};
  const scales = sweep.param_scales || {};
  const [brushes, setBrushes] = useState({});
  const [drag, setDrag] = useState(null);
  const params = sweep.numeric_params.map((name) => ({ name, kind: "num" }))
    .concat(Object.keys(cats).map((name) => ({ name, kind: "cat" }))).slice(0, MAX_PC_AXES - 1);
  const axes = params.concat([{ name: obj.score_label, kind: "score" }]);
  if (axes.length < 2 || !points.length) return null;
  const valueOf = (p, a) => (a.kind === "score" ? p.score : a.kind === "num" ? p.params[a.name]
    : cats[a.name].indexOf((p.categories || {})[a.name]));
  const scaleOf = (a) => {
    const vals = points.map((p) => valueOf(p, a)).filter((v) => v !== undefined && v !== null && v >= (a.kind === "cat" ? 0 : -Infinity));
    if (a.kind === "cat") return categoryAxis(cats[a.name], 9);
    return axisFor(vals.length ? vals : [0, 1], a.kind === "num" ? scales[a.name] : "linear", false);
  };
  const spacing = 118, padL = 64, padR = 64, top = 38, bottom = 14, height = 300;
  const width = padL + padR + spacing * (axes.length - 1);
  const X = (k) => padL + k * spacing;
  const inner = height - top - bottom;
  const scaled = axes.map((a) => ({ a, s: scaleOf(a) }));
  const Yf = (s, v) => top + (1 - (s.scale === "category" ? s.at(v) : Math.min(1, Math.max(0, s.at(v))))) * inner;
  const scores = points.map((p) => p.score);
  const lo = Math.min(...scores), hi = Math.max(...scores);
  const goodness = (v) => (hi === lo ? 1 : obj.maximize ? (v - lo) / (hi - lo) : (hi - v) / (hi - lo));
  const inBrushes = (p) => Object.entries(brushes).every(([name, [y0, y1]]) => {
    const k = axes.findIndex((a) => a.name === name);
    if (k < 0) return true;
    const v = valueOf(p, axes[k]);
    if (v === undefined || v === null || (axes[k].kind === "cat" && v < 0)) return false;
    const y = Yf(scaled[k].s, v);
    return y >= Math.min(y0, y1) - 0.5 && y <= Math.max(y0, y1) + 0.5;
  });
  const kept = points.filter(inBrushes);
  const keptSet = new Set(kept.map((p) => p.index));
  const line = (p) => axes.map((a, k) => {
    const v = valueOf(p, a);
    return v === undefined || v === null || (a.kind === "cat" && v < 0) ? null : `${X(k)},${Yf(scaled[k].s, v)}`;
  }).filter(Boolean).join(" ");
  const ordered = [...points].sort((a, b) => (keptSet.has(a.index) - keptSet.has(b.index)) || (goodness(a.score) - goodness(b.score)));
  // many trials: one path per colour band (a few elements instead of thousands), the picked trial drawn on top;
  // lines are then not clickable one by one (the leaderboard and the plots' points are)
  const many = points.length > MAX_PC_LINES;
  const pickedPoint = many && picked ? points.find((p) => p.trial_id === picked) : null;
  const bundles = (list) => {
    const by = new Map();
    for (const p of list) {
      const colour = keptSet.has(p.index) ? scoreColor(Math.round(goodness(p.score) * 12) / 12) : GREY;
      if (!by.has(colour)) by.set(colour, []);
      by.get(colour).push(p);
    }
    return [...by.entries()];
  };
  const svgY = (e) => e.clientY - e.currentTarget.ownerSVGElement.getBoundingClientRect().top;
  const fit = (text, room) => { const most = Math.max(4, Math.floor(room / 6.9)); return text.length > most ? `${text.slice(0, most - 1)}…` : text; };
  return h("div", null,
    h("div", { style: S.muted, "data-testid": "pc-selection" },
      Object.keys(brushes).length ? `${kept.length} of ${points.length} trials in the selected ranges · ` : `${points.length} trials, coloured by ${obj.score_label} (pale: worst, deep blue: best) · drag along an axis to select a range · `,
      Object.keys(brushes).length ? h("a", { href: "#", style: S.a, onClick: (e) => { e.preventDefault(); setBrushes({}); } }, "clear the selection")
        : many ? "pick a trial in the plots above or the leaderboard to trace its line" : "click a line for its trial"),
    h("svg", { width, height, "data-testid": "plot-parallel", role: "img", "aria-label": "parallel coordinates",
               style: { margin: "4px 0", userSelect: "none" } },
      many ? bundles(ordered).map(([colour, group]) => h("path", { key: colour, fill: "none", stroke: colour,
          "data-lines": group.length, strokeWidth: 0.8, opacity: colour === GREY ? 0.5 : 0.85,
          d: group.map((p) => `M${line(p).replace(/ /g, " L")}`).join(" ") }))
        : ordered.map((p) => h("polyline", { key: p.index, points: line(p), fill: "none", "data-trial": p.trial_id,
        stroke: keptSet.has(p.index) ? scoreColor(goodness(p.score)) : GREY,
        strokeWidth: picked === p.trial_id ? 3 : 1.4,
        opacity: keptSet.has(p.index) ? 0.85 : 0.5, style: { cursor: "pointer" }, onClick: () => onPick(p.trial_id) },
        h("title", null, `trial ${p.index} ${p.label}: ${fmtValue(p.score)}`))),
      many && pickedPoint ? h("polyline", { points: line(pickedPoint), fill: "none", stroke: "black", strokeWidth: 2.5,
        "data-trial": pickedPoint.trial_id }, h("title", null, `trial ${pickedPoint.index} ${pickedPoint.label}`)) : null,
      scaled.map(({ a, s }, k) => h("g", { key: a.name, "data-axis": a.name },
        h("line", { x1: X(k), x2: X(k), y1: top, y2: top + inner, stroke: "currentColor", opacity: 0.6 }),
        h("text", { x: X(k), y: 16, style: { fontSize: "11px" }, textAnchor: "middle", fill: "currentColor", fontWeight: a.kind === "score" ? 700 : 400 },
          fit(a.name + (s.scale === "log" ? " (log)" : ""), k === axes.length - 1 ? 2 * padR - 8 : spacing - 8),
          h("title", null, a.name)),
        // every tick when they fit (a log axis keeps each decade: 1e-4, 0.001, 0.01, 0.1), else every n-th; each label
        // on a box of the page's colour, so the trials' lines pass behind it instead of through it
        s.ticks.filter((_, i) => i % Math.ceil(s.ticks.length / Math.floor(inner / 18)) === 0)
          .map((v) => {
            const i = s.ticks.indexOf(v), text = s.labels[i], boxW = text.length * 6 + 4;
            return h("g", { key: `t${i}`, "data-tick": "pc" },
              h("rect", { x: X(k) - 3 - boxW, y: Yf(s, v) - 6, width: boxW, height: 12, rx: 2, style: { fill: "Canvas" },
                          opacity: 0.85 }),
              h("text", { x: X(k) - 4, y: Yf(s, v) + 3, textAnchor: "end", fill: "currentColor", style: { ...HALO, fontSize: "10px" } },
                text, s.full ? h("title", null, s.full[i]) : null));
          }),
        brushes[a.name] ? h("rect", { x: X(k) - 7, width: 14, y: Math.min(...brushes[a.name]), height: Math.abs(brushes[a.name][1] - brushes[a.name][0]) || 2,
          fill: "rgba(245,159,0,0.35)", stroke: "#f59f00", "data-testid": "pc-brush" }) : null,
        drag && drag.name === a.name ? h("rect", { x: X(k) - 7, width: 14, y: Math.min(drag.y0, drag.y1), height: Math.abs(drag.y1 - drag.y0),
          fill: "rgba(245,159,0,0.25)" }) : null,
        h("rect", { x: X(k) - 10, y: top, width: 20, height: inner, fill: "transparent", style: { cursor: "ns-resize" },
          "data-testid": `pc-axis-${a.name}`,
          onMouseDown: (e) => { const y = svgY(e); setDrag({ name: a.name, y0: y, y1: y }); },
          onMouseMove: (e) => { if (drag && drag.name === a.name) setDrag({ ...drag, y1: svgY(e) }); },
          onMouseUp: () => {
            if (!drag) return;
            const next = { ...brushes };
            if (Math.abs(drag.y1 - drag.y0) < 3) delete next[drag.name]; else next[drag.name] = [drag.y0, drag.y1];
            setBrushes(next); setDrag(null);
          } })))));
}

function Importance({ dagId, run, group }) {
  const url = `${API}/dags/${enc(dagId)}/sweeps/importance?` + new URLSearchParams({ run_id: run, group });
  const { data, error } = useJson(url, 60000);
  if (!data) return error ? h("div", { style: S.muted }, `Importance: ${error}`) : status("parameter importance: computing…");
  const rows = data.importances || [];
  const width = 470, label = 150, barMax = width - label - 56, rowH = 20;
  return h("div", { "data-testid": "importance" },
    h("div", { style: S.muted }, rows.length ? `for ${data.metric}, from all ${data.trials.toLocaleString()} scored trials · ${data.method_label}` +
      (data.note ? ` (${data.note})` : "") : data.note),
    rows.length ? h("svg", { width, height: rows.length * rowH + 8, "data-testid": "plot-importance", role: "img",
                             "aria-label": "parameter importance" },
      rows.map((r, i) => h("g", { key: r.name, "data-param": r.name },
        h("text", { x: label - 6, y: i * rowH + 15, style: { fontSize: "11px" }, textAnchor: "end", fill: "currentColor" },
          r.name.length > 22 ? `${r.name.slice(0, 21)}…` : r.name, h("title", null, r.name)),
        h("rect", { x: label, y: i * rowH + 4, height: rowH - 6, width: Math.max(1, r.importance * barMax), rx: 2, fill: "#2b7bd6" }),
        h("text", { x: label + Math.max(1, r.importance * barMax) + 4, y: i * rowH + 15, style: { fontSize: "10px" }, fill: "currentColor" },
          `${(100 * r.importance).toFixed(1)}%`)))) : null);
}

function TrialPanel({ dagId, run, group, trialId, onClose }) {
  const url = `${API}/dags/${enc(dagId)}/sweeps/trial?` + new URLSearchParams({ run_id: run, group, trial_id: trialId });
  const { data, error } = useJson(url, 10000);
  const frame = (...children) => h("div", { style: { ...S.card, borderColor: "#f59f00" }, "data-testid": "trial-panel" },
    h("a", { href: "#", style: { ...S.a, float: "right" }, onClick: (e) => { e.preventDefault(); onClose(); } }, "close"), ...children);
  if (!data) return frame(errorBox(error) || status("loading the trial…"));
  const flat = flatParams(data.params);
  return frame(
    h("div", { style: { fontWeight: 600 } }, `Trial ${data.index} ${data.label} `, badge(data.state, COLORS[data.state]),
      data.task_id ? h("a", { href: tiHref(dagId, run, data.task_id, data.map_index), style: { ...S.a, fontWeight: 400 } }, "task instance (Airflow log)")
        : h("span", { style: S.muted }, "ran in an earlier DAG run")),
    h("div", { style: S.muted }, Object.entries(flat).map(([k, v]) => `${k}=${typeof v === "number" ? fmtValue(v) : JSON.stringify(v)}`).join(" · ")),
    data.result ? h("div", { "data-testid": "trial-result" }, "Result: ", h("code", null, JSON.stringify(data.result).slice(0, 400))) : null,
    data.error ? h("div", { style: { color: "#e03131" } }, data.error) : null,
    data.seconds !== null && data.seconds !== undefined ? h("div", { style: S.muted }, `ran ${dur(data.seconds)}`) : null,
    h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Output ",
      h("span", { style: { ...S.muted, fontWeight: 400 } }, data.log_path ? `last lines of ${data.log_path}` : "", data.log_note ? ` · ${data.log_note}` : "")),
    data.log_tail !== null && data.log_tail !== undefined ? h("pre", { style: S.pre, "data-testid": "trial-log" }, data.log_tail || "(empty)")
      : h("div", { style: S.muted, "data-testid": "trial-log-missing" }, data.log_note || "no output"));
}

function Compare({ dagId, run, group, runs }) {
  const others = runs.filter((r) => r !== run);
  const [other, setOther] = useState("");
  const url = other ? `${API}/dags/${enc(dagId)}/sweeps/compare?` + new URLSearchParams({ run_id: run, other, group }) : null;
  const { data, error } = useJson(url, 0);
  const pick = h("label", null, "Compare this run with ", h("select", { value: other, "data-testid": "compare-run",
    onChange: (e) => setOther(e.target.value) }, [h("option", { key: "", value: "" }, others.length ? "(choose a run)" : "(no other run)")]
    .concat(others.map((r) => h("option", { key: r, value: r }, r)))));
  if (!other) return h("div", { "data-testid": "compare" }, pick);
  if (!data || (data.b && data.b.run !== other)) return h("div", { "data-testid": "compare" }, pick, errorBox(error) || status("comparing…"));
  const fmtv = (v) => (typeof v === "number" ? fmtValue(v) : "–");
  const pts = data.pairs.map((p) => ({ x: p.a, y: p.b, title: `trial ${p.index} ${p.label}: ${fmtValue(p.a)} → ${fmtValue(p.b)}` }));
  const all = pts.flatMap((p) => [p.x, p.y]);
  const diag = all.length ? [{ x: Math.min(...all), y: Math.min(...all) }, { x: Math.max(...all), y: Math.max(...all) }] : [];
  const short = (r) => (r.length > 34 ? `${r.slice(0, 33)}…` : r);
  return h("div", { "data-testid": "compare" }, pick,
    h(Table, { testid: "compare-runs", head: ["run", "scored", `best ${data.metric}`, "best trial", "counts"],
      rows: [data.a, data.b].map((s) => ({ cells: [h("span", { title: s.run }, short(s.run)), `${s.scored}`, s.best ? fmtv(s.best.score) : "–",
        s.best ? `${s.best.index} ${s.best.label}` : "–", Object.entries(s.counts).filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(", ")] })) }),
    h("div", { style: S.muted, "data-testid": "compare-summary" }, `${data.both} trial(s) scored in both runs: ${data.changed} changed ` +
      `(${data.better_in_b} better and ${data.worse_in_b} worse in ${short(data.b.run)}); ${data.only_a} only in this run, ${data.only_b} only in the other.`),
    h("div", { style: { display: "flex", flexWrap: "wrap" } },
      h("div", null, h("div", { style: S.muted }, `best ${data.metric} so far`),
        h(Legend, { testid: "legend-compare", items: [[short(data.a.run), "#2b7bd6", "line"], [short(data.b.run), "#d9480f", "line"]] }),
        h(Lines, { series: [{ name: data.a.run, color: "#2b7bd6", points: data.a.best_so_far }, { name: data.b.run, color: "#d9480f", points: data.b.best_so_far }],
          xLabel: "trial", yLabel: data.metric, testid: "plot-compare-progress" })),
      pts.length ? h("div", null, h("div", { style: S.muted }, `${data.metric}: this run against the other, per trial`),
        h(Legend, { items: [["same score", "#f59f00", "line"], ["trial", "#2b7bd6"]] }),
        h(Scatter, { points: pts, line: diag, xLabel: short(data.a.run), yLabel: short(data.b.run), testid: "plot-compare" })) : null),
    data.changed ? h(Table, { testid: "compare-changed", head: ["trial", "this run", "other run", "difference"],
      rows: data.pairs.filter((p) => p.diff !== 0).slice(0, 10).map((p) => ({ cells: [`${p.index} ${p.label}`, fmtv(p.a), fmtv(p.b),
        `${p.diff > 0 ? "+" : ""}${fmtValue(p.diff)}`] })) }) : null);
}

function Section({ title, testid, children, note }) {
  return h("div", { "data-testid": testid, style: { marginTop: "10px" } },
    h("div", { style: { fontWeight: 600 } }, title, note ? h("span", { style: { ...S.muted, fontWeight: 400 } }, ` · ${note}`) : null), children);
}

// population-based training: each member's curve over steps (a line per generation, in the member's colour), each
// exploit a dashed line from the donor's point to where the member went on, with its new values; and the members'
// hyper-parameter schedules, generation by generation
function memberColor(k) { return ROUND_COLORS[k % ROUND_COLORS.length]; }
function hyperText(hyper, names) {
  return names.filter((n) => n in (hyper || {})).map((n) => `${n}=${fmtValue(hyper[n])}`).join(", ");
}
function Population({ pop, width = 560, height = 280 }) {
  const all = pop.members.flatMap((m) => m.curve);
  const valueAt = (k, step) => {
    const m = pop.members.find((x) => x.member === k);
    const p = m && m.curve.filter((q) => q[0] <= step).pop();
    return p ? p[1] : null;
  };
  let plot = null;
  if (all.length) {
    const x = linearAxis(all.map((p) => p[0]), true);
    const y = linearAxis(all.map((p) => p[1]), false);
    plot = h(Frame, { x, y, xLabel: "step", yLabel: pop.metric || "score", width, height, testid: "plot-population",
      label: `${pop.metric} by step, one colour per member`, draw: (X, Y) => [
        ...pop.members.map((m) => h("g", { key: `m${m.member}`, "data-member": m.member },
          h("title", null, `member ${m.member}`),
          m.generations.map((g, i) => {
            const from = i === 0 ? -Infinity : m.generations[i - 1].step;
            const pts = m.curve.filter((p) => p[0] > from && p[0] <= g.step);
            return pts.length > 1 ? h("polyline", { key: g.generation, fill: "none", stroke: memberColor(m.member), strokeWidth: 1.6,
              opacity: 0.9, points: pts.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ") }) :
              pts.length ? h("circle", { key: g.generation, cx: X(pts[0][0]), cy: Y(pts[0][1]), r: 2.5, fill: memberColor(m.member) }) : null;
          }))),
        ...pop.exploits.map((e, i) => {
          const from = valueAt(e.from_member, e.step);
          const m = pop.members.find((x) => x.member === e.member);
          const next = m && m.curve.find((q) => q[0] > e.step);
          if (from === null) return null;
          const title = `generation ${e.generation}: member ${e.member} went on from member ${e.from_member}'s checkpoint at step ` +
            `${e.step} (${fmtValue(e.donor_score)} against its own ${fmtValue(e.score)}); ${hyperText(e.old, pop.params)} → ` +
            `${hyperText(e.new, pop.params)}`;
          return h("g", { key: `e${i}`, "data-testid": "exploit", "data-member": e.member, "data-from": e.from_member },
            h("title", null, title),
            next ? h("line", { x1: X(e.step), y1: Y(from), x2: X(next[0]), y2: Y(next[1]), stroke: memberColor(e.member),
              strokeWidth: 1.6, strokeDasharray: "4 3" }) : null,
            h("path", { d: `M${X(e.step)},${Y(from) - 7} l5,8 l-10,0 z`, fill: memberColor(e.member), stroke: "black", strokeWidth: 0.8 }));
        })] });
  }
  const generations = Math.max(0, ...pop.members.map((m) => m.generations.length));
  return h("div", { "data-testid": "population" },
    h(Legend, { testid: "legend-population", items: pop.members.map((m) => [`member ${m.member}`, memberColor(m.member), "line"])
      .concat(pop.exploits.length ? [["exploit (copied a better member's checkpoint)", "#495057", "triangle"]] : []) }),
    plot || h("div", { style: S.muted }, "No member has reported yet."),
    h("div", { style: { ...S.muted, marginTop: "4px" } }, `Hyper-parameter schedule: each member's values per generation ` +
      `(→ k: it went on from member k's checkpoint with these values)`),
    h("div", { style: { overflowX: "auto" } }, h(Table, { testid: "population-schedule",
      head: ["member"].concat(Array.from({ length: generations }, (_, g) => `generation ${g}`)),
      rows: pop.members.map((m) => ({ cells: [h("span", { style: { whiteSpace: "nowrap" } },
        h("span", { style: { display: "inline-block", width: "10px", height: "10px", borderRadius: "50%", background: memberColor(m.member),
          marginRight: "4px" } }), `${m.member}`)].concat(Array.from({ length: generations }, (_, g) => {
        const gen = m.generations[g];
        if (!gen) return "–";
        return h("span", { "data-generation": g, style: { whiteSpace: "nowrap" } },
          gen.from_member !== null && gen.from_member !== undefined ? badge(`→ ${gen.from_member}`, memberColor(gen.from_member),
            `went on from member ${gen.from_member}'s checkpoint`) : null,
          hyperText(gen.hyper, pop.params),
          gen.score !== null && gen.score !== undefined ? h("span", { style: S.muted }, ` · ${fmtValue(gen.score)}`) : null);
      })) })) })),
    pop.cut ? h("div", { style: S.muted }, pop.cut) : null);
}

function SweepCard({ sweep, dagId, focus, runs }) {
  const [picked, setPicked] = useState(null);
  const [logScore, setLogScore] = useState(false);
  const obj = sweep.objective;
  const better = obj && obj.maximize ? (a, b) => a > b : (a, b) => a < b;
  const several = obj && obj.several;
  const fmtv = (v) => (typeof v === "number" ? fmtValue(v) : "–");
  const pts = [...sweep.points].sort((a, b) => a.index - b.index);
  let best = null;
  // the server's best-so-far line counts every trial (the points may be a sample of a large sweep)
  const line = sweep.best_so_far ? sweep.best_so_far.map(([x, y]) => ({ x, y }))
    : pts.map((p) => { if (best === null || better(p.score, best)) best = p.score; return { x: p.index, y: best }; });
  const bestIndex = sweep.best ? sweep.best.index : null;
  const rounds = [...new Set(pts.map((p) => p.round || 0))].sort((a, b) => a - b);
  const scatter = pts.map((p) => ({ x: p.index, y: p.score, best: p.index === bestIndex, id: p.trial_id, picked: p.trial_id === picked,
    color: ROUND_COLORS[(p.round || 0) % ROUND_COLORS.length], title: `trial ${p.index} ${p.label}: ${fmtValue(p.score)}` }));
  const lastIndex = pts.length ? pts[pts.length - 1].index : 0;
  const canLog = pts.length > 0 && pts.every((p) => p.score > 0);
  const yScale = canLog && logScore ? "log" : "linear";
  const pick = (id) => setPicked(id === picked ? null : id);
  const pickLink = (r) => (r.trial_id ? h("a", { href: "#", style: S.a, "data-testid": "pick-trial", title: "its parameters and output",
    onClick: (e) => { e.preventDefault(); pick(r.trial_id); } }, "output") : "");
  const counts = sweep.counts;
  const scales = sweep.param_scales || {};
  const cats = sweep.categorical_params || {};
  const paramNames = [...new Set(sweep.leaderboard.flatMap((r) => Object.keys(flatParams(r.params))))];
  const shownParams = paramNames.slice(0, MAX_PARAM_COLUMNS);
  const curveStates = sweep.curves ? [...new Set(sweep.curves.map((c) => c.state))] : [];
  const bestLegend = ["best trial", "#f59f00"];
  const taskLink = (r) => (r.task_id ? h("a", { href: tiHref(dagId, sweep.run, r.task_id, r.map_index), style: S.a }, "task")
    : h("span", { style: S.muted }, "earlier run"));
  return h("div", { style: { ...S.card, ...(focus ? { outline: "2px solid #f59f00" } : {}) },
                    id: `sweep-${sweep.group}`, "data-testid": `sweep-${sweep.group}` },
    h("div", { style: { fontSize: "16px", fontWeight: 600 } }, `Sweep ${sweep.sweep} `,
      h("span", { style: S.muted }, `${sweep.search} search on ${sweep.backend}` +
        (sweep.rounds ? ` · ${sweep.rounds} round(s) so far` : "") +
        (obj ? ` · ${obj.describe}` : " · no objective") + (obj && obj.weights ? ` · ranked by ${obj.score_label}` : ""))),
    h("div", { style: { margin: "6px 0" }, "data-testid": "counts" },
      ["defined", "waiting", "running", "succeeded", "failed", "invalid", "timeout", "pruned", "stopped", "not_started"]
        .filter((k) => !["stopped", "not_started"].includes(k) || counts[k])
        .map((k) => h("span", { key: k, "data-count": k, title: COUNT_TITLES[k] },
          badge(`${k.replace("_", " ")} ${counts[k] || 0}`, COLORS[k]))),
      h("span", { "data-count": "skipped", style: S.muted, title: "succeeded or pruned in an earlier DAG run and not run " +
        "again (counted in their state too)" }, ` · ${counts.skipped || 0} from earlier runs (skipped)`)),
    sweep.best ? h("div", { "data-testid": "best", style: { margin: "6px 0" } }, "Best: ",
      h("b", null, several && !obj.weights
        ? obj.metrics.map((m) => `${m} = ${fmtv((sweep.best.values || {})[m])}`).join(", ") + " (Pareto front, best " + obj.metrics[0] + ")"
        : `${obj.score_label} = ${fmtv(sweep.best.score)}`), ` — trial ${sweep.best.index} ${sweep.best.label} `,
      sweep.best.task_id ? h("a", { href: tiHref(dagId, sweep.run, sweep.best.task_id, sweep.best.map_index), style: S.a },
        "task instance") : h("span", { style: S.muted }, "(succeeded in an earlier run)")) : null,
    sweep.points_note ? h("div", { style: S.muted, "data-testid": "points-note" }, sweep.points_note) : null,
    scatter.length ? h("div", { style: { display: "flex", flexWrap: "wrap", alignItems: "flex-start" }, "data-testid": "plots" },
      several ? h("div", null, h("div", { style: S.muted }, `${obj.metrics[1]} against ${obj.metrics[0]}`),
        h(Legend, { items: [["Pareto front", "#f59f00"], ["other trials", "#2b7bd6"]] }),
        h(Scatter, { points: pts.map((p) => ({ x: p.values[0], y: p.values[1], best: p.front,
          title: `trial ${p.index} ${p.label}: ${obj.metrics[0]} ${fmtv(p.values[0])}, ${obj.metrics[1]} ${fmtv(p.values[1])}` })),
          line: pts.filter((p) => p.front).map((p) => ({ x: p.values[0], y: p.values[1] })).sort((a, b) => a.x - b.x || a.y - b.y),
          xLabel: obj.metrics[0], yLabel: obj.metrics[1], testid: "plot-pareto" })) : null,
      h("div", null, h("div", { style: S.muted }, `${obj.score_label} by trial`),
        h(Legend, { testid: "legend-progress", items: [["best so far", "#f59f00", "line"]].concat(rounds.length > 1
          ? rounds.map((r) => [`round ${r}`, ROUND_COLORS[r % ROUND_COLORS.length]]) : [["trial", ROUND_COLORS[0]]]) }),
        h(Scatter, { points: scatter, line, xLabel: "trial", yLabel: obj.score_label, testid: "plot-progress", yScale, onPick: pick })),
      sweep.numeric_params.map((name) => h("div", { key: name, "data-testid": "slice" },
        h("div", { style: S.muted }, `slice: ${obj.score_label} against ${name}`),
        h(Legend, { items: [bestLegend, ["earlier trial", trialColor(0, 1)], ["later trial", trialColor(1, 1)]] }),
        h(Scatter, { points: pts.filter((p) => name in p.params).map((p) => ({ x: p.params[name], y: p.score,
          best: p.index === bestIndex, id: p.trial_id, picked: p.trial_id === picked, color: trialColor(p.index, lastIndex),
          title: `trial ${p.index} ${p.label}: ${fmtValue(p.score)}` })), onPick: pick, yScale,
          xScale: scales[name], xLabel: name, yLabel: obj.score_label, width: 300, height: 200, testid: `plot-${name}` }))),
      Object.entries(cats).map(([name, values]) => h("div", { key: name },
        h("div", { style: S.muted }, `${obj.score_label} by ${name}`),
        h(Legend, { items: [bestLegend, ["trial", "#2b7bd6"]] }),
        h(Strip, { points: pts.filter((p) => p.categories && name in p.categories).map((p) => ({
          x: values.indexOf(p.categories[name]), y: p.score, index: p.index, best: p.index === bestIndex, id: p.trial_id,
          title: `trial ${p.index} ${p.label}: ${fmtValue(p.score)}` })), categories: values, onPick: pick,
          xLabel: name, yLabel: obj.score_label, testid: `plot-${name}` })))) : null,
    picked ? h(TrialPanel, { key: picked, dagId, run: sweep.run, group: sweep.group, trialId: picked, onClose: () => setPicked(null) }) : null,
    scatter.length ? h("div", { "data-testid": "analysis" },
      canLog ? h("label", { style: { ...S.muted, display: "block", marginTop: "4px" } }, h("input", { type: "checkbox", checked: logScore,
        "data-testid": "log-score", onChange: (e) => setLogScore(e.target.checked) }), ` ${obj.score_label} on a log axis`) : null,
      h(Section, { title: "Parallel coordinates", testid: "parallel", note: sweep.points_note ? `the same ${pts.length.toLocaleString()} trials as the plots` : "" },
        h(ParallelCoordinates, { sweep, points: pts, onPick: pick, picked })),
      h(Section, { title: "Parameter importance", testid: "importance-section" },
        h(Importance, { dagId, run: sweep.run, group: sweep.group })),
      h(Section, { title: "Compare runs", testid: "compare-section" },
        h(Compare, { dagId, run: sweep.run, group: sweep.group, runs: runs || [] }))) : null,
    obj ? h("div", null, h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Leaderboard"),
      sweep.leaderboard.length === 0 ? h("div", { style: S.muted, "data-testid": "no-score" },
        counts.stopped || counts.not_started ? "This run was stopped before any of its trials had a score; the " +
          "sweep's earlier results stand, in the runs that made them." : "No trial has a score yet.") :
        h("div", { style: { overflowX: "auto" } }, h(Table, { testid: "leaderboard",
          head: ["rank"].concat(several ? ["front", ...obj.metrics] : [], several && !obj.weights ? [] : [obj.score_label],
            ["trial"], shownParams, paramNames.length > shownParams.length ? ["more parameters"] : [], ["time", "", ""]),
          rows: sweep.leaderboard.map((r) => {
            const flat = flatParams(r.params);
            const rest = paramNames.slice(MAX_PARAM_COLUMNS).filter((n) => n in flat).map((n) => `${n}=${fmtValue(flat[n])}`);
            return { cells: [`${r.rank}`].concat(
              several ? [r.front ? `${r.front}` : "–", ...obj.metrics.map((m) => fmtv((r.values || {})[m]))] : [],
              several && !obj.weights ? [] : [fmtv(r.score)], [trialCell(r)],
              shownParams.map((n) => (n in flat ? paramCell(flat[n]) : "–")),
              paramNames.length > shownParams.length ? [h("span", { style: S.muted }, rest.join(", "))] : [],
              [dur(r.seconds), taskLink(r), pickLink(r)]), style: r.trial_id === picked ? { background: "rgba(245,159,0,0.15)" } : undefined };
          }) }))) : null,
    sweep.curves && sweep.curves.length ? h("div", { "data-testid": "reports" },
      h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Intermediate reports"),
      h("div", { style: S.muted }, `${sweep.curve_metric} by step, one line per trial ` +
        `(${sweep.curves.length} trial(s) with reports)`),
      h(Legend, { testid: "legend-reports", items: curveStates.map((st) => [st, COLORS[st] || "#868e96", "line"]) }),
      h(Curves, { curves: sweep.curves, metric: sweep.curve_metric, testid: "plot-reports" }),
      sweep.latest_reports.length ? h(Table, { testid: "latest-reports", head: ["running trial", "step", "latest metrics", "checkpoint", ""],
        rows: sweep.latest_reports.map((r) => ({ cells: [trialCell(r), `${r.step}`,
          Object.entries(r.metrics).map(([k, v]) => `${k} ${typeof v === "number" ? fmtValue(v) : v}`).join(", "),
          r.checkpoint || "", r.task_id ? h("a", { href: tiHref(dagId, sweep.run, r.task_id, r.map_index), style: S.a }, "task") : ""] })) })
        : null) : null,
    sweep.reports_note ? h("div", { style: S.muted, "data-testid": "reports-note" }, sweep.reports_note) : null,
    sweep.population ? h(Section, { title: "Population", testid: "population-section", note: `${sweep.population.members.length} ` +
      `members, ${sweep.population.exploits.length} exploit(s)` }, h(Population, { pop: sweep.population })) : null,
    sweep.population_note ? h("div", { style: S.muted, "data-testid": "population-note" }, sweep.population_note) : null,
    sweep.truncated ? h("div", { style: S.muted }, `${sweep.truncated} trials are not listed (too many to publish).`) : null,
    sweep.pruned && sweep.pruned.length ? h("div", null,
      h("div", { style: { fontWeight: 600, marginTop: "6px" } }, `Pruned (${counts.pruned || sweep.pruned.length})`),
      h(Table, { testid: "pruned", head: ["trial", "stopped at step", "why", "", ""], rows: sweep.pruned.map((p) => ({
        cells: [h("span", { title: p.label }, `${p.index} ${p.label}`), p.step === null || p.step === undefined ? "–" : `${p.step}`,
                p.error || "", p.skipped ? h("span", { style: S.muted }, "earlier run") : taskLink(p), pickLink(p)] })) })) : null,
    sweep.problems.length ? h("div", null, h("div", { style: { fontWeight: 600, marginTop: "6px" } }, "Failed, invalid or timed out"),
      h(Table, { testid: "problems", head: ["trial", "state", "error", "", ""], rows: sweep.problems.map((p) => ({
        cells: [`${p.index} ${p.label}`, badge(p.state, COLORS[p.state]), p.error || "",
                p.task_id ? h("a", { href: tiHref(dagId, sweep.run, p.task_id, p.map_index), style: S.a }, "task") : "", pickLink(p)] })) }))
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
    data.sweeps.map((s) => h(SweepCard, { key: `${data.run_id}/${s.group}`, sweep: s, dagId, focus: q.get("sweep") === s.sweep, runs: data.runs })),
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
  if (!data.found) {  // the tab is on every task: one that submitted no Slurm job says so plainly
    const board = `${UI}/plugin/gpusched-gpus?` + new URLSearchParams({ dag_id: dagId, run_id: runId, task_id: taskId,
                                                                        map_index: String(mi) });
    return h("div", { style: S.page, "data-testid": "slurm-job" },
      h("h1", { style: S.h1 }, "No Slurm job"),
      h("div", { style: S.card, "data-testid": "no-slurm-job" }, data.local_gpus
        ? ["This task ran on local GPUs, not through Slurm. ", h("a", { key: "a", href: board, style: S.a }, "Its GPU lease"),
           " on the GPU board says where and when."]
        : "This task submitted no Slurm job (this tab shows the job of tasks that run through Slurm)."));
  }
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
    data.segments && data.segments.length ? h("div", null,
      h("h2", { style: S.h2 }, `Time-limit chain: ${data.segments.length} segment(s)`),
      h(Table, { testid: "chain-segments", head: ["segment", "job", "node", "started", "ended", "outcome", "why it ended"],
        rows: data.segments.map((g) => ({ cells: [`${g.segment}`, g.job, g.node || "–", when(g.started),
          g.ended === null || g.ended === undefined ? "running" : when(g.ended), g.outcome || "–", g.detail || ""] })) })) : null,
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
globalThis["GPU timeline"] = GpuTimeline;
globalThis.AirflowPlugin = GpuBoard;
export default GpuBoard;
