"""Sweeps whose trials span two Slurm nodes: each trial's command starts as 4 ranks (srun, 2 per node); rank 0
writes the result once every rank has checked in. Mapped (a job per trial) and batched (job arrays of 2-node
tasks). The results root comes from [gpusched] sweep_results_root (the test sets it)."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
RANK_TRIAL = """
import json, os, socket, sys, time
folder = os.environ["GPUSCHED_TRIAL_DIR"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
with open(os.path.join(folder, ".host-%d" % rank), "w") as fh:  # written whole, then named: rank 0 never reads it
    fh.write(socket.gethostname())                                 # half written (it did once, under load)
os.replace(os.path.join(folder, ".host-%d" % rank), os.path.join(folder, "host-%d" % rank))
if rank == 0:
    deadline = time.time() + 60
    while len([f for f in os.listdir(folder) if f.startswith("host-")]) < world and time.time() < deadline:
        time.sleep(0.1)
    hosts = sorted(open(os.path.join(folder, "host-%d" % r)).read() for r in range(world))
    json.dump(dict(score=float(sys.argv[1]) * world, world=world, hosts=hosts, master=os.environ["MASTER_ADDR"]),
              open(os.path.join(folder, "result.json"), "w"))
"""  # (no braces: a command's {name} is a placeholder)
RESOURCES = TrialResources(nodes=2, gpus_per_node=2, distributed="srun", time_limit=10)
COMMAND = [sys.executable, "-c", RANK_TRIAL, "{x}"]

with DAG("t_multinode_sweep_mapped", schedule=None, start_date=START) as mapped:
    sweep_task_group(
        SweepSpec(
            name="multinode_mapped",
            test_config=[{"x": [1, 2, 3]}],
            command=COMMAND,
            objective=Objective("score"),
            resources=RESOURCES,
        ),
        backend="slurm",
        batching="mapped",
        poll_interval=0.5,
    )

with DAG("t_multinode_sweep_batched", schedule=None, start_date=START) as batched:
    sweep_task_group(
        SweepSpec(
            name="multinode_batched",
            test_config=[{"x": [1, 2, 3]}],
            command=COMMAND,
            objective=Objective("score"),
            resources=RESOURCES,
        ),
        backend="slurm",
        batching="batched",
        chunk_size=3,
        poll_interval=0.5,
    )
