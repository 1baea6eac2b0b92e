"""``@task.local_gpu``: run the decorated function on this host's GPUs.

    @task.local_gpu(gpu_memory="6GiB", oom_retries=2)
    def train(lr: float) -> float:
        ...

Arguments are those of :class:`~airflow_provider_gpusched.operators.local_gpu.LocalGPUOperator`. The
return value is the task's XCom; XCom ``gpus_used`` lists the GPUs (index, UUID) it ran on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_provider_gpusched.operators.job_class import apply_local_gpu_class
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator


class _LocalGPUDecoratedOperator(DecoratedOperator, LocalGPUOperator):
    custom_operator_name = "@task.local_gpu"
    python_callable: Callable[..., Any]  # always given here (the operator may run a command instead)
    template_fields: Sequence[str] = LocalGPUOperator.template_fields

    def __init__(self, *, python_callable: Callable[..., Any], op_args=None, op_kwargs=None, **kwargs: Any) -> None:
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs},
            **kwargs,
        )


def local_gpu_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Wrap a function into a :class:`LocalGPUOperator` (``@task.local_gpu``)."""
    # mapped tasks (.expand) take pool and weight from these arguments: apply the job class here
    apply_local_gpu_class(
        kwargs,
        kwargs.get("job_class", "normal"),
        kwargs.get("priority", 0),
        kwargs.get("gpus", 1),
        kwargs.get("gpu_memory"),
    )
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_LocalGPUDecoratedOperator,
        **kwargs,
    )
