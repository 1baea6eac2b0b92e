"""Batched mode on local GPUs: one process drives many trials through the GPU launcher.

Airflow maps at most ``max_map_length`` items per task and its scheduler slows down long before that, so
a large or short-trial sweep runs as a few *runner* tasks, each taking a chunk of the manifest's pending
trials. A runner keeps up to ``parallel`` trials in flight; every trial still gets its own GPU lease (so
runners of other DAGs, and other sweeps, share GPUs fairly through the lease files), its own process
(the trial runner, which records state and result), and OOM escalation.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Callable, Sequence

from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.runner import GPUWorkFailed, GPUWorkRunner, Work
from airflow_provider_gpusched.core.sweep.expand import Trial
from airflow_provider_gpusched.core.sweep.trial_run import Manifest


def trial_argv(manifest: Manifest, trial: Trial, python: str | None = None) -> list[str]:
    """The command that runs one trial of ``manifest`` (on a local GPU child or a Slurm node)."""
    return [python or sys.executable, "-m", "airflow_provider_gpusched.core.sweep.trial_run", manifest.path,
            trial.trial_id, trial.label or trial.trial_id]


def default_parallel(manager: LeaseManager, request: GPURequest) -> int:
    """How many trials of this request fit on the host at once (at least 1)."""
    gpus = manager.inventory.gpus()
    if request.gpu_memory:
        per_gpu = sum(max(1, g.memory_total // request.gpu_memory) for g in gpus)
        return max(1, per_gpu)
    return max(1, len(gpus) // max(1, request.gpus))


def run_local_batch(manifest: Manifest, trials: Sequence[Trial], manager: LeaseManager, request: GPURequest, *,
                    parallel: int | None = None, owner: str = "", job_class: str = "normal", priority: int = 0,
                    oom_policy: OOMRetryPolicy | None = None, on_event: Callable[[str], None] | None = None,
                    stop_event: threading.Event | None = None) -> dict[str, list[str]]:
    """Run ``trials`` with up to ``parallel`` at a time; returns trial ids by outcome (succeeded/failed)."""
    on_event = on_event or (lambda message: None)
    parallel = parallel or default_parallel(manager, request)
    todo: queue.Queue[Trial] = queue.Queue()
    for trial in trials:
        todo.put(trial)
    outcome: dict[str, list[str]] = {"succeeded": [], "failed": []}
    lock = threading.Lock()
    runners: list[GPUWorkRunner] = []
    logs = os.path.join(manifest.store.dir, "logs")
    os.makedirs(logs, exist_ok=True)

    def worker() -> None:
        runner = GPUWorkRunner(manager, oom_policy=oom_policy, owner=owner, job_class=job_class, priority=priority,
                               poll_interval=0.05, sample_interval=5.0)
        if stop_event is not None:
            runner.stop_event = stop_event  # stops the trial in flight too
        with lock:
            runners.append(runner)
        while not (stop_event and stop_event.is_set()):
            try:
                trial = todo.get_nowait()
            except queue.Empty:
                return
            work = Work(argv=trial_argv(manifest, trial))
            try:
                result = runner.run(request, work, os.path.join(logs, f"{trial.trial_id}.log"))
                ok = result.exit_code == 0
            except GPUWorkFailed as exc:
                ok = False
                if exc.oom:
                    manifest.store.mark_finished(trial, ok=False, exit_code=None, error=str(exc).splitlines()[0])
            with lock:
                outcome["succeeded" if ok else "failed"].append(trial.trial_id)
                done = len(outcome["succeeded"]) + len(outcome["failed"])
            if done % max(1, len(trials) // 20) == 0 or not ok:
                on_event(f"{done}/{len(trials)} trials done ({len(outcome['failed'])} failed)"
                         + ("" if ok else f"; {trial.label or trial.trial_id} failed"))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(parallel, max(1, len(trials))))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        for runner in runners:
            runner.stop()
    return outcome
