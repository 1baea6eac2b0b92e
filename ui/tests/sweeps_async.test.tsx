// The Sweeps tab of an asynchronous sweep: its trials ran in worker tasks no plan names, so each links the worker
// that ran it, and "earlier run" is said only of a trial an earlier DAG run did (skipped here).
import { ChakraProvider, defaultSystem } from "@chakra-ui/react";
import { render, screen, within } from "@testing-library/react";
import { expect, it, vi } from "vitest";

import type { Sweep } from "src/api/types";
import { Sweeps } from "src/pages/Sweeps";

import { COLD, answer, sweep } from "./fixtures";

function asynchronous(): Sweep {
  const base = sweep(3);
  const row = (i: number, worker: number | null, skipped = false) => ({
    rank: i + 1, score: [0.2, 0.4, 0.5][i] as number, index: i, label: `t${i}`, trial_id: `id${i}`, params: { lr: 10 ** -(i + 1) },
    task_id: worker === null ? null : "s.run_batch", map_index: worker, seconds: 3, skipped,
  });
  const leaderboard = [row(0, 1), row(1, null, true), row(2, null)];
  return {
    // no slice or strip plots: this test reads the tables, and each plot costs about 50 ms of jsdom
    ...base, numeric_params: [], categorical_params: {}, search: "optuna", counts: { ...base.counts, skipped: 1 }, leaderboard, best: leaderboard[0] ?? null,
    pruned: [{ index: 2, trial_id: "id2", label: "t2", error: "pruned at step 3", task_id: "s.run_batch", map_index: 0, skipped: false, step: 3 }],
  };
}

it("links each trial of an asynchronous sweep to its worker, and says 'earlier run' only of skipped trials", async () => {
  vi.stubGlobal("fetch", vi.fn(async () => answer({ dag_id: "dag1", run_id: "run1", runs: ["run1"], sweeps: [asynchronous()], problems: [] })));
  render(<ChakraProvider value={defaultSystem}><Sweeps dagId="dag1" /></ChakraProvider>);
  const card = await screen.findByTestId("sweep-demo", undefined, COLD.wait);  // the file's only page: everything cold
  const rows = [...within(card).getByTestId("leaderboard").querySelectorAll("tbody tr")];
  expect(rows).toHaveLength(3);
  const [ran, before, unknown] = rows as [HTMLElement, HTMLElement, HTMLElement];
  expect(within(ran).getByText("task").getAttribute("href")).toBe("/dags/dag1/runs/run1/tasks/s.run_batch/mapped/1");
  expect(before.textContent).toContain("earlier run");
  expect(unknown.textContent).not.toContain("earlier run");  // this run's trial whose worker is not known yet
  expect(within(card).getByTestId("best").textContent).not.toContain("earlier run");
  expect(within(card).getByTestId("pruned").textContent).not.toContain("earlier run");
  expect(within(card).getByTestId("pruned").querySelector("a[href*='run_batch/mapped/0']")).toBeTruthy();
}, COLD.testMs);
