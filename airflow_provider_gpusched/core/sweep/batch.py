"""Batched mode on local GPUs: one process drives many trials through the GPU launcher.

Airflow maps at most ``max_map_length`` items per task and its scheduler slows down long before that, so
a large or short-trial sweep runs as a few *batch* tasks (``run_batch``), each taking a chunk of the manifest's pending
trials. A batch task keeps up to ``parallel`` GPU leases busy (leases are shared with every other task on the
host through the lease files); each lease runs the trial runner — which records state and result — for a
small group of trials, and OOM escalation still applies per trial.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.gpu.attempts import Attempt
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed, GPUWorkSupervisor
from airflow_provider_gpusched.core.gpu.work import Work
from airflow_provider_gpusched.core.records import RECORD_KEY_ENV, new_record_key
from airflow_provider_gpusched.core.stops import WorkHalted
from airflow_provider_gpusched.core.sweep.expand import Trial
from airflow_provider_gpusched.core.sweep.trial_run import Manifest, group_argv, write_group_manifest
from airflow_provider_gpusched.core.work_tag import WorkTag

#: seconds per trial (a group's wall time over its trials) from which the last groups are made smaller
SHRINK_TAIL_ABOVE = 1.0
#: the groups grow, up to GROW_TO trials and never past an even share of what is left, once the trials are seen to take
#: less time than the processes that run them cost on top (the process start, the shim, the lease): then a process
#: start costs more than the trials it runs. Both are measured on this host in this batch, so a busy host, where
#: both take longer, decides as an idle one does.
GROW_TO = 64


def default_parallel(manager: LeaseManager, request: GPURequest) -> int:
    """How many trials of this request fit on the host at once (at least 1)."""
    gpus = manager.inventory.gpus()
    if request.gpu_memory:
        per_gpu = sum(max(1, g.memory_total // request.gpu_memory) for g in gpus)
        return max(1, per_gpu)
    return max(1, len(gpus) // max(1, request.gpus))


def run_local_batch(
    manifest: Manifest,
    trials: Sequence[Trial],
    manager: LeaseManager,
    request: GPURequest,
    *,
    parallel: int | None = None,
    trials_per_process: int = 8,
    owner: str = "",
    job_class: str = "normal",
    priority: int = 0,
    oom_policy: OOMRetryPolicy | None = None,
    on_event: Callable[[str], None] | None = None,
    stop_event: threading.Event | None = None,
    work: WorkTag | None = None,
    setup: Sequence[str] = (),
    time_limit: float | None = None,
    on_attempt: Callable[[Attempt, str], None] | None = None,
    on_tick: Callable[[], None] | None = None,
    tick_seconds: float = 30.0,
    host: str = "",
    source: Callable[[], Trial | None] | None = None,
    on_finished: Callable[[Trial], object] | None = None,
) -> dict[str, list[str]]:
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
    or a stop order covers ``work`` before a group starts, every group in flight is stopped, the trials it had started and that have no outcome
    are marked ``stopped`` with the stop's message (those not started keep their records), and :class:`WorkHalted`
    is raised.

    ``on_attempt(attempt, label)`` is told of every attempt on a lease when it ends (``label`` names its trials:
    the GPU timeline's bars); ``on_tick()`` is called from the calling thread only, every ``tick_seconds`` while
    the trials run and as soon as a slot takes a trial from ``source`` (a task publishes what it has so far);
    ``host``: this host's name on the timeline (default: as :func:`~airflow_provider_gpusched.core.fleet.this_host`
    gives it).

    ``source``: an asynchronous search's next trial (core/sweep/asynchronous.py), asked for whenever a slot frees
    and ``trials`` is used up, until it gives None; each such trial runs alone in its process, and
    ``on_finished(trial)`` is called the moment it ends (the search hears its outcome before the slot asks again).
    """
    batch = LocalBatch(
        manifest,
        trials,
        manager,
        request,
        parallel=parallel,
        trials_per_process=trials_per_process,
        owner=owner,
        job_class=job_class,
        priority=priority,
        oom_policy=oom_policy,
        on_event=on_event,
        stop_event=stop_event,
        work=work,
        setup=setup,
        time_limit=time_limit,
        on_attempt=on_attempt,
        host=host,
        source=source,
        on_finished=on_finished,
    )
    return batch.run(on_tick=on_tick, tick_seconds=tick_seconds)


class LocalBatch:
    """One batch of trials on this host's GPUs (see :func:`run_local_batch`): ``parallel`` worker threads, each
    holding a GPU work supervisor, take groups of trials from one queue until it is empty or the batch is halted.

    Its state, shared by the workers under ``_lock``: ``todo`` (groups still to run; a trial put back to run
    alone is a group of one), ``retried`` (those trials), ``finished`` (trial id -> final state), ``ran_seconds``
    and ``ran_trials`` (what the groups so far took, which decides when the tail shrinks) and ``halted`` (why the
    batch was stopped, when it was)."""

    def __init__(
        self,
        manifest: Manifest,
        trials: Sequence[Trial],
        manager: LeaseManager,
        request: GPURequest,
        *,
        parallel: int | None = None,
        trials_per_process: int = 8,
        owner: str = "",
        job_class: str = "normal",
        priority: int = 0,
        oom_policy: OOMRetryPolicy | None = None,
        on_event: Callable[[str], None] | None = None,
        stop_event: threading.Event | None = None,
        work: WorkTag | None = None,
        setup: Sequence[str] = (),
        time_limit: float | None = None,
        on_attempt: Callable[[Attempt, str], None] | None = None,
        host: str = "",
        source: Callable[[], Trial | None] | None = None,
        on_finished: Callable[[Trial], object] | None = None,
    ) -> None:
        self.manifest, self.store, self.trials = manifest, manifest.store, list(trials)
        self.manager, self.request = manager, request
        self.supervisor_settings: dict[str, Any] = {
            "oom_policy": oom_policy,
            "owner": owner,
            "job_class": job_class,
            "priority": priority,
            "work": work,
            "host": host,
        }
        self.on_event = on_event or (lambda message: None)
        self.on_attempt, self.work, self.setup, self.time_limit = on_attempt, work, setup, time_limit
        if time_limit is not None or request.load_stage or source is not None:
            # the limit is each trial's, a load stage holds its own data, an asynchronous search hears each trial
            # end before it asks for the next: one per process
            trials_per_process = 1
        self.trials_per_process = trials_per_process
        self.source, self.on_finished = source, on_finished
        most = parallel or default_parallel(manager, request)
        self.parallel = max(1, most if source is not None else min(most, max(1, len(self.trials))))
        self.logs = os.path.join(self.store.dir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.stop = stop_event or threading.Event()  # every supervisor shares it: set, it stops the trials in flight
        self.orders = manager.stop_orders() if work is not None else None
        self._lock = threading.Lock()
        self.todo: deque[tuple[Trial, ...]] = deque((t,) for t in self.trials)
        self.retried: set[str] = set()
        self.finished: dict[str, str] = {}
        self.ran_seconds = 0.0
        self.ran_trials = 0
        self.trial_seconds = 0.0  # of ran_seconds, what the trials themselves took (their status.json "seconds")
        self.halted: list[str] = []
        self.supervisors: list[GPUWorkSupervisor] = []
        self._news = threading.Event()  # wakes the calling thread: a trial taken from the source, a worker done
        self.errors: list[BaseException] = []  # what ended a worker thread early (raised by run())
        #: seals this batch's group manifests; only the trial runners it starts are given it (core/records.py)
        self.record_key = new_record_key()

    # -- the batch ---------------------------------------------------------------------------------
    def run(self, on_tick: Callable[[], None] | None = None, tick_seconds: float = 30.0) -> dict[str, list[str]]:
        """Run the batch; ``on_tick`` is called from this (the calling) thread only: every ``tick_seconds``, and as
        soon as a slot takes a trial from ``source``. The workers never call it: a task's calls to Airflow are
        made from one thread (``dag.test``'s in-process supervisor removes its channel while it answers a call, so
        a second thread's call then fails)."""
        threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(self.parallel)]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                self._news.wait(timeout=tick_seconds)  # a trial taken from the source, or a worker done
                self._news.clear()
                if on_tick is not None and any(thread.is_alive() for thread in threads):
                    on_tick()
        finally:
            for supervisor in self.supervisors:
                supervisor.stop()
        if self.halted:
            self._mark_halted()
            raise WorkHalted(self.halted[0])
        if self.errors:  # a slot's own failure (the search's, the store's): never a batch quietly one slot short
            raise self.errors[0]
        return self.outcome()

    def halt(self, message: str) -> None:
        """Stop the whole batch: the supervisors' children get SIGTERM, the grace period, SIGKILL."""
        with self._lock:
            self.halted.append(message)
        self.stop.set()

    def outcome(self) -> dict[str, list[str]]:
        """Trial ids by final state, in the batch's order."""
        out: dict[str, list[str]] = {"succeeded": [], "pruned": [], "failed": [], "timeout": []}
        for trial in self.trials:
            if trial.trial_id in self.finished:
                out[self.finished[trial.trial_id]].append(trial.trial_id)
        return out

    # -- groups ------------------------------------------------------------------------------------
    def next_group(self) -> tuple[Trial, ...] | None:
        """The next trials to run in one process, or None when none are left."""
        with self._lock:
            if not self.todo:
                trial = self.source() if self.source is not None and not self.stop.is_set() else None
                if trial is None:
                    return None
                self.trials.append(trial)
                self._news.set()
                return (trial,)
            first = self.todo.popleft()
            if len(first) > 1 or first[0].trial_id in self.retried:
                return first
            size = self._group_size()
            group = [first[0]]
            while self.todo and len(group) < size and self.todo[0][0].trial_id not in self.retried:
                group.append(self.todo.popleft()[0])
            return tuple(group)

    def _group_size(self) -> int:
        """Tail shrinking: once trials are seen to take SHRINK_TAIL_ABOVE seconds or more, the groups near the end
        get smaller so the slots finish together; short trials are cheaper run in full groups than in the extra
        processes smaller groups would start. Growing: once two groups' worth of trials have run and took less time
        themselves than their processes cost besides them, the groups grow (a process start costs more than its
        trials)."""
        even_share = -(-len(self.todo) // self.parallel)
        if self.ran_trials and self.ran_seconds / self.ran_trials >= SHRINK_TAIL_ABOVE:
            return max(1, min(self.trials_per_process, even_share))
        overhead = self.ran_seconds - self.trial_seconds  # what the processes cost besides their trials
        if self.ran_trials >= 2 * self.trials_per_process and self.trial_seconds < overhead:
            return max(self.trials_per_process, min(GROW_TO, even_share))
        return self.trials_per_process

    def _worker(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread once the others end
            with self._lock:
                self.errors.append(exc)
        finally:
            self._news.set()

    def _work(self) -> None:
        supervisor = GPUWorkSupervisor(
            self.manager, poll_interval=0.05, sample_interval=5.0, **self.supervisor_settings
        )
        supervisor.stop_event = self.stop
        with self._lock:
            self.supervisors.append(supervisor)
        while not self.stop.is_set():
            order = self.orders.order_for(self.work) if self.orders is not None and self.work is not None else None
            if order is not None:
                self.halt(order.refusal())
                return
            group = self.next_group()
            if group is None:
                return
            oom = self._run_group(supervisor, group)
            if oom is None:
                return
            self._settle(group, oom)

    def _run_group(self, supervisor: GPUWorkSupervisor, group: tuple[Trial, ...]) -> bool | None:
        """Run one group on a lease; whether it ended in a GPU OOM (None: the batch was halted)."""
        oom = False
        started = time.monotonic()
        sliced = write_group_manifest(self.manifest, group, self.record_key)
        if self.on_attempt is not None:
            on_attempt, label = self.on_attempt, group_label(group)
            supervisor.on_attempt = lambda attempt, _lease: on_attempt(attempt, label)
        try:
            supervisor.run(
                self.request,
                Work(
                    argv=group_argv(sliced, group),
                    setup=self.setup,
                    time_limit=self.time_limit,
                    env={RECORD_KEY_ENV: self.record_key.hex()},
                ),
                os.path.join(self.logs, f"{group[0].trial_id}.log"),
            )
        except GPUWorkFailed as exc:
            if exc.halted:
                self.halt(str(exc).splitlines()[0])
                return None
            oom = exc.oom
            lone = len(group) == 1
            if exc.timed_out and lone and self.store.state(group[0]) in ("waiting", "running"):
                self.store.mark_finished(
                    group[0], ok=False, exit_code=None, error=str(exc).splitlines()[0], state="timeout"
                )
            elif oom and lone:
                self.store.mark_finished(group[0], ok=False, exit_code=None, error=str(exc).splitlines()[0])
        finally:
            with contextlib.suppress(OSError):
                os.remove(sliced.path)
            with self._lock:
                self.ran_seconds += time.monotonic() - started
                self.ran_trials += len(group)
        return oom

    def _settle(self, group: tuple[Trial, ...], oom: bool) -> None:
        """Record each trial's outcome; put back, to run alone, the trials of a failed group without one (and,
        after an OOM, its failed ones: OOM escalation then applies to each alone)."""
        again, own = [], 0.0
        for trial in group:
            status = self.store.status(trial)  # read once: its state, and what the trial itself took
            own += _trial_seconds(status)
            state = self.store.state_of(status)
            if state in ("waiting", "running") and self.halted:
                # another group's lease was stopped and the shared stop ended this one before its trial recorded
                # an outcome: _mark_halted marks it with who stopped it, not as a dead supervisor
                continue
            if len(group) > 1 and (state in ("waiting", "running") or (state == "failed" and oom)):
                again.append(trial)
                continue
            if self.on_finished is not None:
                state = str(self.on_finished(trial))
            with self._lock:
                self.finished[trial.trial_id] = state if state in ("succeeded", "pruned", "timeout") else "failed"
        with self._lock:
            self.trial_seconds += own
            for trial in again:
                self.retried.add(trial.trial_id)
                self.todo.append((trial,))
            done = len(self.finished)
            failed = sum(1 for v in self.finished.values() if v in ("failed", "timeout"))
        if done and (self.source is not None or done % max(1, len(self.trials) // 20) < len(group) or failed):
            self.on_event(f"{done}/{len(self.trials)} trials done ({failed} failed)")

    def _mark_halted(self) -> None:
        """The batch was stopped: its trials that started and have no outcome are marked ``stopped``; those that
        never started keep their records (the store's one transition, TrialStore.end_unfinished)."""
        for trial in self.trials:
            if trial.trial_id not in self.finished:
                self.store.end_unfinished(trial, run=self.manifest.record.run, state="stopped", reason=self.halted[0])


def _trial_seconds(status: object) -> float:
    """What a trial took by its own record (0 without one: a trial that never started cost nothing itself)."""
    seconds = status.get("seconds") if isinstance(status, dict) else None
    return float(seconds) if is_number(seconds) and seconds >= 0 else 0.0


def group_label(group: Sequence[Trial]) -> str:
    """What a group of trials run in one process is called on the GPU timeline."""
    if len(group) == 1:
        return f"trial {group[0].index} {group[0].label}"
    return (
        f"trials {group[0].index}-{group[-1].index} ({len(group)})"
        if all(b.index == a.index + 1 for a, b in zip(group, group[1:], strict=False))
        else f"trials {', '.join(str(t.index) for t in group[:6])}{'...' if len(group) > 6 else ''} ({len(group)})"
    )
