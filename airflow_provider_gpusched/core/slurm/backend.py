"""The ``slurm`` backend: Slurm jobs through the CLI, locally or over ssh (core/slurm/client.py). See
core/backends.py."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.backends import Backend, get_backend
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.queue import QueueEntry, StopOutcome
from airflow_provider_gpusched.core.slurm.options import SlurmClassSettings, SlurmSweepOptions, slurm_class_settings
from airflow_provider_gpusched.core.slurm.stop_marks import write_slurm_stop_mark
from airflow_provider_gpusched.core.work_tag import WorkTag

_LOG = logging.getLogger("airflow_provider_gpusched.sweep")

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.command_handle import CommandHandle
    from airflow_provider_gpusched.core.health_check import Check, HealthContext
    from airflow_provider_gpusched.core.slurm.client import SlurmClient
    from airflow_provider_gpusched.core.stops import StopRequest
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession


class SlurmBackend(Backend):
    """Slurm: a job per task or trial, a job array per chunk of a batched stage, multi-node shapes, deferrable."""

    name = "slurm"
    summary = "Slurm"
    airflow = "airflow_provider_gpusched.backends.slurm:SlurmAirflowBackend"
    handle = "client"
    handle_noun = "Slurm client"
    work_noun = "Slurm job"
    #: settings the Slurm backend cannot honour: they describe this host's GPUs
    unsupported = {
        "gpu_memory": "a share of a GPU's memory (Slurm allocates GPUs whole)",
        "devices": "this host's GPU indices",
        "device_groups": "this host's GPU groups",
        "load_stage": "a load stage before the GPUs (a Slurm job gets its GPUs when it starts)",
        "max_waiting": "a bound on this host's load stages",
    }
    chunk_task = "trial_array"
    asynchronous_search = True
    job_class_settings = SlurmClassSettings
    sweep_options = SlurmSweepOptions
    sweep_keywords = {"slurm_conn_id": "conn_id", "max_array_parallel": "max_array_parallel"}
    folders = {"slurm output dir": "slurm_output_dir"}

    def trial_arguments(self, resources: TrialResources) -> dict[str, Any]:
        """What a trial on Slurm asks for (``SlurmJobOperator`` arguments); unset ones are left to Slurm."""
        return {
            "gpus": resources.gpus_on_each_node or None,
            "cpus": resources.cpus,
            "mem": resources.mem,
            "partition": resources.partition,
            "qos": resources.qos,
            "time_limit": resources.time_limit,
            "setup": resources.setup or None,
            "job_class": resources.job_class,
            "priority": resources.priority,
            "env": resources.env or None,
            **({"group": resources.group} if resources.group else {}),
            **self.job_shape(resources),
        }

    def job_shape(self, resources: TrialResources) -> dict[str, Any]:
        """The job's shape as SlurmJobSpec / SlurmJobOperator arguments (those set); a distributed trial gets one
        task slot per rank on each node (the trial runner starts the ranks with srun)."""
        shape = {
            name: getattr(resources, name) for name in resources.SLURM_SHAPE if getattr(resources, name) is not None
        }
        if resources.distributed:
            shape["ntasks_per_node"] = resources.nproc_per_node
        return shape

    def rank_argv(
        self, mode: str, argv: Sequence[str], settings: Mapping[str, Any], env: Mapping[str, str], grace: float
    ) -> list[str]:
        """srun (or torchrun over the job's nodes) inside the trial's Slurm job."""
        from airflow_provider_gpusched.core.checks import is_int
        from airflow_provider_gpusched.core.errors import InvalidArgumentError
        from airflow_provider_gpusched.core.slurm.ranks import slurm_launch_argv

        if not env.get("SLURM_JOB_ID"):
            raise GpuschedError(
                "the sweep's trials start their ranks with srun, but this trial runner is not inside "
                "a Slurm job (no SLURM_JOB_ID)"
            )
        nproc = settings.get("nproc_per_node")
        if not is_int(nproc) or nproc < 1:
            raise InvalidArgumentError("manifest distributed.nproc_per_node", nproc, "a whole number >= 1")
        return slurm_launch_argv(mode, list(argv), nproc, grace)

    def stop_id(self, entry_id: str) -> str:
        """The array's job id for an array task (scancel cancels all its tasks)."""
        return entry_id.split("_")[0]

    def states(self) -> tuple[str, ...]:
        from airflow_provider_gpusched.core.slurm.states import PENDING_STATES, RUNNING_STATES, TERMINAL_STATES

        return (*PENDING_STATES, *RUNNING_STATES, *TERMINAL_STATES)

    def default_handle(self, *, simulate: str | None = None, state_dir: str | None = None, shared: bool = False) -> Any:
        """A client of the local Slurm CLI."""
        from airflow_provider_gpusched.core.slurm.client import SlurmClient

        return SlurmClient()

    def health_checks(self, context: HealthContext) -> list[Check]:
        """Slurm reachable through the command's client, the job classes' partitions and QOS, preemption."""
        from airflow_provider_gpusched.core.slurm.health import slurm_health

        return slurm_health(context)

    def command_handle(self, args: Any, connect: Callable[[str], CommandHandle]) -> CommandHandle:
        """``--slurm-conn-id``, else the local ``squeue`` (core/slurm/command_line.py)."""
        from airflow_provider_gpusched.core.slurm.command_line import command_handle

        return command_handle(args, connect)

    def output_tail(self, recorded: Callable[[str], Any], lines: int) -> tuple[str, str] | None:
        """The tail its operator recorded in the task's job record (core/slurm/job_view.py) when the job ended."""
        from airflow_provider_gpusched.core.slurm.job_view import SLURM_JOB_XCOM

        record = recorded(SLURM_JOB_XCOM)
        if isinstance(record, dict) and isinstance(record.get("tail"), str) and record["tail"]:
            tail = "\n".join(record["tail"].splitlines()[-lines:])
            return tail, f"Slurm job {record.get('job_id')} ({record.get('tail_path') or 'output'})"
        return None

    def queue_entries(self, handle: SlurmClient) -> tuple[list[QueueEntry], list[str]]:
        from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError

        try:
            return slurm_entries(handle), []
        except (SlurmUnavailableError, SlurmCommandError, OSError) as exc:
            return [], [f"Slurm: {exc}"]

    def stop(
        self, entries: list[QueueEntry], request: StopRequest, handle: SlurmClient, wait: float
    ) -> list[StopOutcome]:
        return cancel_jobs(entries, request, handle)

    def run_sweep(
        self,
        spec: SweepSpec,
        session: SweepSession,
        run: str,
        *,
        handle: Any = None,
        parallel: int | None = None,
        force_rerun: bool | None = None,
        progress: Any = True,
        on_event: Any = None,
        poll_interval: float = 2.0,
    ) -> dict[str, Any]:
        """Each stage's pending trials as job arrays of up to :data:`SLURM_CHUNK` tasks, followed every
        ``poll_interval`` seconds; Ctrl-C cancels them and records the trials ``stopped``. The stage loop is
        core/sweep/running/terminal.py's ``run_stages``; this is the Slurm stage."""
        from airflow_provider_gpusched.core.slurm.client import SlurmClient
        from airflow_provider_gpusched.core.sweep.running.terminal import run_stages

        client = handle or SlurmClient()
        workers = parallel or spec.max_workers or spec.per_round or 1
        logs = os.path.join(session.store.dir, "logs")
        os.makedirs(logs, exist_ok=True)
        base = slurm_job_arguments(spec)

        def run_stage(manifest: Any, round_no: int | None, searching: Any, board: Any) -> None:
            arrays = _stage_arrays(spec, session, manifest, round_no, run, workers if searching is not None else None)
            _run_slurm_stage(spec, session, client, arrays, run, logs, base, poll_interval)

        return run_stages(
            spec, session, run, self.name, run_stage, force_rerun=force_rerun, progress=progress, chunk_size=SLURM_CHUNK
        )


def _stage_arrays(
    spec: SweepSpec, session: SweepSession, manifest: Any, round_no: int | None, run: str, workers: int | None
) -> list[tuple[list[str], str, str, int]]:
    """(command, array, key, trials) of each job array of a stage: one array of ``workers`` worker tasks for an
    asynchronous search, else one per chunk of the stage. The key is the work (this sweep folder's stage and these
    trials): a run killed while its arrays ran left them running, and the next run of the same trials re-attaches
    to them."""
    from airflow_provider_gpusched.core.slurm.job import array_range, work_key
    from airflow_provider_gpusched.core.sweep.running.trial_run import chunk_argv, worker_argv

    if workers is not None:
        return [
            (
                worker_argv(manifest, "slurm"),
                array_range(workers, None),
                work_key("gpusched sweep run", session.store.dir, "workers", run),
                workers,
            )
        ]
    return [
        (
            chunk_argv(manifest, k),
            array_range(len(chunk), spec.max_workers),
            work_key("gpusched sweep run", session.store.dir, str(round_no), *(t.trial_id for t in chunk)),
            len(chunk),
        )
        for k, chunk in enumerate(manifest.chunk(k) for k in range(manifest.chunk_count()))
    ]


def _run_slurm_stage(
    spec: SweepSpec,
    session: SweepSession,
    client: SlurmClient,
    arrays: list[tuple[list[str], str, str, int]],
    run: str,
    logs: str,
    base: dict[str, Any],
    poll_interval: float,
) -> None:
    """Submit (or re-attach to) each job array of a stage and follow them until every one ended; Ctrl-C cancels
    them (core/sweep/running/terminal.py's StageStopped)."""
    from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, job_comment
    from airflow_provider_gpusched.core.slurm.submission import SlurmJobManager
    from airflow_provider_gpusched.core.sweep.running.terminal import StageStopped

    jobs: dict[str, int] = {}
    try:
        for k, (command, array, key, size) in enumerate(arrays):
            tag = WorkTag(run_id=run, sweep=spec.name, job_class=spec.resources.job_class)
            job = SlurmJobSpec(
                command=command,
                array=array,
                job_name=f"sweep.{spec.name}",
                output=os.path.join(logs, "slurm-%A_%a.out"),
                comment=job_comment(key, run=run, tag=tag),
                **base,
            )
            attached = SlurmJobManager(client, key, log=_LOG).start_job(job, key)
            if not attached.submitted:
                print(
                    f"sweep {spec.name}: chunk {k}: Slurm job {attached.job_id} of an earlier run does these "
                    f"trials; following it instead of submitting them again",
                    file=sys.stderr,
                )
            jobs[attached.job_id] = size
        while jobs:
            states = client.statuses(list(jobs), jobs)
            jobs = {j: n for j, n in jobs.items() if not states[j].is_terminal}
            if jobs:
                time.sleep(poll_interval)
    except KeyboardInterrupt:
        if jobs:
            client.cancel(list(jobs))
        raise StageStopped(
            "stopped by Ctrl-C in gpusched sweep run (its Slurm jobs cancelled)",
            f"sweep {spec.name}: stopped (Slurm jobs {', '.join(jobs) or '-'} cancelled); the trials that "
            f"finished are kept in {session.store.dir}, and the next run goes on with the rest",
        ) from None


#: trials per job array (below Slurm's usual MaxArraySize of 1001)
SLURM_CHUNK = 1000


def slurm_job_arguments(spec: SweepSpec) -> dict[str, Any]:
    """The spec's resources and job class as SlurmJobSpec fields (sbatch's names)."""
    from airflow_provider_gpusched.core.job_classes import JobClassMapping

    r = spec.resources
    args = dict(get_backend(SlurmBackend.name).trial_arguments(r))
    job_class, priority = args.pop("job_class"), args.pop("priority")
    group = args.pop("group", None)
    if group:  # the quota group's Slurm account and QOS (docs/quotas.md)
        from airflow_provider_gpusched.core.quota.config import QuotaConfig
        from airflow_provider_gpusched.core.quota.slurm import slurm_settings

        by_group = slurm_settings(QuotaConfig.load(os.environ.get("AIRFLOW__GPUSCHED__QUOTAS") or None), group)
        args["account"] = args.get("account") or by_group.get("account")
        if job_class == "normal":
            args["qos"] = args.get("qos") or by_group.get("qos")
    args["cpus_per_task"] = args.pop("cpus")
    args["environment"] = args.pop("env") or {}
    args["setup"] = args.get("setup") or ()
    classes = JobClassMapping.load(os.environ.get("AIRFLOW__GPUSCHED__JOB_CLASSES") or None)
    for key, value in slurm_class_settings(job_class, classes, priority).items():
        if args.get(key) is None:
            args[key] = value
    return {k: v for k, v in args.items() if v is not None}


def slurm_where(job: dict[str, Any]) -> str:
    """``batch on n3``; a multi-node job ``batch on n[1-2] (2 nodes)``, or ``batch (2 nodes)`` while it waits."""
    count = job.get("node_count")
    several = f" ({count} nodes)" if isinstance(count, int) and count > 1 else ""
    return str(job["partition"]) + (f" on {job['nodes']}" if job["nodes"] else "") + several


def slurm_entries(client: SlurmClient) -> list[QueueEntry]:
    """This user's unfinished Slurm jobs that the provider submitted (one ``squeue`` call)."""
    entries = []
    for job in client.provider_jobs():
        entries.append(
            QueueEntry(
                backend=SlurmBackend.name,
                id=job["job_id"],
                tag=WorkTag.from_comment(job["fields"]),
                state=job["state"],
                elapsed=job["elapsed"],
                requeues=job["restarts"],
                where=slurm_where(job),
                reason="" if job["reason"] in ("None", "") else job["reason"],
                output=job["output"],
                job_name=job["name"],
            )
        )
    return entries


def cancel_jobs(jobs: list[QueueEntry], request: StopRequest, client: SlurmClient) -> list[StopOutcome]:
    from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError

    notes: dict[str, str] = {}
    for job in jobs:
        if not job.output or job.stop_id in notes:
            continue
        try:
            write_slurm_stop_mark(job.output, job.stop_id, request)
            notes[job.stop_id] = ""
        except (OSError, GpuschedError) as exc:
            notes[job.stop_id] = f"; no stop mark ({exc}): its task will report a plain CANCELLED"
    ids = sorted({job.stop_id for job in jobs}, key=lambda j: int(j) if j.isdigit() else 0)
    try:
        client.cancel(ids)
    except (SlurmUnavailableError, SlurmCommandError) as exc:
        return [StopOutcome(job, "failed", f"scancel: {exc}") for job in jobs]
    return [StopOutcome(job, "cancelled", "scancel" + notes.get(job.stop_id, "")) for job in jobs]
