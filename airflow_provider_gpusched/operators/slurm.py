"""Operators that run work as Slurm jobs.

* :class:`SlurmJobOperator`: a command (argv list or shell string) or a script, with resources.
* :class:`SlurmPythonOperator`: a Python callable as a Slurm job (seed pavi's function-level
  scheduling); its return value is the task's XCom, its exception (with traceback) fails the task.

Both defer to :class:`~airflow_provider_gpusched.triggers.slurm.SlurmJobTrigger` by default (a blocking
mode exists too), push the job id as XCom ``slurm_job_id`` at once, and never submit a second job for
the same task instance while an earlier try's job is still alive: they find it by its ``--comment``
(keyed to dag/run/task/map index) and re-attach.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched import lineage, settings
from airflow_provider_gpusched.callables import callable_arguments
from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, launcher_grace
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.slurm import (
    JobStatus,
    SlurmCommandError,
    SlurmJobSpec,
    job_comment,
    parse_array_indices,
    task_key,
)
from airflow_provider_gpusched.core.slurm.chain import TimeLimitChain, chain_failure, read_chain
from airflow_provider_gpusched.core.slurm.chain import time_limit_chain as time_limit_chain_settings
from airflow_provider_gpusched.core.slurm.job import task_family_key, work_key
from airflow_provider_gpusched.core.slurm.job_view import SLURM_JOB_XCOM, claim_output_folder, job_record
from airflow_provider_gpusched.core.slurm.states import JobPhase, array_task_order
from airflow_provider_gpusched.core.slurm.submission import JobWait, SlurmJobManager
from airflow_provider_gpusched.core.work_env import CHECKPOINT_ENV
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.hooks.slurm import SlurmHook
from airflow_provider_gpusched.links import SlurmJobLink, publish_links
from airflow_provider_gpusched.operators.arguments import argument_error, check_argument_types, renamed_argument
from airflow_provider_gpusched.operators.job_class import (
    apply_job_class,
    apply_partial_job_class,
    apply_quota_group_to,
    slurm_gpu_total,
)
from airflow_provider_gpusched.operators.queue_stops import WorkStopped, refuse_if_stopped, work_tag
from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger

#: task states of a run whose job is still wanted: its own task is (or will be again) waiting for it


class SlurmJobFailed(AirflowException):
    """The Slurm job ended in a state other than COMPLETED."""

    def __init__(self, message: str, status: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status or {}

    @property
    def trial_end(self) -> str:
        """The state a sweep trial whose task raised this ends in: ``timeout`` when Slurm stopped the job at its
        --time, else ``failed`` (task_groups/trial_operators.py)."""
        return "timeout" if self.status.get("phase") == JobPhase.TIMEOUT.value else "failed"


#: SlurmJobSpec's names for the operator's arguments, where they differ
_SPEC_NAMES = {"cpus_per_task": "cpus", "environment": "env"}


def task_state_in_run(ti, run_id: str) -> str | None:
    """This task's state in another DAG run ('absent' when that run has no such task instance), None if
    Airflow cannot tell."""
    try:
        states = ti.get_task_states(
            dag_id=ti.dag_id,
            task_ids=[ti.task_id],
            run_ids=[run_id],
            map_index=ti.map_index if ti.map_index is not None and ti.map_index >= 0 else None,
        )
    except Exception:  # noqa: BLE001 - an older API or no API server: say so, never guess
        return None
    mine = (states or {}).get(run_id) or {}
    name = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
    state = mine.get(name)
    return str(state.value if hasattr(state, "value") else state) if state is not None else "absent"


class SlurmJobOperator(lineage.LineageFacets, BaseOperator):
    """Submit a Slurm batch job and wait for it.

    :param command: argv list (passed verbatim) or a shell command line (a string). Templated.
    :param script: a whole batch script body instead of ``command``. Templated.
    :param job_name: Slurm job name (default ``<dag_id>.<task_id>``).
    :param partition: (and ``qos``, ``account``) Slurm placement (defaults from the connection).
    :param gpus: GPUs per job (``--gres=gpu:N``); or ``gres`` for a raw GRES string such as ``gpu:a100:2``.
    :param cpus: (and ``mem``, ``time_limit``) resources (``cpus``: sbatch's ``--cpus-per-task``; its old name ``cpus_per_task``
        still works, with a warning) (``mem`` accepts ``'16G'``, ``'2.5GB'``; ``time_limit``
        minutes, a timedelta or ``'HH:MM:SS'``).
    :param array: job array spec (``'0-9%2'``): the task succeeds when every array task succeeds (each array task
        has the whole shape: an array of multi-node jobs).
    :param nodes: (and ``ntasks_per_node``, ``gpus_per_node``, ``gpus_per_task``, ``cpus_per_gpu``, ``exclusive``, ``constraint``, ``nodelist``, ``exclude``) the job's shape (``nodes=2`` or ``"2-4"``; ``gpus_per_node=4`` or ``"a100:4"``; ``nodelist`` and
        ``exclude`` as a list or a hostlist such as ``"gpu[01-04]"``). ``gpus`` is per node too (``--gres``).
    :param distributed: start the command as ranks on every node: ``"torchrun"`` (one torchrun per node,
        ``nproc_per_node`` = GPUs per node, c10d rendezvous on the first node) or ``"srun"`` (one process per GPU
        with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). See docs/slurm.md.
    :param rank_exit_grace: seconds the other ranks may run on after the first one ended (then they are stopped:
        a hung rank never holds the job until its time limit); 0: no limit. Default 300.
    :param nice: (and ``requeue``, ``open_mode``) scheduling knobs (``open_mode='append'`` by default so a requeued job
        keeps its earlier output).
    :param output_path: (and ``error_path``) output files (``%j``, ``%A``, ``%a`` allowed); default under ``[gpusched] slurm_output_dir``.
    :param env: variables exported in the job script (old name: ``environment``). ``setup``: lines run before the command
        (for example ``source /shared/envs/pt2.sh``). ``sbatch_args``: extra sbatch options.
    :param deferrable: wait in the triggerer (default ``[gpusched] default_deferrable``) or in the worker.
    :param poll_interval: seconds between status checks (default ``[gpusched] slurm_poll_interval``).
    :param cancel_on_kill: cancel the job when the task is killed (default True).
    :param follow_output: while the job runs, new lines of its output file appear in the task log as they are
        written (read incrementally, at most 64 KiB per poll; over ssh through the login host when the connection
        names one). Default True; an array job's tasks each have a file and are shown as a tail at the end.
    :param time_limit_chain: go on past the time limit (docs/slurm.md, "Training longer than the time limit"):
        ``True`` or a mapping of ``checkpoint`` (the file or folder whose newer version proves progress),
        ``max_requeues`` (3), ``signal`` (``"USR1"``), ``signal_delay`` (90 s before the limit) and ``grace``. The
        job is signalled before its limit, checkpoints, and is requeued while it makes progress; the task follows
        every segment and logs each one.
    :param group: with team quotas (``[gpusched] quotas``), the group the job counts for (default: the group of the
        task's ``owner``, else ``default_group``): its Slurm ``account`` and, for normal-class work, ``qos``, unless
        given here (docs/quotas.md).
    :param job_class: (and ``priority``) ``"normal"`` (default) or ``"idle"`` (fill-in work), and a whole-number
        priority. The ``[gpusched] job_classes`` mapping turns them into the Airflow pool, slots and weight
        and the Slurm partition/QOS/nice/requeue (idle: the preemptible ``idle`` partition with requeue;
        connection extras ``idle_partition`` / ``idle_qos`` change where). Explicit arguments win.
    """

    template_fields: Sequence[str] = (
        "command",
        "script",
        "job_name",
        "partition",
        "qos",
        "account",
        "environment",
        "setup",
        "sbatch_args",
        "output_path",
        "error_path",
        "working_dir",
        "array",
    )
    template_fields_renderers = {"script": "bash", "command": "py", "environment": "json"}
    ui_color = "#dbe9f6"
    operator_extra_links: tuple[BaseOperatorLink, ...] = (SlurmJobLink(),)

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """Airflow's ``partial``, with the job class's pool and weight for the mapped tasks."""
        apply_partial_job_class(kwargs, local_gpus=False)
        return super().partial(**kwargs)

    def __init__(
        self,
        *,
        command: Sequence[str] | str | None = None,
        script: str | None = None,
        job_name: str | None = None,
        partition: str | None = None,
        qos: str | None = None,
        account: str | None = None,
        gpus: int | None = None,
        gres: str | None = None,
        cpus: int | None = None,
        mem: int | str | None = None,
        time_limit: int | str | timedelta | None = None,
        array: str | None = None,
        nodes: int | str | None = None,
        ntasks_per_node: int | None = None,
        gpus_per_node: int | str | None = None,
        gpus_per_task: int | None = None,
        cpus_per_gpu: int | None = None,
        exclusive: bool | None = None,
        constraint: str | None = None,
        nodelist: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        distributed: str | None = None,
        rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
        nice: int | None = None,
        requeue: bool | None = None,
        open_mode: str | None = "append",
        output_path: str | None = None,
        error_path: str | None = None,
        working_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        setup: Sequence[str] | str | None = None,
        sbatch_args: Sequence[str] | None = None,
        slurm_conn_id: str = SlurmHook.default_conn_name,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        cancel_on_kill: bool = True,
        follow_output: bool = True,
        job_class: str = "normal",
        priority: int = 0,
        group: str | None = None,
        time_limit_chain: bool | Mapping[str, Any] | TimeLimitChain | None = None,
        cpus_per_task: int | None = None,  # the old names of cpus and env
        environment: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        cpus = renamed_argument(task_id, "cpus", cpus, "cpus_per_task", cpus_per_task)
        env = renamed_argument(task_id, "env", env, "environment", environment)
        self.job_class, self.priority = apply_job_class(
            kwargs, job_class, priority, slurm_gpu_total(gpus, gpus_per_node, nodes)
        )
        super().__init__(**kwargs)
        self.group = apply_quota_group_to(self, group, self.job_class, pool=False)
        if self.group:  # the group's Slurm account and QOS (docs/quotas.md); explicit arguments win
            from airflow_provider_gpusched.core.quota.slurm import slurm_settings

            by_group = slurm_settings(settings.quota_config(), self.group)
            account = account or by_group.get("account")
            if self.job_class == "normal":
                qos = qos or by_group.get("qos")
        check_argument_types(
            self.task_id,
            (
                ("env", env, (Mapping,), "a mapping of variable name -> value"),
                ("setup", setup, (str, list, tuple), "a shell line or a list of them"),
                ("sbatch_args", sbatch_args, (list, tuple), "a list of sbatch options"),
                ("poll_interval", poll_interval, (int, float), "seconds (a number > 0)"),
                ("deferrable", deferrable, (bool,), "True or False"),
                ("requeue", requeue, (bool,), "True, False or None"),
                ("cancel_on_kill", cancel_on_kill, (bool,), "True or False"),
                ("follow_output", follow_output, (bool,), "True or False"),
            ),
            positive=["poll_interval"],
        )
        self.command = command
        self.script = script
        self.job_name = job_name
        self.partition = partition
        self.qos = qos
        self.account = account
        self.gpus = gpus
        self.gres = gres
        self.cpus_per_task = cpus  # sbatch's --cpus-per-task
        self.mem = mem
        self.time_limit = time_limit
        self.array = array
        self.shape: dict[str, Any] = {  # checked by check_shape (core/job_shape.py)
            "nodes": nodes,
            "ntasks_per_node": ntasks_per_node,
            "gpus_per_node": gpus_per_node,
            "gpus_per_task": gpus_per_task,
            "cpus_per_gpu": cpus_per_gpu,
            "exclusive": exclusive,
            "constraint": constraint,
            "nodelist": nodelist,
            "exclude": exclude,
            "distributed": distributed,
            "rank_exit_grace": rank_exit_grace,
        }
        self.nice = nice
        self.requeue = requeue
        self.open_mode = open_mode
        self.output_path = output_path
        self.error_path = error_path
        self.working_dir = working_dir
        self.environment = dict(env or {})
        self.setup = [setup] if isinstance(setup, str) else list(setup or [])
        self.sbatch_args = list(sbatch_args or [])
        self.slurm_conn_id = slurm_conn_id
        self.deferrable = settings.default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.follow_output = follow_output
        try:
            self.time_limit_chain = time_limit_chain_settings(time_limit_chain)
        except InvalidArgumentError as exc:
            raise argument_error(self.task_id, exc, {}) from exc
        self._segments: list[dict[str, Any]] = []  # a time-limit chain's segments, once it ended
        self._followed_lines: int | None = None  # lines of the output already shown in the log as they came
        self._final_status: JobStatus | None = None  # how the job ended, its requeues, a problem (OpenLineage)
        self._preemptions = 0
        self._problem: str | None = None
        self._lineage_source = ""
        self._job_id: str | None = None
        self._preemption_events: list[str] = []  # when Slurm preempted and requeued the job (for the log)
        # fail at DAG parse time, naming the argument, rather than when the task runs
        self._validate_static()

    # -- building the job ------------------------------------------------------------------------------
    def _validate_static(self) -> None:
        command = self.command
        if command is None and self.script is None:
            if type(self) is SlurmJobOperator:
                raise AirflowException(f"{self.task_id}: give either command (argv list or shell string) or script")
            command = ["true"]  # a subclass makes its command when it runs (a Python call)
        try:
            SlurmJobSpec(
                command=command if self.script is None else None,
                script=self.script,
                gpus=self.gpus,
                gres=self.gres,
                cpus_per_task=self.cpus_per_task,
                mem=self.mem,
                time_limit=self.time_limit,
                nice=self.nice,
                open_mode=self.open_mode,
                environment=self.environment,
                sbatch_args=self.sbatch_args,
                array=self.array if self.array and "{{" not in str(self.array) else None,
                requeue=self.requeue,
                time_limit_chain=self._chain(None),
                chain_records="/" if self.time_limit_chain else None,
                **self._launch(None),
            )
        except InvalidArgumentError as exc:
            raise argument_error(self.task_id, exc, _SPEC_NAMES) from exc

    def _task_dir(self, context) -> str:
        return settings.task_directory(settings.slurm_output_dir(), context["ti"])

    def _command(self, context) -> Sequence[str] | str | None:
        return self.command

    def _launch(self, context) -> dict[str, Any]:
        """The job's shape and distributed start (SlurmJobSpec fields)."""
        return dict(self.shape)

    def _setup(self, context) -> list[str]:
        """The lines the job script runs before the command, at each start of the job (a requeue starts it again)."""
        return list(self.setup)

    def _chain(self, context) -> TimeLimitChain | None:
        """The job's time-limit chain, its checkpoint filled in: the folder ``checkpoint`` in the task's folder
        unless given (the job gets it as ``$GPUSCHED_CHECKPOINT_DIR``, where the examples' checkpoints go)."""
        chain = self.time_limit_chain
        if chain is None or chain.checkpoint:
            return chain
        where = self._checkpoint_dir(context) if context is not None else "/checkpoint"
        return dataclasses.replace(chain, checkpoint=where)

    def _checkpoint_dir(self, context) -> str:
        return os.path.join(self._task_dir(context), "checkpoint")

    def _chain_records(self, context) -> str:
        """Where a time-limit chain's segments are recorded: the task's folder ('' without a chain)."""
        return self._task_dir(context) if self.time_limit_chain else ""

    def _environment(self, context) -> dict[str, Any]:
        """The job's variables: the user's, and a chain's default checkpoint folder (when it names none)."""
        env = dict(self.environment)
        if self.time_limit_chain is not None and not self.time_limit_chain.checkpoint:
            folder = self._checkpoint_dir(context)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            env.setdefault(CHECKPOINT_ENV, folder)
        return env

    def build_spec(self, context, comment: str) -> SlurmJobSpec:
        ti = context["ti"]
        os.makedirs(self._task_dir(context), exist_ok=True)
        # the UI reads this folder's files (output, a chain's records) only under the DAG its dags.json lists
        try:
            unclaimed = claim_output_folder(self._task_dir(context), ti.dag_id)
        except GpuschedError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None
        if unclaimed:
            self.log.warning("%s", unclaimed)
        output = self._output_pattern(context)
        command = self._command(context)
        return SlurmJobSpec(
            command=command if self.script is None else None,
            script=self.script,
            job_name=self.job_name or f"{ti.dag_id}.{ti.task_id}",
            partition=self.partition,
            qos=self.qos,
            account=self.account,
            gpus=self.gpus,
            gres=self.gres,
            cpus_per_task=self.cpus_per_task,
            mem=self.mem,
            time_limit=self.time_limit,
            array=self.array,
            nice=self.nice,
            requeue=self.requeue,
            open_mode=self.open_mode,
            output=output,
            error=self.error_path,
            working_dir=self.working_dir,
            environment=self._environment(context),
            setup=self._setup(context),
            sbatch_args=self.sbatch_args,
            comment=comment,
            time_limit_chain=self._chain(context),
            chain_records=self._chain_records(context) or None,
            **self._launch(context),
        )

    # -- running -----------------------------------------------------------------------------------------
    def execute(self, context) -> Any:
        hook = SlurmHook(self.slurm_conn_id)
        manager = self._job_manager(context, hook.get_conn())
        job_id, output_path = self._submit(context, hook, manager)
        self._publish_submitted(context, hook, job_id, output_path)
        array_size = len(parse_array_indices(self.array)) if self.array else None
        poll = self.poll_interval or settings.poll_interval()
        if self.deferrable:
            self._defer(hook, job_id, output_path, array_size, poll)
        return self._run_blocking(context, manager, job_id, output_path, array_size, poll)

    def _job_manager(self, context, client) -> SlurmJobManager:
        """The manager of this task instance's job (its key: every try has it; its family: the same task in other
        DAG runs, whose orphans it adopts or cancels)."""
        ti = context["ti"]
        return SlurmJobManager(
            client,
            task_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index),
            family=task_family_key(ti.dag_id, ti.task_id, ti.map_index),
            owner_state=lambda run: task_state_in_run(ti, run),
            log=self.log,
        )

    def _submit(self, context, hook: SlurmHook, manager: SlurmJobManager) -> tuple[str, str]:
        """This task instance's job (re-attached, adopted or submitted now) and its output file."""
        ti = context["ti"]
        key, family = manager.key, manager.family

        def build() -> tuple[SlurmJobSpec, str]:
            tag = self.work_tag(context)
            refuse_if_stopped(self.task_id, tag)
            spec = hook.apply_defaults(self.build_spec(context, job_comment(key)), self.job_class, self.priority)
            work = self.work_key(context, spec)
            spec.comment = job_comment(key, ti.try_number, task=family, work=work, run=ti.run_id, tag=tag)
            return spec, work

        try:
            attached, spec = manager.start(build)
        except SlurmCommandError as exc:  # sbatch refused the job: not something a retry fixes
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        output_path = manager.output_path(attached, spec, self._output_pattern(context))
        if attached.submitted:
            assert spec is not None
            self.log.info("Submitted Slurm job %s (sbatch %s)", attached.job_id, " ".join(spec.sbatch_argv()))
            advice = spec.chain_advice()
            if advice:
                self.log.warning("%s", advice)
        self._job_id = attached.job_id
        return attached.job_id, output_path

    def _publish_submitted(self, context, hook: SlurmHook, job_id: str, output_path: str) -> None:
        """The job's id and output as XComs, its first record for the Slurm job view, and the task's links."""
        ti = context["ti"]
        ti.xcom_push(key="slurm_job_id", value=job_id)
        ti.xcom_push(key="slurm_output", value=output_path)
        ti.xcom_push(
            key=SLURM_JOB_XCOM,
            value=job_record(
                job_id,
                output_path=output_path,
                array=self.array,
                runner=hook.runner_description,
                chain_records=self._chain_records(context),
            ),
        )
        publish_links(self, context)

    def _defer(self, hook: SlurmHook, job_id: str, output_path: str, array_size: int | None, poll: float) -> None:
        """Wait in the triggerer (:class:`SlurmJobTrigger`); :meth:`execute_complete` takes over at the job's end."""
        self.defer(
            trigger=SlurmJobTrigger(
                job_id=job_id,
                runner=hook.runner_description,
                poll_interval=poll,
                array_size=array_size,
                not_found_timeout=settings.not_found_timeout(),
                cancel_on_kill=self.cancel_on_kill,
                output_path=output_path,
                fire_after=time.time() + settings.min_deferral(),
                follow_output=self.follow_output,
                chain=self.time_limit_chain is not None,
            ),
            method_name="execute_complete",
        )

    def _run_blocking(
        self,
        context,
        manager: SlurmJobManager,
        job_id: str,
        output_path: str,
        array_size: int | None,
        poll: float,
    ) -> Any:
        """Wait in the worker, then finish as :meth:`execute_complete` does."""
        waited = manager.wait(
            job_id,
            output_path,
            poll_interval=poll,
            array_size=array_size,
            not_found_timeout=settings.not_found_timeout(),
            follow_output=self.follow_output,
            chain=self.time_limit_chain is not None,
        )
        return self._finish_wait(context, waited)

    def _finish_wait(self, context, waited: JobWait) -> Any:
        """The end of a followed job (here or in the triggerer): its requeues and shown output noted, then
        :meth:`_finish`."""
        self._followed_lines = waited.followed_lines
        self._preemption_events = waited.preemption_events
        return self._finish(context, waited.job, waited.output_path, waited.preemptions, waited.problem)

    def _log_chain(self, context, client, status: JobStatus) -> str | None:
        """A time-limit chain's segments in the task log (and for the job view); why the chain ended, if it ended
        without finishing its work."""
        if not self.time_limit_chain:
            return None
        keys = sorted(status.tasks, key=array_task_order) if status.tasks else [status.job_id]
        try:
            segments, problems = read_chain(client, self._task_dir(context), keys)
        except GpuschedError as exc:
            self.log.warning("Cannot read the time-limit chain's records: %s", exc)
            return None
        for line in problems:
            self.log.warning("Ignored a line of the time-limit chain's records: %s", line)
        self._segments = [s.to_dict() for s in segments]
        if segments:
            self.log.info(
                "Time-limit chain of Slurm job %s, %d segment(s):\n  %s",
                status.job_id,
                len(segments),
                "\n  ".join(s.describe() for s in segments),
            )
        failures = [chain_failure([s for s in segments if s.job == key]) for key in keys]
        return next((f for f in failures if f), None)

    def work_tag(self, context) -> WorkTag:
        """Which DAG run, task and sweep this job is for, as its comment records it (``gpusched queue``)."""
        return work_tag(context, self.job_class)

    def work_key(self, context, spec: SlurmJobSpec) -> str:
        """What makes two submissions the same work: the script and the resources (not name, output, comment)."""
        skip = ("--comment=", "--output=", "--error=", "--job-name=")
        return work_key(spec.render_script(), *(a for a in spec.sbatch_argv() if not a.startswith(skip)))

    def _output_pattern(self, context) -> str:
        """The job's output file, with Slurm's ``%j`` / ``%A_%a`` (the same for every try, so a
        re-attached job's output is found too)."""
        return self.output_path or os.path.join(self._task_dir(context), "%A_%a.out" if self.array else "%j.out")

    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        self._job_id = event.get("job_id")
        return self._finish_wait(context, JobWait.from_event(event))

    def _finish(
        self, context, job: dict[str, Any] | None, output_path: str, preemptions: int, problem: str | None
    ) -> Any:
        client = SlurmHook(self.slurm_conn_id).get_conn()
        if job is None:
            raise SlurmJobFailed(f"Slurm job {self._job_id or '?'}: {problem}")
        end = self._job_manager(context, client).finish(
            JobStatus.from_dict(job), output_path, problem, settings.output_tail_lines()
        )
        status, tail, tail_path = end.status, end.tail, end.tail_path
        self._job_id = status.job_id
        chain_problem = self._log_chain(context, client, status)
        if chain_problem and not problem and not end.stopped:
            problem = chain_problem
        preemptions = self._log_requeues(status, preemptions)
        if status.tasks:
            for key in sorted(status.tasks, key=array_task_order):
                self.log.info("  array task %s", status.tasks[key].describe())
        if self._followed_lines is not None and status.phase.is_success and not problem:
            self.log.info(
                "The job's output (%d lines) was shown above as it was written: %s", self._followed_lines, tail_path
            )
        elif tail:
            self.log.info("Last lines of %s:\n%s", tail_path, tail)
        self._publish_final(context, status, output_path, preemptions, tail, tail_path, problem)
        self._final_status, self._preemptions, self._problem = status, preemptions, problem
        # where the job id means something, for OpenLineage (whose methods must not look connections up)
        self._lineage_source = lineage.slurm_source(client.runner.describe())
        if end.stopped is not None:
            raise WorkStopped(end.stop_message())  # no retry: someone stopped it
        if not end.succeeded:
            raise SlurmJobFailed(end.failure_message(), status.to_dict())
        return self.result_value(context, status, output_path, preemptions)

    def _log_requeues(self, status: JobStatus, preemptions: int) -> int:
        """The job's requeues in the task log; returns how many there were. A time-limit chain's own records count
        them, whatever the polls saw (a poll that began late, or a triggerer that restarted, missed some); for an
        array, the task that requeued most."""
        if self.time_limit_chain is not None:
            by_job: dict[str, int] = {}
            for segment in self._segments:
                if segment.get("outcome") == "requeued":
                    by_job[segment["job"]] = by_job.get(segment["job"], 0) + 1
            preemptions = max([preemptions, *by_job.values()])
        if preemptions and self.time_limit_chain is not None:
            self.log.info(
                "Slurm job %s was requeued %d time(s) by its time-limit chain:\n  %s",
                status.job_id,
                preemptions,
                "\n  ".join(self._preemption_events),
            )
        elif preemptions:
            self.log.warning(
                "Slurm job %s was preempted and requeued %d time(s) before finishing:\n  %s",
                status.job_id,
                preemptions,
                "\n  ".join(self._preemption_events),
            )
        return preemptions

    # -- OpenLineage (the provider calls these; lineage.py) --------------------------------------------------
    lineage_job_type = "SLURM_JOB"

    def _lineage_run(self) -> dict[str, Any]:
        status = self._final_status
        return {
            "backend": "slurm",
            "jobClass": self.job_class,
            "priority": self.priority,
            "request": {
                k: v
                for k, v in (
                    ("partition", self.partition),
                    ("qos", self.qos),
                    ("gpus", self.gpus),
                    ("gres", self.gres),
                    ("mem", self.mem),
                    ("time_limit", self.time_limit),
                    ("array", self.array),
                    *((k, v) for k, v in self.shape.items() if k != "rank_exit_grace"),
                )
                if v not in (None, "", [], False)
            },
            "placement": {"nodes": status.nodes, "partition": status.partition} if status else {},
            "attempts": 1 + self._preemptions,
            "preemptions": self._preemptions,
            "oomRetries": 0,
        }

    def _lineage_external(self) -> tuple[str, str]:
        return (str(self._job_id or ""), self._lineage_source) if self._lineage_source else ("", "")

    def _lineage_failure(self) -> tuple[str, str]:
        status = self._final_status
        if status is not None:
            return status.phase.value, self._problem or status.describe()
        return ("not submitted" if not self._job_id else "lost", self._problem or "no final state was seen")

    def _publish_final(
        self,
        context,
        status: JobStatus,
        output_path: str,
        preemptions: int,
        tail: str,
        tail_path: str,
        problem: str | None,
    ) -> None:
        """The job's final record for the UI's Slurm job view (XCom ``gpusched_slurm_job``)."""
        ti = context["ti"]
        try:
            submitted = (ti.xcom_pull(task_ids=ti.task_id, key=SLURM_JOB_XCOM, map_indexes=ti.map_index) or {}).get(
                "submitted"
            )
            record = job_record(
                status.job_id,
                output_path=output_path,
                array=self.array,
                runner=SlurmHook(self.slurm_conn_id).runner_description,
                submitted=submitted,
                status=status,
                preemptions=preemptions,
                preemption_events=list(self._preemption_events),
                chain_records=self._chain_records(context),
                segments=list(self._segments),
                tail=tail,
                tail_path=tail_path,
                problem=problem,
            )
            ti.xcom_push(key=SLURM_JOB_XCOM, value=record)
        except Exception as exc:  # noqa: BLE001 - the job's outcome matters more than its page
            self.log.warning("Could not publish the Slurm job record for the UI: %s", exc)

    def result_value(self, context, status: JobStatus, output_path: str, preemptions: int) -> Any:
        result: dict[str, Any] = {
            "job_id": status.job_id,
            "state": status.state,
            "exit_code": status.exit_code,
            "output_path": output_path,
            "nodes": status.nodes,
            "partition": status.partition,
            "preemptions": preemptions,
            "preemption_events": list(self._preemption_events),
        }
        if self._segments:
            result["segments"] = list(self._segments)
        if status.tasks:
            result["array_tasks"] = {k: {"state": t.state, "exit_code": t.exit_code} for k, t in status.tasks.items()}
        return result

    def on_kill(self) -> None:
        if self._job_id and self.cancel_on_kill:
            self.log.info("Task killed: cancelling Slurm job %s", self._job_id)
            SlurmHook(self.slurm_conn_id).get_conn().cancel([self._job_id])


class SlurmPythonOperator(SlurmJobOperator):
    """Run ``python_callable(*op_args, **op_kwargs)`` as a Slurm job; its return value becomes the XCom.

    The callable is pickled (by value when it lives in a DAG file) into the task's directory under
    ``[gpusched] slurm_output_dir``, which must be visible from the compute nodes; the job runs
    ``python -m airflow_provider_gpusched.core.pyfunc DIR`` with ``python`` (default: this interpreter,
    so the job sees the same packages). Resources as for :class:`SlurmJobOperator`; ``setup`` lines
    (``source /path/env.sh``) run first.

    With ``distributed`` (``"torchrun"`` or ``"srun"``) the function runs on every rank: a parameter named
    ``rank_info`` receives its :class:`~airflow_provider_gpusched.core.distributed.RankInfo` (or call
    ``airflow_provider_gpusched.rank_info()``); the XCom is rank 0's return value; the first rank to raise fails the
    task with its traceback, rank and node; a rank still running ``rank_exit_grace`` seconds after another ended
    stops itself, saying where it hung.
    """

    template_fields: Sequence[str] = (*SlurmJobOperator.template_fields, "op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        python: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(python_callable):
            raise AirflowException(f"python_callable must be callable, got {python_callable!r}")
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args: Collection[Any] = list(op_args or [])  # typed as DecoratedOperator types them
        self.op_kwargs: Mapping[str, Any] = dict(op_kwargs or {})
        self.python = python or sys.executable

    def _call_dir(self, context) -> str:
        return os.path.join(self._task_dir(context), "call")

    def call_arguments(self, context) -> tuple[list[Any], dict[str, Any]]:
        return callable_arguments(self.python_callable, self.op_args, self.op_kwargs, context, self.log)

    def _command(self, context) -> list[str]:
        args, kwargs = self.call_arguments(context)
        grace = self.shape["rank_exit_grace"] if self.shape["distributed"] else None
        pyfunc.write_call(self._call_dir(context), self.python_callable, tuple(args), kwargs, rank_exit_grace=grace)
        return [self.python, "-m", "airflow_provider_gpusched.core.pyfunc", self._call_dir(context)]

    def _chain(self, context) -> TimeLimitChain | None:
        """A callable with a checkpoint method (``__submitit_checkpoint__`` or ``checkpoint``) is continued from the
        call that method returns: the call file is the chain's checkpoint. Any other callable checkpoints itself,
        where the chain's ``checkpoint`` says (by default ``$GPUSCHED_CHECKPOINT_DIR``, as for a command)."""
        chain = self.time_limit_chain
        func = getattr(self, "python_callable", None)
        if chain is None or chain.checkpoint or func is None or pyfunc.checkpoint_hook(func) is None:
            return super()._chain(context)
        where = os.path.join(self._call_dir(context), pyfunc.CALL_FILE) if context is not None else "/call.pkl"
        return dataclasses.replace(chain, checkpoint=where)

    def _setup(self, context) -> list[str]:
        """A requeued job starts afresh: what its preempted start left (an error, ranks' ends) goes first."""
        return [pyfunc.clear_outcome_line(self._call_dir(context)), *super()._setup(context)]

    def _launch(self, context) -> dict[str, Any]:
        """torchrun from the same interpreter; srun's own stop (``--wait``) a little after the ranks' own, so that a
        hung rank stops itself first and says where it was."""
        python = getattr(self, "python", None) or sys.executable  # (checked at parse time before it is set)
        launch = dict(self.shape, torchrun=[python, "-m", "torch.distributed.run"])
        grace = self.shape["rank_exit_grace"]
        if is_number(grace):  # (a bad one is refused by the spec)
            launch["rank_exit_grace"] = launcher_grace(grace, python_call=True)
        return launch

    def _finish(self, context, job, output_path, preemptions, problem):
        try:
            return super()._finish(context, job, output_path, preemptions, problem)
        except SlurmJobFailed as exc:
            outcome = pyfunc.read_outcome(self._call_dir(context))
            if outcome.error is not None:
                self.log.error("The callable raised in Slurm job %s:\n%s", self._job_id, outcome.error.remote_traceback)
                raise SlurmJobFailed(
                    f"{self.python_callable.__name__} raised {outcome.error} in Slurm job "
                    f"{self._job_id}\n--- remote traceback ---\n"
                    f"{outcome.error.remote_traceback}",
                    exc.status,
                ) from None
            raise

    def result_value(self, context, status, output_path, preemptions):
        outcome = pyfunc.read_outcome(self._call_dir(context))
        if not outcome.finished:
            raise SlurmJobFailed(
                f"Slurm job {status.job_id} completed but left no result in "
                f"{self._call_dir(context)} (is that directory shared with the compute nodes?)"
            )
        return outcome.value
