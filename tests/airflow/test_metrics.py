"""gpusched's metrics through Airflow's own StatsD support, received by a real UDP socket."""

from __future__ import annotations

import re
import threading
import time

import pytest

from airflow_provider_gpusched import metrics
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUProcess
from airflow_provider_gpusched.core.gpu.telemetry import sample_gpus


def test_gpu_samples_reach_statsd_as_gauges_per_host_and_gpu(statsd):
    gpus = [
        GPUInfo(0, "u0", "GPU", 24 << 30, 5 << 30, 93, [GPUProcess(7, 5 << 30)], temperature=70),
        GPUInfo(1, "u1", "GPU", 24 << 30, 0, 0, [], temperature=35),
    ]
    metrics.emit_gpu_samples("gpu-box.lab", sample_gpus(gpus, {"a" * 16: {7}}, user_of=lambda pid: ""))
    lines = statsd()
    assert "airflow.gpusched.gpus.gpu-box_lab:2|g" in lines
    assert "airflow.gpusched.gpus_in_use.gpu-box_lab:1|g" in lines
    assert "airflow.gpusched.gpu_utilization.gpu-box_lab.0:93|g" in lines
    assert f"airflow.gpusched.gpu_memory_used.gpu-box_lab.0:{5 << 30}|g" in lines
    assert "airflow.gpusched.gpu_temperature.gpu-box_lab.1:35|g" in lines


def test_events_reach_statsd_as_counters_and_timings(statsd):
    metrics.preemption("idle", "h1")
    metrics.oom_retry("normal", "h1")
    metrics.gpu_wait(2.5, "normal", "h1")
    metrics.slurm_jobs({("gpu", "pending"): 3, ("debug q", "running"): 1})
    metrics.trial_finished("lr.sweep", "pruned")
    lines = statsd()
    assert "airflow.gpusched.preemptions.idle:1|c" in lines
    assert "airflow.gpusched.oom_retries.normal:1|c" in lines
    assert any(re.fullmatch(r"airflow\.gpusched\.gpu_wait\.normal:2500(\.0+)?\|ms", line) for line in lines), lines
    assert "airflow.gpusched.slurm_jobs.gpu.pending:3|g" in lines
    assert "airflow.gpusched.slurm_jobs.debug_q.running:1|g" in lines
    assert "airflow.gpusched.sweep_trials.lr_sweep.pruned:1|c" in lines


def test_the_documented_exporter_mapping_and_dashboard_cover_every_metric(statsd, tmp_path):
    """docs/grafana: every metric gpusched sends is named by exactly one statsd_exporter mapping, and every series
    the Grafana dashboard queries is one a mapping makes."""
    import json

    import yaml

    from .conftest import REPO

    gpus = [GPUInfo(0, "u0", "GPU", 24 << 30, 1 << 30, 50, [], temperature=40)]
    metrics.emit_gpu_samples("gpu-a", sample_gpus(gpus, {}, user_of=lambda pid: ""))
    metrics.preemption("idle", "gpu-a")
    metrics.oom_retry("normal", "gpu-a")
    metrics.gpu_wait(1.0, "normal", "gpu-a")
    metrics.slurm_jobs({("batch", "running"): 1})
    metrics.trial_finished("grid", "succeeded")
    from airflow_provider_gpusched.core.quota.book import QuotaBook
    from airflow_provider_gpusched.core.quota.config import QuotaConfig

    metrics.emit_quotas(QuotaBook(str(tmp_path / "quota"), QuotaConfig.from_dict({"groups": {"vision": 2}})), 4.0)
    metrics.quota_reclaim("vision", "gpu-a")
    # Airflow's own metrics may come too (airflow.serde.load_serializers, when something loads its serializers)
    names = {line.split(":")[0] for line in statsd() if line.startswith("airflow.gpusched.")}
    assert len(names) >= 21
    mappings = yaml.safe_load((REPO / "docs" / "grafana" / "statsd-mapping.yml").read_text())["mappings"]
    globs = [(re.compile("^" + re.escape(m["match"]).replace(r"\*", "[^.]+") + "$"), m["name"]) for m in mappings]
    made = set()
    for name in names:
        hits = [prom for rx, prom in globs if rx.match(name)]
        assert len(hits) == 1, (name, hits)
        made.add(hits[0])
    dashboard = json.loads((REPO / "docs" / "grafana" / "gpusched.json").read_text())
    queried = {
        m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"\bgpusched_[a-z_]+", t["expr"])
    }
    assert queried and all(q in made or q.removesuffix("_bucket") in made for q in queried), queried - made


@pytest.mark.slurm
def test_real_tasks_send_oom_retries_trials_and_slurm_job_counts(statsd, airflow_db, slurm_cluster):
    """dag.test in another process with [metrics] pointed at the listener: the task processes and the (inline)
    trigger send what happened."""
    import os

    from .conftest import REPO, dag_test_process, process_result

    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW__METRICS__")}
    proc = dag_test_process(REPO / "tests" / "airflow" / "dagfiles" / "t_metrics.py", "metrics_events", env)
    lines: list[str] = []
    done = threading.Event()

    def listen() -> None:  # while the DAG runs (its output is read by process_result: a full pipe would stall it)
        while not done.is_set():
            lines.extend(statsd(wait=0.5))

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        result = process_result(proc, "metrics_events", timeout=400)
    finally:
        time.sleep(1.0)
        done.set()
        listener.join(timeout=10)
    assert result["state"] == "success", result
    assert "airflow.gpusched.oom_retries.normal:1|c" in lines
    assert lines.count("airflow.gpusched.sweep_trials.metric_grid.succeeded:1|c") == 2
    slurm = [x for x in lines if x.startswith("airflow.gpusched.slurm_jobs.batch.")]
    assert any(x.endswith(":1|g") for x in slurm), slurm  # the job, pending or running, while it was watched


def test_long_names_stay_distinct_and_within_airflows_limits(statsd, monkeypatch, caplog):
    """Issue 53, item 8: names were cut at 80 characters (two sweeps shared one metric), and long tags under
    statsd_influxdb_enabled made Airflow log a traceback per call. Two sweeps whose names share 90 characters
    are two metrics, and each name with its tags passes Airflow's own validator."""
    import logging

    from airflow.sdk._shared.observability.metrics.validators import ALLOWED_CHARACTERS, stat_name_default_handler

    first, second = "s" * 90 + "_lr", "s" * 90 + "_wd"
    assert metrics.part(first) != metrics.part(second) and len(metrics.part(first)) == metrics.MAX_PART
    host = "gpu-node-" + "x" * 200 + ".cluster.example.org"
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    metrics._state["key"] = None
    with caplog.at_level(logging.ERROR):
        metrics.trial_finished(first, "succeeded")
        metrics.trial_finished(second, "succeeded")
        metrics.gpu_wait(1.0, "normal", host)
        lines = statsd()
    assert not [r for r in caplog.records if "Invalid stat name" in r.getMessage()], caplog.text
    names = [line.split(":")[0] for line in lines]
    trials = [n for n in names if ".sweep_trials." in n]
    assert len(set(trials)) == 2, lines
    for name in names:
        stat_name_default_handler(name, allowed_chars={*ALLOWED_CHARACTERS, ",", "="})  # raises if refused
    assert any(n.startswith("airflow.gpusched.gpu_wait.normal,") for n in names), names
