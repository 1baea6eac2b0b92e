"""The Slurm backend under Airflow: a trial is a deferrable ``SweepTrialSlurmOperator`` job; a batched stage is one
job array per chunk (the same operator, mapped over the chunks: ``AirflowBackend.run_chunks``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.backends import AirflowBackend
from airflow_provider_gpusched.core.backends import get_backend
from airflow_provider_gpusched.core.command_handle import CommandHandle
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.slurm.job import work_key as slurm_work_key
from airflow_provider_gpusched.links import SweepLeaderboardLink
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator
from airflow_provider_gpusched.task_groups.trial_operators import RecordsTrialFailures

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.job_classes import JobClass
    from airflow_provider_gpusched.core.slurm.options import SlurmSweepOptions
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest
    from airflow_provider_gpusched.task_groups.stage_view import StageView


class SlurmAirflowBackend(AirflowBackend):
    batches = True
    runs_workers = True

    def trial_operator(self, view: StageView, arguments: dict[str, Any]) -> Any:
        return SweepTrialSlurmOperator.partial(
            **get_backend(view.backend).trial_arguments(view.resources),
            slurm_conn_id=view.options.conn_id,
            job_name=f"sweep.{view.sweep}",
            **arguments,
        )

    def chunk_parallel(self, options: SlurmSweepOptions, max_workers: int | None) -> int | None:
        """``%N`` on each job array: the options' ``max_array_parallel``, at most the spec's ``max_workers``."""
        return options.array_parallel(max_workers)

    def plan_chunks(self, manifest: Manifest, python: str, max_parallel: int | None) -> list[Any]:
        """A job array per chunk, at most ``max_parallel`` of its tasks at once."""
        from airflow_provider_gpusched.core.slurm.job import array_range
        from airflow_provider_gpusched.core.sweep.running.trial_run import chunk_argv, trial_set

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
        from airflow_provider_gpusched.core.sweep.running.trial_run import trial_set, worker_argv

        return [
            {
                "command": worker_argv(manifest, "airflow", python),
                "trials": trial_set(manifest, chunk=0),
                "array": array_range(workers),
            }
        ]

    def pool_gpus(self, conn_id: str | None, simulate: str | None) -> Callable[[JobClass], int]:
        """The GPUs of the class's Slurm partition (the connection's class settings, or its default partition)."""
        from airflow_provider_gpusched.hooks.slurm import SlurmHook

        hook = SlurmHook(conn_id or SlurmHook.default_conn_name)
        client = hook.get_conn()

        def partition_gpus(cls: JobClass) -> int:
            partition = hook.class_settings(cls.name).get("partition") or hook.job_defaults().get("partition")
            return client.partition_gpus(partition)

        return partition_gpus

    def connect(self, conn_id: str) -> CommandHandle:
        """A Slurm client through the connection (``gpusched queue --slurm-conn-id``), and its job classes' view."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        from airflow_provider_gpusched.hooks.slurm import SlurmHook

        try:
            hook = SlurmHook(conn_id)
            runner = hook.runner_description
        except AirflowNotFoundException:
            raise GpuschedError(
                f"--slurm-conn-id {conn_id}: no such Airflow connection (airflow connections list)"
            ) from None
        how = f"connection {conn_id!r} " + (
            f"(ssh to {runner['host']})" if runner.get("host") else "(local Slurm commands)"
        )
        return CommandHandle(hook.get_conn(), how, class_settings=hook.class_settings, conn_id=conn_id)


class SweepTrialSlurmOperator(RecordsTrialFailures, SlurmJobOperator):
    """One mapped trial (or a chunk's job array) of a sweep on Slurm: SlurmJobOperator, recording its trials'
    failures and publishing their outcomes (task_groups/trial_operators.py)."""

    lineage_job_type = "SWEEP_TRIAL_SLURM"
    operator_extra_links = (*SlurmJobOperator.operator_extra_links, SweepLeaderboardLink())

    def __init__(self, *, sweep_name: str = "", trials: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name = sweep_name  # for the "Sweep leaderboard" link
        self.trials = trials

    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().execute_complete, context, event)

    def work_key(self, context, spec) -> str:
        """A trial is the same work in every DAG run (each run has its own manifest path in the command):
        the sweep folder, the trials and the resources. A job an earlier, killed run left running is
        re-attached to instead of running the trial a second time."""
        found = self.trial_set()
        if found is None:
            return super().work_key(context, spec)
        manifest, trials = found
        skip = ("--comment=", "--output=", "--error=", "--job-name=")
        return slurm_work_key(
            manifest.store.dir,
            # an asynchronous search's workers: their run's (they ask for their trials)
            *(sorted(t.trial_id for t in trials) if not manifest.record.shared_study else [manifest.path]),
            *(a for a in spec.sbatch_argv() if not a.startswith(skip)),
        )
