// The plugin API's answers with every name and value a DAG author (or their tasks, or a Slurm job) controls made
// hostile: DAG, run and task ids, host, class and group names, sweep and parameter names, choice values, metric names,
// labels, errors, Slurm job fields and output. Used by tests/xss.test.tsx (jsdom) and tests/browser/harness.tsx (the
// committed bundle in Chromium, tests/ui/test_browser.py): each page must show these as text.
import type { Board, Comparison, Importance, SlurmJob, Sweep, Sweeps, Timeline, Trial } from "src/api/types";

import { board, objective, sweep, timeline } from "./fixtures";

/** what a page that takes markup for text runs: each sets window.__xss */
export const PAYLOADS = [
  "<img src=x onerror=window.__xss=1>",
  "\"><script>window.__xss=2</script>",
  "'><svg onload=window.__xss=3>",
  "&lt;b&gt;",
];
const TAIL = ` ${PAYLOADS.join(" ")}`;

/** a name or value as a hostile DAG author writes it (the same every time: the pages compare names) */
export const bad = (s: string): string => `${s}${TAIL}`;

// maps whose keys are names (parameters, metrics, classes, array tasks): their keys are made hostile too
const NAMED_KEYS = new Set(["params", "categories", "categorical_params", "param_scales", "hyper", "old", "new", "metrics", "values", "tails",
  "hour", "day", "classes", "outcomes", "counts_by"]);
// strings the page reads as a choice of the code's, not a name: kept (a hostile one is just an unknown value)
const KEPT = new Set(["param_scales.*", "quota", "mode", "modes", "kind"]);

/** ``x`` with every string (and every key of a map of names) made hostile */
export function hostile<T>(x: T, key = ""): T {
  if (typeof x === "string") return (KEPT.has(key) ? x : bad(x)) as T;
  if (Array.isArray(x)) return x.map((v) => hostile(v, key)) as T;
  if (x === null || typeof x !== "object") return x;
  const named = NAMED_KEYS.has(key);
  return Object.fromEntries(Object.entries(x as Record<string, unknown>).map(([k, v]) => [named ? bad(k) : k,
    hostile(v, key === "param_scales" ? "param_scales.*" : k)])) as T;
}

export const DAG = bad("dag1");

/** a sweep with every part the tab draws: plots, reports, pruned and failed trials, a PBT population */
function fullSweep(): Sweep {
  const s = sweep(12);
  return {
    ...s,
    search: "pbt",
    points: s.points.map((p, i) => ({ ...p, categories: { act: ["gelu", "relu", "silu"][i % 3] as string, opt: i % 2 ? "adam" : "sgd" } })),
    categorical_params: { act: ["gelu", "relu", "silu"], opt: ["adam", "sgd"] },
    leaderboard: [...s.leaderboard, { ...s.leaderboard[0]!, rank: 2, index: 5, label: "t5", trial_id: "id5", params: { lr: 0.01, opt: "adam", act: "silu" } }],
    curves: [
      { index: 0, label: "t0", state: "succeeded", points: [[1, 0.9], [2, 0.8]] },
      { index: 1, label: "t1", state: "running", points: [[1, 0.7], [2, 0.6], [3, 0.5]] },
    ],
    latest_reports: [{ index: 1, label: "t1", step: 3, metrics: { loss: 0.5, note: "warm" }, checkpoint: "/ckpt/t1", task_id: "trial", map_index: 1 }],
    pruned: [{ index: 7, trial_id: "id7", label: "t7", error: "below the median at step 2", task_id: "trial", map_index: 7, step: 2 }],
    problems: [{ index: 8, trial_id: "id8", label: "t8", error: "CUDA error: out of memory", task_id: "trial", map_index: 8, state: "failed" }],
    points_note: "the best 500 and a sample",
    reports_note: "reports of an earlier run",
    population: {
      metric: "acc", params: ["lr", "opt"],
      members: [
        { member: 0, curve: [[1, 0.1], [2, 0.2], [3, 0.3], [4, 0.4]], generations: [
          { generation: 0, step: 2, trial_id: "a", index: 0, hyper: { lr: 0.1, opt: "sgd" }, from_member: null, score: 0.2 },
          { generation: 1, step: 4, trial_id: "b", index: 2, hyper: { lr: 0.2, opt: "adam" }, from_member: 1, score: 0.4 }] },
        { member: 1, curve: [[1, 0.5], [2, 0.6], [3, 0.65]], generations: [
          { generation: 0, step: 2, trial_id: "c", index: 1, hyper: { lr: 0.3, opt: "adam" }, from_member: null, score: 0.6 }] },
      ],
      exploits: [{ generation: 1, step: 2, member: 0, from_member: 1, old: { lr: 0.1, opt: "sgd" }, new: { lr: 0.2, opt: "adam" }, score: 0.2, donor_score: 0.6 }],
      cut: "members beyond 16 are not drawn",
    },
    population_note: "a population of 2",
  };
}

/** two objectives: the Pareto plot and the leaderboard's metric columns (the first card: where both cards draw a plot of
 * the same test id, globalThis.gpuschedCharts, which the browser test hovers, keeps the later card's, the full sweep's) */
function paretoSweep(): Sweep {
  const s = sweep(6);
  const metrics = ["loss", "latency"];
  return {
    ...s, sweep: "multi", group: "multi", numeric_params: [], categorical_params: {}, curves: [],  // the plots above are the first sweep's
    objective: { ...objective, metrics, modes: ["min", "min"], several: true, describe: "min loss, min latency", score_label: "loss" },
    points: s.points.map((p, i) => ({ ...p, values: [p.score, 10 - i], front: i % 2 === 1 })),
    leaderboard: s.leaderboard.map((r) => ({ ...r, values: { loss: 0.2, latency: 7 }, front: 1 })),
    best: s.best ? { ...s.best, values: { loss: 0.2, latency: 7 } } : null,
  };
}

export function sweepsAnswer(): Sweeps {
  return hostile({ dag_id: "dag1", run_id: "run1", runs: ["run1", "run0"], sweeps: [paretoSweep(), fullSweep()], problems: ["a record of trial 9 could not be read"] });
}

export function importanceAnswer(): Importance {
  return hostile({ method: "variance-explained", importances: [{ name: "lr", importance: 0.7 }, { name: "opt", importance: 0.3 }], trials: 12,
    note: "chance removed", metric: "loss", method_label: "variance explained" });
}

export function compareAnswer(): Comparison {
  const side = (run: string, best: number) => ({ run, counts: { succeeded: 3 }, scored: 3, best: { index: 1, label: "t1", score: best, trial_id: "id1" },
    best_so_far: [[0, 0.9], [1, best]] });
  return hostile({ group: "demo", metric: "loss", maximize: false, a: side("run1", 0.2), b: side("run0", 0.3), both: 2, only_a: 1, only_b: 0,
    changed: 2, better_in_b: 1, worse_in_b: 1, pairs_total: 2,
    pairs: [{ index: 1, label: "t1", trial_id: "id1", a: 0.2, b: 0.3, diff: 0.1 }, { index: 2, label: "t2", trial_id: "id2", a: 0.5, b: 0.4, diff: -0.1 }] }) as Comparison;
}

export function trialAnswer(): Trial {
  return hostile({ index: 3, trial_id: "id3", label: "t3", params: { lr: 1e-4, opt: "adam" }, state: "succeeded", result: { loss: 0.2 }, error: "a warning",
    seconds: 12, task_id: "trial", map_index: 3, skipped: false, step: null, round: 1, log_tail: "epoch 1: loss 0.2", log_path: "/x/output.log", log_note: "cut" });
}

export function boardAnswer(): Board {
  const b = board();
  const host = b.hosts[0]!;
  const gpu = host.gpus[0]!;
  const lease = { ...gpu.leases[0]!, yielding_to: "high-prio", over_reservation: true, memory_used: 9 * 2 ** 30 };
  return hostile({ ...b, problems: ["a lease record of dag9 could not be read"], cut: ["leases beyond 500"],
    hosts: [{ ...host, gpus: [{ ...gpu, leases: [lease] }, ...host.gpus.slice(1)] }, ...b.hosts.slice(1)],
    quotas: b.quotas ? { ...b.quotas, config_error: "quotas.yaml: bad key" } : null });
}

export function timelineAnswer(): Timeline {
  const t = timeline();
  const since = t.since;
  const row = t.rows[0]!;
  return hostile({ ...t, groups: ["vision"], problems: ["a history record could not be read"], cut: ["rows beyond 64"],
    rows: [{ ...row, bars: [...row.bars.map((b) => ({ ...b, group: "vision", label: "trials 1-4", request: "1 GPU", detail: "preempted by high" })),
      { start: since + 1000, end: since + 1200, map_index: -1, count: 3, busy: 30, outcomes: { succeeded: 3 }, classes: { idle: 3 }, dag_id: "d", run_id: "r", task_id: "t" }] },
    ...t.rows.slice(1)] });
}

export function slurmAnswer(): SlurmJob {
  return hostile({ job_id: "42", output_path: "/o/%A_%a.out", array: "0-1", via: "this host's CLI", submitted: 1, final: false, source: "squeue",
    preemptions: 1, preemption_events: ["preempted at 12:00:00 on n1, requeued"], problem: "sacct said something odd", state: "PENDING", phase: "pending",
    exit_code: null, nodes: "n1", partition: "gpu", requeues: 1, elapsed: 30, reason: "Priority", tail_path: "", tail_source: "files", task_state: "running",
    signal: null,
    tasks: [{ task: "0", state: "RUNNING", exit_code: null, nodes: "n1", elapsed: 10, requeues: 0 }, { task: "1", state: "PENDING", exit_code: null, nodes: "", elapsed: 0, requeues: 0 }],
    tails: { "0": "seed 0 on GPU 0", "1": "seed 1" },
    segments: [{ job: "42", segment: 1, node: "n1", started: 1e9, ended: 1e9 + 50, outcome: "requeued", detail: "time limit near", signalled: null }] }) as SlurmJob;
}

/** every answer, by the end of its path (as the pages' unit tests serve them) */
export function routes(): Record<string, unknown> {
  return {
    "/gpus": boardAnswer(), "/timeline": timelineAnswer(), "/sweeps": sweepsAnswer(), "/sweeps/importance": importanceAnswer(),
    "/sweeps/compare": compareAnswer(), "/sweeps/trial": trialAnswer(), "/slurm": slurmAnswer(),
  };
}
