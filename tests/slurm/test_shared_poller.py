"""The shared poller: many waiters, one squeue call per poll interval, Slurm outages retried."""

import asyncio
import subprocess

import pytest

from airflow_provider_gpusched.core.slurm import (
    JobPhase,
    JobStatus,
    JobTracker,
    PollProblem,
    SharedJobPoller,
    SlurmClient,
    SlurmJobSpec,
    SlurmTransport,
    client_for,
)

from .conftest import REPO, over_every_transport

pytestmark = pytest.mark.slurm


async def _follow(poller, job_id, problems):
    tracker = JobTracker(job_id)
    async for update in poller.watch(job_id, poll_interval=0.5):
        if isinstance(update, PollProblem):
            problems.append(update)
            continue
        tracker.update(update)
        if tracker.done:
            return tracker.final_status()


@over_every_transport
def test_twenty_waiters_share_one_squeue_call_per_poll(transport, tmp_path):
    client = client_for(transport())
    jobs = [
        client.submit(SlurmJobSpec(command=f"sleep {1 + i % 3}", output=str(tmp_path / "p-%j.out"))).job_id
        for i in range(20)
    ]

    async def main():
        poller = SharedJobPoller.shared("test-share", lambda: client_for(transport()))
        problems: list = []
        finals = await asyncio.gather(*(_follow(poller, j, problems) for j in jobs))
        return poller, finals, problems

    poller, finals, problems = asyncio.run(main())
    assert [f.phase for f in finals] == [JobPhase.SUCCEEDED] * 20
    assert problems == []
    assert poller.polls >= 2
    calls = poller.client.runner.calls
    assert calls[poller.client.status_call] == poller.polls  # one squeue (GET jobs) per poll, not one per job
    assert sum(calls.values()) - calls[poller.client.status_call] <= 1  # and nothing else but 'show config', once


def test_poller_rides_out_a_slurmctld_restart(slurm_cluster, tmp_path):
    client = SlurmClient(SlurmTransport(slurm_conf=slurm_cluster))
    jobs = [client.submit(SlurmJobSpec(command="sleep 30", output=str(tmp_path / "r-%j.out"))).job_id for _ in range(2)]

    async def main():
        poller = SharedJobPoller.shared("test-restart", lambda: SlurmClient(SlurmTransport(slurm_conf=slurm_cluster)))
        problems: list = []
        restart = await asyncio.create_subprocess_exec(
            "bash",
            str(REPO / "scripts" / "slurm-cluster.sh"),
            "restart-ctld",
            "35",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        finals = await asyncio.gather(*(_follow(poller, j, problems) for j in jobs))
        assert await restart.wait() == 0
        return finals, problems

    finals, problems = asyncio.run(main())
    assert [f.phase for f in finals] == [JobPhase.SUCCEEDED] * 2
    # squeue itself waits a while for slurmctld to come back; a 35 s outage makes some polls fail
    assert problems, "the outage should have been noticed"
    assert all(p.transient for p in problems)
    assert all(isinstance(f, JobStatus) for f in finals)
