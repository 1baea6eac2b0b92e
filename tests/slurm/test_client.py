"""SlurmClient against the project's real Slurm test cluster (two nodes), through the CLI and through slurmrestd."""

import json
import subprocess
import time

import pytest

from airflow_provider_gpusched.core.slurm import JobPhase, SlurmCommandError, SlurmJobSpec
from tests.polling import wait_until

from .conftest import REPO, over_every_transport, scontrol

pytestmark = [pytest.mark.slurm, over_every_transport]


def test_success_and_arguments_arrive_verbatim(client, tmp_path):
    args = ["a b", "it's", 'say "hi"', "x;y", "$HOME", "`id`", "*"]
    job = client.submit(
        SlurmJobSpec(
            command=["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args],
            job_name="verbatim; echo pwned",
            output=str(tmp_path / "verbatim-%j.out"),
        )
    )
    status = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED and status.exit_code == 0
    assert status.name == "verbatim; echo pwned"
    printed = (tmp_path / f"verbatim-{job.job_id}.out").read_text().strip().splitlines()[-1]
    assert json.loads(printed) == args


def test_nonzero_exit_code_and_output_tail(client, out):
    path = out("fail")
    job = client.submit(SlurmJobSpec(command="echo preparing; echo 'something broke' >&2; exit 3", output=path))
    status = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.FAILED
    assert status.exit_code == 3
    tail = client.tail(path.replace("%j", job.job_id), 5)
    assert "preparing" in tail and "something broke" in tail


def test_cancel(client, out):
    job = client.submit(SlurmJobSpec(command="sleep 300", output=out()))
    wait_until(lambda: client.status(job.job_id).phase is JobPhase.RUNNING, what="job running")
    client.cancel([job.job_id])
    status = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.CANCELLED
    assert "cancelled" in status.describe() and "exit code 0" not in status.describe()
    client.cancel(["999999"])  # unknown ids are not an error


def test_time_limit(client, out):
    job = client.submit(SlurmJobSpec(command="sleep 600", time_limit=1, output=out()))
    status = client.wait(job.job_id, poll_interval=2, timeout=200)
    assert status.phase is JobPhase.TIMEOUT
    assert status.describe().startswith(f"job {job.job_id} TIMEOUT (reached its time limit")
    assert "exit code 0" not in status.describe()


def test_array_with_per_task_states(client, tmp_path):
    job = client.submit(
        SlurmJobSpec(
            command="sleep 1; exit $(( SLURM_ARRAY_TASK_ID == 2 ? 4 : 0 ))",
            array="0-3%2",
            output=str(tmp_path / "arr-%A_%a.out"),
        )
    )
    status = client.wait(job.job_id, poll_interval=0.5, timeout=120, array_size=4)
    assert sorted(status.tasks) == [f"{job.job_id}_{i}" for i in range(4)]
    assert status.tasks[f"{job.job_id}_2"].phase is JobPhase.FAILED
    assert status.tasks[f"{job.job_id}_2"].exit_code == 4
    assert all(status.tasks[f"{job.job_id}_{i}"].phase is JobPhase.SUCCEEDED for i in (0, 1, 3))
    assert status.phase is JobPhase.FAILED and "1 of 4" in status.reason
    for i in range(4):
        assert (tmp_path / f"arr-{job.job_id}_{i}.out").exists()


def test_gres_gpus_are_visible_to_the_job(client, tmp_path):
    job = client.submit(
        SlurmJobSpec(command='echo "CVD=$CUDA_VISIBLE_DEVICES"', gpus=2, output=str(tmp_path / "gres-%j.out"))
    )
    assert client.wait(job.job_id, poll_interval=0.5, timeout=60).phase is JobPhase.SUCCEEDED
    line = (tmp_path / f"gres-{job.job_id}.out").read_text().strip()
    devices = line.split("=", 1)[1].split(",")
    assert len(devices) == 2 and len(set(devices)) == 2


def test_unknown_partition_gives_a_clear_error(client, out):
    with pytest.raises(SlurmCommandError) as err:
        client.submit(SlurmJobSpec(command="true", partition="no-such-partition", output=out()))
    message = str(err.value)
    assert "Slurm rejected the job" in message
    assert "invalid partition" in message.lower()
    assert "--partition=no-such-partition" in message


def test_idle_job_is_preempted_requeued_and_completes(client, slurm_cluster, tmp_path):
    # the idle job fills every GPU of the cluster (both nodes); a normal job on one node preempts it
    idle = client.submit(
        SlurmJobSpec(
            command="echo start; sleep 4; echo done",
            partition="idle",
            nodes=2,
            gpus_per_node=4,
            requeue=True,
            output=str(tmp_path / "idle-%j.out"),
        )
    )
    wait_until(lambda: client.status(idle.job_id).phase is JobPhase.RUNNING, what="idle job running")
    normal = client.submit(
        SlurmJobSpec(command="sleep 2", partition="batch", gpus=4, output=str(tmp_path / "batch-%j.out"))
    )
    requeued = wait_until(
        lambda: (s := client.status(idle.job_id)).restarts >= 1 and s, timeout=60, what="idle job requeued"
    )
    assert not requeued.is_terminal
    assert client.wait(normal.job_id, poll_interval=0.5, timeout=60).phase is JobPhase.SUCCEEDED
    # Slurm holds a requeued job back (cred_expire + 1 s); release it now as an operator would, but not within the
    # second of the requeue: a node refuses a credential made in the same second as the old one's revocation
    time.sleep(3)
    wait_until(
        lambda: scontrol(slurm_cluster, "update", f"JobId={idle.job_id}", "StartTime=now").returncode == 0,
        what="release requeued job",
    )
    final = client.wait(idle.job_id, poll_interval=0.5, timeout=120)
    assert final.phase is JobPhase.SUCCEEDED and final.restarts >= 1
    text = (tmp_path / f"idle-{idle.job_id}.out").read_text()
    assert text.count("start") == 2 and "done" in text  # --open-mode=append kept the first run's output


def test_status_survives_slurmctld_restart(client, out):
    jobs = [client.submit(SlurmJobSpec(command="sleep 6", output=out())).job_id for _ in range(3)]
    wait_until(lambda: all(s.phase is JobPhase.RUNNING for s in client.statuses(jobs).values()), what="running")
    restart = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "restart-ctld", "3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        finals = [client.wait(j, poll_interval=0.5, timeout=120) for j in jobs]
    finally:
        assert restart.wait(timeout=120) == 0
    assert [f.phase for f in finals] == [JobPhase.SUCCEEDED] * 3


def test_many_jobs_cost_one_squeue_call(client, out):
    jobs = [client.submit(SlurmJobSpec(command="true", output=out())).job_id for _ in range(20)]
    before = client.runner.calls[client.status_call]
    statuses = client.statuses(jobs)
    assert client.runner.calls[client.status_call] - before == 1
    assert set(statuses) == set(jobs)


def test_partition_gpus_counts_gres_of_the_partition(client):
    assert client.partition_gpus("idle") == 8 and client.partition_gpus("batch") == 8  # 2 nodes x 4 GPUs
    assert client.partition_gpus() == 8  # the default partition
