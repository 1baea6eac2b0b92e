// The pages, rendered on the API's answers (fetch answers them here), with Chakra UI and ECharts (SVG in jsdom).
import { ChakraProvider, defaultSystem } from "@chakra-ui/react";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import type { ReactNode } from "react";
import { beforeEach, describe, expect, it, vi } from "vitest";

import { PAGES } from "src/main";
import { GpuBoard } from "src/pages/GpuBoard";
import { GpuTimeline } from "src/pages/GpuTimeline";
import { SlurmJob } from "src/pages/SlurmJob";
import { Sweeps } from "src/pages/Sweeps";

import { COLD, answer, board, sweep, sweeps, timeline } from "./fixtures";

const wrap = (node: ReactNode) => render(<ChakraProvider value={defaultSystem}>{node}</ChakraProvider>);

function serve(routes: Record<string, unknown>) {
  const fetchMock = vi.fn(async (url: string) => {
    const path = url.split("?")[0] ?? "";
    const key = Object.keys(routes).find((k) => path.endsWith(k));
    return key ? answer(routes[key]) : new Response(JSON.stringify({ detail: "no such page" }), { status: 404, statusText: "Not Found" });
  });
  vi.stubGlobal("fetch", fetchMock);
  return fetchMock;
}

beforeEach(() => {
  vi.unstubAllGlobals();
  window.history.replaceState(null, "", "/");
});

describe("the plugin", () => {
  it("registers a component under each react app's name", () => {
    expect(Object.keys(PAGES).sort()).toEqual(["GPU board", "GPU timeline", "GPUs", "Slurm job", "Sweeps"]);
    for (const name of Object.keys(PAGES)) expect(typeof (globalThis as Record<string, unknown>)[name]).toBe("function");
  });
});

describe("the GPU board", () => {
  it("lists hosts, GPUs, leases with their group, quotas and who waits", async () => {
    serve({ "/gpus": board() });
    wrap(<GpuBoard />);
    await screen.findByTestId("gpu-board", undefined, COLD.wait);  // the file's first page: React and Chakra UI cold
    expect(screen.getByTestId("fleet-overview").textContent).toContain("2 hosts, 3 GPUs, 1 leased");
    expect(screen.getAllByTestId("gpu-tile")).toHaveLength(3);
    const lease = screen.getByTestId("lease");
    expect(lease.textContent).toContain("dag1 › train[2]");
    expect(within(lease).getByText("borrowed")).toBeTruthy();
    expect(within(lease).getByRole("link").getAttribute("href")).toBe("/dags/dag1/runs/run1/tasks/train/mapped/2");
    expect(screen.getByTestId("quota-groups").querySelectorAll("tbody tr")).toHaveLength(2);
    expect(screen.getByTestId("quota-why").textContent).toBe("reclaiming from vision");
    expect(screen.getByTestId("waiting").textContent).toContain("all GPUs leased");
    expect(screen.getByTestId("gpu-time").textContent).toContain("2.00 GPU-h");
    expect(screen.getByTestId("host-fleet").textContent).toContain("fleet: up");
    expect(screen.queryByTestId("quota-config-error")).toBeNull();  // the quota file is good: no banner
  }, COLD.testMs);
  it("says loudly that the quota file is broken and the quotas shown are its last good version", async () => {
    const good = board();
    // the error as plain text: what the file holds is never taken for markup
    const error = "quotas.yaml: key 'groups.vision': unknown key 'wieght' (did you mean 'weight'?) <img src=x onerror=\"window.pwned=1\">";
    serve({ "/gpus": { ...good, quotas: { ...good.quotas, config_error: error } } });
    wrap(<GpuBoard />);
    const banner = await screen.findByTestId("quota-config-error");
    expect(banner.getAttribute("role")).toBe("alert");
    expect(banner.closest("[data-testid='quotas']")).toBeTruthy();  // in the Team quotas section
    expect(banner.textContent).toContain("last good version");
    expect(banner.textContent).toContain(error);
    expect(banner.querySelector("img")).toBeNull();
    expect(screen.getByTestId("quota-groups").querySelectorAll("tbody tr")).toHaveLength(2);  // the quotas in force, still shown
  });
  it("highlights the task the address names", async () => {
    serve({ "/gpus": board() });
    window.history.replaceState(null, "", "/?dag_id=dag1&run_id=run1&task_id=train&map_index=2");
    wrap(<GpuBoard />);
    expect((await screen.findByTestId("task-lease")).textContent).toContain("Highlighted below");
  });
  it("says what went wrong when the API refuses", async () => {
    serve({});
    wrap(<GpuBoard />);
    expect((await screen.findByRole("alert")).textContent).toContain("404 Not Found: no such page");
  });
});

describe("the Sweeps tab", () => {
  const trial = { index: 3, trial_id: "id3", label: "t3", params: { lr: 1e-4 }, state: "succeeded", result: { loss: 0.2 }, error: null, seconds: 12,
    task_id: "trial", map_index: 3, skipped: false, step: null, round: 1, log_tail: "epoch 1: loss 0.2", log_path: "/x/output.log", log_note: "" };
  const importance = { method: "variance-explained", importances: [{ name: "lr", importance: 0.8 }], trials: 6, note: "", metric: "loss", method_label: "variance explained" };

  it("draws the counts, best trial, plots, parallel coordinates, importance and leaderboard", async () => {
    serve({ "/sweeps": sweeps(), "/sweeps/importance": importance });
    wrap(<Sweeps dagId="dag1" />);
    const card = await screen.findByTestId("sweep-demo", undefined, COLD.wait);  // the file's first plots: ECharts cold
    expect(within(card).getByTestId("counts").textContent).toContain("succeeded 6");
    expect(within(card).getByTestId("best").textContent).toContain("loss = 0.2");
    const progress = within(card).getByTestId("plot-progress");
    expect(progress.dataset.points).toBe("6");
    expect(progress.dataset.line).toBe("4");
    expect(progress.querySelector("svg")).toBeTruthy();  // ECharts drew it
    expect(within(card).getByTestId("plot-lr").dataset.xscale).toBe("log");
    expect(within(card).getByTestId("plot-act").dataset.categories).toBe("2");
    expect(within(card).getByTestId("plot-parallel").dataset.axes).toBe("4");
    expect(within(card).getByTestId("legend-progress").textContent).toContain("round 1");
    expect(within(card).getByTestId("leaderboard").querySelectorAll("tbody tr")).toHaveLength(1);
    await waitFor(() => expect(within(card).getByTestId("plot-importance").dataset.first).toBe("lr"));
  }, COLD.testMs);

  it("opens a trial's parameters and output on a click, and draws the score on a log axis", async () => {
    // only the plot these change (the test above draws every plot): a click or the log axis draws each plot of the
    // page again, about 50 ms apiece in jsdom; drawing and clicking in one test took 1.1-1.5 s on a shared 2-core
    // machine (2.5 s with vitest on a third of a core), these two tests 0.6-0.9 s and 0.4-0.6 s
    const few = { ...sweeps(), sweeps: [{ ...sweep(), numeric_params: [], categorical_params: {}, curves: [] }] };
    const fetchMock = serve({ "/sweeps": few, "/sweeps/trial": trial, "/sweeps/importance": { ...importance, importances: [] } });
    wrap(<Sweeps dagId="dag1" />);
    const card = await screen.findByTestId("sweep-demo");
    fireEvent.click(within(card).getByTestId("pick-trial"));
    expect((await screen.findByTestId("trial-log")).textContent).toBe("epoch 1: loss 0.2");
    expect(fetchMock.mock.calls.some(([u]) => String(u).includes("trial_id=id3"))).toBe(true);
    expect(within(card).getByTestId("plot-progress").dataset.yscale).toBe("linear");
    fireEvent.click(within(card).getByTestId("log-score"));
    await waitFor(() => expect(within(card).getByTestId("plot-progress").dataset.yscale).toBe("log"));
  });
});

describe("the timeline", () => {
  it("counts leases, draws a row per GPU and offers the server's windows", async () => {
    serve({ "/timeline": timeline() });
    wrap(<GpuTimeline />);
    const plot = await screen.findByTestId("plot-timeline");
    expect(plot.dataset.rows).toBe("3");
    expect(plot.dataset.bars).toBe("3");
    expect(plot.dataset.marks).toBe("1");
    expect(screen.getByTestId("timeline-counts").textContent).toContain("1 preempted");
    expect(screen.getByTestId("timeline-window").querySelectorAll("button")).toHaveLength(3);
    expect(screen.getByTestId("timeline-key").textContent).toContain("idle class");
  });
});

describe("the Slurm tab", () => {
  it("says plainly when a task ran on local GPUs, with a link to its lease", async () => {
    serve({ "/slurm": { found: false, dag_id: "d", run_id: "r", task_id: "t", map_index: -1, local_gpus: true, message: "" } });
    wrap(<SlurmJob dagId="d" runId="r" taskId="t" mapIndex={-1} />);
    const box = await screen.findByTestId("no-slurm-job");
    expect(within(box).getByRole("link").getAttribute("href")).toBe("/plugin/gpusched-gpus?dag_id=d&run_id=r&task_id=t&map_index=-1");
  });
  it("shows a job's fields, array tasks and each task's output", async () => {
    serve({ "/slurm": { job_id: "42", output_path: "/o/%A_%a.out", array: "0-1", via: "this host's CLI", submitted: 1, final: true, source: "recorded",
      preemptions: 1, preemption_events: ["preempted at 12:00:00 on n1, requeued"], problem: "", state: "COMPLETED", phase: "succeeded", exit_code: 0,
      nodes: "n1", partition: "gpu", requeues: 1, elapsed: 30, reason: "None", tail_path: "", tail_source: "files", task_state: "success",
      tasks: [{ task: "0", state: "COMPLETED", exit_code: 0, nodes: "n1", elapsed: 10, requeues: 0 }, { task: "1", state: "COMPLETED", exit_code: 0, nodes: "n2", elapsed: 12, requeues: 0 }],
      tails: { "0": "seed 0 on GPU 0", "1": "seed 1 on GPU 1" } } });
    wrap(<SlurmJob dagId="d" runId="r" taskId="t" />);
    expect((await screen.findByTestId("output-tail")).textContent).toBe("seed 0 on GPU 0");
    const events = screen.getByTestId("requeue-events");
    expect(events.querySelector("h2")?.textContent).toBe("Preemptions");  // not a chain: its requeues were preemptions
    expect(events.textContent).toContain("preempted at 12:00:00");
    expect(screen.getByTestId("array-tasks").querySelectorAll("tbody tr")).toHaveLength(2);
    fireEvent.change(screen.getByTestId("tail-task"), { target: { value: "1" } });
    expect(screen.getByTestId("output-tail").textContent).toBe("seed 1 on GPU 1");
  });
  it("lists a time-limit chain's segments: ended, left without an end record, running", async () => {
    const seg = (segment: number, extra: object) => ({ job: "42", segment, node: "n1", started: 1e9, ended: null, outcome: null, detail: null, signalled: null, ...extra });
    serve({ "/slurm": { job_id: "42", output_path: "/o/%j.out", via: "this host's CLI", submitted: 1, final: false, source: "squeue",
      preemptions: 2, preemption_events: ["segment 1 reached its time limit, requeued", "segment 2 requeued"], problem: "", state: "RUNNING",
      phase: "running", exit_code: null, nodes: "n1", partition: "gpu", requeues: 2, elapsed: 30, reason: "None", tail_path: "", tail_source: "files", task_state: "running", tasks: [], tails: {},
      segments: [seg(1, { ended: 1e9 + 50, outcome: "requeued", detail: "time limit near" }), seg(2, { detail: "no end record: its wrapper was stopped" }), seg(3, {})] } });
    wrap(<SlurmJob dagId="d" runId="r" taskId="t" />);
    const rows = (await screen.findByTestId("chain-segments")).querySelectorAll("tbody tr");
    const ended = [...rows].map((row) => row.querySelectorAll("td")[4]?.textContent);
    expect(ended[0]).not.toBe("running");
    expect(ended.slice(1)).toEqual(["–", "running"]);
    expect(rows[1]?.textContent).toContain("no end record");
    // a chain's requeues are its segments ending at the limit: titled so, not "Preemptions"
    const events = screen.getByTestId("requeue-events");
    expect(events.querySelector("h2")?.textContent).toBe("Requeues");
    expect(events.querySelectorAll("li")).toHaveLength(2);
  });
});
