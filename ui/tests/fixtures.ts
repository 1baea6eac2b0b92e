// Answers of the plugin API for the unit tests, typed by the generated schema (a renamed field fails here too).
import type { Board, Sweep, Sweeps, Timeline } from "src/api/types";

export const objective = {
  metric: "loss", mode: "min", metrics: ["loss"], modes: ["min"], several: false, describe: "min loss", score_label: "loss", maximize: false,
};

export function sweep(n = 6): Sweep {
  const points = Array.from({ length: n }, (_, i) => ({
    index: i, round: i < 3 ? 0 : 1, score: [0.9, 0.5, 0.7, 0.2, 0.4, 0.3][i % 6] as number, label: `t${i}`, trial_id: `id${i}`,
    params: { lr: 10 ** -(1 + (i % 4)), wd: i / 10 }, categories: { act: i % 2 ? "relu" : "gelu" },
  }));
  const best = { rank: 1, score: 0.2, index: 3, label: "t3", trial_id: "id3", params: { lr: 1e-4, wd: 0.3, act: "relu" }, task_id: "trial", map_index: 3, seconds: 12 };
  return {
    sweep: "demo", search: "random", backend: "local", run: "run1", group: "demo", objective, rounds: 2, truncated: 0,
    counts: { defined: n, waiting: 0, running: 0, succeeded: n, failed: 0, invalid: 0, timeout: 0, pruned: 0, skipped: 0 },
    problems: [], pruned: [], curve_metric: "loss", curves: [{ index: 0, label: "t0", state: "succeeded", points: [[1, 0.9], [2, 0.8]] }],
    latest_reports: [], leaderboard: [best], best, points, points_total: n,
    best_so_far: [[0, 0.9], [1, 0.5], [3, 0.2], [n - 1, 0.2]], numeric_params: ["lr", "wd"], categorical_params: { act: ["gelu", "relu"] },
    param_scales: { lr: "log", wd: "linear" },
  };
}

export function sweeps(): Sweeps {
  return { dag_id: "dag1", run_id: "run1", runs: ["run1", "run0"], sweeps: [sweep()], problems: [] };
}

export function board(): Board {
  const gpu = (index: number, leases: Board["hosts"][number]["gpus"][number]["leases"]) => ({
    index, uuid: `GPU-${index}`, name: "Simulated 24GiB", memory_total: 24 * 2 ** 30, simulated: true, memory_leased: leases.length ? 8 * 2 ** 30 : 0,
    whole_taken: false, leases, held_by_others: false, memory_free: leases.length ? 16 * 2 ** 30 : 24 * 2 ** 30,
  });
  const lease = {
    lease_id: "L1", dag_id: "dag1", run_id: "run1", task_id: "train", map_index: 2, job_class: "normal", priority: 0, started: 1_700_000_000,
    seconds: 90, whole: false, memory: 8 * 2 ** 30, yielding_to: "", group: "vision", quota: "borrowed",
  };
  return {
    generated: 1_700_000_100, api_server_host: "api", waiting_shared: [], problems: [], cut: [],
    hosts: [
      { host: "a", simulated: true, seen: "running work", fleet: null, telemetry: null, gpus: [gpu(0, [lease]), gpu(1, [])] },
      { host: "b", simulated: true, seen: "fleet", fleet: { published: 1, age: 3, up: true, clock_off: 0, foreign_busy: [], leases: 0, address: null },
        telemetry: null, gpus: [gpu(0, [])] },
    ],
    waiting: [{ host: "a", request: "1 GPU", job_class: "idle", dag_id: "dag2", run_id: "r", task_id: "fill", since: 1_700_000_000, priority: 0,
                map_index: -1, why: "all GPUs leased", reason: "all GPUs leased", details: ["GPU 0: 16 GiB free"] }],
    gpu_time: { hour: { normal: { attempts: 1, gpu_seconds: 3600, lost_gpu_seconds: 0, preemptions: 0 } },
                day: { normal: { attempts: 1, gpu_seconds: 7200, lost_gpu_seconds: 60, preemptions: 1, running: 1 } } },
    quotas: { resource: "gpus", capacity: 3, source: "quotas.yaml", problems: [], leases: {}, config_error: "",
      groups: [{ group: "vision", quota: 1, used: 2, in_quota: 1, borrowed: 1, lent: 0, waiting: 0, weight: 1, borrowing_limit: null, leases: 2, waiters: [] },
               { group: "nlp", quota: 2, used: 0, in_quota: 0, borrowed: 0, lent: 1, waiting: 1, weight: 2, borrowing_limit: 1, leases: 0,
                 waiters: [{ owner: "nlp-job", host: "a", amount: 1, kind: "quota", for_s: 30, reason: "reclaiming from vision" }] }] },
  };
}

export function timeline(): Timeline {
  const since = 1_700_000_000, until = since + 3600;
  return {
    since, until, bars: 3, dropped: 0, problems: [], cut: [], windows: [1, 6, 24], hours: 1, classes: ["normal", "idle"], groups: [],
    counts: { running: 1, succeeded: 1, failed: 0, preempted: 1, oom: 0, timeout: 0, stopped: 0 },
    rows: [
      { host: "a", gpu: 0, lanes: 2, busy_fraction: 0.5, bars: [
        { start: since + 60, end: since + 600, map_index: -1, job_class: "normal", outcome: "succeeded", dag_id: "d", run_id: "r", task_id: "t" },
        { start: since + 100, end: since + 900, map_index: 1, lane: 1, job_class: "idle", outcome: "preempted", dag_id: "d", run_id: "r", task_id: "fill" }] },
      { host: "a", gpu: 1, lanes: 1, busy_fraction: 0.1, bars: [{ start: since + 3000, end: until, map_index: -1, job_class: "normal", outcome: "running" }] },
      { host: "b", gpu: 0, lanes: 1, busy_fraction: 0, bars: [] },
    ],
  };
}

export function answer(body: unknown): Response {
  return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
}

/** The bounds of a test that draws a page first in its file: each test file runs in a fresh VM context (vite.config.ts:
 * vmThreads), so React, Chakra UI and ECharts run cold there: 0.5-0.9 s on a shared 2-core machine, 1.6-1.9 s with
 * vitest on a third of a core (the next page of the same file about half that); the Sweeps test took over vitest's 5 s
 * when the suite ran it beside 3 pytest workers on 2 cores. Its waits still end as soon as the state they wait for is
 * there: these bounds only catch a hang. */
export const COLD = { testMs: 20_000, wait: { timeout: 15_000 } };
