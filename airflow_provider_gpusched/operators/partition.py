"""PipelinePartitionOperator: the optimal pipeline schedule for a model on heterogeneous hosts, into XCom."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_gpusched.core.partition import PartitionInputError, load_problem, partition
from airflow_provider_gpusched.core.partition.report import explain_table, not_proven_note, schedule_json


class PipelinePartitionOperator(BaseOperator):
    """Split ``model``'s layers into pipeline stages (sched-pipeline's inputs and semantics, optimal
    bottleneck). Returns ``{"feasible", "bottleneck_s", "bottleneck_stage", "stages": [{"host",
    "device_type", "layers": [first, last], "compute_s", "comm_s", "time_s", "memory_bytes", ...}]}``
    and logs the per-stage table. Bad input fails the task at once (no retry), naming the file and key;
    ``fail_if_infeasible`` (default True) fails it when no schedule fits. ``time_limit`` (seconds, default 60)
    bounds the search: past it the best schedule found is returned with ``"optimal": false``, the proven
    ``lower_bound_s`` and the ``gap``, and a warning is logged.
    """

    template_fields: Sequence[str] = ("models_file", "device_types_file", "devices_file", "model", "dtype")
    ui_color = "#f5e6d5"

    def __init__(
        self,
        *,
        models_file: str = "models.yml",
        device_types_file: str = "device_types.yml",
        devices_file: str = "devices.yml",
        model: str = "google/vit-base-patch16-224",
        dtype: str = "torch.float32",
        batch_size: int = 8,
        buffers_in: int = 2,
        buffers_out: int = 2,
        fail_if_infeasible: bool = True,
        time_limit: float | None = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
            raise ValueError(
                f"{kwargs.get('task_id')}: time_limit: expected a number of seconds > 0 or None, got {time_limit!r}"
            )
        self.time_limit = time_limit
        self.models_file = models_file
        self.device_types_file = device_types_file
        self.devices_file = devices_file
        self.model = model
        self.dtype = dtype
        self.batch_size = batch_size
        self.buffers_in = buffers_in
        self.buffers_out = buffers_out
        self.fail_if_infeasible = fail_if_infeasible

    def execute(self, context) -> dict[str, Any]:
        try:
            problem = load_problem(
                self.models_file,
                self.device_types_file,
                self.devices_file,
                model=self.model,
                dtype=self.dtype,
                batch_size=self.batch_size,
                buffers_in=self.buffers_in,
                buffers_out=self.buffers_out,
            )
        except PartitionInputError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        schedule = partition(problem, time_limit=self.time_limit)
        self.log.info("%s", explain_table(problem, schedule))
        if not schedule.optimal:
            self.log.warning("%s", not_proven_note(schedule, self.time_limit))
        if not schedule.feasible and self.fail_if_infeasible:
            raise AirflowFailException(
                f"{self.task_id}: no pipeline schedule fits {problem.model} on these hosts "
                f"(set fail_if_infeasible=False to return an empty schedule)"
            )
        return schedule_json(problem, schedule)
