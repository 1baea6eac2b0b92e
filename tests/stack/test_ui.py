"""The UI plugin's pages in a real browser (Debian's headless Chromium driven by Playwright) against the deployed
api-server: log in through the login form, open each page while real work runs, assert what it shows, and save
screenshots (test-artifacts/ui/, or $GPUSCHED_ARTIFACTS/ui) for people to look at."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.polling import wait_until
from tests.stack.client import REPO

pytestmark = pytest.mark.stack

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("GPUSCHED_ARTIFACTS", REPO / "test-artifacts")) / "ui"


@pytest.fixture(scope="module")
def browser_page(stack):
    if not os.path.exists(CHROMIUM) or shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (scripts/test.sh installs Debian's package)")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    password = (stack.dir / "admin-password").read_text().strip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{stack.url}/auth/login", wait_until="networkidle")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)
        yield page
        browser.close()


def finished_run(stack, dag_id: str) -> str:
    """Trigger ``dag_id`` and wait until its run succeeded; its run id."""
    stack.wait_for_dag(dag_id)
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id, timeout=300) == "success"
    return run_id


def open_page(stack, page, path: str, ready: str) -> None:
    """Open a UI page and wait until the plugin has rendered ``ready`` (a CSS selector)."""
    page.goto(f"{stack.url}{path}", wait_until="networkidle")
    page.wait_for_selector(ready, timeout=60_000)


def shot(page, name: str) -> None:
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_gpu_board_shows_the_leases_of_running_tasks(stack, browser_page, out_dir):
    page = browser_page
    run_id = stack.trigger("e2e_packing", out=str(out_dir), seconds=45)
    wait_until(lambda: sum(ti["state"] == "running" for ti in stack.task_instances("e2e_packing", run_id)) >= 4,
               timeout=120, what="4 packing trials running")
    open_page(stack, page, "/plugin/gpusched-gpus", "[data-testid=gpu-board]")
    # running tasks publish their leases one by one; the page refreshes every 5 s
    page.wait_for_function("document.querySelectorAll('[data-testid=lease]').length >= 4", timeout=60_000)
    board = page.locator("[data-testid=gpu-board]")
    shot(page, "gpu-board")
    assert "SIMULATED GPUs" in board.inner_text()  # no NVML here: said plainly
    leases = page.locator("[data-testid=lease]")
    assert leases.count() >= 4
    text = board.inner_text()
    assert "e2e_packing › trial[" in text and "GPU time by class" in text
    link = leases.first.locator("a").get_attribute("href")
    assert link.startswith("/dags/e2e_packing/runs/") and "/tasks/trial/mapped/" in link
    open_page(stack, page, "/", "[data-testid=gpu-summary]")
    assert re.search(r"\d of 4 in use on 1 host\(s\)", page.locator("[data-testid=gpu-summary]").inner_text())
    shot(page, "dashboard")
    stack.wait_run("e2e_packing", run_id, timeout=300)


def test_sweeps_tab_shows_counts_leaderboard_and_plots_of_a_finished_sweep(stack, browser_page):
    page = browser_page
    run_id = finished_run(stack, "gpusched_sweep_grid")
    open_page(stack, page, f"/dags/gpusched_sweep_grid/plugin/gpusched-sweeps?run_id={run_id}",
              "[data-testid=leaderboard] tbody tr")
    counts = page.locator("[data-testid=counts]").inner_text()
    assert "defined 4" in counts and "succeeded 4" in counts and "failed 0" in counts
    rows = page.locator("[data-testid=leaderboard] tbody tr")
    assert rows.count() == 4
    first = rows.first.inner_text()
    assert "7.7" in first and "WGAN" in first  # WGAN, packing 3, zmode 1: 7.0 + 0.9 - 0.2
    assert page.locator("[data-testid=plot-progress] circle").count() == 4
    assert page.locator("[data-testid=best]").inner_text().startswith("Best: inception_score = 7.7")
    shot(page, "sweeps")


def test_sweeps_tab_shows_the_pareto_front_of_a_two_objective_sweep(stack, browser_page):
    page = browser_page
    run_id = finished_run(stack, "gpusched_sweep_pareto")
    open_page(stack, page, f"/dags/gpusched_sweep_pareto/plugin/gpusched-sweeps?run_id={run_id}",
              "[data-testid=leaderboard] tbody tr")
    card = page.locator("[data-testid=sweep-pareto_size]")
    assert "maximize val_accuracy, minimize latency_ms" in card.inner_text()
    assert "defined 18" in page.locator("[data-testid=counts]").inner_text()
    head = page.locator("[data-testid=leaderboard] thead").inner_text()
    assert "front" in head and "val_accuracy" in head and "latency_ms" in head
    first = page.locator("[data-testid=leaderboard] tbody tr").first.inner_text().split("\t")
    assert first[:2] == ["1", "1"]  # rank 1 is on front 1
    # the plot of latency against accuracy: every scored trial, the front drawn as a line through its points
    assert page.locator("[data-testid=plot-pareto] circle").count() == 18
    assert page.locator("[data-testid=plot-pareto] polyline").count() == 1
    best = page.locator("[data-testid=best]").inner_text()
    assert best.startswith("Best: val_accuracy = ") and "(Pareto front, best val_accuracy)" in best
    # every trial reported 10 epochs: one curve each, read by the api-server from the results folder
    assert page.locator("[data-testid=plot-reports] g[data-state=succeeded] polyline").count() == 18
    assert "val_accuracy by step" in page.locator("[data-testid=reports]").inner_text()
    shot(page, "sweeps-pareto")
    page.locator("[data-testid=reports]").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "sweeps-reports.png"))
    page.locator("[data-testid=leaderboard]").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "sweeps-pareto-leaderboard.png"))


def test_slurm_job_tab_shows_array_tasks_state_and_output(stack, browser_page):
    page = browser_page
    run_id = finished_run(stack, "gpusched_slurm_array")
    open_page(stack, page, f"/dags/gpusched_slurm_array/runs/{run_id}/tasks/seeds/plugin/gpusched-slurm-job",
              "[data-field=state]")
    assert page.locator("[data-field=state]").inner_text().startswith("COMPLETED")
    assert page.locator("[data-field=node]").inner_text() != "–"
    assert page.locator("[data-testid=array-tasks] tbody tr").count() == 4
    assert page.locator("[data-testid=output-tail]").inner_text().startswith("seed 0 on GPU")
    page.select_option("[data-testid=tail-task]", "3")
    assert page.locator("[data-testid=output-tail]").inner_text().startswith("seed 3 on GPU")
    shot(page, "slurm-job")
