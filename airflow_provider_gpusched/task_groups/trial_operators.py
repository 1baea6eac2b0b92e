"""The operators a sweep's mapped trials run as: the local-GPU and Slurm operators, plus one duty — when the
task fails before its trial could record an outcome (no GPU fits, sbatch refused the job, the job died before
the trial runner started), the trial is marked ``failed`` with that reason instead of staying ``waiting``."""

from __future__ import annotations

from typing import Any

from airflow_provider_gpusched.core.sweep.trial_run import mark_unfinished
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator


class _RecordsTrialFailures:
    command: Any

    def _recording(self, method, *args) -> Any:
        try:
            return method(*args)
        except Exception as exc:  # TaskDeferred is a BaseException: deferring passes through
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            for line in mark_unfinished(self.command, f"the trial's task failed: {first}"):
                self.log.warning("%s", line)
            raise

    def execute(self, context) -> Any:
        return self._recording(super().execute, context)  # type: ignore[misc]


class SweepTrialGPUOperator(_RecordsTrialFailures, LocalGPUOperator):
    def resume(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().resume, context, event)


class SweepTrialSlurmOperator(_RecordsTrialFailures, SlurmJobOperator):
    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().execute_complete, context, event)
