"""SlurmJobSensor: wait for a Slurm job that something else submitted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.slurm import JobStatus
from airflow_provider_gpusched.hooks.slurm import SlurmHook
from airflow_provider_gpusched.operators.slurm import SlurmJobFailed
from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger


class SlurmJobSensor(BaseSensorOperator):
    """Succeeds when job ``job_id`` completes; fails (with state and exit code) when it ends otherwise.

    Deferrable by default: it then waits in the triggerer through the shared poller. A requeued
    (preempted) job is still waited for. ``cancel_on_kill`` defaults to False: the sensor does not own the job.
    """

    template_fields: Sequence[str] = ("job_id",)

    def __init__(
        self,
        *,
        job_id: str,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        cancel_on_kill: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.slurm_conn_id = slurm_conn_id
        self.deferrable = settings.default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        if poll_interval:
            self.poke_interval = poll_interval

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        hook = SlurmHook(self.slurm_conn_id)
        self.defer(
            trigger=SlurmJobTrigger(
                job_id=str(self.job_id),
                runner=hook.runner_description,
                poll_interval=self.poll_interval or settings.poll_interval(),
                not_found_timeout=settings.not_found_timeout(),
                cancel_on_kill=self.cancel_on_kill,
                fire_after=time.time() + settings.min_deferral(),
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def poke(self, context) -> bool:
        status = SlurmHook(self.slurm_conn_id).get_conn().status(str(self.job_id))
        self.log.info("%s", status.describe())
        if not status.is_terminal:
            return False
        self._check(status)
        return True

    def _check(self, status: JobStatus) -> dict[str, Any]:
        if not status.phase.is_success:
            raise SlurmJobFailed(f"Slurm {status.describe()}", status.to_dict())
        return {"job_id": status.job_id, "state": status.state, "exit_code": status.exit_code}

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        if not event.get("job"):
            raise SlurmJobFailed(f"Slurm job {self.job_id}: {event.get('message')}")
        return self._check(JobStatus.from_dict(event["job"]))
