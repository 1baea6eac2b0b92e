"""What a followed Slurm job's end means for its task: read once, after ``SlurmClient.follow`` (or the triggerer's
shared poller) saw it end. The operator logs and publishes a :class:`JobEnd` and raises what it says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_gpusched.core.slurm.states import JobStatus
from airflow_provider_gpusched.core.slurm.stop_marks import read_slurm_stop_mark
from airflow_provider_gpusched.core.stops import StopRequest

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.slurm.client import SlurmClient


@dataclass(frozen=True)
class JobEnd:
    """How a job ended: its final status, the output whose tail explains it (the first failed array task's), a
    problem with following it (lost from Slurm's view), and the stop mark of whoever stopped it."""

    status: JobStatus
    tail_path: str
    tail: str
    problem: str | None = None
    stopped: StopRequest | None = None

    @property
    def succeeded(self) -> bool:
        return not self.problem and self.stopped is None and self.status.phase.is_success

    def stop_message(self) -> str:
        assert self.stopped is not None
        return f"Slurm job {self.status.job_id} {self.stopped.describe()}; Slurm says {self.status.describe()}"

    def failure_message(self) -> str:
        status = self.status
        message = f"Slurm {status.describe()}" if not self.problem else f"Slurm job {status.job_id}: {self.problem}"
        if self.tail:
            message += f"\n--- last lines of {self.tail_path} ---\n{self.tail}"
        return message


def job_end(client: SlurmClient, status: JobStatus, output_path: str, problem: str | None, tail_lines: int) -> JobEnd:
    """Read what explains ``status``: the tail of its output (``%a``: the first failed array task's, else the
    first task's) and, for a job that did not succeed, its stop mark (``gpusched queue stop``)."""
    failed_task = next((t for t in status.tasks.values() if not t.phase.is_success), None)
    tail_path = output_path
    if status.tasks:
        task_id = (failed_task or next(iter(status.tasks.values()))).array_task_id or ""
        tail_path = output_path.replace("%a", task_id)
    tail = client.tail(tail_path, tail_lines) if tail_path else ""
    stopped = read_slurm_stop_mark(output_path, status.job_id) if not status.phase.is_success else None
    return JobEnd(status, tail_path, tail, problem, stopped)
