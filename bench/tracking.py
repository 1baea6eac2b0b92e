"""Benchmark: sending a sweep's trials to a real MLflow tracking server, next to MLflow's own client.

Starts ``mlflow server`` (SQLite backend, artifacts served; the tests' venv, scripts/mlflow-venv.sh), writes a sweep
folder of N trials with R reports each through the real trial store, and sends it three ways, each to its own
experiment:

  gpusched      the sweep's final sync (core/tracking/sync.py + the MLflow callback): a parent run, a child run per
                trial with its params, reports, result, state, output log and result file
  mlflow-batch  MLflow's client (in the server's venv), per trial: a nested run, log_batch of params and all its
                metrics at once, the result, two artifacts, end
  mlflow-tune   MLflow's client as Ray Tune's MLflowLoggerCallback uses it: a run per trial, log_params, one
                log_metrics call per report, log_artifacts, end

and prints each one's wall time, requests per trial and what the server holds afterwards (runs, metric points,
artifacts), the same for all three. Then what a trial's task pays when the server is down: gpusched's sync against
a port nobody listens on, next to one call of MLflow's client there (its default retries; cut at --down-limit s).
Last, the sync engine alone over a large sweep (--engine-trials, a callback that does nothing): what the sweep's
collect pays to find what is left to send.

    .venv/bin/python bench/tracking.py [--trials 200] [--reports 20] [--engine-trials 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PEER = r"""
import json, os, sys, time
from mlflow.tracking import MlflowClient
from mlflow.entities import Metric, Param
url, mode, folder, experiment = sys.argv[1:5]
trials = json.load(open(os.path.join(folder, "bench-trials.json")))
c = MlflowClient(url)
exp = c.create_experiment(experiment)
t0 = time.time()
parent = c.create_run(exp, run_name="sweep").info.run_id
for t in trials:
    tags = {"mlflow.parentRunId": parent} if mode == "batch" else {}
    run = c.create_run(exp, run_name=t["label"], tags=tags).info.run_id
    if mode == "batch":
        ms = [Metric(k, v, int(r["time"] * 1000), r["step"]) for r in t["reports"] for k, v in r["metrics"].items()]
        for i in range(0, max(len(ms), 1), 1000):
            c.log_batch(run, metrics=ms[i:i + 1000], params=[Param(k, str(v)) for k, v in t["params"].items()] if i == 0 else [])
    else:  # Ray Tune's MLflowLoggerCallback: params at the start, one log_metrics per result
        c.log_batch(run, params=[Param(k, str(v)) for k, v in t["params"].items()])
        for r in t["reports"]:
            c.log_batch(run, metrics=[Metric(k, v, int(r["time"] * 1000), r["step"]) for k, v in r["metrics"].items()])
    c.log_batch(run, metrics=[Metric(k, v, int(time.time() * 1000), t["reports"][-1]["step"]) for k, v in t["result"].items()])
    for path in t["files"]:
        c.log_artifact(run, path)
    c.set_terminated(run, "FINISHED")
c.set_terminated(parent, "FINISHED")
print(json.dumps({"seconds": time.time() - t0}))
"""

COUNT = r"""
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
exp = c.get_experiment_by_name(sys.argv[2])
runs = c.search_runs([exp.experiment_id], max_results=50000)
points = sum(len(c.get_metric_history(r.info.run_id, k)) for r in runs[:20] for k in r.data.metrics)
arts = sum(len(c.list_artifacts(r.info.run_id)) for r in runs[:20])
print(json.dumps({"runs": len(runs), "points_in_20_runs": points, "artifacts_in_20_runs": arts}))
"""

DOWN = r"""
import sys, time
from mlflow.tracking import MlflowClient
t0 = time.time()
try:
    MlflowClient(sys.argv[1]).create_experiment("x")
except Exception as exc:
    print(f"{time.time() - t0:.1f} s ({type(exc).__name__})")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(venv: Path, folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [str(venv / "bin" / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{folder / 'db.sqlite'}"]
        + ["--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
        + ["--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    raise SystemExit("mlflow server did not start")


def make_sweep(root: Path, trials: int, reports: int, name: str = "bench_trk"):
    from tests.tracking_helpers import FakeSweep

    sweep = FakeSweep(root, name=name, lrs=[round(0.001 * (i + 1), 6) for i in range(trials)])
    sweep.run_all(steps=reports)
    return sweep


def peer_input(sweep) -> None:
    """What the peer logs, read from the same folder: the same trials, reports, results and files."""
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports

    out = []
    for t in sweep.trials:
        folder = sweep.store.trial_dir(t)
        reports, _ = read_reports(os.path.join(folder, "reports.jsonl"))
        out.append(
            {
                "label": t.label,
                "params": dict(t.params),
                "reports": [{**r, "time": r.get("time") or time.time()} for r in reports],
                "result": {"acc": 0.7, "extra.flops": 10.0},
                "files": [os.path.join(folder, "output.log"), os.path.join(folder, "result.json")],
            }
        )
    Path(sweep.store.dir, "bench-trials.json").write_text(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--reports", type=int, default=20)
    ap.add_argument("--engine-trials", type=int, default=10_000)
    ap.add_argument("--down-limit", type=float, default=60.0)
    args = ap.parse_args()
    subprocess.run(["bash", str(REPO / "scripts" / "mlflow-venv.sh")], check=True)
    venv = REPO / ".venv-mlflow"
    from airflow_provider_gpusched.core.tracking import TrackingCallback, TrackingSync, parse_tracking

    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        proc, url = start_server(venv, tmp_path / "server")
        try:
            sweep = make_sweep(tmp_path / "sweeps", args.trials, args.reports)
            summary = sweep.summary()
            peer_input(sweep)
            print(f"{args.trials} trials x {args.reports} reports (2 metrics each) to mlflow server 3.17.2 at {url}")
            rows = []
            (config,) = parse_tracking([{"kind": "mlflow", "tracking_uri": url, "experiment": "gpusched"}])
            t0 = time.monotonic()
            out = TrackingSync(sweep.sweep_run(), [config.build(sweep.store.dir)], score=sweep.spec.objective.score)
            outcome = out.sync(final=True, summary=summary)
            rows.append(("gpusched", time.monotonic() - t0, outcome.describe()))
            for mode in ("batch", "tune"):
                done = subprocess.run(
                    [str(venv / "bin" / "python"), "-c", PEER, url, mode, sweep.store.dir, f"mlflow-{mode}"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rows.append((f"mlflow-{mode}", json.loads(done.stdout.strip().splitlines()[-1])["seconds"], ""))
            for name, seconds, note in rows:
                counted = subprocess.run(
                    [str(venv / "bin" / "python"), "-c", COUNT, url, name if name != "gpusched" else "gpusched"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                c = json.loads(counted.stdout.strip().splitlines()[-1])
                print(
                    f"  {name:13s} {seconds:7.2f} s  {seconds / args.trials * 1000:6.1f} ms/trial  runs {c['runs']}, "
                    f"metric points in 20 runs {c['points_in_20_runs']}, artifacts in 20 runs "
                    f"{c['artifacts_in_20_runs']}  {note}"
                )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        down = make_sweep(tmp_path / "down", 10, args.reports)
        (config,) = parse_tracking([{"kind": "mlflow", "tracking_uri": dead}])
        t0 = time.monotonic()
        TrackingSync(down.sweep_run(), [config.build(down.store.dir)], log=lambda s: None).sync()
        first = time.monotonic() - t0
        t0 = time.monotonic()
        TrackingSync(down.sweep_run(), [config.build(down.store.dir)], log=lambda s: None).sync()
        again = time.monotonic() - t0
        try:
            peer = subprocess.run(
                [str(venv / "bin" / "python"), "-c", DOWN, dead],
                capture_output=True,
                text=True,
                timeout=args.down_limit,
            ).stdout.strip()
        except subprocess.TimeoutExpired:
            peer = f"> {args.down_limit:.0f} s (still retrying; cut)"
        print(
            f"server down: a trial task's sync {first * 1000:.0f} ms (first try), {again * 1000:.1f} ms (within a "
            f"minute: not tried again); MLflow's client, one call with its default retries: {peer}"
        )

        class Nothing(TrackingCallback):
            name = "nothing"

        big = make_sweep(tmp_path / "big", args.engine_trials, 3, name="bench_engine")
        t0 = time.monotonic()
        TrackingSync(big.sweep_run(), [Nothing()]).sync(final=True)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        TrackingSync(big.sweep_run(), [Nothing()]).sync(final=True)
        again = time.monotonic() - t0
        print(
            f"sync engine over {args.engine_trials:,} trials x 3 reports (a callback that does nothing): "
            f"{first:.1f} s telling everything, {again:.1f} s finding nothing left"
        )


if __name__ == "__main__":
    main()
