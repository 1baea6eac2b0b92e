"""The UI plugin's pages in a real browser (Debian's headless Chromium driven by Playwright) against the deployed
api-server: log in through the login form, open each page while real work runs, assert what it shows, and save
screenshots (test-artifacts/ui/, or $GPUSCHED_ARTIFACTS/ui) for people to look at."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.polling import wait_until
from tests.processes import start_foreign_process
from tests.stack.client import REPO

pytestmark = pytest.mark.stack

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("GPUSCHED_ARTIFACTS", REPO / "test-artifacts")) / "ui"


@pytest.fixture(scope="module")
def browser_page(stack):
    if not os.path.exists(CHROMIUM) or shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (scripts/test.sh installs Debian's package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page = logged_in_page(p, stack)
        yield page
        browser.close()


def logged_in_page(playwright, stack):
    """Debian's Chromium, logged in to ``stack``'s UI as admin through the login form: ``(browser, page)``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    password = (stack.dir / "admin-password").read_text().strip()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{stack.url}/auth/login", wait_until="networkidle")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", password)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)
    return browser, page


def finished_run(stack, dag_id: str) -> str:
    """Trigger ``dag_id`` and wait until its run succeeded; its run id."""
    stack.wait_for_dag(dag_id)
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id, timeout=300) == "success"
    return run_id


def open_page(stack, page, path: str, ready: str) -> None:
    """Open a UI page and wait until the plugin has rendered ``ready`` (a CSS selector)."""
    page.goto(f"{stack.url}{path}", wait_until="networkidle")
    try:
        page.wait_for_selector(ready, timeout=60_000)
    except Exception as exc:  # a page that never rendered says what it shows instead (CI's run of 214b9b2: a blank
        # timeline after 60 s, under load, with nothing to tell why)
        with contextlib.suppress(Exception):
            page.screenshot(path=str(SHOTS / "not-rendered.png"))
        text = page.locator("body").inner_text(timeout=5_000)[-1500:] if page.locator("body").count() else ""
        raise AssertionError(f"{path}: {ready} not rendered in 60 s; the page says: {text!r}") from exc


def shot_at(page, testid: str, name: str) -> None:
    """A screenshot of the window scrolled to the element ``testid`` (not the whole page)."""
    page.locator(f"[data-testid={testid}]").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def shot(page, name: str) -> None:
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@contextlib.contextmanager
def api_answers(page, answers: dict):
    """While the block runs, the page's requests to each URL pattern of ``answers`` get its JSON text instead of the
    api-server's answer (a view built here: 10,000 trials, 64 GPUs, a day of leases), or go to its handler when it is
    a function of the route. At the end, whatever happened, every route of the page is removed and a handler that
    runs late is ignored: a page that refreshes itself (the Sweeps tab every few seconds) can have a request in
    flight when the block ends, and Playwright then ran the old handler during the next test, which failed that test
    with "Route is already handled" (a CI run with the other core busy, 2026-11-29)."""

    def fulfil(body: str):  # a handler of one argument: Playwright passes the request too to one that takes two
        return lambda route: route.fulfill(status=200, content_type="application/json", body=body)

    for pattern, answer in answers.items():
        page.route(pattern, answer if callable(answer) else fulfil(answer))
    try:
        yield
    finally:
        page.unroute_all(behavior="ignoreErrors")


def shots_light_and_dark(page, name: str) -> None:
    """The page as it is (light) and in the host UI's dark mode (class "dark" on <html>, as Airflow's colour-mode
    switch sets it): ``<name>.png`` and ``<name>-dark.png``."""
    shot(page, name)
    page.evaluate("document.documentElement.classList.add('dark'); document.documentElement.style.colorScheme = 'dark'")
    try:
        shot(page, f"{name}-dark")
        # the charts redraw in the dark mode's ink (their text light on the dark page)
        assert page.evaluate(DARK_CHARTS), "a chart kept the light mode's colours"
    finally:
        page.evaluate(
            "document.documentElement.classList.remove('dark'); document.documentElement.style.colorScheme = ''"
        )


#: every chart of the page: what ECharts was asked to draw (ui/src/charts/EChart.tsx lists each instance in
#: globalThis.gpuschedCharts under its test id) and what it drew (non-blank pixels on its canvas)
CHARTS = """() => Object.entries(globalThis.gpuschedCharts || {}).map(([id, c]) => {
  const canvas = c.getDom().querySelector('canvas');
  let inked = 0;
  if (canvas && canvas.width && canvas.height) {
    const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < px.length; i += 4 * 7) if (px[i] > 0) inked++;
  }
  const series = (c.getOption().series || []).map((s) => (s.data || []).length);
  return { id, inked, series, connected: c.getDom().isConnected };
})"""

DARK_CHARTS = """() => Object.values(globalThis.gpuschedCharts || {}).every((c) => {
  const o = c.getOption();
  const axes = [...(o.xAxis || []), ...(o.yAxis || []), ...(o.parallelAxis || [])].filter((a) => a.show !== false && a.axisLabel);
  return axes.every((a) => a.axisLabel.color === undefined || a.axisLabel.color === '#e4e4e7');
})"""

#: one chart's series (type, name, how many items) and the labels its axes show (ECharts' own layout: overlapping
#: labels are hidden, axis names cut to their room)
CHART = """(id) => {
  const c = (globalThis.gpuschedCharts || {})[id];
  if (!c) return null;
  const labels = (kind, i) => {
    const m = c.getModel().getComponent(kind, i);
    return m && m.axis ? m.axis.getViewLabels().map((l) => l.formattedLabel) : null;
  };
  const o = c.getOption();
  return {
    series: o.series.map((s) => ({ type: s.type, name: s.name, n: (s.data || []).length })),
    x: labels('xAxis', 0),
    y: labels('yAxis', 0),
    parallel: (o.parallelAxis || []).map((a, i) => ({ name: a.name, labels: labels('parallelAxis', i) })),
  };
}"""

#: the items of one series: value and the fields the page gave each (link, outcome, trial, title...)
ITEMS = """([id, k]) => ((globalThis.gpuschedCharts || {})[id].getOption().series[k].data || []).map((d) =>
  d && typeof d === 'object' && !Array.isArray(d) ? { value: d.value, href: d.href, outcome: d.outcome, cls: d.cls, id: d.id,
                                                      count: d.count, title: d.title } : { value: d })"""


def chart(page, testid: str) -> dict:
    info = page.evaluate(CHART, testid)
    assert info is not None, f"no chart {testid} on the page"
    return info


def items(page, testid: str, series: int = 0) -> list[dict]:
    return page.evaluate(ITEMS, [testid, series])


def wait_chart(page, testid: str, timeout: float = 60_000) -> None:
    page.wait_for_function(f"!!(globalThis.gpuschedCharts || {{}})[{json.dumps(testid)}]", timeout=timeout)


def assert_plots_drawn(page) -> None:
    """Every chart on the page drew something (ink on its canvas) from data (items in its series)."""
    charts = [c for c in page.evaluate(CHARTS) if c["connected"]]
    assert charts, "no chart on the page"
    blank = [c for c in charts if not c["inked"] or not any(c["series"])]
    assert not blank, blank


def test_an_idle_board_lists_every_gpu_of_the_host(stack, browser_page):
    """The api-server's host is a GPU host (simulated here): its GPUs are on the board and in the dashboard
    summary before any task holds a lease, not "0 of 0 in use on 0 host(s)"."""
    page = browser_page
    open_page(stack, page, "/plugin/gpusched-gpus", "[data-testid=gpus] tbody tr")
    assert page.locator("[data-testid=gpus] tbody tr").count() == 4
    seen = page.locator("[data-testid=host-seen]").first.inner_text()
    assert "of 4 GPU(s) leased" in seen and "known from" in seen
    open_page(stack, page, "/", "[data-testid=gpu-summary]")
    assert re.search(r"\d of 4 in use on 1 host\(s\)", page.locator("[data-testid=gpu-summary]").inner_text())


def test_gpu_board_shows_the_leases_of_running_tasks(stack, browser_page, out_dir):
    page = browser_page
    run_id = stack.trigger("e2e_packing", out=str(out_dir), seconds=45)
    wait_until(
        lambda: sum(ti["state"] == "running" for ti in stack.task_instances("e2e_packing", run_id)) >= 4,
        timeout=120,
        what="4 packing trials running",
    )
    open_page(stack, page, "/plugin/gpusched-gpus", "[data-testid=gpu-board]")
    # running tasks publish their leases one by one; the page refreshes every 5 s
    page.wait_for_function("document.querySelectorAll('[data-testid=lease]').length >= 4", timeout=60_000)
    board = page.locator("[data-testid=gpu-board]")
    # measured use: the simulated driver reports one trial's process using 8 GiB of its 6 GiB reservation, and a
    # colleague's process (not a descendant of any task) on the same GPU; the api-server samples every 10 s
    lease = next(
        r
        for r in (
            json.loads(p.read_text())
            for p in stack.lease_dir.glob("*.json")
            if re.fullmatch(r"[0-9a-f]{16}\.json", p.name)
        )
        if r.get("child_pids")
    )
    colleague = start_foreign_process(600)
    usage = stack.dir / "simulated-usage.json"
    gpu = lease["gpus"][0]
    usage.write_text(
        json.dumps(
            {
                str(gpu): {
                    "utilization": 71,
                    "memory_used": "10GiB",
                    "processes": [
                        {"pid": lease["child_pids"][0], "used_memory": "8GiB"},
                        {"pid": colleague, "used_memory": "2GiB"},
                    ],
                }
            }
        )
    )
    try:
        page.wait_for_selector("[data-testid=over-reservation]", timeout=60_000)
        page.wait_for_selector("[data-testid=foreign-processes]", timeout=60_000)
        measured = page.locator(f"[data-testid=gpus] tbody tr:nth-child({gpu + 1}) [data-testid=measured]")
        assert measured.get_attribute("data-utilization") == "71"
        assert "71% · 10.0 GiB in use" in measured.inner_text() and "simulated" in measured.inner_text()
        over = page.locator("[data-testid=over-reservation]").inner_text()
        assert re.search(r"trial\[\d+\] uses 8\.0 GiB, more than the 6\.0 GiB it reserved", over), over
        assert f"pid {colleague}" in page.locator("[data-testid=foreign-processes]").inner_text()
        assert page.locator("[data-testid=gpu-sparkline]").count() == 4
        assert "sampled every 10" in page.locator("[data-testid=telemetry-note]").inner_text()
        shots_light_and_dark(page, "gpu-board")
    finally:
        usage.unlink()
        with contextlib.suppress(ProcessLookupError):
            os.kill(colleague, signal.SIGKILL)
    assert "SIMULATED GPUs" in board.inner_text()  # no NVML here: said plainly
    leases = page.locator("[data-testid=lease]")
    assert leases.count() >= 4
    text = board.inner_text()
    assert "e2e_packing › trial[" in text and "GPU time by class" in text
    link = leases.first.locator("a").get_attribute("href")
    assert link.startswith("/dags/e2e_packing/runs/") and "/tasks/trial/mapped/" in link
    open_page(stack, page, "/", "[data-testid=gpu-summary]")
    assert re.search(r"\d of 4 in use on 1 host\(s\)", page.locator("[data-testid=gpu-summary]").inner_text())
    shots_light_and_dark(page, "dashboard")
    stack.wait_run("e2e_packing", run_id, timeout=300)
    # the "GPU lease" link of a finished task: the board says the lease ended, where and when it ran
    open_page(
        stack,
        page,
        f"/plugin/gpusched-gpus?dag_id=e2e_packing&run_id={run_id}&task_id=trial&map_index=3",
        "[data-testid=task-lease] b",
    )
    ended = page.locator("[data-testid=task-lease]").inner_text()
    assert "e2e_packing › trial[3]" in ended and "This task's lease has ended" in ended, ended
    assert re.search(r"ran on host \S+, GPU \d \(6\.0 GiB of 24\.0 GiB\)", ended) and "task success" in ended, ended
    shot(page, "gpu-board-ended-lease")


def test_the_slurm_job_tab_of_a_local_gpu_task_says_it_ran_on_local_gpus(stack, browser_page, out_dir):
    page = browser_page
    run_id = stack.trigger("e2e_normal", out=str(out_dir), seconds=1)
    assert stack.wait_run("e2e_normal", run_id, timeout=300) == "success"
    open_page(
        stack,
        page,
        f"/dags/e2e_normal/runs/{run_id}/tasks/train/plugin/gpusched-slurm-job",
        "[data-testid=no-slurm-job]",
    )
    text = page.locator("[data-testid=slurm-job]").inner_text()
    assert "ran on local GPUs, not through Slurm" in text and "404" not in text
    assert page.locator("[role=alert]").count() == 0  # no red error box
    assert "gpusched-gpus?dag_id=e2e_normal" in page.locator("[data-testid=no-slurm-job] a").get_attribute("href")
    shots_light_and_dark(page, "slurm-job-local-task")


def test_sweeps_tab_shows_counts_leaderboard_and_plots_of_a_finished_sweep(stack, browser_page):
    page = browser_page
    run_id = finished_run(stack, "gpusched_sweep_grid")
    open_page(
        stack,
        page,
        f"/dags/gpusched_sweep_grid/plugin/gpusched-sweeps?run_id={run_id}",
        "[data-testid=leaderboard] tbody tr",
    )
    counts = page.locator("[data-testid=counts]").inner_text()
    assert "defined 4" in counts and "succeeded 4" in counts and "failed 0" in counts
    rows = page.locator("[data-testid=leaderboard] tbody tr")
    assert rows.count() == 4
    first = rows.first.inner_text()
    assert "7.7" in first and "WGAN" in first  # WGAN, packing 3, zmode 1: 7.0 + 0.9 - 0.2
    wait_chart(page, "plot-progress")
    assert page.locator("[data-testid=plot-progress]").get_attribute("data-points") == "4"
    assert page.locator("[data-testid=best]").inner_text().startswith("Best: inception_score = 7.7")
    # categorical parameters (the GAN's name) get a plot too, a strip of its values
    strips = page.eval_on_selector_all("[data-testid^=plot-][data-categories]", "ps => ps.map(p => +p.dataset.points)")
    assert strips and all(n == 4 for n in strips), strips
    assert_plots_drawn(page)
    shots_light_and_dark(page, "sweeps")


def test_sweeps_tab_shows_the_pareto_front_of_a_two_objective_sweep(stack, browser_page):
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 1000})  # a laptop's width: the leaderboard must not wrap
    run_id = finished_run(stack, "gpusched_sweep_pareto")
    open_page(
        stack,
        page,
        f"/dags/gpusched_sweep_pareto/plugin/gpusched-sweeps?run_id={run_id}",
        "[data-testid=leaderboard] tbody tr",
    )
    card = page.locator("[data-testid=sweep-pareto_size]")
    assert "maximize val_accuracy, minimize latency_ms" in card.inner_text()
    assert "defined 18" in page.locator("[data-testid=counts]").inner_text()
    head = page.locator("[data-testid=leaderboard] thead").inner_text()
    assert "front" in head and "val_accuracy" in head and "latency_ms" in head
    first = page.locator("[data-testid=leaderboard] tbody tr").first.inner_text().split("\t")
    assert first[:2] == ["1", "1"]  # rank 1 is on front 1
    # the plot of latency against accuracy: every scored trial, the front drawn as a line through its points
    wait_chart(page, "plot-pareto")
    assert page.locator("[data-testid=plot-pareto]").get_attribute("data-points") == "18"
    front = chart(page, "plot-pareto")["series"]
    assert [s["type"] for s in front] == ["line", "scatter"] and front[0]["n"] >= 2, front  # the front, as a line
    best = page.locator("[data-testid=best]").inner_text()
    assert best.startswith("Best: val_accuracy = ") and "(Pareto front, best val_accuracy)" in best
    # every trial reported 10 epochs: one curve each, read by the api-server from the results folder
    assert page.locator("[data-testid=plot-reports]").get_attribute("data-state-succeeded") == "18"
    assert "val_accuracy by step" in page.locator("[data-testid=reports]").inner_text()
    assert "succeeded" in page.locator("[data-testid=legend-reports]").inner_text()
    assert "round 0" in page.locator("[data-testid=legend-progress]").inner_text()  # colour = round, said
    # lr is loguniform: a log axis with decade ticks; activation (relu/gelu) is categorical: a plot of its own
    assert page.locator("[data-testid=plot-lr]").get_attribute("data-xscale") == "log"
    ticks = chart(page, "plot-lr")["x"]
    assert ticks[0] == "1e-4" and ticks[-1] == "0.01", ticks
    assert [t for t in chart(page, "plot-activation")["x"] if t] == ["gelu", "relu"]
    assert page.locator("[data-testid=plot-activation]").get_attribute("data-points") == "18"
    assert_plots_drawn(page)
    # one column per parameter, values with 4 significant digits: a leaderboard row is one line high
    head = page.locator("[data-testid=leaderboard] thead").inner_text()
    assert all(name in head for name in ("width", "depth", "lr", "activation")) and "parameters" not in head
    body = page.locator("[data-testid=leaderboard] tbody").inner_text()
    assert "{" not in body and not re.search(r"\d\.\d{7,}", body), body[:500]  # no 17-digit floats
    heights = page.eval_on_selector_all("[data-testid=leaderboard] tbody tr", "rows => rows.map(r => r.offsetHeight)")
    assert max(heights) <= 40, heights
    shot(page, "sweeps-pareto")
    # analysis over every trial: parallel coordinates (a line each), Optuna's importance of the four parameters
    assert page.locator("[data-testid=plot-parallel]").get_attribute("data-lines") == "18"
    page.wait_for_selector("[data-testid=plot-importance]", timeout=60_000)
    ranked = page.locator("[data-testid=plot-importance]").get_attribute("data-params").split(",")
    assert sorted(ranked) == ["activation", "depth", "lr", "width"], ranked
    assert "Optuna's PED-ANOVA" in page.locator("[data-testid=importance]").inner_text()
    # drag along the score axis (the last): only the trials in that range keep their colour
    page.locator("[data-testid=plot-parallel]").scroll_into_view_if_needed()  # the mouse acts on the viewport
    ends = page.evaluate(SCORE_AXIS, "plot-parallel")
    page.mouse.move(ends["x0"], ends["y0"] + 2)
    page.mouse.down()
    page.mouse.move((ends["x0"] + ends["x1"]) / 2, (ends["y0"] + ends["y1"]) / 2, steps=5)
    page.mouse.up()
    page.wait_for_function(
        "document.querySelector('[data-testid=pc-selection]').textContent.includes('selected ranges')"
    )
    selection = page.locator("[data-testid=pc-selection]").inner_text()
    kept = int(re.match(r"(\d+) of 18 trials in the selected ranges", selection).group(1))
    assert 1 <= kept < 18, selection
    # a trial's output: its parameters, result and the tail of its log, read from the results folder
    page.locator("[data-testid=leaderboard] tbody tr").first.locator("[data-testid=pick-trial]").click()
    page.wait_for_selector("[data-testid=trial-log]", timeout=30_000)
    panel = page.locator("[data-testid=trial-panel]").inner_text()
    assert "succeeded" in panel and "val_accuracy" in panel and "width=" in panel, panel
    assert page.locator("[data-testid=trial-log]").inner_text().splitlines()[-1].startswith("epoch 10: val_accuracy")
    assert_plots_drawn(page)
    page.locator("[data-testid=analysis]").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / "sweeps-analysis.png"), full_page=True)
    shots_light_and_dark(page, "sweeps-pareto-analysis")
    shot_at(page, "reports", "sweeps-reports")
    shot_at(page, "leaderboard", "sweeps-pareto-leaderboard")
    page.set_viewport_size({"width": 1400, "height": 1000})


#: the ends of the parallel coordinates' last axis (the score), in the page's pixels: where a range is dragged
SCORE_AXIS = """(id) => {
  const c = globalThis.gpuschedCharts[id];
  const cs = c.getModel().getComponent('parallel').coordinateSystem;
  const dim = cs.dimensions[cs.dimensions.length - 1];
  const [a, b] = cs.getAxis(dim).getExtent();
  const p0 = cs.axisCoordToPoint(a, dim), p1 = cs.axisCoordToPoint(b, dim);
  const r = c.getDom().getBoundingClientRect();
  return { x0: r.left + p0[0], y0: r.top + p0[1], x1: r.left + p1[0], y1: r.top + p1[1] };
}"""


def _curve_lengths(page) -> list[int]:
    """The points of each report curve drawn (a line series per trial)."""
    wait_chart(page, "plot-reports")
    return [s["n"] for s in chart(page, "plot-reports")["series"]]


def test_sweeps_tab_of_a_rerun_and_of_an_older_run_after_a_forced_rerun(stack, browser_page):
    """A re-run skips the trials done before and shows them as they ended (3 succeeded, 3 pruned, curves in their
    colours, the pruned ones listed with step and reason); after another DAG forced the same sweep to run again
    (5 steps instead of 3), the older runs still draw their own curves."""
    page = browser_page
    shutil.rmtree(stack.dir / "sweeps" / "e2e_rerun", ignore_errors=True)  # a kept stack: start the sweep anew
    first = finished_run(stack, "e2e_sweep_rerun")
    second = finished_run(stack, "e2e_sweep_rerun")
    open_page(
        stack,
        page,
        f"/dags/e2e_sweep_rerun/plugin/gpusched-sweeps?run_id={second}",
        "[data-testid=plot-reports]",
    )
    counts = page.locator("[data-testid=counts]").inner_text()
    assert "succeeded 3" in counts and "pruned 3" in counts and "6 from earlier runs" in counts, counts
    assert page.locator("[data-testid=plot-reports]").get_attribute("data-state-pruned") == "3"
    assert page.locator("[data-testid=plot-reports]").get_attribute("data-state-succeeded") == "3"
    legend = page.locator("[data-testid=legend-reports]").inner_text()
    assert "pruned" in legend and "succeeded" in legend
    pruned = page.locator("[data-testid=pruned] tbody tr").all_inner_texts()
    assert len(pruned) == 3 and all("\t2\t" in row and "the test's rule" in row for row in pruned), pruned
    assert sorted(_curve_lengths(page)) == [2, 2, 2, 3, 3, 3]
    shot(page, "sweeps-rerun")
    # the two runs side by side: the re-run carries the first run's scores over, trial by trial
    page.select_option("[data-testid=compare-run]", first)
    page.wait_for_selector("[data-testid=compare-summary]", timeout=30_000)
    summary = page.locator("[data-testid=compare-summary]").inner_text()
    assert summary.startswith("3 trial(s) scored in both runs: 0 changed"), summary
    assert page.locator("[data-testid=compare-runs] tbody tr").count() == 2
    wait_chart(page, "plot-compare")
    assert page.locator("[data-testid=plot-compare-progress]").get_attribute("data-series") == "2"
    assert page.locator("[data-testid=plot-compare]").get_attribute("data-points") == "3"
    assert_plots_drawn(page)
    shot_at(page, "compare", "sweeps-compare")
    shot_at(page, "pruned", "sweeps-rerun-pruned")
    forced = finished_run(stack, "e2e_sweep_rerun_forced")
    open_page(
        stack,
        page,
        f"/dags/e2e_sweep_rerun_forced/plugin/gpusched-sweeps?run_id={forced}",
        "[data-testid=plot-reports]",
    )
    assert sorted(_curve_lengths(page)) == [2, 2, 2, 5, 5, 5]
    for older in (first, second):  # each older run: its own 3-step curves, not the forced run's 5-step ones
        open_page(
            stack,
            page,
            f"/dags/e2e_sweep_rerun/plugin/gpusched-sweeps?run_id={older}",
            "[data-testid=plot-reports]",
        )
        assert sorted(_curve_lengths(page)) == [2, 2, 2, 3, 3, 3], older
        assert page.locator("[data-testid=plot-reports]").get_attribute("data-state-pruned") == "3"


def _trial_records(folder: Path) -> dict:
    return {
        d.name: json.loads((d / "status.json").read_text())
        for d in sorted((folder / "trials").iterdir())
        if (d / "status.json").exists()
    }


def test_sweeps_tab_of_a_forced_rerun_stopped_by_queue_stop_and_of_the_run_before(stack, browser_page):
    """Issue 52 as the new user met it, in the browser: a run (3 succeeded, 2 pruned, 1 failed), a forced re-run
    stopped while its trials ran, a plain re-run. The stopped run's tab counts what it stopped and did not start
    (no success, no best of its own); the first run's tab and the sweep's records are as they were; the next run
    runs only the failed trial. The first run's tab also shows the failed trial's error line, why importance is not
    drawn, and a log axis that labels each decade."""
    page = browser_page
    folder = stack.dir / "sweeps" / "e2e_stop"
    shutil.rmtree(folder, ignore_errors=True)  # a kept stack: start the sweep anew
    first = finished_run(stack, "e2e_sweep_stop")
    before = _trial_records(folder)
    assert sorted(r["state"] for r in before.values()) == [
        "failed",
        "pruned",
        "pruned",
        "succeeded",
        "succeeded",
        "succeeded",
    ], before
    best = json.loads((folder / "best.json").read_text())

    (folder / "SLOW").touch()  # the re-run's trials wait until the stop comes
    try:
        second = stack.trigger("e2e_sweep_stop", force_rerun=True)

        def running() -> bool:
            out = stack.gpusched("queue", "list", "--sweep", "e2e_stop", "--json", "--no-slurm")
            return out.returncode == 0 and any(e["state"] == "running" for e in json.loads(out.stdout)["entries"])

        wait_until(running, timeout=120, what="the forced re-run's trials running")
        stop = stack.gpusched("queue", "stop", "--sweep", "e2e_stop", "--reason", "the GPUs are needed")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert stack.wait_run("e2e_sweep_stop", second, timeout=300) == "failed"
    finally:
        (folder / "SLOW").unlink()
        stack.gpusched("queue", "lift", "--sweep", "e2e_stop")
    after = _trial_records(folder)
    interrupted = {name for name, r in after.items() if "interrupted" in r}
    assert interrupted, "the stop found no trial of the re-run running"
    for name, record in after.items():  # every outcome of the first run stands; the re-runs it stopped say so
        note = record.pop("interrupted", None)
        assert record == before[name], name
        if note:
            assert note["state"] == "stopped" and "the GPUs are needed" in note["reason"], note
    assert json.loads((folder / "best.json").read_text()) == best

    open_page(stack, page, f"/dags/e2e_sweep_stop/plugin/gpusched-sweeps?run_id={second}", "[data-testid=counts]")
    counts = page.locator("[data-testid=counts]").inner_text()
    found = {k: re.search(rf"{k} (\d+)", counts) for k in ("stopped", "not started")}
    assert all(found.values()), counts
    stopped, not_started = (int(found[k].group(1)) for k in ("stopped", "not started"))
    assert stopped == len(interrupted) and stopped + not_started == 6 and not_started > 0, counts
    assert "succeeded 0" in counts and "failed 0" in counts and "0 from earlier runs" in counts, counts
    assert page.locator("[data-testid=best]").count() == 0  # the stopped run established no result
    assert page.locator("[data-testid=no-score]").inner_text().startswith("This run was stopped before any")
    assert "ran again in a later DAG run" not in page.locator("[data-testid=sweep-e2e_stop]").inner_text()
    assert "started by this run and stopped" in page.locator("[data-count=stopped]").get_attribute("title")
    shot(page, "sweeps-stopped-rerun")
    # the GPU timeline marks the leases the stop ended, and its key says how
    open_page(stack, page, "/plugin/gpusched-timeline?hours=0.5", "[data-testid=plot-timeline]")
    assert "stopped by gpusched queue stop" in page.locator("[data-testid=timeline-key]").inner_text()
    wait_chart(page, "plot-timeline")
    stopped_bars = [b for b in items(page, "plot-timeline", 1) if b["outcome"] == "stopped"]
    assert len(stopped_bars) >= len(interrupted), len(stopped_bars)
    shot(page, "timeline-stopped")

    open_page(stack, page, f"/dags/e2e_sweep_stop/plugin/gpusched-sweeps?run_id={first}", "[data-testid=plot-parallel]")
    assert page.locator("[data-testid=plot-parallel]").get_attribute("data-lines") == "3"  # the scored trials
    counts = page.locator("[data-testid=counts]").inner_text()
    assert "succeeded 3" in counts and "pruned 2" in counts and "failed 1" in counts, counts
    assert page.locator("[data-testid=best]").inner_text().startswith("Best: loss = 1")
    problems = page.locator("[data-testid=problems] tbody tr").all_inner_texts()
    assert len(problems) == 1 and "exit code 1: ValueError: q=7 is not allowed" in problems[0], problems
    page.wait_for_selector("[data-testid=importance]", timeout=60_000)
    importance = page.locator("[data-testid=importance]").inner_text()
    assert "3 scored trial(s): importance needs at least 8" in importance, importance
    assert "the 2 pruned trial(s) have no final score" in importance, importance
    wait_chart(page, "plot-parallel")
    lr_ticks = next(a["labels"] for a in chart(page, "plot-parallel")["parallel"] if a["name"] == "lr (log)")
    # the scored trials' lr spans 1e-4..0.01: each decade labelled, 0.001 included
    assert [t for t in lr_ticks if t] == ["1e-4", "0.001", "0.01"], lr_ticks
    assert_plots_drawn(page)
    shot_at(page, "plot-parallel", "sweeps-parallel-log-axis")
    shot_at(page, "problems", "sweeps-failed-error-line")

    third = stack.trigger("e2e_sweep_stop")  # plain: only the failed trial runs again (and fails again)
    assert stack.wait_run("e2e_sweep_stop", third, timeout=300) == "success"
    open_page(stack, page, f"/dags/e2e_sweep_stop/plugin/gpusched-sweeps?run_id={third}", "[data-testid=counts]")
    counts = page.locator("[data-testid=counts]").inner_text()
    assert "5 from earlier runs" in counts and "succeeded 3" in counts and "pruned 2" in counts, counts
    assert "failed 1" in counts and "not started" not in counts and "stopped" not in counts, counts


def test_slurm_job_tab_shows_array_tasks_state_and_output(stack, browser_page):
    page = browser_page
    run_id = finished_run(stack, "gpusched_slurm_array")
    open_page(
        stack,
        page,
        f"/dags/gpusched_slurm_array/runs/{run_id}/tasks/seeds/plugin/gpusched-slurm-job",
        "[data-field=state]",
    )
    assert page.locator("[data-field=state]").inner_text().startswith("COMPLETED")
    assert page.locator("[data-field=node]").inner_text() != "–"
    assert page.locator("[data-testid=array-tasks] tbody tr").count() == 4
    assert page.locator("[data-testid=output-tail]").inner_text().startswith("seed 0 on GPU")
    page.select_option("[data-testid=tail-task]", "3")
    assert page.locator("[data-testid=output-tail]").inner_text().startswith("seed 3 on GPU")
    shots_light_and_dark(page, "slurm-job")


def _ten_thousand_trial_view() -> dict:
    """The Sweeps API's answer for one 10,000-trial random search (three parameters, one categorical), built by the
    same code the api-server runs (core/sweep/results/view.py) from the records such a sweep publishes."""
    from airflow_provider_gpusched.core.sweep.results.view import build_sweep_view

    plans, outcomes = _ten_thousand_trial_records()
    view = build_sweep_view(plans, outcomes, {})
    view["group"] = "big"
    return {
        "dag_id": "gpusched_sweep_grid",
        "run_id": "manual__big",
        "runs": ["manual__big"],
        "sweeps": [view],
        "problems": [],
    }


def _ten_thousand_trial_records():
    """The plan and outcomes a 10,000-trial random search publishes."""
    import random

    from airflow_provider_gpusched.core.sweep.results.view import read_plan_record

    rnd = random.Random(3)
    n = 10_000
    trials = [
        {
            "index": i,
            "trial_id": f"{i:012x}",
            "label": f"lr={10 ** rnd.uniform(-5, -1):.3g}",
            "params": {"lr": 10 ** rnd.uniform(-5, -1), "wd": rnd.uniform(0, 0.1), "opt": rnd.choice(["sgd", "adam"])},
        }
        for i in range(n)
    ]
    plan = read_plan_record(
        {
            "sweep": "big",
            "search": "random",
            "round": None,
            "backend": "local",
            "trial_task": "big.run_batch",
            "chunk_size": 5000,
            "run": "manual__big",
            "objective": {"metric": "acc", "mode": "maximize"},
            "defined": n,
            "trials": trials,
            "pending": [t["trial_id"] for t in trials],
            "skipped": [],
            "log_params": ["lr"],
        },
        "plan",
    )
    outcomes = {
        t["trial_id"]: {
            "trial_id": t["trial_id"],
            "state": "succeeded",
            "seconds": 1.0,
            "error": None,
            "result": {"acc": 0.9 - abs(t["params"]["wd"] - 0.03) - rnd.uniform(0, 0.2)},
        }
        for t in trials
    }
    return [plan], outcomes


def _ten_thousand_trial_importance() -> dict:
    """What the importance endpoint answers for that sweep: core/sweep/results/analysis.py over all 10,000 trials."""
    from airflow_provider_gpusched.core.sweep.results.analysis import param_importance
    from airflow_provider_gpusched.core.sweep.results.view import param_axes, scored_points, sweep_objective, trial_rows

    plans, outcomes = _ten_thousand_trial_records()
    objective = sweep_objective(plans)
    t0 = time.monotonic()
    points, values, categories = scored_points(trial_rows(plans, outcomes, {}), objective)
    found = param_importance(points, param_axes(plans, values, categories), objective)
    print(f"importance of 10,000 trials ({found['method']}): {time.monotonic() - t0:.2f}s")
    return found


def test_the_sweeps_tab_of_a_10000_trial_sweep_renders_in_under_3_seconds_and_stays_readable(stack, browser_page):
    """The page as the api-server serves it, with the API's answer for a 10,000-trial sweep put in its place (the
    answer built by the api-server's own code): under 2 MB, drawn in under 3 s, the plots readable."""
    import json

    page = browser_page
    body = json.dumps(_ten_thousand_trial_view())
    assert len(body) < 2_000_000, len(body)
    answered: list[tuple[float, float]] = []
    # the page's main-thread CPU time (Chrome's own counter, in thread ticks): what the page costs, which another
    # process busy on the same cores does not inflate as it does the wall-clock time
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable", {"timeDomain": "threadTicks"})

    def main_thread_s() -> float:
        return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")

    def answer(route) -> None:
        answered.append((time.monotonic(), main_thread_s()))
        route.fulfill(status=200, content_type="application/json", body=body)

    importance = json.dumps(_ten_thousand_trial_importance())
    with api_answers(
        page,
        {
            "**/gpusched/api/dags/gpusched_sweep_grid/sweeps*": answer,
            "**/gpusched/api/dags/gpusched_sweep_grid/sweeps/importance*": importance,
        },
    ):
        page.goto(f"{stack.url}/dags/gpusched_sweep_grid/plugin/gpusched-sweeps?run_id=manual__big")
        wait_chart(page, "plot-progress")
        page.wait_for_selector("[data-testid=leaderboard] tbody tr", timeout=60_000)
        page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")  # painted
        # from the API's answer to the page drawn (the Airflow UI around it loads first and is not ours)
        seconds = time.monotonic() - answered[0][0]
        cpu = main_thread_s() - answered[0][1]
        print(
            f"10,000-trial Sweeps page: {len(body) / 1e6:.2f} MB answer, drawn {seconds:.2f} s after it arrived "
            f"({cpu:.2f} s of the page's main thread)"
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "sweeps-10000-trials.json").write_text(
            json.dumps({"answer_bytes": len(body), "drawn_s": seconds, "main_thread_s": cpu})
        )
        # the wall-clock figure is recorded (target 3 s, docs/benchmarks.md) but not asserted: on two cores shared
        # with the rest of the suite it varied from 1.5 to 10.1 s. The page's own main-thread CPU time varies far
        # less (1.8 s with the other core busy, 2026-11-28): more than 5 s is a page grown 3-fold slower. A page that
        # draws every trial again is caught by the counts below (2,000 circles, a few parallel-coordinate bands).
        assert 0 < cpu < 5.0, cpu
        counts = page.locator("[data-testid=counts]").inner_text()
        assert "defined 10000" in counts and "succeeded 10000" in counts
        assert "show 2,000 of 10,000 scored trials" in page.locator("[data-testid=points-note]").inner_text()
        assert page.locator("[data-testid=plot-progress]").get_attribute("data-points") == "2000"
        # the best-so-far line counts every trial (the server's line over all 10,000)
        assert int(page.locator("[data-testid=plot-progress]").get_attribute("data-line")) >= 2
        assert page.locator("[data-testid=leaderboard] tbody tr").count() == 20
        lr = [t for t in chart(page, "plot-lr")["x"] if t]
        assert lr[:2] == ["1e-5", "1e-4"], lr  # loguniform: log axis
        wd = chart(page, "plot-wd")["x"]  # uniform(0, 0.1): linear, though its draws reach 1e-6
        assert page.locator("[data-testid=plot-wd]").get_attribute("data-xscale") == "linear"
        assert wd[0] == "0" and wd[-1] == "0.1" and "0.04" in wd, wd
        # parallel coordinates draw the plots' 2,000 trials; the importance ranks all 10,000 (wd drives the score)
        assert page.locator("[data-testid=plot-parallel]").get_attribute("data-lines") == "2000"
        page.wait_for_selector("[data-testid=plot-importance]", timeout=60_000)
        assert page.locator("[data-testid=plot-importance]").get_attribute("data-first") == "wd"
        assert "from all 10,000 scored trials" in page.locator("[data-testid=importance]").inner_text()
        assert_plots_drawn(page)
        shot(page, "sweeps-10000-trials")


def _pbt_view(tmp_path) -> dict:
    """The Sweeps API's answer for a PBT sweep that ran for real (tests/core/test_pbt.py's toy training: 4 members,
    3 generations of 2 steps, through the local backend), built by the api-server's own code from the plans and
    outcomes such a sweep publishes (the plan and trial tasks' own record builders), its lineage and its trials'
    reports."""
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports
    from airflow_provider_gpusched.core.sweep.results.view import (
        build_sweep_view,
        outcome_records,
        plan_record,
        report_paths,
    )
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep
    from airflow_provider_gpusched.core.sweep.searches.pbt import read_lineage
    from tests.core.test_pbt import manager, spec

    run = "manual__pbt"
    run_sweep(spec(tmp_path), manager=manager(tmp_path), progress=False, run=run)
    lineage, why = read_lineage(str(tmp_path / "pbt"))
    assert why == "", why
    session = SweepSession(spec(tmp_path), str(tmp_path))
    plans, outcomes = [], {}
    for g, manifest in enumerate(session.manifests(run)):
        trials = manifest.trials
        plans.append(
            plan_record(
                "pbt",
                "pbt",
                g,
                session.spec.objective,
                "local",
                f"pbt.round_{g}.trial",
                None,
                trials,
                trials,
                session.store,
                [],
                run,
                curve_metric="score",
                log_params=["lr"],
            )
        )
        outcomes.update(
            (o["trial_id"], o) for o in outcome_records(session.store, trials, run, manifest.record.planned_at)
        )
    assert len(plans) == 3 and len(outcomes) == 12
    paths = report_paths(plans)
    view = build_sweep_view(plans, outcomes, {}, reports=lambda t: read_reports(paths[t])[0], lineage=lineage)
    view["group"] = "pbt"
    return {"dag_id": "gpusched_sweep_grid", "run_id": run, "runs": [run], "sweeps": [view], "problems": []}


def test_the_sweeps_tab_draws_a_pbt_population_its_exploits_and_each_members_schedule(stack, browser_page, tmp_path):
    """Issue 56, item 3: a PBT sweep's Sweeps tab draws each member's curve over steps in its colour, each exploit
    as a marker with a dashed line from the donor (its title says who copied whom, at which step, with which values),
    and the members' hyper-parameter schedules, generation by generation."""
    answer = _pbt_view(tmp_path)
    population = answer["sweeps"][0]["population"]
    page = browser_page
    with api_answers(page, {"**/gpusched/api/dags/gpusched_sweep_grid/sweeps*": json.dumps(answer)}):
        page.goto(f"{stack.url}/dags/gpusched_sweep_grid/plugin/gpusched-sweeps?run_id=manual__pbt")
        wait_chart(page, "plot-population")
        # a line per member and generation (each generation trains 2 steps), a marker per exploit
        assert page.locator("[data-testid=plot-population]").get_attribute("data-segments") == str(4 * 3)
        series = chart(page, "plot-population")["series"]
        exploits = items(page, "plot-population", len(series) - 1)
        assert series[-1]["name"] == "exploits" and len(exploits) == len(population["exploits"]) == 2
        first = population["exploits"][0]
        title = exploits[0]["title"]
        assert (
            f"member {first['member']} went on from member {first['from_member']}'s checkpoint at step {first['step']}"
            in title
        )
        assert "lr=" in title and "→" in title
        schedule = page.locator("[data-testid=population-schedule] tbody tr")
        assert schedule.count() == 4
        row = schedule.nth(first["member"]).inner_text()
        assert f"→ {first['from_member']}" in row and "lr=" in row
        assert "4 members, 2 exploit(s)" in page.locator("[data-testid=population-section]").inner_text()
        # the legend's exploit key is the triangle the plot marks exploits with
        legend = page.locator("[data-testid=legend-population] [data-shape=triangle]")
        assert legend.count() == 1 and "exploit" in legend.inner_text()
        assert_plots_drawn(page)
        shot_at(page, "population-section", "sweeps-pbt-population")


def test_the_gpu_board_stays_readable_with_64_gpus_on_8_hosts(stack, browser_page):
    """The board page with the API's answer for 8 hosts of 8 GPUs, 40 of them leased (built by the api-server's own
    code, core/board.py): every host and GPU listed, nothing cut off or overlapping."""
    import json

    from airflow_provider_gpusched.core.board import build_board, lease_record, read_lease_record
    from airflow_provider_gpusched.core.gpu.inventory import GPUInfo

    now = time.time()
    leases = []
    for h in range(8):
        inventory = [
            GPUInfo(
                index=i,
                uuid=f"GPU-SIM-{h}-{i}",
                name="NVIDIA A100-SXM4-80GB",
                memory_total=80 * 2**30,
                memory_used=0,
                simulated=True,
            )
            for i in range(8)
        ]
        for i in range(5):  # five leases per host: whole GPUs and 20 GiB slices
            whole = i % 2 == 0
            record = lease_record(
                f"gpu-host-{h}.lab.example",
                {
                    "lease_id": f"{h:02d}{i:02d}" + "0" * 12,
                    "gpus": [i],
                    "memory": {i: (80 if whole else 20) * 2**30},
                    "whole": whole,
                    "job_class": "idle" if i == 4 else "normal",
                    "priority": 0,
                    "created": now - 600 * i,
                },
                inventory,
                dag_id="nas_evolution",
                run_id="scheduled__2026-11-26",
                task_id="round_3.trial",
                map_index=h * 8 + i,
            )
            leases.append(read_lease_record(record, "test"))
    board = build_board(leases, now=now)
    board["api_server_host"] = "gpu-host-0.lab.example"
    body = json.dumps(board)
    page = browser_page
    with api_answers(page, {"**/gpusched/api/gpus": body}):
        open_page(stack, page, "/plugin/gpusched-gpus", "[data-testid=gpu-board]")
        page.wait_for_function("document.querySelectorAll('[data-testid=lease]').length >= 40", timeout=60_000)
        text = page.locator("[data-testid=gpu-board]").inner_text()
        assert all(f"gpu-host-{h}.lab.example" in text for h in range(8))
        assert page.locator("[data-testid=gpus] tbody tr").count() == 64
        # the overview: every host on one line, one square per GPU, the whole fleet within the first screen
        overview = page.locator("[data-testid=fleet-overview]")
        assert overview.inner_text().startswith("8 hosts, 64 GPUs, 40 leased")
        assert page.locator("[data-testid=fleet-hosts] tbody tr").count() == 8
        assert page.locator("[data-testid=gpu-tile]").count() == 64
        assert "taken whole or full" in page.locator("[data-testid=tile-key]").inner_text()
        box = overview.bounding_box()
        assert box["y"] + box["height"] < 1000, box  # the viewport's height
        clipped = page.evaluate("""() => [...document.querySelectorAll('[data-testid=gpu-board] td')]
            .filter((td) => td.scrollWidth > td.clientWidth + 1).map((td) => td.textContent)""")
        assert clipped == [], clipped[:5]
        shot(page, "gpu-board-64-gpus-8-hosts")


def leases(bars: list[dict]) -> int:
    """The leases a set of timeline bars stands for (a bar of merged short leases counts each)."""
    return sum(b["count"] for b in bars)


def bars_to(page, part: str) -> list[dict]:
    """The timeline's bars that link to an address containing ``part``."""
    return [b for b in items(page, "plot-timeline", 1) if b["href"] and part in b["href"]]


#: where the last bar linking to an address containing the argument is drawn, in the page's pixels (its middle)
BAR_AT = """(part) => {
  const c = globalThis.gpuschedCharts['plot-timeline'];
  const data = c.getOption().series[1].data;
  const k = data.map((b, i) => [b, i]).filter(([b]) => (b.href || '').includes(part)).pop()[1];
  const [start, end, top] = data[k].value;
  const [x0, y] = c.convertToPixel({ gridIndex: 0 }, [start, top]);
  const [x1] = c.convertToPixel({ gridIndex: 0 }, [end, top]);
  const r = c.getDom().getBoundingClientRect();
  return { x: r.left + (x0 + x1) / 2, y: r.top + y + 7 };
}"""


def test_the_gpu_timeline_shows_each_lease_with_its_preemptions_and_oom_retries(stack, browser_page, out_dir):
    """Real work on the deployed stack: idle fillers preempted by normal work, and a task whose first attempt runs
    out of GPU memory. The timeline draws a bar per lease on its GPU's row, coloured by class, marks each
    preemption and OOM, and links each bar to its task instance."""
    page = browser_page
    began = time.time()
    for dag_id in ("e2e_oom_retry", "e2e_idle_fillers", "e2e_normal"):
        stack.wait_for_dag(dag_id)
    oom = stack.trigger("e2e_oom_retry")
    fill = stack.trigger("e2e_idle_fillers", out=str(out_dir), seconds=12)
    wait_until(
        lambda: sum(ti["state"] == "running" for ti in stack.task_instances("e2e_idle_fillers", fill)) >= 4,
        timeout=300,
        what="4 fillers holding every GPU",
    )
    time.sleep(3)  # the fillers' children start and hold their GPUs
    normal = stack.trigger("e2e_normal", out=str(out_dir), seconds=3)
    for dag_id, run_id in (("e2e_oom_retry", oom), ("e2e_normal", normal), ("e2e_idle_fillers", fill)):
        assert stack.wait_run(dag_id, run_id, timeout=420) == "success", dag_id
    preemptions = sum(
        stack.xcom("e2e_idle_fillers", fill, "filler", key="gpu_time", map_index=i)["preemptions"] for i in range(6)
    )
    assert preemptions >= 1

    # a window from just before these runs (?hours= takes any length; the server offers 1 h to 3 d)
    def window() -> str:
        return f"/plugin/gpusched-timeline?hours={(time.time() - began + 20) / 3600:.4f}"

    open_page(stack, page, window(), "[data-testid=plot-timeline]")
    wait_chart(page, "plot-timeline")
    outcomes = {b["outcome"] for b in items(page, "plot-timeline", 1)}
    assert {"preempted", "oom"} <= outcomes, outcomes
    assert int(page.locator("[data-testid=plot-timeline]").get_attribute("data-rows")) >= 4  # this host's 4 GPUs
    # the address's window is offered beside the server's (1 h to 3 d) and pressed
    assert re.fullmatch(
        r"[\d.]+ min", page.locator("[data-testid=timeline-window] button[aria-pressed=true]").inner_text()
    )
    fillers = bars_to(page, f"/dags/e2e_idle_fillers/runs/{fill}/")
    assert leases(fillers) == 6 + preemptions  # each filler's last attempt, and one per preempted attempt
    assert sum(b["outcome"] == "preempted" for b in fillers) == preemptions
    assert {b["cls"] for b in fillers} == {"idle"}
    trains = bars_to(page, f"/dags/e2e_normal/runs/{normal}/tasks/train")
    assert leases(trains) == 4  # a 4-GPU lease: one bar on each GPU's row
    oom_bars = sorted(bars_to(page, f"/dags/e2e_oom_retry/runs/{oom}/"), key=lambda b: b["value"][0])
    assert [b["outcome"] for b in oom_bars] == ["oom", "succeeded"]
    assert "GPU out of memory with 2.0GiB on 1 GPU" in oom_bars[0]["title"]
    counts = page.locator("[data-testid=timeline-counts]").inner_text()
    assert re.search(r"[1-9]\d* preempted", counts) and re.search(r"[1-9]\d* out of GPU memory", counts), counts
    assert "idle class" in page.locator("[data-testid=timeline-key]").inner_text()
    assert_plots_drawn(page)
    shots_light_and_dark(page, "gpu-timeline")
    page.click("[data-testid=timeline-window] button:has-text('1 d')")
    page.wait_for_function(
        "document.querySelector('[data-testid=timeline-window] button[aria-pressed=true]').textContent === '1 d'",
        timeout=30_000,
    )
    page.wait_for_function(
        f"(globalThis.gpuschedCharts['plot-timeline'].getOption().series[1].data || [])"
        f".some((b) => (b.href || '').includes({json.dumps(f'/runs/{oom}/')}))",
        timeout=30_000,
    )
    assert_plots_drawn(page)
    open_page(stack, page, window(), "[data-testid=plot-timeline]")
    wait_chart(page, "plot-timeline")
    # a bar links to its task: a click on the OOM retry's last bar, where ECharts drew it
    page.locator("[data-testid=plot-timeline]").scroll_into_view_if_needed()
    at = page.evaluate(BAR_AT, f"/runs/{oom}/")
    page.mouse.click(at["x"], at["y"])
    page.wait_for_url(re.compile(rf".*/dags/e2e_oom_retry/runs/{re.escape(oom)}/tasks/train.*"), timeout=30_000)


def test_a_day_of_10000_leases_on_16_gpus_draws_a_few_thousand_bars(stack, browser_page):
    """The timeline API's answer for a day of 10,000 one-minute leases on 2 hosts of 8 GPUs (built by the
    api-server's own code, core/gpu/timeline.py): short leases merge per class, preemptions stay marks, the answer
    is small and the page readable."""
    import json
    import random

    from airflow_provider_gpusched.core.gpu.timeline import build_timeline

    rnd = random.Random(1)
    now = time.time()
    segments = []
    for k in range(10_000):
        start = now - 86400 + rnd.uniform(0, 86400 - 60)
        outcome = rnd.choices(["succeeded", "failed", "preempted", "oom"], [96, 2, 1.5, 0.5])[0]
        segments.append(
            {
                "host": f"gpu-host-{k % 2}.lab.example",
                "gpus": [k // 2 % 8],
                "start": start,
                "end": start + rnd.uniform(20, 60),
                "job_class": rnd.choice(["normal", "idle", "high"]),
                "outcome": outcome,
                "detail": "",
                "request": "1 GPU",
                "label": f"trial {k}",
                "dag_id": "nas_evolution",
                "run_id": "scheduled__2026-11-25",
                "task_id": "round_3.trial",
                "map_index": k,
            }
        )
    timeline = build_timeline(segments, since=now - 86400, until=now)
    timeline["hours"] = 24
    body = json.dumps(timeline)
    assert len(body) < 1_000_000, len(body)
    page = browser_page
    with api_answers(page, {"**/gpusched/api/timeline*": body}):
        t0 = time.monotonic()
        open_page(stack, page, "/plugin/gpusched-timeline?hours=24", "[data-testid=plot-timeline]")
        wait_chart(page, "plot-timeline")
        page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")  # painted
        drawn = int(page.locator("[data-testid=plot-timeline]").get_attribute("data-bars"))
        print(
            f"timeline of 10,000 leases in a day: {len(body) / 1e6:.2f} MB answer, {timeline['bars']} bars, "
            f"page open {time.monotonic() - t0:.1f}s"
        )
        assert drawn == timeline["bars"] < 4000  # one per run of short leases (a visible gap apart), and the marks
        assert page.locator("[data-testid=plot-timeline]").get_attribute("data-rows") == "16"
        marks = timeline["counts"]["preempted"] + timeline["counts"]["oom"]
        assert int(page.locator("[data-testid=plot-timeline]").get_attribute("data-marks")) == marks > 0
        assert "10000 lease(s) in the window" in page.locator("[data-testid=timeline-counts]").inner_text()
        assert_plots_drawn(page)
        shot(page, "gpu-timeline-10000-leases")
