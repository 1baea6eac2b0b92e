"""Slurm through a login host: a real sshd on 127.0.0.1 in front of the test cluster."""

import time

import pytest

from airflow_provider_gpusched.core.slurm import JobPhase, SlurmClient, SlurmJobSpec, SSHTransport
from tests.polling import wait_until

from ..conftest import free_port

pytestmark = pytest.mark.slurm


@pytest.fixture
def ssh_client(login_host, slurm_cluster):
    port, options = login_host
    return SlurmClient(
        SSHTransport(host="127.0.0.1", user="root", port=port, ssh_options=options, slurm_conf=slurm_cluster)
    )


def test_submit_track_tail_and_cancel_through_ssh(ssh_client, tmp_path):
    args = ["a b", "it's", 'say "hi"', "x;y", "$HOME", "`id`", "*", "--flag=1 2"]
    out = str(tmp_path / "ssh-%j.out")
    job = ssh_client.submit(
        SlurmJobSpec(
            command=["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:])); sys.exit(3)", *args],
            job_name="over ssh; echo pwned",
            environment={"NOTE": "it's a 'test'; ok"},
            output=out,
        )
    )
    status = ssh_client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert (status.phase, status.exit_code, status.name) == (JobPhase.FAILED, 3, "over ssh; echo pwned")
    import json

    assert json.loads(ssh_client.tail(out.replace("%j", job.job_id), 1)) == args
    assert ssh_client.runner.calls["sbatch"] == 1

    long = ssh_client.submit(SlurmJobSpec(command="sleep 300", output=out)).job_id
    wait_until(lambda: ssh_client.status(long).phase is JobPhase.RUNNING, what="running")
    ssh_client.cancel([long])
    assert ssh_client.wait(long, poll_interval=0.5, timeout=60).phase is JobPhase.CANCELLED
    assert ssh_client.runner.calls["tail"] >= 1  # completion records were read over ssh


def test_unreachable_login_host_is_a_transient_error(slurm_cluster):
    from airflow_provider_gpusched.core.slurm import SlurmUnavailableError

    client = SlurmClient(
        SSHTransport(
            host="127.0.0.1", port=free_port(), ssh_options=["-o", "ConnectTimeout=3"], slurm_conf=slurm_cluster
        )
    )
    with pytest.raises(SlurmUnavailableError):
        client.squeue(["1"])


def test_a_running_jobs_output_is_followed_over_ssh_while_it_runs(ssh_client, tmp_path):
    """The lines a job writes reach the follower through the login host before the job ends, in order, each once;
    the path (spaces, quotes, ';') reaches the remote reader verbatim."""
    from airflow_provider_gpusched.core.slurm.output import OutputFollower

    out = str(tmp_path / "it's a job; %j.out")
    go = tmp_path / "go"  # the job prints only once the follower has had its first look (from the file's start)
    job = ssh_client.submit(
        SlurmJobSpec(
            command=[
                "python3",
                "-u",
                "-c",
                "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.1)\n"
                "for i in range(12):\n    print('tick', i)\n    time.sleep(0.5)",
                str(go),
            ],
            output=out,
        )
    ).job_id
    follower = OutputFollower(out.replace("%j", job), ssh_client.runner, max_bytes=20)
    assert follower.read() == []  # nothing written yet: followed from the first byte, however slow the machine
    go.touch()
    seen, while_running = [], []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        phase = ssh_client.status(job).phase
        got = follower.read()
        seen += got
        if phase is JobPhase.RUNNING:
            while_running += got
        if phase.is_terminal:
            break
        time.sleep(0.3)
    while len(seen) < 12 and time.monotonic() < deadline:  # at most 20 bytes a read: it catches up
        seen += follower.read()
    assert seen == [f"tick {i}" for i in range(12)]
    assert while_running, "no line arrived while the job ran"
