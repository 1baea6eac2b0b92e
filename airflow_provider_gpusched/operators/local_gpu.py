"""LocalGPUOperator: run a program or a Python callable on this host's GPUs.

It leases GPUs (whole, or memory on a shared GPU), runs the work in its own process group with
``CUDA_VISIBLE_DEVICES`` set, streams the output into the task log, and retries a GPU out-of-memory
failure with a bigger reservation. While the GPUs are busy the task defers (no worker slot is held).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Callable, Collection, Mapping, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.callables import callable_arguments
from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError
from airflow_provider_gpusched.core.gpu.launch import GPUChild
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.runner import (
    Work,
    failure_message,
    gpu_descriptions,
    run_attempt,
    work_value,
)
from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook
from airflow_provider_gpusched.operators.job_class import apply_job_class
from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger


class LocalGPUOperator(BaseOperator):
    """Run work on local GPUs.

    :param command: argv list, run directly (no shell). Templated.
    :param bash_command: a shell command line, run by bash (explicitly a shell). Templated.
    :param python_callable: a function to call in the GPU child (with ``op_args``/``op_kwargs``); its
        return value becomes the XCom, and XCom ``gpus_used`` says where it ran.
    :param gpus: number of GPUs (default 1). Without ``gpu_memory`` they are whole GPUs.
    :param gpu_memory: memory to reserve on each GPU (``"10GiB"``): the GPU may be shared (packing).
    :param devices: restrict to these GPU indices.
    :param memory_margin, max_foreign_processes, min_free_ram, max_cpu_percent: admission limits.
    :param oom_retries, oom_factor: GPU OOM retries, each reserving ``oom_factor`` x more, the last a
        whole GPU. Other failures go to Airflow's ``retries``.
    :param env: extra environment (templated); ``cwd``: working directory (default: a per-run directory).
    :param grace_period: seconds between SIGTERM and SIGKILL when the task is stopped.
    :param wait_mode: ``"defer"`` (default: wait in the triggerer), ``"reschedule"`` (free the slot and
        try again later; for several GPU hosts) or ``"block"`` (wait in the worker).
    :param job_class, priority: ``"normal"`` (default) or ``"idle"``, and a whole-number priority. The
        ``[gpusched] job_classes`` mapping turns them into the Airflow pool, ``pool_slots`` (one per GPU by
        default) and ``priority_weight``; an idle lease is preemptible (see docs/idle-filling.md).
    """

    template_fields: Sequence[str] = ("command", "bash_command", "env", "cwd", "op_args", "op_kwargs")
    template_fields_renderers = {"bash_command": "bash", "env": "json"}
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        bash_command: str | None = None,
        python_callable: Callable | None = None,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        gpus: int = 1,
        gpu_memory: int | str | None = None,
        devices: Sequence[int] | None = None,
        memory_margin: int | str = 0,
        max_foreign_processes: int | None = None,
        min_free_ram: int | str | None = None,
        max_cpu_percent: float | None = None,
        oom_retries: int = 2,
        oom_factor: float = 1.5,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        grace_period: float = 10.0,
        wait_mode: str = "defer",
        poll_interval: float | None = None,
        job_class: str = "normal",
        priority: int = 0,
        **kwargs: Any,
    ) -> None:
        job_class, priority = apply_job_class(kwargs, job_class, priority, gpus)
        super().__init__(**kwargs)
        given = [x for x in (command, bash_command, python_callable) if x is not None]
        if len(given) != 1:
            raise AirflowException(f"{self.task_id}: give exactly one of command (argv list), bash_command "
                                   f"(shell string) or python_callable")
        if isinstance(command, str):
            raise AirflowException(f"{self.task_id}: command must be an argv list such as ['python', 'train.py']; "
                                   f"use bash_command for a shell command line")
        if wait_mode not in ("defer", "reschedule", "block"):
            raise AirflowException(f"{self.task_id}: wait_mode must be 'defer', 'reschedule' or 'block', got {wait_mode!r}")
        self.command = list(command) if command is not None else None
        self.bash_command = bash_command
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        try:
            self.request = GPURequest(gpus=gpus, gpu_memory=gpu_memory, devices=devices, memory_margin=memory_margin,
                                      max_foreign_processes=max_foreign_processes, min_free_ram=min_free_ram,
                                      max_cpu_percent=max_cpu_percent)
            self.oom_policy = OOMRetryPolicy(retries=oom_retries, factor=oom_factor)
        except InvalidArgumentError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        self.env = dict(env or {})
        self.cwd = cwd
        self.grace_period = grace_period
        self.wait_mode = wait_mode
        self.poll_interval = poll_interval
        self.job_class = job_class
        self.priority = priority
        self._child: GPUChild | None = None
        self._stop = threading.Event()

    # -- helpers -------------------------------------------------------------------------------------
    def _run_dir(self, context) -> str:
        ti = context["ti"]
        return settings.task_directory(settings.local_run_dir(), ti, f"try-{ti.try_number}")

    def _owner(self, context) -> str:
        ti = context["ti"]
        return f"{ti.dag_id}.{ti.task_id}" + (f"[{ti.map_index}]" if ti.map_index is not None and ti.map_index >= 0 else "") \
            + f" ({ti.run_id}, try {ti.try_number})"

    def call_arguments(self, context) -> tuple[list, dict]:
        return callable_arguments(self.python_callable, self.op_args, self.op_kwargs, context, self.log)

    def _work(self, context) -> Work:
        run_dir = self._run_dir(context)
        cwd = self.cwd or os.path.join(run_dir, "work")
        if self.python_callable is not None:
            call_dir = os.path.join(run_dir, "call")
            args, kwargs = self.call_arguments(context)
            pyfunc.write_call(call_dir, self.python_callable, tuple(args), kwargs)  # also clears old outcomes
            return Work(call_dir=call_dir, env=self.env, cwd=cwd)
        if self.bash_command is not None:
            return Work(shell_command=self.bash_command, env=self.env, cwd=cwd)
        return Work(argv=self.command, env=self.env, cwd=cwd)

    # -- execution -------------------------------------------------------------------------------------
    def execute(self, context) -> Any:
        return self._run(context, self.request, [])

    def resume(self, context, event: dict[str, Any]) -> Any:
        state = event["payload"]
        return self._run(context, GPURequest(**state["request"]), state["attempts"])

    def _run(self, context, request: GPURequest, attempts: list[dict]) -> Any:
        hook = LocalGPUHook()
        try:
            manager = hook.get_conn()
            manager.check_possible(request)
        except (GPUInventoryError, InvalidArgumentError) as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc  # retrying cannot help
        owner = self._owner(context)
        while True:
            lease, why = manager.try_acquire(request, owner, job_class=self.job_class, priority=self.priority)
            if lease is not None:
                break
            self.log.info("GPUs busy for %s: %s", request.describe(), why)
            if self.wait_mode == "defer":
                self.defer(trigger=GPUAvailableTrigger(
                    request=dataclasses.asdict(request), simulate=hook.simulate or None, state_dir=manager.state_dir,
                    poll_interval=self.poll_interval or settings.gpu_poll_interval(),
                    payload={"request": dataclasses.asdict(request), "attempts": attempts}),
                    method_name="resume")
            if self.wait_mode == "reschedule":
                from datetime import timedelta

                from airflow.sdk import timezone
                from airflow.sdk.exceptions import AirflowRescheduleException

                raise AirflowRescheduleException(timezone.utcnow() + timedelta(
                    seconds=self.poll_interval or settings.gpu_poll_interval()))
            self._stop.wait(self.poll_interval or settings.gpu_poll_interval())
        run_dir = self._run_dir(context)
        log_path = os.path.join(run_dir, "output.log")
        try:
            gpus = gpu_descriptions(lease, manager.inventory)
            where = ", ".join(f"{g['index']} ({g['uuid']}{', SIMULATED' if g['simulated'] else ''})" for g in gpus)
            self.log.info("Attempt %d: %s on GPU %s, CUDA_VISIBLE_DEVICES=%s; log %s", len(attempts) + 1,
                          request.describe(), where, lease.cuda_visible_devices, log_path)
            work = self._work(context)
            outcome = run_attempt(manager, lease, work, number=len(attempts) + 1, request=request,
                                  log_path=log_path, on_line=lambda line: self.log.info("%s", line),
                                  started=self._started, grace=self.grace_period, stop_event=self._stop)
        finally:
            self._child = None
            manager.release(lease)
        attempts = [*attempts, dataclasses.asdict(outcome.attempt)]
        if outcome.attempt.exit_code == 0:
            context["ti"].xcom_push(key="gpus_used", value=gpus)
            try:
                value = work_value(work)
            except GpuschedError as exc:
                raise AirflowException(f"{self.task_id}: {exc}") from exc
            if self.python_callable is not None:
                return value
            return {"exit_code": 0, "gpus": gpus, "log_path": log_path, "simulated": any(g["simulated"] for g in gpus),
                    "oom_retries": sum(1 for a in attempts if a["oom"]), "attempts": attempts}
        if outcome.attempt.oom and not self._stop.is_set():
            ooms = sum(1 for a in attempts if a["oom"])
            bigger = self.oom_policy.escalate(request, ooms, [g.memory_total for g in manager.inventory.gpus()])
            if bigger is not None:
                self.log.warning("GPU out of memory with %s (%s): retrying with %s", request.describe(),
                                 outcome.attempt.oom, bigger.describe())
                return self._run(context, bigger, attempts)
        message = failure_message(outcome, [a["request"] for a in attempts], work)
        self.log.error("%s", message)
        raise AirflowException(f"{self.task_id}: {message}")

    def _started(self, child: GPUChild) -> None:
        self._child = child

    def on_kill(self) -> None:
        self._stop.set()
        child = self._child
        if child is not None:
            self.log.info("Task killed: stopping the GPU process group %d", child.pid)
            child.stop(self.grace_period)
