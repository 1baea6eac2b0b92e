"""Batched mode on local GPUs: one process drives many trials through the GPU launcher.

Airflow maps at most ``max_map_length`` items per task and its scheduler slows down long before that, so
a large or short-trial sweep runs as a few *runner* tasks, each taking a chunk of the manifest's pending
trials. A runner keeps up to ``parallel`` GPU leases busy (leases are shared with every other task on the
host through the lease files); each lease runs the trial runner — which records state and result — for a
small group of trials, and OOM escalation still applies per trial.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from typing import Callable, Sequence

from airflow_provider_gpusched.core.gpu.attempts import Attempt
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.runner import GPUWorkFailed, GPUWorkRunner, Work
from airflow_provider_gpusched.core.stops import WorkHalted
from airflow_provider_gpusched.core.sweep.expand import Trial
from airflow_provider_gpusched.core.sweep.trial_run import Manifest, group_argv, write_group_manifest
from airflow_provider_gpusched.core.work_tag import WorkTag

#: seconds per trial (a group's wall time over its trials) from which the last groups are made smaller
SHRINK_TAIL_ABOVE = 1.0


def default_parallel(manager: LeaseManager, request: GPURequest) -> int:
    """How many trials of this request fit on the host at once (at least 1)."""
    gpus = manager.inventory.gpus()
    if request.gpu_memory:
        per_gpu = sum(max(1, g.memory_total // request.gpu_memory) for g in gpus)
        return max(1, per_gpu)
    return max(1, len(gpus) // max(1, request.gpus))


def run_local_batch(manifest: Manifest, trials: Sequence[Trial], manager: LeaseManager, request: GPURequest, *,
                    parallel: int | None = None, trials_per_process: int = 8, owner: str = "",
                    job_class: str = "normal", priority: int = 0, oom_policy: OOMRetryPolicy | None = None,
                    on_event: Callable[[str], None] | None = None,
                    stop_event: threading.Event | None = None, work: WorkTag | None = None,
                    setup: Sequence[str] = (), time_limit: float | None = None,
                    on_attempt: Callable[[Attempt, str], None] | None = None,
                    on_tick: Callable[[], None] | None = None, tick_seconds: float = 30.0,
                    host: str = "") -> dict[str, list[str]]:
    """Run ``trials`` with up to ``parallel`` leases at a time; returns trial ids by final state. ``setup``:
    shell lines each trial process runs first (the sweep's ``resources.setup``); ``time_limit``: seconds each
    trial may run (then it is stopped and ends ``timeout``; each trial then runs in a process of its own, as does each
    two-stage trial, ``request.load_stage``).

    Each lease runs a small group of trials in one process (``trials_per_process``; once trials are seen to
    take a second or more, fewer near the end so the slots finish together): tiny trials then cost one
    process start per group, not per trial. When a
    group's process fails, its unfinished trials — and, after a GPU OOM, its failed ones — run again one
    per process, where OOM escalation applies to each alone.

    ``work`` tags the leases with the task (``gpusched queue``). When ``gpusched queue stop`` stops one of them,
    or a stop order covers ``work`` before a group starts, every group in flight is stopped, the trials without
    an outcome are marked failed with the stop's message, and :class:`WorkHalted` is raised.

    ``on_attempt(attempt, label)`` is told of every attempt on a lease when it ends (``label`` names its trials:
    the GPU timeline's bars); ``on_tick()`` is called every ``tick_seconds`` from the calling thread while the
    trials run (a task publishes what it has so far); ``host``: this host's name on the timeline (default: as
    :func:`~airflow_provider_gpusched.core.fleet.this_host` gives it).
    """
    on_event = on_event or (lambda message: None)
    if time_limit is not None or request.load_stage:
        trials_per_process = 1  # the limit is each trial's, a load stage holds its own data: one trial per process
    parallel = max(1, min(parallel or default_parallel(manager, request), max(1, len(trials))))
    todo: deque[tuple[Trial, ...]] = deque((t,) for t in trials)
    lock = threading.Lock()
    runners: list[GPUWorkRunner] = []
    logs = os.path.join(manifest.store.dir, "logs")
    os.makedirs(logs, exist_ok=True)
    store = manifest.store
    finished: dict[str, str] = {}
    retried: set[str] = set()  # trials that run alone after their group failed
    ran = {"seconds": 0.0, "trials": 0}  # wall time of the groups so far, and their trials
    stop = stop_event or threading.Event()
    halted: list[str] = []
    orders = manager.stop_orders() if work is not None else None

    def halt(message: str) -> None:
        with lock:
            halted.append(message)
        stop.set()  # every runner shares it: their children get SIGTERM, the grace period, SIGKILL

    def take() -> tuple[Trial, ...] | None:
        with lock:
            if not todo:
                return None
            first = todo.popleft()
            if len(first) > 1 or first[0].trial_id in retried:
                return first
            size = trials_per_process
            if ran["trials"] and ran["seconds"] / ran["trials"] >= SHRINK_TAIL_ABOVE:
                # long trials: smaller groups near the end, so the slots finish together; short ones are
                # cheaper run in full groups than in the extra processes that smaller groups would start
                size = max(1, min(trials_per_process, -(-len(todo) // parallel)))
            group = [first[0]]
            while todo and len(group) < size and todo[0][0].trial_id not in retried:
                group.append(todo.popleft()[0])
            return tuple(group)

    def worker() -> None:
        runner = GPUWorkRunner(manager, oom_policy=oom_policy, owner=owner, job_class=job_class, priority=priority,
                               poll_interval=0.05, sample_interval=5.0, work=work, host=host)
        runner.stop_event = stop  # stops the trials in flight too
        with lock:
            runners.append(runner)
        while not stop.is_set():
            order = orders.order_for(work) if orders is not None and work is not None else None
            if order is not None:
                halt(order.refusal())
                return
            group = take()
            if group is None:
                return
            oom = False
            started = time.monotonic()
            sliced = write_group_manifest(manifest, group)
            if on_attempt is not None:
                runner.on_attempt = lambda attempt, _lease, label=group_label(group): on_attempt(attempt, label)
            try:
                runner.run(request, Work(argv=group_argv(sliced, group), setup=setup, time_limit=time_limit),
                           os.path.join(logs, f"{group[0].trial_id}.log"))
            except GPUWorkFailed as exc:
                if exc.halted:
                    halt(str(exc).splitlines()[0])
                    return
                oom = exc.oom
                if exc.timed_out and len(group) == 1 and store.state(group[0]) in ("waiting", "running"):
                    store.mark_finished(group[0], ok=False, exit_code=None, error=str(exc).splitlines()[0],
                                        state="timeout")
                elif oom and len(group) == 1:
                    store.mark_finished(group[0], ok=False, exit_code=None, error=str(exc).splitlines()[0])
            finally:
                with contextlib.suppress(OSError):
                    os.remove(sliced.path)
                with lock:
                    ran["seconds"] += time.monotonic() - started
                    ran["trials"] += len(group)
            again = []
            for trial in group:
                state = store.state(trial)
                if state in ("waiting", "running") and halted:
                    # another group's lease was stopped and the shared stop ended this one before its trial
                    # recorded an outcome: the halt below marks it with who stopped it, not as a dead runner
                    continue
                if len(group) > 1 and (state in ("waiting", "running") or (state == "failed" and oom)):
                    again.append(trial)
                    continue
                with lock:
                    finished[trial.trial_id] = state if state in ("succeeded", "pruned", "timeout") else "failed"
            with lock:
                for trial in again:
                    retried.add(trial.trial_id)
                    todo.append((trial,))
                done = len(finished)
                failed = sum(1 for v in finished.values() if v in ("failed", "timeout"))
            if done and (done % max(1, len(trials) // 20) < len(group) or failed):
                on_event(f"{done}/{len(trials)} trials done ({failed} failed)")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(parallel)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=tick_seconds if on_tick is not None else None)
                if on_tick is not None and t.is_alive():
                    on_tick()
                    break
    finally:
        for runner in runners:
            runner.stop()
    if halted:
        for trial in trials:
            if trial.trial_id not in finished and store.state(trial) in ("waiting", "running"):
                store.mark_finished(trial, ok=False, exit_code=None, error=halted[0])
        raise WorkHalted(halted[0])
    outcome: dict[str, list[str]] = {"succeeded": [], "pruned": [], "failed": [], "timeout": []}
    for trial in trials:
        if trial.trial_id in finished:
            outcome[finished[trial.trial_id]].append(trial.trial_id)
    return outcome


def group_label(group: Sequence[Trial]) -> str:
    """What a group of trials run in one process is called on the GPU timeline."""
    if len(group) == 1:
        return f"trial {group[0].index} {group[0].label}"
    return f"trials {group[0].index}-{group[-1].index} ({len(group)})" if all(
        b.index == a.index + 1 for a, b in zip(group, group[1:])) else \
        f"trials {', '.join(str(t.index) for t in group[:6])}{'...' if len(group) > 6 else ''} ({len(group)})"
