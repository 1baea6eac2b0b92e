"""Benchmark: Slurm CLI calls needed to track many concurrent jobs.

Submits N short jobs to the Slurm cluster named by SLURM_CONF (default: the project's test cluster,
started with scripts/slurm-cluster.sh up) twice and tracks them to the end:

  shared   one SharedJobPoller for all N waiters (what SlurmJobTrigger does in a triggerer), through the CLI and
           through the cluster's slurmrestd (the REST transport: one GET jobs per poll)
  per-job  every waiter polls its own job with its own client (one squeue per job per interval)

and prints the calls each design made (CLI commands, or REST requests), in total and per poll interval.

    .venv/bin/python bench/slurm_tracking.py [--jobs 200] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import pwd
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from airflow_provider_gpusched.core.slurm import (
    JobTracker,
    PollProblem,
    SharedJobPoller,
    SlurmClient,
    SlurmJobSpec,
    SlurmTransport,
    client_for,
)
from airflow_provider_gpusched.core.slurm.rest import SlurmRestTransport

REPO = Path(__file__).resolve().parents[1]


def submit(client: SlurmClient, n: int, out_dir: str) -> list[str]:
    return [
        client.submit(
            SlurmJobSpec(command=f"sleep {1 + i % 3}", cpus_per_task=1, output=os.path.join(out_dir, "%j.out"))
        ).job_id
        for i in range(n)
    ]


async def follow(source, job_id: str, interval: float) -> None:
    tracker = JobTracker(job_id)
    async for update in source.watch(job_id, poll_interval=interval):
        if isinstance(update, PollProblem):
            continue
        tracker.update(update)
        if tracker.done:
            return


async def shared_design(conf: str, jobs: list[str], interval: float) -> tuple[Counter, int]:
    poller = SharedJobPoller.shared(f"bench-{time.time()}", lambda: SlurmClient(SlurmTransport(slurm_conf=conf)))
    await asyncio.gather(*(follow(poller, j, interval) for j in jobs))
    return poller.client.runner.calls, poller.polls


def rest_transport(conf: str) -> SlurmRestTransport:
    """The test cluster's slurmrestd (scripts/slurm-cluster.sh writes its URL beside the config), with a fresh token."""
    url = (Path(conf).parents[1] / "rest-url").read_text().strip()
    user = pwd.getpwuid(os.geteuid()).pw_name
    env = {**os.environ, "SLURM_CONF": conf}
    token = subprocess.run(
        ["scontrol", "token", f"username={user}", "lifespan=3600"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    return SlurmRestTransport(
        url=url, user=user, token=token.split("=", 1)[1], environment={"PATH": os.environ["PATH"], "SLURM_CONF": conf}
    )


async def shared_rest_design(conf: str, jobs: list[str], interval: float) -> tuple[Counter, int]:
    transport = rest_transport(conf)
    poller = SharedJobPoller.shared(f"bench-rest-{time.time()}", lambda: client_for(transport))
    await asyncio.gather(*(follow(poller, j, interval) for j in jobs))
    return poller.client.runner.calls, poller.polls


async def per_job_design(conf: str, jobs: list[str], interval: float) -> tuple[Counter, int]:
    calls: Counter = Counter()
    intervals = 0

    async def one(job_id: str) -> None:
        nonlocal intervals
        client = SlurmClient(SlurmTransport(slurm_conf=conf))
        tracker = JobTracker(job_id)
        while not tracker.done:
            status = await asyncio.to_thread(client.status, job_id)
            tracker.update(status)
            if not tracker.done:
                await asyncio.sleep(interval)
        calls.update(client.runner.calls)

    start = time.monotonic()
    await asyncio.gather(*(one(j) for j in jobs))
    intervals = max(1, round((time.monotonic() - start) / interval))
    return calls, intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    conf = os.environ.get("SLURM_CONF") or str(REPO / ".slurm" / "etc" / "slurm.conf")
    client = SlurmClient(SlurmTransport(slurm_conf=conf))
    print(f"# slurm tracking benchmark: {args.jobs} concurrent jobs, poll interval {args.interval}s")
    print(f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), SLURM_CONF={conf}")
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        for name, design in (
            ("shared poller", shared_design),
            ("shared, REST", shared_rest_design),
            ("one poll per job", per_job_design),
        ):
            jobs = submit(client, args.jobs, out_dir)
            start = time.monotonic()
            calls, polls = asyncio.run(design(conf, jobs, args.interval))
            elapsed = time.monotonic() - start
            total = sum(v for k, v in calls.items())
            rows.append((name, total, calls, polls, elapsed))
    print(
        f"{'design':<18} {'calls':>9} {'status':>7} {'other':>6} {'intervals':>9} {'calls/interval':>14} {'wall s':>7}"
    )
    for name, total, calls, polls, elapsed in rows:
        status = calls["squeue"] + calls["GET jobs"]
        print(
            f"{name:<18} {total:>9} {status:>7} {total - status:>6} {polls:>9} {total / polls:>14.1f} {elapsed:>7.1f}"
        )
    shared, _rest, naive = rows
    print(
        f"per-job polling made {naive[1] / shared[1]:.0f}x the CLI calls of the shared poller "
        f"({naive[1] / naive[3]:.0f} vs {shared[1] / shared[3]:.1f} per interval)"
    )


if __name__ == "__main__":
    main()
