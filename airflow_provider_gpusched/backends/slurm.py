"""The Slurm backend under Airflow: a trial is a deferrable ``SweepTrialSlurmOperator`` job; a batched stage is one
job array per chunk (the same operator, mapped over the chunks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.backends import AirflowBackend

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.job_classes import JobClass
    from airflow_provider_gpusched.core.sweep.trial_run import Manifest
    from airflow_provider_gpusched.task_groups.sweep import SweepStage


class SlurmAirflowBackend(AirflowBackend):
    batches = True
    runs_workers = True

    def trial_operator(self, stage: SweepStage, arguments: dict[str, Any]) -> Any:
        from airflow_provider_gpusched.task_groups.trial_operators import SweepTrialSlurmOperator

        return SweepTrialSlurmOperator.partial(
            **stage.spec.resources.slurm_arguments(),
            slurm_conn_id=stage.execution.slurm_conn_id,
            job_name=f"sweep.{stage.spec.name}",
            **arguments,
        )

    def plan_chunks(self, manifest: Manifest, python: str, max_parallel: int | None) -> list[Any]:
        """A job array per chunk, at most ``max_parallel`` of its tasks at once."""
        from airflow_provider_gpusched.core.slurm.job import array_range
        from airflow_provider_gpusched.core.sweep.trial_run import chunk_argv, trial_set

        return [
            {
                "command": chunk_argv(manifest, k, python),
                "trials": trial_set(manifest, chunk=k),
                "array": array_range(len(manifest.chunk(k)), max_parallel),
            }
            for k in range(manifest.chunk_count())
        ]

    def plan_workers(self, manifest: Manifest, python: str, workers: int) -> list[Any]:
        """One job array of ``workers`` tasks, each a worker asking for trials until none are left; its trials are
        the stage's, read when the array ends (whichever worker ran them)."""
        from airflow_provider_gpusched.core.slurm.job import array_range
        from airflow_provider_gpusched.core.sweep.trial_run import trial_set, worker_argv

        return [
            {
                "command": worker_argv(manifest, "airflow", python),
                "trials": trial_set(manifest, chunk=0),
                "array": array_range(workers),
            }
        ]

    def run_chunks(self, stage: SweepStage, round_no: int | None, planned: Any) -> Any:
        """The trial operator mapped over the chunks: each task one job array."""
        label = "workers" if stage.spec.asks_as_it_goes else "chunk {{ task.command[-1] }}"
        return stage.trial_operator("trial_array", label).expand_kwargs(planned)

    def pool_gpus(self, conn_id: str | None, simulate: str | None) -> Callable[[JobClass], int]:
        """The GPUs of the class's Slurm partition (the connection's class settings, or its default partition)."""
        from airflow_provider_gpusched.hooks.slurm import SlurmHook

        hook = SlurmHook(conn_id or SlurmHook.default_conn_name)
        client = hook.get_conn()

        def partition_gpus(cls: JobClass) -> int:
            partition = hook.class_settings(cls.name).get("partition") or hook.job_defaults().get("partition")
            return client.partition_gpus(partition)

        return partition_gpus
