"""LocalGPUOperator: run a program or a Python callable on this host's GPUs.

It leases GPUs (whole, or memory on a shared GPU), runs the work in its own process group with
``CUDA_VISIBLE_DEVICES`` set, streams the output into the task log, and retries a GPU out-of-memory
failure with a bigger reservation. While the GPUs are busy the task defers (no worker slot is held).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_gpusched import fleet, lineage, metrics, settings
from airflow_provider_gpusched.callables import callable_arguments
from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.board import (
    GPU_TIME_XCOM,
    LEASE_XCOM,
    WAIT_XCOM,
    gpu_time_record,
    lease_record,
    wait_record,
)
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, check_grace, check_mode
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu import attempts
from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError
from airflow_provider_gpusched.core.gpu.launch import GPUChild
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import AttemptHooks, attempt_loop
from airflow_provider_gpusched.core.gpu.timeline import LEASE_HISTORY_XCOM, SegmentLog, attempt_outcome, segment_of
from airflow_provider_gpusched.core.gpu.work import Work
from airflow_provider_gpusched.core.units import time_limit_seconds
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook
from airflow_provider_gpusched.links import GPULeaseLink, publish_links
from airflow_provider_gpusched.operators.arguments import argument_error, check_argument_types, renamed_argument
from airflow_provider_gpusched.operators.job_class import (
    apply_local_gpu_class,
    apply_partial_job_class,
    apply_quota_group_to,
    quota_pool_for_partial,
)
from airflow_provider_gpusched.operators.queue_stops import WorkStopped, refuse_if_stopped, work_tag
from airflow_provider_gpusched.triggers.local_gpu import FleetRoomTrigger, GPUAvailableTrigger


class WorkTimedOut(AirflowException):
    """The work reached its ``time_limit`` and was stopped (Airflow's retries apply, as to any failure)."""

    #: the state a sweep trial whose task raised this ends in (task_groups/trial_operators.py)
    trial_end = "timeout"


class LocalGPUOperator(lineage.LineageFacets, BaseOperator):
    """Run work on local GPUs.

    :param command: argv list, run directly (no shell). Templated.
    :param bash_command: a shell command line, run by bash (explicitly a shell). Templated.
    :param python_callable: a function to call in the GPU child (with ``op_args``/``op_kwargs``); its
        return value becomes the XCom, and XCom ``gpus_used`` says where it ran.
    :param gpus: number of GPUs (default 1). Without ``gpu_memory`` they are whole GPUs.
    :param gpu_memory: memory to reserve on each GPU (``"10GiB"``): the GPU may be shared (packing).
    :param devices: restrict to these GPU indices.
    :param device_groups: fixed GPU groups (``[[0, 1], [2, 3]]``, or mixed ``[[0], [1, 2]]``): the work takes one
        whole group, whichever is free first, and sees exactly its GPUs (GPU Task Scheduler's GPU groups).
    :param memory_margin: (and ``max_foreign_processes``, ``min_free_ram``, ``max_cpu_percent``) admission limits (not given:
        ``[gpusched] gpu_memory_margin``, ``min_free_ram``, ``max_cpu_percent``: fedflow's host limits).
    :param cpus: host CPUs this task reserves while it runs: CPUs no other lease holds, its child pinned to them
        (CPU affinity; ``$GPUSCHED_CPUS`` lists them, ``OMP_NUM_THREADS`` defaults to their number).
    :param mem: host RAM this task reserves while it runs (``'16GiB'``): admitted only while the
        reservations of all live leases on this host fit its budget ($GPUSCHED_HOST_MEMORY, else 90% of RAM).
    :param oom_retries: (and ``oom_factor``) GPU OOM retries, each reserving ``oom_factor`` x more, the last a
        whole GPU. Other failures go to Airflow's ``retries``.
    :param env: extra environment (templated); ``cwd``: working directory (default: a per-run directory).
    :param time_limit: how long each start of the work may run, as Slurm's ``--time`` (minutes as an int,
        ``'01:30:00'``, ``'2-00:00:00'``, a timedelta): then it is stopped (SIGTERM, ``grace_period``, SIGKILL) and
        the task fails saying it reached its time limit (a sweep trial ends ``timeout``). A relaunch after a
        preemption starts a new limit, as a requeued Slurm job does.
    :param setup: shell lines run before the work, in the shell that then starts it (``source /shared/env.sh``),
        as a Slurm job script runs its ``setup`` lines; the command's arguments still reach it verbatim.
    :param grace_period: seconds between SIGTERM and SIGKILL when the task is stopped.
    :param wait_mode: ``"defer"`` (default: wait in the triggerer), ``"reschedule"`` (free the slot and
        try again later; for several GPU hosts) or ``"block"`` (wait in the worker).
    :param defer_after: deferring mode: seconds to look for GPUs again in the worker (every 0.2 s) before deferring,
        so a GPU that frees soon is taken at once (default ``[gpusched] defer_after``, 0: defer at once).
    :param job_class: (and ``priority``) ``"normal"`` (default) or ``"idle"``, and a whole-number priority. The
        ``[gpusched] job_classes`` mapping turns them into the Airflow pool, ``pool_slots`` (one per GPU by
        default) and ``priority_weight``; an idle lease is preemptible (see docs/idle-filling.md).
    :param group: with team quotas (``[gpusched] quotas``), the group the work counts for; default: the group whose
        ``members`` list the task's ``owner``, else the quotas' ``default_group``. Work beyond its group's quota
        borrows idle GPUs and gives them back when their group needs them (docs/quotas.md).
    :param distributed: start the work as one rank per leased GPU: ``"torchrun"`` (``torchrun --standalone``,
        ``nproc_per_node`` = the lease's GPUs) or ``"srun"`` (the same per-GPU processes and variables as on Slurm,
        ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, started by gpusched: there is no
        srun here). A callable runs on every rank (a ``rank_info`` parameter gets its place); the XCom is rank 0's.
    :param rank_exit_grace: seconds the other ranks may run on after the first one ended; 0: no limit.
    :param load_stage: fedflow's two-stage task: the work starts with host resources only (``mem``, ``cpus``; no GPU
        visible) and gets its GPUs, placed by ``gpus``/``gpu_memory`` as usual, when it calls
        ``airflow_provider_gpusched.wait_for_gpus()`` after loading its data; the data stays loaded while it waits.
    :param max_waiting: with ``load_stage``: a load stage starts only while fewer than this many load-stage tasks on
        the host are loading or loaded and waiting for GPUs (fedflow's ``scheduler.max-waiting``); not given:
        ``[gpusched] max_waiting`` (0: no bound).
    """

    template_fields: Sequence[str] = ("command", "bash_command", "env", "cwd", "op_args", "op_kwargs", "setup")
    template_fields_renderers = {"bash_command": "bash", "env": "json"}
    ui_color = "#d5f5e3"
    operator_extra_links: tuple[BaseOperatorLink, ...] = (GPULeaseLink(),)

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """Airflow's ``partial``, with the job class's pool and weight and, in a fleet, queue for the mapped tasks."""
        apply_partial_job_class(kwargs, local_gpus=True)
        return quota_pool_for_partial(super().partial(**kwargs), kwargs.get("job_class", "normal"))

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        bash_command: str | None = None,
        python_callable: Callable[..., Any] | None = None,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        gpus: int = 1,
        gpu_memory: int | str | None = None,
        devices: Sequence[int] | None = None,
        device_groups: Sequence[Sequence[int]] | None = None,
        memory_margin: int | str | None = None,
        max_foreign_processes: int | None = None,
        min_free_ram: int | str | None = None,
        max_cpu_percent: float | None = None,
        mem: int | str | None = None,
        cpus: int | None = None,
        oom_retries: int = 2,
        oom_factor: float = 1.5,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        setup: Sequence[str] | str | None = None,
        time_limit: int | str | timedelta | None = None,
        grace_period: float = 10.0,
        wait_mode: str = "defer",
        poll_interval: float | None = None,
        defer_after: float | None = None,
        job_class: str = "normal",
        priority: int = 0,
        group: str | None = None,
        distributed: str | None = None,
        rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
        load_stage: bool = False,
        max_waiting: int | None = None,
        host_memory: int | str | None = None,  # the old name of mem
        **kwargs: Any,
    ) -> None:
        mem = renamed_argument(kwargs.get("task_id", "?"), "mem", mem, "host_memory", host_memory)
        limits = settings.host_limit_defaults()  # [gpusched] defaults for the limits not given here
        memory_margin = limits["memory_margin"] if memory_margin is None else memory_margin
        min_free_ram = limits["min_free_ram"] if min_free_ram is None else min_free_ram
        max_cpu_percent = limits["max_cpu_percent"] if max_cpu_percent is None else max_cpu_percent
        max_waiting = limits["max_waiting"] if max_waiting is None else max_waiting
        if (
            isinstance(device_groups, (list, tuple))
            and device_groups
            and all(isinstance(g, (list, tuple)) for g in device_groups)
        ):
            gpus = max(len(g) for g in device_groups)  # a whole group: its pool slots are its largest group's GPUs
        job_class, priority = apply_local_gpu_class(kwargs, job_class, priority, gpus, gpu_memory)
        super().__init__(**kwargs)
        given = [x for x in (command, bash_command, python_callable) if x is not None]
        if len(given) != 1:
            raise AirflowException(
                f"{self.task_id}: give exactly one of command (argv list), bash_command "
                f"(shell string) or python_callable"
            )
        check_argument_types(
            self.task_id,
            (
                ("command", command, (list, tuple, str), "an argv list such as ['python', 'train.py']"),
                ("bash_command", bash_command, (str,), "a shell command line"),
                ("env", env, (Mapping,), "a mapping of variable name -> value"),
                ("cwd", cwd, (str,), "a directory path"),
                ("setup", setup, (str, list, tuple), "a shell line or a list of them"),
                ("op_args", op_args, (list, tuple), "a list of positional arguments"),
                ("op_kwargs", op_kwargs, (Mapping,), "a mapping of keyword arguments"),
                ("grace_period", grace_period, (int, float), "seconds (a number >= 0)"),
                ("poll_interval", poll_interval, (int, float), "seconds (a number > 0)"),
                ("defer_after", defer_after, (int, float), "seconds (a number >= 0)"),
            ),
            positive=["poll_interval"],
        )
        if defer_after is not None and defer_after < 0:
            raise AirflowException(f"{self.task_id}: defer_after: expected seconds (a number >= 0), got {defer_after}")
        if grace_period is None or grace_period < 0:
            raise AirflowException(
                f"{self.task_id}: grace_period: expected seconds (a number >= 0), got {grace_period}"
            )
        if isinstance(command, str):
            raise AirflowException(
                f"{self.task_id}: command must be an argv list such as ['python', 'train.py']; "
                f"use bash_command for a shell command line"
            )
        if wait_mode not in ("defer", "reschedule", "block"):
            raise AirflowException(
                f"{self.task_id}: wait_mode must be 'defer', 'reschedule' or 'block', got {wait_mode!r}"
            )
        self.command = list(command) if command is not None else None
        self.bash_command = bash_command
        self.python_callable = python_callable
        self.op_args: Collection[Any] = list(op_args or [])  # typed as DecoratedOperator types them
        self.op_kwargs: Mapping[str, Any] = dict(op_kwargs or {})
        try:
            self.request = GPURequest(
                gpus=gpus,
                gpu_memory=gpu_memory,
                devices=devices,
                device_groups=device_groups,
                memory_margin=memory_margin,
                max_foreign_processes=max_foreign_processes,
                min_free_ram=min_free_ram,
                max_cpu_percent=max_cpu_percent,
                host_memory=mem,
                cpus=cpus,
                load_stage=load_stage,
                max_waiting=max_waiting,
            )
            self.oom_policy = OOMRetryPolicy(retries=oom_retries, factor=oom_factor)
            self.distributed = check_mode(distributed)
            if load_stage and self.distributed:
                raise InvalidArgumentError(
                    "load_stage", load_stage, "work started as one process (not with distributed=...)"
                )
            self.time_limit = None if time_limit is None else time_limit_seconds(time_limit)
            self.rank_exit_grace = check_grace(rank_exit_grace)
        except InvalidArgumentError as exc:  # the request calls mem host_memory (mem's old name, if given so)
            raise argument_error(self.task_id, exc, {} if host_memory is not None else {"host_memory": "mem"}) from exc
        self.env = dict(env or {})
        self.cwd = cwd
        self.setup = [setup] if isinstance(setup, str) else list(setup or [])
        self.grace_period = grace_period
        self.wait_mode = wait_mode
        self.poll_interval = poll_interval
        self.defer_after = defer_after
        self.job_class = job_class
        self.priority = priority
        self.group = apply_quota_group_to(self, group, job_class)  # its quota group ('' without quotas)
        self.child: GPUChild | None = None  # the GPU process of the attempt that runs now (on_kill stops it)
        self.stop_requested = threading.Event()  # set by on_kill: every wait of this try ends
        self.wait_state = WaitState()  # how this try waits for GPUs: _TaskWaiting changes it
        self.attempts: list[Any] = []  # this try's attempts so far (OpenLineage facets): _TaskAttempts sets it

    # -- helpers -------------------------------------------------------------------------------------
    def run_dir(self, context) -> str:
        ti = context["ti"]
        return settings.task_directory(settings.local_run_dir(), ti, f"try-{ti.try_number}")

    def _task_key(self, context) -> str:
        """The task instance, whatever the try: two tries of it never hold GPUs at once."""
        ti = context["ti"]
        return (
            f"{ti.dag_id}.{ti.task_id}"
            + (f"[{ti.map_index}]" if ti.map_index is not None and ti.map_index >= 0 else "")
            + f" ({ti.run_id})"
        )

    def work_tag(self, context) -> WorkTag:
        """Which DAG run, task and sweep this work is for, as its lease records it (``gpusched queue``)."""
        return work_tag(context, self.job_class, group=self.group)

    def _owner(self, context) -> str:
        return self._task_key(context)[:-1] + f", try {context['ti'].try_number})"

    def call_arguments(self, context) -> tuple[list[Any], dict[str, Any]]:
        if self.python_callable is None:
            raise AirflowException(f"{self.task_id}: no python_callable to call")
        return callable_arguments(self.python_callable, self.op_args, self.op_kwargs, context, self.log)

    def work(self, context) -> Work:
        run_dir = self.run_dir(context)
        cwd = self.cwd or os.path.join(run_dir, "work")
        checkpoints = os.path.join(run_dir, "checkpoint")  # kept across relaunches within this try
        launch: dict[str, Any] = {
            "distributed": self.distributed,
            "rank_exit_grace": self.rank_exit_grace,
            "setup": self.setup,
            "time_limit": self.time_limit,
        }
        if self.python_callable is not None:
            call_dir = os.path.join(run_dir, "call")
            args, kwargs = self.call_arguments(context)
            pyfunc.write_call(
                call_dir,
                self.python_callable,
                tuple(args),
                kwargs,  # also clears old outcomes
                rank_exit_grace=self.rank_exit_grace if self.distributed else None,
            )
            return Work(call_dir=call_dir, env=self.env, cwd=cwd, checkpoint_dir=checkpoints, **launch)
        if self.bash_command is not None:
            return Work(shell_command=self.bash_command, env=self.env, cwd=cwd, checkpoint_dir=checkpoints, **launch)
        return Work(argv=self.command, env=self.env, cwd=cwd, checkpoint_dir=checkpoints, **launch)

    # -- execution -------------------------------------------------------------------------------------
    def execute(self, context) -> Any:
        publish_links(self, context)
        return self._run(context, attempts.WorkProgress(self.request))

    def resume(self, context, event: dict[str, Any]) -> Any:
        state = event["payload"]
        self.wait_state = WaitState.from_payload(state)
        return self._run(context, attempts.WorkProgress.from_dict(state))

    def _run(self, context, progress: attempts.WorkProgress) -> Any:
        """The attempt loop (:func:`~airflow_provider_gpusched.core.gpu.supervisor.attempt_loop`, the one the blocking
        runner uses too); this operator adds only how to wait (defer, reschedule or block: _TaskWaiting) and
        what it publishes."""
        hook = LocalGPUHook()
        owner, task_key = self._owner(context), self._task_key(context)
        try:
            manager = hook.get_conn()
            hooks = _TaskAttempts(self, context, manager, hook, owner, task_key)
            if fleet.enabled():
                hooks.waiting.land_in_fleet(context, manager, hook, progress, owner, task_key)
            else:
                manager.check_possible(progress.request)
        except (GPUInventoryError, InvalidArgumentError) as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc  # retrying cannot help
        return attempt_loop(
            manager,
            progress,
            hooks,
            job_class=self.job_class,
            oom_policy=self.oom_policy,
            stop_event=self.stop_requested,
            grace=self.grace_period,
        )

    # -- OpenLineage (the provider calls these; lineage.py) --------------------------------------------------
    lineage_job_type = "LOCAL_GPU"

    def _lineage_run(self) -> dict[str, Any]:
        tried = self.attempts
        last = tried[-1] if tried else None
        return {
            "backend": "local_gpu",
            "jobClass": self.job_class,
            "priority": self.priority,
            "request": {
                "description": self.request.describe(),
                "gpus": self.request.gpus,
                "gpu_memory": self.request.gpu_memory,
                "cpus": self.request.cpus,
                "time_limit": self.time_limit,
            },
            "placement": {"host": last.host, "gpus": list(last.gpus)} if last else {},
            "attempts": len(tried),
            "preemptions": sum(1 for a in tried if a.preempted),
            "oomRetries": sum(1 for a in tried[:-1] if a.oom),
        }

    def _lineage_failure(self) -> tuple[str, str]:
        last = self.attempts[-1] if self.attempts else None
        return attempt_outcome(last) if last is not None else ("not started", "it never got its GPUs")

    def on_kill(self) -> None:
        self.stop_requested.set()
        child = self.child
        if child is not None:
            self.log.info("Task killed: stopping the GPU process group %d", child.pid)
            child.stop(self.grace_period)


@dataclasses.dataclass
class WaitState:
    """How one try of a LocalGPUOperator task waits for GPUs; :class:`_TaskWaiting` changes it, a deferral carries
    what must survive it (:meth:`payload`, :meth:`from_payload`)."""

    #: when this try began waiting for GPUs (published to the board)
    waiting_since: float | None = None
    #: the wait whose length went out as a metric
    wait_measured: float | None = None
    #: when this try found the GPUs busy (defer_after counts from it)
    busy_since: float | None = None
    #: how long to wait here for idle work to yield
    yield_deadline: float | None = None
    #: in a fleet: the hosts this try landed on, in order
    fleet_hosts: list[str] = dataclasses.field(default_factory=list)

    def payload(self, fleet: bool = True) -> dict[str, Any]:
        return {"waiting_since": self.waiting_since, **({"fleet_hosts": self.fleet_hosts} if fleet else {})}

    @classmethod
    def from_payload(cls, state: dict[str, Any]) -> WaitState:
        hosts = [h for h in state.get("fleet_hosts") or [] if isinstance(h, str)][:100]
        return cls(waiting_since=state.get("waiting_since"), fleet_hosts=hosts)


class _TaskAttempts(AttemptHooks):
    """The operator's side of the attempt loop: a lease through the operator's waiting (look again here, defer to
    the triggerer, reschedule or block), the output in the task log, the lease, wait, history and GPU time
    published for the UI, metrics, and Airflow's exceptions at the end."""

    def __init__(self, operator: LocalGPUOperator, context, manager, hook, owner: str, task_key: str) -> None:
        self.op, self.context, self.manager, self.hook = operator, context, manager, hook
        self.owner, self.task_key = owner, task_key
        self.waiting = _TaskWaiting(operator, operator.wait_state)

    def acquire(self, progress: attempts.WorkProgress):
        return self.waiting.acquire(self.context, self.manager, self.hook, progress, self.owner, self.task_key)

    def work(self) -> Work:
        return self.op.work(self.context)

    def log_path(self) -> str:
        return os.path.join(self.op.run_dir(self.context), "output.log")

    def attempt_options(self) -> dict[str, Any]:
        op, context, manager = self.op, self.context, self.manager
        return {
            "on_line": lambda line: op.log.info("%s", line),
            "started": self._started,
            "on_gpus": lambda grown: self._publish_lease(context, grown, manager),
            "host": fleet.worker_host(context["ti"]),
        }

    def starting(self, banner: str, lease, log_path: str) -> None:
        self.op.log.info("%s; log %s", banner, log_path)
        if lease.gpus:  # a load stage has none yet: published when they are added (on_gpus)
            self._publish_lease(self.context, lease, self.manager)

    def _started(self, child: GPUChild) -> None:
        self.op.child = child

    def released(self, lease) -> None:
        self.op.child = None
        fleet.publish_quietly(self.manager)  # in a fleet: the head node sees the GPUs free at once

    def ended(self, outcome: attempts.AttemptOutcome, step: attempts.NextStep, progress: attempts.WorkProgress) -> None:
        op = self.op
        self._publish_history(self.context, progress)
        op.attempts = list(progress.attempts)
        if outcome.attempt.preempted:
            metrics.preemption(op.job_class, outcome.attempt.host)
            if op.group and outcome.attempt.preempted.startswith("reclaimed for"):
                metrics.quota_reclaim(op.group, outcome.attempt.host)
        if step.action is attempts.Action.RELAUNCH:
            op.log.warning("%s; no Airflow retry used", step.message)
            return
        self.waiting.state.waiting_since = None
        if step.action is attempts.Action.RETRY_BIGGER:
            metrics.oom_retry(op.job_class, outcome.attempt.host)
            op.log.warning("%s", step.message)
            return
        self._publish_gpu_time(self.context, progress)
        if step.action is attempts.Action.SUCCEEDED:
            op.log.info("%s", step.message)
        else:
            op.log.error("%s", step.message)

    def wait_to_relaunch(
        self, step: attempts.NextStep, outcome: attempts.AttemptOutcome, progress: attempts.WorkProgress
    ) -> None:
        self.waiting.wait_for_gpus(
            self.manager,
            self.hook,
            progress,
            self.owner,
            "backoff after a preemption",
            not_before=time.time() + step.wait,
            task_key=self.task_key,
        )

    def value(self, work: Work) -> Any:
        try:
            return attempts.work_value(work)
        except GpuschedError as exc:
            raise AirflowException(f"{self.op.task_id}: {exc}") from exc

    def succeeded(self, result: attempts.RunResult) -> Any:
        self.context["ti"].xcom_push(key="gpus_used", value=result.gpus)
        if self.op.python_callable is not None:
            return result.value
        return result.to_dict()

    def failed(
        self, step: attempts.NextStep, outcome: attempts.AttemptOutcome, progress: attempts.WorkProgress
    ) -> None:
        task_id = self.op.task_id
        if step.action is attempts.Action.HALTED:
            raise WorkStopped(f"{task_id}: {step.message}")  # no retry: someone stopped it
        if step.action is attempts.Action.TIMED_OUT:
            raise WorkTimedOut(f"{task_id}: {step.message}")
        raise AirflowException(f"{task_id}: {step.message}")

    def _publish_gpu_time(self, context, progress: attempts.WorkProgress) -> None:
        """GPU time used and lost by this try, for the board's per-class totals (XCom ``gpu_time``)."""
        context["ti"].xcom_push(
            key=GPU_TIME_XCOM, value=gpu_time_record(self.op.job_class, time.time(), progress.history.to_dict())
        )

    def _publish_history(self, context, progress: attempts.WorkProgress) -> None:
        """Every attempt of this try so far, as the GPU timeline's bars (XCom ``gpusched_lease_history``)."""
        ti = context["ti"]
        log = SegmentLog()
        for attempt in progress.attempts:
            log.add(
                segment_of(
                    attempt,
                    job_class=self.op.job_class,
                    priority=self.op.priority,
                    dag_id=ti.dag_id,
                    run_id=ti.run_id,
                    task_id=ti.task_id,
                    map_index=ti.map_index if ti.map_index is not None else -1,
                    group=self.op.group,
                )
            )
        ti.xcom_push(key=LEASE_HISTORY_XCOM, value=log.record())

    def _publish_lease(self, context, lease, manager) -> None:
        """Tell the UI's GPU board (which may run on another host) what this try holds: XCom ``gpusched_lease``."""
        ti = context["ti"]
        map_index = ti.map_index if ti.map_index is not None else -1
        ti.xcom_push(
            key=LEASE_XCOM,
            value=lease_record(
                fleet.worker_host(ti),
                dataclasses.asdict(lease),
                manager.inventory.gpus(),
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=map_index,
            ),
        )


class _TaskWaiting:
    """How a LocalGPUOperator task waits for GPUs, by its ``wait_mode``: look again in the worker for
    ``defer_after`` seconds, then defer to the triggerer (``defer``), or reschedule (``reschedule``), or keep
    looking in the worker (``block``); idle work yielding to it is waited for here. The attempt loop gets it
    through _TaskAttempts.acquire and wait_to_relaunch."""

    def __init__(self, operator: LocalGPUOperator, state: WaitState) -> None:
        self.op, self.state = operator, state

    def wait_for_gpus(
        self,
        manager,
        hook,
        progress: attempts.WorkProgress,
        owner: str,
        why: str,
        not_before: float | None = None,
        task_key: str = "",
    ) -> None:
        """Defer (or reschedule) until the request may fit; returns only in blocking mode, after a poll."""
        interval = self.op.poll_interval or settings.gpu_poll_interval()
        if self.op.wait_mode == "defer" and fleet.enabled():  # the head node's triggerer waits on the hosts' records
            self.op.defer(
                trigger=FleetRoomTrigger(
                    request=dataclasses.asdict(progress.request),
                    fleet_dir=settings.fleet_dir(),
                    poll_interval=interval,
                    not_before=not_before,
                    fire_after=time.time() + settings.min_deferral(),
                    payload={**progress.to_dict(), **self.state.payload()},
                    waiter=manager.quota_waiter(owner),
                ),
                method_name="resume",
            )
        if self.op.wait_mode == "defer":
            request = dataclasses.asdict(progress.request)
            self.op.defer(
                trigger=GPUAvailableTrigger(
                    request=request,
                    simulate=hook.simulate or None,
                    state_dir=manager.state_dir,
                    poll_interval=interval,
                    owner=owner,
                    job_class=self.op.job_class,
                    not_before=not_before,
                    task_key=task_key,
                    fire_after=time.time() + settings.min_deferral(),
                    payload={**progress.to_dict(), **self.state.payload(fleet=False)},
                    group=self.op.group,
                ),
                method_name="resume",
            )
        if self.op.wait_mode == "reschedule" and not progress.attempts:  # before the first attempt nothing is lost
            from datetime import timedelta

            from airflow.sdk import timezone
            from airflow.sdk.exceptions import AirflowRescheduleException

            raise AirflowRescheduleException(timezone.utcnow() + timedelta(seconds=interval))
        delay = max(interval, (not_before or 0) - time.time())
        if self.op.stop_requested.wait(delay):
            raise AirflowException(f"{self.op.task_id}: stopped while waiting for GPUs ({why})")

    def wait_for_yield(self, manager, owner: str, why: str) -> bool:
        """Idle work was asked to give up the GPUs for this request: it goes within its grace period, so wait
        here (a deferral would cost a task restart and could fire too soon for Airflow, see
        triggers/deferral.py). True to look again; False once nothing yields or the wait took too long."""
        if self.op.wait_mode == "reschedule":
            return False
        yielding = manager.yielding_to(owner)
        if not yielding:
            return False
        if self.state.yield_deadline is None:
            self.state.yield_deadline = time.monotonic() + manager.yield_grace(yielding) + 10
            self.op.log.info("Idle work is yielding its GPUs to this task; waiting for it: %s", why)
        if time.monotonic() > self.state.yield_deadline:
            return False
        if self.op.stop_requested.wait(0.5):
            raise AirflowException(f"{self.op.task_id}: stopped while idle work was yielding its GPUs")
        return True

    def land_in_fleet(self, context, manager, hook, progress: attempts.WorkProgress, owner: str, task_key: str) -> None:
        """In a fleet: record the host this try landed on (XCom ``gpusched_fleet_hosts``); refuse a request no
        host can ever hold, naming the hosts' sizes; and wait for room elsewhere when this host cannot hold it."""
        from airflow_provider_gpusched.core.fleet import FLEET_HOSTS_XCOM
        from airflow_provider_gpusched.core.host_name import this_host

        self.state.fleet_hosts.append(this_host())
        context["ti"].xcom_push(key=FLEET_HOSTS_XCOM, value=list(self.state.fleet_hosts))
        view = fleet.read_this_fleet()
        if view is None:  # called only in a fleet (fleet.enabled()); its directory went from the configuration since
            manager.check_possible(progress.request)
            return
        view.refuse_impossible(progress.request)  # InvalidArgumentError: the task fails, naming the sizes
        try:
            manager.check_possible(progress.request)
        except InvalidArgumentError as exc:
            if not view.hosts or self.op.wait_mode == "block":  # blocking here cannot make this host any bigger
                raise
            self.op.log.info(
                "This host cannot hold %s (%s); waiting for room on another host of the fleet",
                progress.request.describe(),
                exc,
            )
            self.wait_for_gpus(manager, hook, progress, owner, str(exc), task_key=task_key)

    def acquire(self, context, manager, hook, progress: attempts.WorkProgress, owner: str, task_key: str):
        """A lease for ``progress.request``, waiting (deferring, rescheduling or blocking) while GPUs are busy."""
        policy = manager.classes[self.op.job_class].local
        tag = self.op.work_tag(context)
        while True:
            refuse_if_stopped(self.op.task_id, tag, manager.state_dir)
            lease, why = manager.try_acquire(
                progress.request,
                owner,
                job_class=self.op.job_class,
                priority=self.op.priority,
                preemptible=progress.history.preemptible(policy),
                task_key=task_key,
                grace=self.op.grace_period,
                work=tag,
            )
            if lease is not None:
                self.state.busy_since = None
                fleet.publish_quietly(manager)
                if self.state.waiting_since is not None and self.state.wait_measured != self.state.waiting_since:
                    self.state.wait_measured = (
                        self.state.waiting_since
                    )  # metric gpusched.gpu_wait.<class>, once per wait
                    metrics.gpu_wait(
                        time.time() - self.state.waiting_since, self.op.job_class, fleet.worker_host(context["ti"])
                    )
                return lease
            if self.wait_for_yield(manager, owner, why):
                continue
            first = self.state.busy_since is None
            if first:
                self.state.busy_since = time.monotonic()
            here = self.look_again_here()
            if first or not here:
                self.op.log.info(
                    "GPUs busy for %s: %s%s",
                    progress.request.describe(),
                    why,
                    f" (looking again here for {self.defer_after():g}s before deferring)" if here else "",
                )
                self.publish_wait(context, manager, progress.request, why)
            if here:
                if self.op.stop_requested.wait(0.2):
                    raise AirflowException(f"{self.op.task_id}: stopped while waiting for GPUs ({why})")
                continue
            self.wait_for_gpus(manager, hook, progress, owner, why, task_key=task_key)

    def defer_after(self) -> float:
        return settings.defer_after() if self.op.defer_after is None else float(self.op.defer_after)

    def look_again_here(self) -> bool:
        """Deferring mode, GPUs busy: whether to look again in the worker (within ``defer_after`` of the first
        look) instead of deferring. A GPU that frees meanwhile is taken at once, where a deferral would cost at
        least ``min_deferral`` and a task restart."""
        if self.op.wait_mode != "defer" or self.state.busy_since is None:
            return False
        return time.monotonic() - self.state.busy_since < self.defer_after()

    def publish_wait(self, context, manager, request: GPURequest, why: str) -> None:
        """Tell the GPU board this try waits for GPUs (XCom ``gpusched_wait``), once per wait."""
        if self.state.waiting_since is not None:
            return
        self.state.waiting_since = time.time()
        ti = context["ti"]
        ti.xcom_push(
            key=WAIT_XCOM,
            value=wait_record(
                fleet.worker_host(ti),
                request.describe(),
                self.op.job_class,
                self.op.priority,
                why,
                self.state.waiting_since,
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=ti.map_index if ti.map_index is not None else -1,
            ),
        )
