"""The committed bundle in Debian's headless Chromium, without Airflow: ui/tests/browser/harness.ts (built here with
esbuild from ui/node_modules) gives it the globals the Airflow UI gives a plugin and answers its API with
ui/tests/hostile.ts — every DAG, run and task id, host, class and group name, sweep parameter and choice value, metric
name, label, error and Slurm job field carrying markup that sets ``window.__xss``. Each page is rendered, its sweep
opened as a user would (compare runs, a trial's output), and every tooltip of every chart hovered with the mouse
(ECharts' showTip for a line's points, which a mouse shows only on the line): no markup becomes an element, no
script runs, and the tooltips show the hostile text as text (issue 77, item 1; the jsdom version: ui/tests/xss.test.tsx).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.ui.test_frontend import BUNDLE, node

pytestmark = pytest.mark.heavy  # Chromium and an esbuild bundle of React and Chakra UI: several seconds of CPU

CHROMIUM = "/usr/bin/chromium"
#: each page's screenshot on the hostile answers, to look at (as tests/stack/test_ui.py keeps the real pages')
SHOTS = (
    Path(os.environ.get("GPUSCHED_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")) / "ui-hostile"
)
ORIGIN = "http://gpusched.test"
PAGE = '<!doctype html><html><head><meta charset="utf-8"></head><body><div id="root"></div><script src="/harness.js"></script></body></html>'
MARKER = "<img src=x onerror=window.__xss=1>"  # ui/tests/hostile.ts PAYLOADS[0]

# where each chart's items are on the screen: a point of each item the mouse can rest on (a scatter's points, a
# parallel line's first segment, a bar, a timeline bar); and ECharts' own showTip for every other item (a line's
# points show on the line only)
POINTS = """(id) => {
  const chart = globalThis.gpuschedCharts[id];
  const box = chart.getDom().getBoundingClientRect();
  const model = chart.getModel();
  const out = [];
  model.eachSeries((series) => {
    const data = series.getData();
    for (let j = 0; j < data.count(); j++) {
      const el = data.getItemGraphicEl(j);
      if (!el || series.subType === 'line') {
        chart.dispatchAction({ type: 'showTip', seriesIndex: series.componentIndex, dataIndex: j });
        continue;
      }
      let x, y;
      const pts = el.shape && el.shape.points;
      if (pts && pts.length > 1 && series.subType === 'parallel') {
        [x, y] = [(pts[0][0] + pts[1][0]) / 2, (pts[0][1] + pts[1][1]) / 2];
      } else {
        const leaf = el.isGroup ? el.childAt(0) : el;
        const r = leaf.getBoundingRect().clone();
        r.applyTransform(leaf.getComputedTransform());
        [x, y] = [r.x + r.width / 2, r.y + r.height / 2];
      }
      out.push([box.left + x, box.top + y]);
    }
  });
  return out;
}"""


def _harness(tmp_path) -> bytes:
    out = tmp_path / "harness.js"
    build = (
        'require("esbuild").buildSync({entryPoints: ["tests/browser/harness.ts"], bundle: true, format: "iife", '
        f'outfile: {json.dumps(str(out))}, define: {{"process.env.NODE_ENV": "\\"production\\""}}, logLevel: "error"}})'
    )
    run = node("-e", build)
    assert run.returncode == 0, run.stderr[-3000:]
    return out.read_bytes()


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _open(page, name: str, ready: str) -> None:
    page.goto(f"{ORIGIN}/?page={name.replace(' ', '%20')}")
    page.wait_for_function("window.__ready === true")
    page.wait_for_selector(f"[data-testid='{ready}']", timeout=30_000)
    _all_drawn(page)


def _all_drawn(page) -> None:
    """every chart on the page drawn (ECharts is set up in an effect, just after its div is on the page)"""
    page.wait_for_function(
        "[...document.querySelectorAll('[data-echart]')].every((d) => d.hasAttribute('_echarts_instance_'))",
        timeout=30_000,
    )


def _hover_every_chart(page) -> int:
    """every chart's every item hovered (or shown by showTip); how many the mouse rested on"""
    _all_drawn(page)
    moved = 0
    for chart in page.evaluate("Object.keys(globalThis.gpuschedCharts || {})"):
        page.evaluate("(id) => globalThis.gpuschedCharts[id].getDom().scrollIntoView({block: 'center'})", chart)
        for x, y in page.evaluate(POINTS, chart):
            page.mouse.move(x, y)
            moved += 1
        page.mouse.move(1, 1)
    return moved


def _nothing_ran(page, what: str) -> list[str]:
    markup = page.evaluate("window.__markup")
    assert markup == [], f"{what}: markup from the API became elements: {markup[:3]}"
    assert page.evaluate("window.__xss") is None, f"{what}: a script from the API ran"
    assert page.locator("img, iframe, svg[onload]").count() == 0
    return page.evaluate("window.__tooltips")


def test_hostile_names_and_values_are_text_on_every_page_in_chromium(tmp_path):
    if not os.path.exists(CHROMIUM) or shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (scripts/test.sh installs Debian's package)")
    from playwright.sync_api import sync_playwright

    files = {
        "/": (PAGE.encode(), "text/html"),
        "/harness.js": (_harness(tmp_path), "text/javascript"),
        "/gpusched/static/gpusched.js": (Path(BUNDLE).read_bytes(), "text/javascript"),
    }

    def serve(route):
        path = "/" + route.request.url.removeprefix(ORIGIN).lstrip("/").split("?")[0]
        body, kind = files.get(path, (b"not found", "text/plain"))
        route.fulfill(status=200 if path in files else 404, body=body, content_type=kind)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.route("**/*", serve)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            _open(page, "Sweeps", "plot-population")
            page.wait_for_selector("[data-testid=plot-importance]", timeout=30_000)
            card = page.locator("[data-testid^='sweep-demo']")
            card.locator("[data-testid=compare-run]").select_option(index=1)
            page.wait_for_selector("[data-testid=plot-compare]", timeout=30_000)
            card.locator("[data-testid=pick-trial]").first.click()
            page.wait_for_selector("[data-testid=trial-log]", timeout=30_000)
            assert _hover_every_chart(page) > 40
            tips = _nothing_ran(page, "Sweeps")
            # the tooltips were shown, hostile text in them as text: the exploit's (choice values), a point's, a line's
            assert any("went on from" in t and MARKER in t for t in tips), tips[-5:]
            assert any(t.startswith("trial ") and MARKER in t for t in tips), tips[-5:]
            assert MARKER in page.locator("[data-testid=trial-panel]").inner_text()
            _shot(page, "sweeps")

            _open(page, "GPU timeline", "plot-timeline")
            assert _hover_every_chart(page) >= 4
            tips = _nothing_ran(page, "GPU timeline")
            assert any("› " in t and MARKER in t for t in tips), tips[-5:]
            _shot(page, "gpu-timeline")

            _open(page, "GPU board", "gpu-board")
            page.locator("[data-testid=gpu-tile]").first.hover()
            _hover_every_chart(page)
            _nothing_ran(page, "GPU board")
            assert MARKER in page.locator("[data-testid=lease]").first.inner_text()
            _shot(page, "gpu-board")

            _open(page, "Slurm job", "output-tail")
            _nothing_ran(page, "Slurm job")
            assert MARKER in page.locator("[data-testid=slurm-job]").inner_text()
            _shot(page, "slurm-job")
            assert errors == [], errors
        finally:
            browser.close()
