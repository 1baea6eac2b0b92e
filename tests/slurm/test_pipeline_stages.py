"""A partitioned pipeline as one Slurm job on the real multi-node test cluster: each stage a job step on the node
the plan names, with its neighbours' addresses; one stage failing stops the others and fails the job, naming it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.partition.stages import launch_command, stage_plan
from airflow_provider_gpusched.core.slurm import SlurmJobSpec

pytestmark = pytest.mark.slurm

REPORT = r"""
import os, socket, sys, time
stage = os.environ["GPUSCHED_STAGE"]
print(f"stage {stage} runs on {os.environ['SLURMD_NODENAME']} (host {socket.gethostname()}), prev "
      f"{os.environ['GPUSCHED_STAGE_PREV_ADDR'] or '-'}, next {os.environ['GPUSCHED_STAGE_NEXT_ADDR'] or '-'}, "
      f"args {sys.argv[1:]}", flush=True)
if stage == os.environ.get("FAIL_STAGE"):
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", "0")))
"""


def test_each_stage_runs_as_a_step_on_its_node_with_its_neighbours(client, out):
    stages = [{"host": "n2", "layers": [1, 4]}, {"host": "n1", "layers": [5, 8]}]
    plan = stage_plan(stages, base_port=29800)
    odd = "a b;'c\"$HOME"
    spec = SlurmJobSpec(
        command=launch_command(plan, [sys.executable, "-c", REPORT, odd], pinned=True),
        nodes=2,
        nodelist=["n1", "n2"],
        output=out("stages"),
    )
    job_id = client.submit(spec).job_id
    final = client.wait(job_id, poll_interval=0.5, timeout=120)
    text = Path(spec.output.replace("%j", job_id)).read_text()
    assert final.state == "COMPLETED", text
    assert f"[stage 1 on n2] stage 1 runs on n2 (host n2), prev -, next n1:29801, args {[odd]}" in text
    assert f"[stage 2 on n1] stage 2 runs on n1 (host n1), prev n2:29800, next -, args {[odd]}" in text
    assert "gpusched stages: all 2 stages finished" in text


def test_one_stage_failing_stops_the_others_and_fails_the_job_naming_it(client, out):
    stages = [{"host": "n1", "layers": [1, 3]}, {"host": "n2", "layers": [4, 6]}]
    spec = SlurmJobSpec(
        command=launch_command(stage_plan(stages), [sys.executable, "-c", REPORT], pinned=True),
        nodes=2,
        nodelist=["n1", "n2"],
        output=out("fail"),
        environment={"FAIL_STAGE": "2", "SLEEP": "300"},
    )
    started = time.monotonic()
    job_id = client.submit(spec).job_id
    final = client.wait(job_id, poll_interval=0.5, timeout=200)
    text = Path(spec.output.replace("%j", job_id)).read_text()
    assert final.state == "FAILED" and final.exit_code == 3, (final, text)
    assert time.monotonic() - started < 150, "stage 1 (sleeping 300 s) was not stopped"
    assert (
        "gpusched stages: stage 2 of 2 (host n2, layers 4-6) failed with exit status 3; the other stages were stopped"
    ) in text


def test_unpinned_stages_all_run_on_the_jobs_node_addressed_by_its_name(client, out):
    stages = [
        {"host": "mb-0", "layers": [1, 2]},
        {"host": "rcc-0", "layers": [3, 3]},
        {"host": "mb-1", "layers": [4, 9]},
    ]
    spec = SlurmJobSpec(
        command=launch_command(stage_plan(stages, base_port=29900), [sys.executable, "-c", REPORT], pinned=False),
        nodes=1,
        output=out("unpinned"),
    )
    job_id = client.submit(spec).job_id
    final = client.wait(job_id, poll_interval=0.5, timeout=120)
    text = Path(spec.output.replace("%j", job_id)).read_text()
    assert final.state == "COMPLETED", text
    node = next(n for n in ("n1", "n2") if f"[stage 1 on {n}]" in text)
    assert f"[stage 2 on {node}] stage 2 runs on {node} (host {node}), prev {node}:29900, next {node}:29902" in text
