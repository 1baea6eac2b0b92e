"""`gpusched queue` on the real test cluster (through the CLI and slurmrestd): the provider's jobs found by their
comment in one squeue (or GET jobs) call, their
work tags read back, stop marks and cancellation, and the health checks of partitions and preemption."""

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_gpusched.core.health import FAIL, OK
from airflow_provider_gpusched.core.queue import list_work, stop_work
from airflow_provider_gpusched.core.slurm import SlurmJobSpec
from airflow_provider_gpusched.core.slurm.health import check_slurm
from airflow_provider_gpusched.core.slurm.job import MAX_COMMENT, job_comment
from airflow_provider_gpusched.core.stops import Selector, StopRequest, read_slurm_stop_mark
from airflow_provider_gpusched.core.work_tag import WorkTag

from .conftest import REPO, over_every_transport

pytestmark = pytest.mark.slurm


def submit(client, tmp_path, tag, run="manual__2026-11-23T10:00:00+00:00"):
    folder = tmp_path / tag.task_id
    folder.mkdir(mode=0o700)
    comment = job_comment("k" * 24, 1, task="t" * 16, work="w" * 16, run=run, tag=tag)
    job = client.submit(
        SlurmJobSpec(
            command="sleep 120",
            job_name=f"{tag.dag_id}.{tag.task_id}",
            output=str(folder / "%j.out"),
            comment=comment,
            partition="batch",
        )
    )
    return job.job_id, str(folder / "%j.out")


@over_every_transport
def test_provider_jobs_are_listed_with_their_tags_and_stopped_with_a_mark(client, tmp_path):
    odd = WorkTag(
        dag_id="hpo",
        run_id="x",
        task_id="sweep.trial",
        map_index=7,
        try_number=1,
        sweep='lr sweep: it\'s "big"; =1',
        job_class="idle",
    )
    mine, output = submit(client, tmp_path, odd)
    other = WorkTag(dag_id="other", task_id="train", job_class="normal")
    theirs, _ = submit(client, tmp_path, other)
    foreign = client.submit(SlurmJobSpec(command="sleep 120", comment="not ours", output=str(tmp_path / "f-%j.out")))
    try:
        listing = list_work(client=client)
        found = {e.id: e for e in listing.entries}
        assert foreign.job_id not in found and {mine, theirs} <= set(found)
        entry = found[mine]
        assert entry.tag.sweep == odd.sweep and entry.tag.map_index == 7 and entry.tag.job_class == "idle"
        assert entry.tag.run_id == "manual__2026-11-23T10:00:00+00:00" and entry.tag.task == "hpo.sweep.trial[7]"
        assert entry.job_name == "hpo.sweep.trial" and entry.output == output
        chosen = [e for e in listing.entries if Selector(sweep=odd.sweep).matches(e)]
        assert [e.id for e in chosen] == [mine]
        request = StopRequest.now("make room")
        [outcome] = stop_work(chosen, request, client=client)
        assert outcome.action == "cancelled" and outcome.detail == "scancel", outcome
        client.wait(mine, poll_interval=0.5, timeout=30)
        assert client.status(mine).state == "CANCELLED" and not client.status(theirs).phase.is_terminal
        mark = read_slurm_stop_mark(output.replace("%j", mine), mine)
        assert mark == request and "make room" in mark.describe()
    finally:
        client.cancel([mine, theirs, foreign.job_id])


@over_every_transport
def test_the_comment_stays_within_what_sbatch_takes(client, tmp_path):
    long = WorkTag(dag_id="d" * 250, run_id="r", task_id="t" * 250, map_index=3, sweep="s é" * 80, job_class="normal")
    comment = job_comment("k" * 24, 2, task="t" * 16, work="w" * 16, run="r" * 290, tag=long)
    assert len(comment) <= MAX_COMMENT and ":try=2" in comment and ":run=" in comment
    job_id, _ = submit(client, tmp_path, long, run="r" * 290)  # sbatch refuses comments over ~1,020 characters
    try:
        [entry] = [e for e in list_work(client=client).entries if e.id == job_id]
        assert entry.tag.run_id == "r" * 250 and entry.tag.dag_id == "d" * 250  # what did not fit is left out
    finally:
        client.cancel([job_id])


@over_every_transport
def test_health_of_the_test_cluster(client):
    checks = {
        c.name: c
        for c in check_slurm(client, {"normal": {"partition": "batch"}, "idle": {"partition": "idle"}}, "test cluster")
    }
    assert all(c.status == OK for c in checks.values()), checks
    assert "PriorityTier 1 < 'batch' 10" in checks["idle work preemptible"].detail
    checks = {
        c.name: c
        for c in check_slurm(
            client, {"normal": {"partition": "gpu-large"}, "idle": {"partition": "batch", "qos": "scavenger"}}, "x"
        )
    }
    assert (
        checks["normal class partition"].status == FAIL
        and "'gpu-large' is not a partition" in checks["normal class partition"].detail
    )
    assert checks["idle work preemptible"].status == "skip"  # its partition is missing: said above
    assert checks["QOS"].status == "warn"  # the test cluster keeps no accounting database: QOS cannot be listed
    checks = {
        c.name: c for c in check_slurm(client, {"normal": {"partition": "idle"}, "idle": {"partition": "batch"}}, "x")
    }
    assert (
        checks["idle work preemptible"].status == FAIL and "PreemptMode=OFF" in checks["idle work preemptible"].detail
    )


def test_queue_health_command_on_the_cluster(slurm_cluster, tmp_path):
    env = {
        **os.environ,
        "SLURM_CONF": slurm_cluster,
        "AIRFLOW__GPUSCHED__JOB_CLASSES": json.dumps({"idle": {"slurm": {"partition": "idle"}}}),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.cli",
            "queue",
            "health",
            "--no-airflow",
            "--simulate",
            "2x16GiB",
            "--state-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[  ok] slurm reachable: the local Slurm commands: partitions batch, idle" in out.stdout
    assert "[  ok] idle work preemptible: preempt/partition_prio" in out.stdout
