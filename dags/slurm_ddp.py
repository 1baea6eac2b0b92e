"""Data-parallel training across two Slurm nodes (PyTorch DDP), started by torchrun on each node.

``train`` runs on every rank: ``@task.slurm(nodes=2, gpus_per_node=2, distributed="torchrun")`` asks Slurm for two
nodes with two GPUs each, runs one ``torchrun`` per node (``nproc_per_node=2``, c10d rendezvous on the first node,
a port of its own), and passes each rank its place (``rank_info``). Each rank trains on its shard of the data;
DDP averages the gradients, so every rank ends with the same weights (checked). The task's XCom is rank 0's
return value: the last epoch's training loss, the accuracy on 1,024 held-out samples, the world size and the hosts
the ranks ran on.

On GPUs the ranks use NCCL on ``cuda:LOCAL_RANK``; without (the project's test cluster has fake GPUs, and the CPU
build of PyTorch) they use gloo on the CPU. Needs PyTorch where the job runs (``pip install
"airflow-provider-gpusched[examples]"``) and a shared filesystem for the task's directory, as every Slurm
Python task does.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


def blobs(n: int = 5120, dims: int = 16, classes: int = 4, seed: int = 0):
    """A classification data set made here (no download): ``classes`` overlapping Gaussian blobs in ``dims``
    dimensions (a linear model gets about 90% of it right)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dims, generator=g) * 0.8
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, dims, generator=g)
    return x, y


def mlp(dims: int = 16, width: int = 64, classes: int = 4):
    import torch

    torch.manual_seed(1)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    return torch.nn.Sequential(torch.nn.Linear(dims, width), torch.nn.ReLU(), torch.nn.Linear(width, classes))


@dag(
    dag_id="gpusched_slurm_ddp",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "distributed", "example"],
    doc_md=__doc__,
)
def slurm_ddp():
    @task.slurm(nodes=2, gpus_per_node=2, distributed="torchrun", time_limit=15, poll_interval=1, rank_exit_grace=120)
    def train(epochs: int = 8, lr: float = 0.05, rank_info=None) -> dict:
        import socket

        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        cuda = torch.cuda.is_available()
        device = torch.device(f"cuda:{rank_info.local_rank}" if cuda else "cpu")
        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        x, y = blobs()
        train_x, train_y, test_x, test_y = x[:4096], y[:4096], x[4096:], y[4096:]  # 1,024 held out
        shard_x, shard_y = train_x[rank::world].to(device), train_y[rank::world].to(device)  # this rank's part
        model = DistributedDataParallel(mlp().to(device), device_ids=[device.index] if cuda else None)
        optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        for epoch in range(epochs):
            total = torch.zeros(2, device=device)
            for i in range(0, len(shard_x), 64):
                optimiser.zero_grad()
                loss = loss_fn(model(shard_x[i : i + 64]), shard_y[i : i + 64])
                loss.backward()  # DDP all-reduces the gradients here
                optimiser.step()
                total += torch.stack(
                    [
                        loss.detach() * len(shard_y[i : i + 64]),
                        torch.tensor(float(len(shard_y[i : i + 64])), device=device),
                    ]
                )
            dist.all_reduce(total)
            if rank == 0:
                print(
                    f"epoch {epoch + 1}/{epochs}: loss {(total[0] / total[1]).item():.4f} ({world} ranks)", flush=True
                )
        with torch.no_grad():  # accuracy on the held-out samples, each rank scoring its share
            part_x, part_y = test_x[rank::world].to(device), test_y[rank::world].to(device)
            correct = torch.tensor(
                [(model(part_x).argmax(1) == part_y).sum().item(), len(part_y)], dtype=torch.float64, device=device
            )
            dist.all_reduce(correct)
            checksum = torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)
        sums = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world)]
        dist.all_gather(sums, checksum)
        hosts = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
        dist.destroy_process_group()
        return {
            "world_size": world,
            "hosts": sorted(set(hosts)),
            "rank_hosts": hosts,
            "loss": round((total[0] / total[1]).item(), 4),
            "accuracy": round((correct[0] / correct[1]).item(), 4),
            "weights_in_sync": len({round(s.item(), 9) for s in sums}) == 1,
            "device": "cuda" if cuda else "cpu",
        }

    @task
    def report(result: dict) -> dict:
        print(
            f"DDP over {result['world_size']} ranks on {', '.join(result['hosts'])} ({result['device']}): "
            f"accuracy {result['accuracy']:.3f}, loss {result['loss']:.4f}, weights in sync: "
            f"{result['weights_in_sync']}"
        )
        return result

    report(train())


slurm_ddp_dag = slurm_ddp()
