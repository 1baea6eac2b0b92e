"""``@task.slurm``: run the decorated function as a Slurm job (function-level scheduling).

    @task.slurm(gpus=1, cpus=4, partition="gpu", setup=["source /shared/envs/pt2.sh"])
    def evaluate(subnet: list[int]) -> float:
        ...

On several nodes, the function runs on every rank and the XCom is rank 0's return value::

    @task.slurm(nodes=2, gpus_per_node=4, distributed="torchrun")
    def train(epochs: int, rank_info=None) -> dict:
        ...  # torch.distributed.init_process_group("nccl"); rank_info.rank, rank_info.world_size, ...

Arguments are those of :class:`~airflow_provider_gpusched.operators.slurm.SlurmPythonOperator`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_provider_gpusched.operators.job_class import apply_job_class, slurm_gpu_total
from airflow_provider_gpusched.operators.slurm import SlurmPythonOperator


class _SlurmDecoratedOperator(DecoratedOperator, SlurmPythonOperator):
    custom_operator_name = "@task.slurm"
    python_callable: Callable[..., Any]  # always given here (the operator may run a command instead)
    template_fields: Sequence[str] = SlurmPythonOperator.template_fields

    def __init__(self, *, python_callable: Callable[..., Any], op_args=None, op_kwargs=None, **kwargs: Any) -> None:
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs},
            **kwargs,
        )


def slurm_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Wrap a function into a :class:`SlurmPythonOperator` (``@task.slurm``)."""
    # mapped tasks (.expand) take pool and weight from these arguments: apply the job class here
    apply_job_class(
        kwargs,
        kwargs.get("job_class", "normal"),
        kwargs.get("priority", 0),
        slurm_gpu_total(kwargs.get("gpus", 1), kwargs.get("gpus_per_node"), kwargs.get("nodes")),
    )
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_SlurmDecoratedOperator,
        **kwargs,
    )
