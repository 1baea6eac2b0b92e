"""Benchmark: start-up time of distributed Slurm jobs, from submit until every rank is running.

Submits jobs to the cluster named by SLURM_CONF (default: the project's multi-node test cluster,
scripts/slurm-cluster.sh up) and records three instants per job: sbatch called, the batch script started (Slurm's
scheduling and launch), and the last rank started (the distributed start's own cost: srun over the nodes, or one
torchrun per node and its c10d rendezvous). Each rank is a Python process that writes the time it began. Shapes:

  plain           one task, no distributed start (what any Slurm job costs)
  bare srun 2x2   the reference for the srun start: `srun python ...` written in the script by hand
  srun 1x2, 2x2   one process per GPU, started by srun, on 1 and 2 nodes
  torchrun 1x2, 2x2  one torchrun per node (2 ranks each), on 1 and 2 nodes

    .venv/bin/python bench/multinode_startup.py [--repeat 5]

Prints the median (and min-max) of each phase per shape.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmJobSpec, SlurmTransport

REPO = Path(__file__).resolve().parents[1]
RANK = (
    "import os, sys, time; rank = os.environ.get('RANK', os.environ.get('SLURM_PROCID', '0')); "
    "open(os.path.join(sys.argv[1], 'rank-' + rank), 'w').write(repr(time.time()))"
)
#: (label, distributed, nodes); "bare srun" is the reference: srun in the script by hand, no gpusched start
SHAPES = [
    ("plain", None, 1),
    ("bare srun 2x2", "bare", 2),
    ("srun 1x2", "srun", 1),
    ("srun 2x2", "srun", 2),
    ("torchrun 1x2", "torchrun", 1),
    ("torchrun 2x2", "torchrun", 2),
]


def one_job(client: SlurmClient, mode: str | None, nodes: int, work: Path) -> tuple[float, float]:
    """(submit -> batch script, batch script -> last rank) in seconds."""
    folder = Path(tempfile.mkdtemp(dir=work))
    argv = [sys.executable, "-c", RANK, str(folder)]
    if mode == "bare":
        spec = SlurmJobSpec(
            command=["srun", *argv],
            nodes=nodes,
            ntasks_per_node=2,
            gpus_per_node=2,
            setup=[f"date +%s.%N > {folder}/batch"],
            output=str(folder / "%j.out"),
        )
    else:
        spec = SlurmJobSpec(
            command=argv,
            nodes=nodes,
            gpus_per_node=2 if mode else None,
            distributed=mode,
            torchrun=[sys.executable, "-m", "torch.distributed.run"],
            setup=[f"date +%s.%N > {folder}/batch"],
            output=str(folder / "%j.out"),
        )
    ranks = 2 * nodes if mode else 1
    submitted = time.time()
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.2, timeout=300)
    if not final.phase.is_success:
        raise SystemExit(
            f"job {job.job_id} ({mode}, {nodes} node(s)) ended {final.describe()}:\n"
            + next(folder.glob("*.out")).read_text()[-2000:]
        )
    starts = [float((folder / f"rank-{r}").read_text()) for r in range(ranks)]
    batch = float((folder / "batch").read_text())
    return batch - submitted, max(starts) - batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    conf = os.environ.get("SLURM_CONF") or str(REPO / ".slurm" / "etc" / "slurm.conf")
    client = SlurmClient(SlurmTransport(slurm_conf=conf))
    work = Path(tempfile.mkdtemp(prefix="gpusched-bench-startup-"))
    print(
        f"{time.strftime('%Y-%m-%d')}, {platform.node()} ({os.cpu_count()} cores), SLURM_CONF={conf}, "
        f"{args.repeat} job(s) per shape, one after another"
    )
    print("| shape | ranks | submit -> batch script | batch script -> all ranks running | submit -> all ranks |")
    print("|---|---:|---:|---:|---:|")
    for label, mode, nodes in SHAPES:
        runs = [one_job(client, mode, nodes, work) for _ in range(args.repeat)]
        sched = [a for a, _ in runs]
        start = [b for _, b in runs]
        total = [a + b for a, b in runs]

        def fmt(xs):
            return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"

        print(f"| {label} | {2 * nodes if mode else 1} | {fmt(sched)} | {fmt(start)} | {fmt(total)} |", flush=True)


if __name__ == "__main__":
    main()
