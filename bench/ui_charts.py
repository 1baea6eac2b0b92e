"""The chart libraries the UI could use, measured on the UI's two heaviest plots (issue 60): plotly.js (optuna-dashboard's
choice), ECharts, uPlot and Vega-Lite draw the 10,000-trial Sweeps progress plot (a score on a log axis and a
best-so-far line) and a day of 10,000 leases on 64 GPUs (the timeline), each in headless Chromium (Debian's), on the
same data; a zoom to a tenth of the x range is then timed too. Bundle size: each library's own minified browser build,
and gzip'd. One command:

    python bench/ui_charts.py [--repeat 5]

It installs the libraries with npm into bench/ui_charts/node_modules (its own lock file), serves the folder on
loopback and prints a table (medians over the repeats, each in a fresh page)."""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ui_charts")
LIBS = {
    "plotly.js": ("plotly", ["plotly.js-dist-min/plotly.min.js"]),
    "ECharts": ("echarts", ["echarts/dist/echarts.min.js"]),
    "uPlot": ("uplot", ["uplot/dist/uPlot.iife.min.js"]),
    "Vega-Lite": (
        "vegalite",
        ["vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js", "vega-embed/build/vega-embed.min.js"],
    ),
}
# what each offers for the pages' interactions without code of ours (their documentation)
INTERACTION = {
    "plotly.js": "hover, zoom, box/lasso select, parcoords with brushing (WebGL)",
    "ECharts": "hover, zoom (dataZoom), brush, parallel axes with brushing, custom series",
    "uPlot": "hover cursor, drag-zoom; no parallel axes, no brushing of other plots",
    "Vega-Lite": "hover, interval selections (brush), zoom bound to scales; parallel axes by hand (fold)",
}


def version(pkg: str) -> str:
    import json

    with open(os.path.join(HERE, "node_modules", pkg, "package.json")) as f:
        return json.load(f)["version"]


def sizes(files: list[str]) -> tuple[int, int]:
    raw = zipped = 0
    for rel in files:
        with open(os.path.join(HERE, "node_modules", rel), "rb") as f:
            data = f.read()
        raw += len(data)
        zipped += len(gzip.compress(data, 9))
    return raw, zipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(HERE, "node_modules")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=HERE)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for name, (key, files) in LIBS.items():
            scripts = "".join(f'<script src="node_modules/{f}"></script>' for f in files)
            css = '<link rel="stylesheet" href="node_modules/uplot/dist/uPlot.min.css">' if key == "uplot" else ""
            page_html = (
                f"<!doctype html><html><head>{css}{scripts}</head><body><div id=chart></div>"
                '<script type="module">import "./harness.js"; window.ready = true;</script></body></html>'
            )
            with open(os.path.join(HERE, f"page-{key}.html"), "w") as f:
                f.write(page_html)
            result = {}
            for which in ("sweep", "timeline"):
                draws, zooms = [], []
                for _ in range(args.repeat):
                    page = browser.new_page(viewport={"width": 1000, "height": 600})
                    page.goto(f"{base}/page-{key}.html")
                    page.wait_for_function("window.ready === true")
                    try:
                        m = page.evaluate("([l, w]) => measure(l, w)", [key, which])
                        draws.append(m["draw_ms"])
                        zooms.append(m["zoom_ms"])
                    except Exception as exc:  # noqa: BLE001 - said in the table
                        result[f"{which}_error"] = str(exc).splitlines()[0][:80]
                    page.close()
                result[which] = (
                    statistics.median(draws) if draws else None,
                    statistics.median(zooms) if zooms else None,
                )
            raw, zipped = sizes(files)
            rows.append((name, version(files[0].split("/")[0]), raw, zipped, result))
        browser.close()
    server.shutdown()
    print(
        f"# chart libraries, {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, Chromium headless,"
        f" median of {args.repeat}"
    )
    print(
        f"{'library':<11} {'version':<8} {'min KB':>7} {'gzip KB':>8} {'sweep draw':>11} {'zoom':>7} {'timeline draw':>14} {'zoom':>7}"
    )
    fmt = lambda v: "-" if v is None else f"{v:.0f} ms"  # noqa: E731
    for name, ver, raw, zipped, r in rows:
        print(
            f"{name:<11} {ver:<8} {raw / 1024:>7.0f} {zipped / 1024:>8.0f} {fmt(r['sweep'][0]):>11} {fmt(r['sweep'][1]):>7} "
            f"{fmt(r['timeline'][0]):>14} {fmt(r['timeline'][1]):>7}"
        )
        for k in ("sweep_error", "timeline_error"):
            if k in r:
                print(f"  {name} {k}: {r[k]}")
    print("interaction (what each offers without code of ours):")
    for name, text in INTERACTION.items():
        print(f"  {name}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
