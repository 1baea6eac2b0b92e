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
from typing import Any, Protocol

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.attempts import Attempt
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed, GPUWorkSupervisor
from airflow_provider_gpusched.core.gpu.work import Work
from airflow_provider_gpusched.core.records import RECORD_KEY_ENV, new_record_key
from airflow_provider_gpusched.core.stops import WorkHalted
from airflow_provider_gpusched.core.sweep.parts.expand import Trial, safe_text
from airflow_provider_gpusched.core.sweep.records.store import FAILED_STATES, FINAL_STATES
from airflow_provider_gpusched.core.sweep.running.trial_run import (
    Manifest,
    group_argv,
    worker_argv,
    write_group_manifest,
)
from airflow_provider_gpusched.core.work_tag import WorkTag

#: seconds per trial (a group's wall time over its trials) from which the last groups are made smaller
SHRINK_TAIL_ABOVE = 1.0
#: the groups grow, up to GROW_TO trials and never past an even share of what is left, once the trials are seen to take
#: less time than the processes that run them cost on top (the process start, the shim, the lease): then a process
#: start costs more than the trials it runs. Both are measured on this host in this batch, so a busy host, where
#: both take longer, decides as an idle one does.
GROW_TO = 64
#: a slot's worker process (an asynchronous search) that dies with a trial unfinished is started again, at most this
#: many times in a row without a trial finished in between
WORKER_RESTARTS = 3
#: how often the calling thread looks for the trials the slots' worker processes took (it publishes new ones)
TAKEN_POLL_SECONDS = 1.0


class SlotSearch(Protocol):
    """An asynchronous search as a batch's source of trials (core/sweep/running/asynchronous.py's AsyncRun)."""

    def next_trial(self, worker: str = "", resume: bool = False) -> Trial | None: ...

    def finish(self, trial: Trial) -> str: ...

    def taken(self, worker: str) -> list[Trial]: ...


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
    search: SlotSearch | None = None,
    worker: str = "",
    on_taken: Callable[[Trial], None] | None = None,
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
    the trials run and as soon as a slot takes a trial from ``search`` (a task publishes what it has so far);
    ``host``: this host's name on the timeline (default: as :func:`~airflow_provider_gpusched.core.fleet.this_host`
    gives it).

    ``search``: an asynchronous search (core/sweep/running/asynchronous.py) whose trials the slots run, each slot asking
    for its next trial the moment it frees, until the search hands out no more. Each slot is a worker process
    (core/sweep/running/worker.py, named ``worker`` and, with several slots, ``slot N``) that runs up to
    ``trials_per_process`` trials one after another on the slot's lease, asking and telling the search itself, then
    a new one: the trainable is imported once per process, not once per trial (PyTorch: 3-5 s of CPU each time). A
    worker that dies with a trial unfinished (a crash) leaves that trial failed and is started again
    (WORKER_RESTARTS); one relaunched by its supervisor (after a GPU OOM, with more memory; after a preemption)
    goes on with the same trial. A trial's own GPU OOM inside a worker fails that trial; with
    ``trials_per_process`` 1, a time limit or a load stage (which are each trial's own), each trial runs in a
    process of its own instead, the slot asking for it and telling it, and OOM escalation applies to each trial
    alone. ``on_taken(trial)`` is told of each trial a slot took (on any thread, under the batch's lock: keep it to
    recording it), before ``on_tick`` runs.
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
        search=search,
        worker=worker,
        on_taken=on_taken,
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
        search: SlotSearch | None = None,
        worker: str = "",
        on_taken: Callable[[Trial], None] | None = None,
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
        own_process = time_limit is not None or bool(request.load_stage)
        #: an asynchronous search's slots run as worker processes, each running up to trials_per_process trials
        self.slot_workers = search is not None and not own_process and trials_per_process > 1
        if own_process or (search is not None and not self.slot_workers):
            # the limit is each trial's, a load stage holds its own data: one per process (and for a search,
            # trials_per_process 1: each trial in its own process, the slot asking for it and telling it)
            trials_per_process = 1
        self.trials_per_process = trials_per_process
        self.search, self.on_taken = search, on_taken
        most = parallel or default_parallel(manager, request)
        self.parallel = max(1, most if search is not None else min(most, max(1, len(self.trials))))
        self.slot_names = [worker if self.parallel == 1 else f"{worker} slot {i}".strip() for i in range(self.parallel)]
        self._known = {t.trial_id for t in self.trials}
        self._reported_final: dict[str, str] = {}  # trial id -> the final state a progress line counted
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
        self._news = threading.Event()  # wakes the calling thread: a trial taken from the search, a slot done
        self.errors: list[BaseException] = []  # what ended a worker thread early (raised by run())
        #: seals this batch's group manifests; only the trial runners it starts are given it (core/records.py)
        self.record_key = new_record_key()

    # -- the batch ---------------------------------------------------------------------------------
    def run(self, on_tick: Callable[[], None] | None = None, tick_seconds: float = 30.0) -> dict[str, list[str]]:
        """Run the batch; ``on_tick`` is called from this (the calling) thread only: every ``tick_seconds``, and as
        soon as a slot takes a trial from the search. The slots never call it: a task's calls to Airflow are made
        from one thread (``dag.test``'s in-process supervisor removes its channel while it answers a call, so a
        second thread's call then fails)."""
        threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.parallel)]
        for thread in threads:
            thread.start()
        wait = min(tick_seconds, TAKEN_POLL_SECONDS) if self.slot_workers else tick_seconds
        ticked = time.monotonic()
        try:
            while any(thread.is_alive() for thread in threads):
                woke = self._news.wait(timeout=wait)  # a trial taken from the search, or a slot done
                self._news.clear()
                fresh = self._collect_taken() if self.slot_workers else False
                due = time.monotonic() - ticked >= tick_seconds
                if on_tick is not None and (woke or fresh or due) and any(t.is_alive() for t in threads):
                    on_tick()
                    ticked = time.monotonic()
        finally:
            for supervisor in self.supervisors:
                supervisor.stop()
        if self.slot_workers:
            self._collect_taken()
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

    # -- the trials an asynchronous search hands out ---------------------------------------------------------
    def _took(self, trial: Trial) -> bool:
        """Note a trial a slot took (under the lock); whether it is new to the batch."""
        if trial.trial_id in self._known:
            return False
        self._known.add(trial.trial_id)
        self.trials.append(trial)
        if self.on_taken is not None:
            self.on_taken(trial)
        return True

    def _collect_taken(self) -> bool:
        """The trials the slots' worker processes took so far (the search's record of who took what), and a
        progress line when more of them ended; whether a slot took a new one."""
        assert self.search is not None
        taken = [trial for name in self.slot_names for trial in self.search.taken(name)]
        with self._lock:
            fresh = [trial for trial in taken if self._took(trial)]
            pending = [t for t in self.trials if t.trial_id not in self._reported_final]
        ended = {t.trial_id: state for t in pending if (state := self.store.state(t)) in FINAL_STATES}
        if ended:
            self._reported_final.update(ended)
            failed = sum(1 for state in self._reported_final.values() if state in FAILED_STATES)
            self.on_event(f"{len(self._reported_final)}/{len(self.trials)} trials done ({failed} failed)")
        return bool(fresh)

    # -- groups ------------------------------------------------------------------------------------
    def next_group(self, slot: int = 0) -> tuple[Trial, ...] | None:
        """The next trials to run in one process, or None when none are left."""
        with self._lock:
            if not self.todo:
                if self.search is None or self.stop.is_set():
                    return None
                trial = self.search.next_trial(self.slot_names[slot])
                if trial is None:
                    return None
                self._took(trial)
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

    def _worker(self, slot: int) -> None:
        try:
            self._work(slot)
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread once the others end
            with self._lock:
                self.errors.append(exc)
        finally:
            self._news.set()

    def _work(self, slot: int) -> None:
        supervisor = GPUWorkSupervisor(
            self.manager, poll_interval=0.05, sample_interval=5.0, **self.supervisor_settings
        )
        supervisor.stop_event = self.stop
        with self._lock:
            self.supervisors.append(supervisor)
        restarts = 0
        while not self.stop.is_set():
            order = self.orders.order_for(self.work) if self.orders is not None and self.work is not None else None
            if order is not None:
                self.halt(order.refusal())
                return
            if self.slot_workers:
                ended = self._run_slot_worker(supervisor, self.slot_names[slot])
                if ended is None:  # halted
                    return
                unfinished, finished, ran = ended
                if not unfinished:  # it ended as a worker ends: it ran its trials_per_process, or no more are left
                    if ran < self.trials_per_process:
                        return
                    restarts = 0
                    continue
                restarts = 0 if finished else restarts + 1
                if restarts >= WORKER_RESTARTS:
                    self.on_event(f"{self.slot_names[slot]}: its worker process died {restarts} times in a row")
                    return
                continue
            group = self.next_group(slot)
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

    def _run_slot_worker(self, supervisor: GPUWorkSupervisor, name: str) -> tuple[int, int, int] | None:
        """One worker process of an asynchronous search on a lease of this slot (core/sweep/running/worker.py), then every
        trial it took told to the search; returns (trials it left unfinished, trials it finished, trials it took),
        None when the batch was halted."""
        assert self.search is not None
        before = {t.trial_id for t in self.search.taken(name)}
        log = os.path.join(self.logs, f"worker-{safe_text(name) or 'slot'}.log")
        if self.on_attempt is not None:  # the GPU timeline's bar: the trials this process took
            on_attempt, search = self.on_attempt, self.search

            def label() -> str:
                mine = [t for t in search.taken(name) if t.trial_id not in before]
                return f"{name}: {group_label(mine) if mine else 'no trial'}"

            supervisor.on_attempt = lambda attempt, _lease: on_attempt(attempt, label())
        oom, error = False, ""
        try:
            argv = worker_argv(self.manifest, name, max_trials=self.trials_per_process)
            supervisor.run(self.request, Work(argv=argv, setup=self.setup), log)
        except GPUWorkFailed as exc:
            if exc.halted:
                self.halt(str(exc).splitlines()[0])
                return None
            oom, error = exc.oom, str(exc).splitlines()[0]
        taken = self.search.taken(name)
        unfinished = finished = 0
        for trial in taken:
            with self._lock:
                self._took(trial)
                if trial.trial_id in self.finished:
                    continue
            if self.store.state(trial) not in FINAL_STATES:
                unfinished += 1
                if oom:  # (else the search marks it failed: its runner stopped before recording an outcome)
                    self.store.mark_finished(trial, ok=False, exit_code=None, error=error)
            state = str(self.search.finish(trial))
            finished += state in FINAL_STATES
            self._record_finished(trial, state)
        if error and not oom and len(taken) == len(before):
            raise GpuschedError(f"{name}: its worker process failed before running a trial: {error} (log {log})")
        return unfinished, finished - unfinished, len(taken) - len(before)

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
            if self.search is not None:
                state = str(self.search.finish(trial))
            self._record_finished(trial, state)
        with self._lock:
            self.trial_seconds += own
            for trial in again:
                self.retried.add(trial.trial_id)
                self.todo.append((trial,))
            done = len(self.finished)
            failed = sum(1 for v in self.finished.values() if v in ("failed", "timeout"))
        if done and (self.search is not None or done % max(1, len(self.trials) // 20) < len(group) or failed):
            self.on_event(f"{done}/{len(self.trials)} trials done ({failed} failed)")

    def _record_finished(self, trial: Trial, state: str) -> None:
        """A trial's outcome in this batch: succeeded, pruned, timeout, or failed (every other final state)."""
        with self._lock:
            self.finished[trial.trial_id] = state if state in ("succeeded", "pruned", "timeout") else "failed"

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
