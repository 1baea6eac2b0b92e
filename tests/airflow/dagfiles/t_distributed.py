"""Python functions on every rank: a real gloo all-reduce across two Slurm nodes (srun and torchrun starts) and
over the two GPUs of a local lease (torchrun and gpusched's srun-style start), each returning rank 0's view."""

import pendulum
from airflow.sdk import DAG, task


def all_reduce(rank_info) -> dict:
    """Every rank adds rank + 1; each learns every rank's hostname (module-level: travels with the task)."""
    import os
    import socket

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    places = [None] * dist.get_world_size()
    dist.all_gather_object(places, rank_info.to_dict())
    dist.destroy_process_group()
    return {
        "sum": value.item(),
        "hosts": hosts,
        "rank": rank_info.rank,
        "world_size": rank_info.world_size,
        "places": places,
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


with DAG(dag_id="t_distributed", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task.slurm(nodes=2, gpus_per_node=2, distributed="srun", poll_interval=0.5, time_limit=10)
    def slurm_srun(rank_info=None):
        return all_reduce(rank_info)

    @task.slurm(nodes=2, gpus_per_node=2, distributed="torchrun", poll_interval=0.5, time_limit=10)
    def slurm_torchrun(rank_info=None):
        return all_reduce(rank_info)

    @task.local_gpu(gpus=2, distributed="torchrun", poll_interval=0.5)
    def local_torchrun(rank_info=None):
        return all_reduce(rank_info)

    @task.local_gpu(gpus=2, distributed="srun", poll_interval=0.5)
    def local_srun(rank_info=None):
        return all_reduce(rank_info)

    slurm_srun()
    slurm_torchrun()
    local_torchrun() >> local_srun()  # one after the other: each takes 2 of the 4 simulated GPUs anyway
