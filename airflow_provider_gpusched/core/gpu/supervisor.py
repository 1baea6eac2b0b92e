"""Running one piece of work on leased GPUs, with out-of-memory retry.

:func:`run_attempt` runs one child on one lease and reports what happened. :func:`attempt_loop` strings
attempts together (acquire, run, release, then :func:`~airflow_provider_gpusched.core.gpu.attempts.decide`:
relaunch, retry bigger, succeed or fail), and is the only place that loop is written. What differs between its
users is an :class:`AttemptHooks`: how to wait for a lease and between attempts (block here, or, in the Airflow
operator, defer to the triggerer or reschedule) and what to tell whom. :class:`GPUWorkSupervisor` is the blocking
user (scripts, batched sweep trials, the benchmarks); ``LocalGPUOperator`` is the other, on one host or on each
host of a fleet (its Edge workers run the same operator).
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu.accounting import gpu_share, newest_checkpoint
from airflow_provider_gpusched.core.gpu.attempts import (
    Action,
    Attempt,
    AttemptOutcome,
    NextStep,
    RunResult,
    WorkProgress,
    attempt_banner,
    decide,
    gpu_descriptions,
    work_value,
)
from airflow_provider_gpusched.core.gpu.inventory import GPUInventory
from airflow_provider_gpusched.core.gpu.launch import SHARED_GPU_ENV, GPUChild, gpu_environment
from airflow_provider_gpusched.core.gpu.lease_store import Lease
from airflow_provider_gpusched.core.gpu.leases import LeaseManager, reason_kind
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy, find_oom, memory_evidence
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.stages import StageChannel
from airflow_provider_gpusched.core.gpu.work import Work
from airflow_provider_gpusched.core.host_name import this_host
from airflow_provider_gpusched.core.units import format_time_limit
from airflow_provider_gpusched.core.work_env import CHECKPOINT_ENV
from airflow_provider_gpusched.core.work_tag import WorkTag


class MemorySampler:
    """Peak GPU memory of a child's process tree, per GPU of its lease, from the inventory's process list
    (NVML's per-process figures; a simulated usage file's in tests).

    Sampled about every ``interval`` seconds, jittered (x0.5 to x1.5) so that samplers of trials started
    together, and the trials' own once-a-second work, do not fall on the same instant. A sample asks the
    inventory once and checks only the few pids it lists on the lease's GPUs (one ``getsid`` each, the
    answer remembered), never walking the process tree."""

    def __init__(self, inventory: GPUInventory, lease: Lease, child: GPUChild, interval: float = 1.0) -> None:
        self.inventory, self.lease, self.child, self.interval = inventory, lease, child, interval
        self.peaks: dict[int, int] = {}
        self.samples = 0
        self._ours: dict[int, bool] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"gpu-mem-{child.pid}")

    @staticmethod
    def useful(inventory: GPUInventory, lease: Lease) -> bool:
        """Sampling helps where the inventory lists processes and the lease is a share of a GPU (a whole-GPU
        lease gets no memory cap to run into)."""
        return not lease.whole and getattr(inventory, "reports_processes", True)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def _is_ours(self, pid: int) -> bool:
        if pid not in self._ours:
            self._ours[pid] = self.child.owns(pid)
        return self._ours[pid]

    def sample(self) -> None:
        try:
            gpus = self.inventory.gpus()
        except Exception:  # noqa: BLE001 - sampling is best effort
            return
        self.samples += 1
        for g in gpus:
            if g.index in self.lease.gpus:
                used = sum(p.used_memory or 0 for p in g.processes if self._is_ours(p.pid))
                self.peaks[g.index] = max(self.peaks.get(g.index, 0), used)

    def _loop(self) -> None:
        jitter = random.Random()
        while not self._done.wait(self.interval * jitter.uniform(0.5, 1.5)):
            self.sample()

    def stop(self) -> dict[int, int]:
        self._done.set()
        self._thread.join(timeout=5)
        return self.peaks


def _pids_on(inventory: GPUInventory, gpus: Iterable[int]) -> set[int] | None:
    """The processes the driver (NVML) shows on ``gpus`` now; None where it cannot be asked."""
    try:
        return {p.pid for g in inventory.gpus() if g.index in gpus for p in g.processes}
    except (GpuschedError, OSError):
        return None


def _report_left_on_gpus(manager: LeaseManager, lease: Lease, before: set[int] | None, child: GPUChild) -> None:
    """After the work and everything it started were stopped: a live process the driver shows on the lease's GPUs
    that was not there when the work started and belongs to no other lease is said in the task log. It escaped
    the work's containment (started through something outside it: ssh, a scheduler, a container) or belongs to
    someone who took the GPU meanwhile; either way its memory is not free when the lease is given back."""
    if before is None or not lease.gpus:
        return
    from airflow_provider_gpusched.core.gpu.lease_store import gpu_process_kin, process_alive

    try:
        gpus, leases = manager.snapshot()
    except (GpuschedError, OSError):
        return
    kin = gpu_process_kin(gpus)
    others = {pid for other in leases if other.lease_id != lease.lease_id for pid in other.view(kin).pids}
    left = [
        (g.index, p.pid, p.used_memory)
        for g in gpus
        if g.index in lease.gpus
        for p in g.processes
        if p.pid not in before and p.pid not in others and process_alive(p.pid)
    ]
    if not left:
        return
    from airflow_provider_gpusched.core.units import format_bytes

    shown = ", ".join(f"GPU {i} pid {pid}" + (f" ({format_bytes(used)})" if used else "") for i, pid, used in left[:10])
    child.say(
        f"[gpusched] after the work ended, the driver still shows process(es) on its GPU(s) that started "
        f"while it ran and belong to no lease: {shown}. They escaped the work's containment or are someone "
        f"else's; their memory is not free when this lease is given back"
    )


def run_attempt(
    manager: LeaseManager,
    lease: Lease,
    work: Work,
    *,
    number: int,
    request: GPURequest,
    log_path: str,
    on_line: Callable[[str], None] | None = None,
    started: Callable[[GPUChild], None] | None = None,
    grace: float = 10.0,
    stop_event: threading.Event | None = None,
    timeout: float | None = None,
    sample_interval: float = 1.0,
    yield_interval: float = 1.0,
    extra_env: Mapping[str, str] | None = None,
    on_gpus: Callable[[Lease], None] | None = None,
    host: str = "",
) -> AttemptOutcome:
    """Run ``work`` once on ``lease`` (the caller releases the lease). A failure counts as a GPU OOM when
    the output says so, or when the child's GPU memory reached its reservation (NVML evidence).

    Every ``yield_interval`` seconds :meth:`LeaseManager.yield_reason` is asked whether the lease must
    give its GPUs back (a normal task preempts it, foreign work appeared); if so the child is stopped
    (SIGTERM, ``grace`` seconds to checkpoint, SIGKILL) and the attempt is marked ``preempted``.

    A load-stage lease (``request.load_stage``) starts the work without GPUs; once it says it has loaded
    (:func:`~airflow_provider_gpusched.core.gpu.stages.wait_for_gpus`) its GPUs are placed and handed over
    (``on_gpus(lease)`` is then called), and the time limit goes on counting from the start."""
    totals = {g.index: g.memory_total for g in manager.inventory.gpus()}
    env, stage = _attempt_env(lease, work, totals, extra_env)
    child, before = _launch(manager, lease, work, env, stage, log_path=log_path, on_line=on_line, grace=grace)
    sampler = _start_sampler(manager, lease, child, sample_interval) if stage is None else None
    if started:
        started(child)
    two_stage = _TwoStages(manager, lease, request, child, stage, totals, on_line, on_gpus) if stage else None
    watch = _AttemptWatch(
        manager,
        lease,
        child,
        two_stage,
        sampler,
        grace=grace,
        stop_event=stop_event,
        timeout=work.time_limit if timeout is None else timeout,
        yield_interval=yield_interval,
        sample_interval=sample_interval,
    )
    code = watch.run(stage)
    _report_left_on_gpus(manager, lease, before, child)
    return _outcome(watch, work, totals, code, number=number, request=request, host=host)


def _attempt_env(
    lease: Lease, work: Work, totals: Mapping[int, int], extra_env: Mapping[str, str] | None
) -> tuple[dict[str, str], StageChannel | None]:
    """The attempt's environment (its GPUs, the work's checkpoint folder, made here, and ``extra_env``) and, for a
    load-stage lease, the channel to hand its GPUs over on."""
    env_extra = dict(work.env)
    if work.call_dir:  # a relaunch is judged by its own outcome, not by the one of the start it replaces
        pyfunc.clear_outcome(work.call_dir)
    if work.checkpoint_dir:
        os.makedirs(work.checkpoint_dir, exist_ok=True)
        env_extra[CHECKPOINT_ENV] = work.checkpoint_dir
    env_extra.update(extra_env or {})
    env = gpu_environment(lease, totals, extra=env_extra)
    stage = StageChannel() if lease.stage == "load" else None
    if stage is not None:
        if work.distributed:
            stage.close()
            raise InvalidArgumentError("load_stage", True, "work started as one process (not distributed=...)")
        env.update(stage.child_env())
    return env, stage


def _launch(
    manager: LeaseManager,
    lease: Lease,
    work: Work,
    env: dict[str, str],
    stage: StageChannel | None,
    *,
    log_path: str,
    on_line: Callable[[str], None] | None,
    grace: float,
) -> tuple[GPUChild, set[int] | None]:
    """Start the attempt's child and record it on the lease; also the processes on the lease's GPUs just before
    (:func:`_report_left_on_gpus`)."""
    argv, shell = work.child_argv(len(lease.gpus), env)
    before = _pids_on(manager.inventory, lease.gpus)
    child = GPUChild(
        argv,
        env=env,
        cwd=work.cwd,
        log_path=log_path,
        lease=lease,
        shell=shell,
        on_line=on_line,
        grace=grace,
        extra_fds=stage.child_fds if stage is not None else (),
    )
    try:
        child.start()
    finally:
        if stage is not None:
            stage.started()
    manager.record_child(lease, child.pid)
    return child, before


def _start_sampler(manager: LeaseManager, lease: Lease, child: GPUChild, interval: float) -> MemorySampler | None:
    """A running :class:`MemorySampler` of ``child`` where sampling helps (:meth:`MemorySampler.useful`)."""
    if MemorySampler.useful(manager.inventory, lease):
        return MemorySampler(manager.inventory, lease, child, interval).start()
    return None


class _AttemptWatch:
    """One attempt's child, watched until it ends: a two-stage task's GPUs handed over, and the child stopped when
    ``stop_event`` is set, at its time limit, or when its lease must stop or yield (what stopped it is kept)."""

    def __init__(
        self,
        manager: LeaseManager,
        lease: Lease,
        child: GPUChild,
        two_stage: _TwoStages | None,
        sampler: MemorySampler | None,
        *,
        grace: float,
        stop_event: threading.Event | None,
        timeout: float | None,
        yield_interval: float,
        sample_interval: float,
    ) -> None:
        self.manager, self.lease, self.child, self.two_stage, self.sampler = manager, lease, child, two_stage, sampler
        self.grace, self.stop_event = grace, stop_event
        self.yield_interval, self.sample_interval = yield_interval, sample_interval
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.limit_text = "" if timeout is None else format_time_limit(math.ceil(timeout))
        self.timed_out: str | None = None
        # when the child started, as `seconds` counts
        self.started_wall = time.time() - (time.monotonic() - child.started_at)
        self.next_yield_check = time.monotonic() + yield_interval
        self.preempted: str | None = None
        self.halted: str | None = ""

    def run(self, stage: StageChannel | None) -> int | None:
        """Watch the child to its end (stopping it, and what it left, whatever happens); its exit status."""
        child = self.child
        code = None
        try:
            while code is None:
                code = child.wait(timeout=0.2)
                if code is not None:
                    break
                if self.two_stage is not None and self.two_stage.step():
                    self.sampler = _start_sampler(self.manager, self.lease, child, self.sample_interval)
                if self.stop_event is not None and self.stop_event.is_set():
                    code = child.stop(self.grace)
                elif self.deadline is not None and time.monotonic() > self.deadline:
                    self.timed_out = (
                        f"reached its time limit ({self.limit_text}) after "
                        f"{time.monotonic() - child.started_at:.1f}s and was stopped"
                    )
                    code = child.stop(self.grace)
                elif time.monotonic() >= self.next_yield_check:
                    code = self._check_lease()
                    if self.halted:
                        break
        finally:
            if code is None or (child.proc is not None and child.proc.poll() is None):
                code = child.stop(self.grace)
            else:  # it ended on its own: what it left running (cmd &, setsid, double fork) goes before the lease
                child.stop_leftovers(self.grace)
            if stage is not None:
                stage.close()
        return code

    def _check_lease(self) -> int | None:
        """Whether the lease must stop (``gpusched queue stop``) or yield its GPUs: if so the child is stopped."""
        self.next_yield_check = time.monotonic() + self.yield_interval
        self.halted = self.manager.stop_reason(self.lease)
        if self.halted:
            return self.child.stop(self.grace)
        reason = self.manager.yield_reason(self.lease)
        if reason:
            self.preempted = reason
            return self.child.stop(self.manager.yield_grace([self.lease]))
        return None


def _outcome(
    watch: _AttemptWatch,
    work: Work,
    totals: Mapping[int, int],
    code: int | None,
    *,
    number: int,
    request: GPURequest,
    host: str,
) -> AttemptOutcome:
    """How the attempt ended, from what its watch saw (a GPU OOM, by its output or its memory peaks); its GPU time
    goes on the manager's ledger."""
    lease, child, two_stage = watch.lease, watch.child, watch.two_stage
    peaks = watch.sampler.stop() if watch.sampler else {}
    if (watch.preempted or watch.halted) and not child.stopped_by_us:
        watch.preempted = watch.halted = None  # it finished on its own just before we signalled it
    oom = None
    if code != 0 and not child.stopped_by_us:
        oom = find_oom(child.tail) or memory_evidence(peaks, lease.memory)
    seconds = round(time.monotonic() - child.started_at, 3)
    on_gpus_seconds = seconds if two_stage is None else two_stage.seconds_on_gpus()
    attempt = _attempt(
        watch,
        work,
        totals,
        number=number,
        request=request,
        code=code,
        oom=oom,
        seconds=seconds,
        on_gpus_seconds=on_gpus_seconds,
        host=host,
    )
    watch.manager.ledger.append(
        {
            "owner": lease.owner,
            "job_class": lease.job_class,
            "gpus": list(lease.gpus),
            "seconds": on_gpus_seconds,
            "gpu_seconds": attempt.gpu_seconds,
            "preempted": attempt.preempted,
            "lost_gpu_seconds": attempt.lost_gpu_seconds,
            "exit_code": code,
            "simulated": lease.simulated,
        }
    )
    return AttemptOutcome(attempt, lease, list(child.tail))


def _attempt(
    watch: _AttemptWatch,
    work: Work,
    totals: Mapping[int, int],
    *,
    number: int,
    request: GPURequest,
    code: int | None,
    oom: str | None,
    seconds: float,
    on_gpus_seconds: float,
    host: str,
) -> Attempt:
    """The attempt's record: how it ended, its time, and the GPU time it used (and lost, when preempted)."""
    lease, child, two_stage = watch.lease, watch.child, watch.two_stage
    share = gpu_share(lease.gpus, lease.memory, lease.whole, totals)
    lost = 0.0
    if watch.preempted and lease.gpus:
        since = watch.started_wall if two_stage is None else two_stage.gpus_given_wall
        checkpoint = newest_checkpoint(work.checkpoint_dir, since)
        lost = round(share * (time.time() - (checkpoint or since)), 3)
    return Attempt(
        number=number,
        request=request.describe(),
        gpus=list(lease.gpus),
        exit_code=code,
        oom=oom,
        seconds=seconds,
        stopped=child.stopped_by_us,
        preempted=watch.preempted,
        halted=watch.halted or None,
        timed_out=watch.timed_out,
        gpu_seconds=round(share * on_gpus_seconds, 3),
        lost_gpu_seconds=lost,
        load_seconds=two_stage.load_seconds if two_stage else None,
        gpu_wait_seconds=two_stage.gpu_wait_seconds() if two_stage else None,
        started=round(watch.started_wall, 3),
        host=host or this_host(),
    )


class _TwoStages:
    """The parent's side of a two-stage task during one attempt: see the child load, then add its GPUs."""

    def __init__(
        self,
        manager: LeaseManager,
        lease: Lease,
        request: GPURequest,
        child: GPUChild,
        stage: StageChannel,
        totals: Mapping[int, int],
        on_line: Callable[[str], None] | None,
        on_gpus: Callable[[Lease], None] | None,
        retry_interval: float = 0.5,
    ) -> None:
        self.manager, self.lease, self.request, self.child, self.stage = manager, lease, request, child, stage
        self.totals, self.on_gpus, self.retry_interval = totals, on_gpus, retry_interval
        self.say = on_line or (lambda line: None)
        self.load_seconds: float | None = None
        self.loaded_at: float | None = None
        self.gpus_given_at: float | None = None
        self.gpus_given_wall = 0.0
        self._next_try = 0.0
        self._last_why = ""

    def step(self) -> bool:
        """One look (never blocks); True when the GPUs were handed over just now."""
        if self.gpus_given_at is not None:
            return False
        now = time.monotonic()
        if self.loaded_at is None:
            if not self.stage.poll_loaded():
                return False
            self.loaded_at = now
            self.load_seconds = round(now - self.child.started_at, 3)
            self.manager.mark_loaded(self.lease)
            self.say(
                f"[gpusched] load stage done after {self.load_seconds:.1f}s; waiting for "
                f"{self.request.gpu_part().describe()}"
            )
        if now < self._next_try:
            return False
        self._next_try = now + self.retry_interval
        why = self.manager.try_add_gpus(self.lease, self.request, task_key=self.lease.task_key)
        if why:
            if reason_kind(why) != self._last_why:
                self.say(f"[gpusched] waiting for GPUs: {why}")
            self._last_why = reason_kind(why)
            return False
        self.gpus_given_at, self.gpus_given_wall = time.monotonic(), time.time()
        env = gpu_environment(self.lease, self.totals, base={})
        defaults = {
            k: env.pop(k) for k in list(env) if k in SHARED_GPU_ENV or k in ("OMP_NUM_THREADS", "GPUSCHED_CPUS")
        }
        self.stage.give(env, defaults)
        self.say(
            f"[gpusched] train stage on GPU {self.lease.cuda_visible_devices} after "
            f"{self.gpu_wait_seconds():.1f}s waiting for GPUs"
        )
        if self.on_gpus:
            self.on_gpus(self.lease)
        return True

    def gpu_wait_seconds(self) -> float | None:
        if self.loaded_at is None:
            return None
        return round((self.gpus_given_at or time.monotonic()) - self.loaded_at, 3)

    def seconds_on_gpus(self) -> float:
        return 0.0 if self.gpus_given_at is None else round(time.monotonic() - self.gpus_given_at, 3)


class GPUWorkFailed(GpuschedError):
    def __init__(
        self,
        message: str,
        attempts: list[Attempt],
        tail: list[str],
        oom: bool,
        halted: bool = False,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.tail = tail
        self.oom = oom
        self.halted = halted  # stopped for good by `gpusched queue stop`: nothing may run it again
        self.timed_out = timed_out  # stopped at the work's time limit


class AttemptHooks:
    """What a user of :func:`attempt_loop` decides: how it waits (for a lease, and before a relaunch) and what it
    tells whom. :meth:`acquire`, :meth:`work` and :meth:`log_path` must be given; the others default to doing
    nothing, except the ends: :meth:`succeeded` returns the result, :meth:`failed` raises :class:`GPUWorkFailed`."""

    def acquire(self, progress: WorkProgress) -> Lease:
        """A lease for ``progress.request``, waiting as this user waits (blocking, deferring, rescheduling)."""
        raise NotImplementedError

    def work(self) -> Work:
        """What each attempt runs."""
        raise NotImplementedError

    def log_path(self) -> str:
        """Where each attempt's output goes."""
        raise NotImplementedError

    def attempt_options(self) -> dict[str, Any]:
        """Further :func:`run_attempt` arguments (on_line, started, sample_interval, yield_interval, host,
        on_gpus)."""
        return {}

    def starting(self, banner: str, lease: Lease, log_path: str) -> None:
        """An attempt is about to start on ``lease`` (``banner`` says what, where and which class)."""

    def released(self, lease: Lease) -> None:
        """The attempt's lease was just released."""

    def ended(self, outcome: AttemptOutcome, step: NextStep, progress: WorkProgress) -> None:
        """An attempt ended and ``step`` is what comes next (``progress`` has recorded it)."""

    def wait_to_relaunch(self, step: NextStep, outcome: AttemptOutcome, progress: WorkProgress) -> None:
        """After a preemption: return once the work may start again (``step.wait`` seconds at least); raise to
        give up."""

    def value(self, work: Work) -> object:
        """What the successful attempt produced (the callable's return value; None for programs)."""
        return work_value(work)

    def succeeded(self, result: RunResult) -> object:
        """The work succeeded; what :func:`attempt_loop` returns."""
        return result

    def failed(self, step: NextStep, outcome: AttemptOutcome, progress: WorkProgress) -> None:
        """The work failed for good (``step.action``: FAILED, HALTED or TIMED_OUT); raise."""
        raise GPUWorkFailed(
            step.message,
            progress.attempts,
            outcome.tail,
            bool(outcome.attempt.oom),
            halted=step.action is Action.HALTED,
            timed_out=step.action is Action.TIMED_OUT,
        )


def attempt_loop(
    manager: LeaseManager,
    progress: WorkProgress,
    hooks: AttemptHooks,
    *,
    job_class: str,
    oom_policy: OOMRetryPolicy,
    stop_event: threading.Event,
    grace: float,
) -> object:
    """Run the work until it succeeds or fails for good: acquire a lease, run one attempt on it, release it,
    and let :func:`~airflow_provider_gpusched.core.gpu.attempts.decide` say what comes next. ``progress`` carries
    the request and the attempts so far (a deferred operator resumes with the one it saved)."""
    policy = manager.classes[job_class].local
    sizes = [g.memory_total for g in manager.inventory.gpus()]
    while True:
        lease = hooks.acquire(progress)
        log_path = hooks.log_path()
        try:
            work = hooks.work()
            gpus = gpu_descriptions(lease, manager.inventory)
            hooks.starting(
                attempt_banner(progress.next_number, progress.request, lease, gpus, job_class), lease, log_path
            )
            outcome = run_attempt(
                manager,
                lease,
                work,
                number=progress.next_number,
                request=progress.request,
                log_path=log_path,
                grace=grace,
                stop_event=stop_event,
                extra_env=progress.relaunch_env(),
                **hooks.attempt_options(),
            )
            if lease.stage:  # a two-stage task's GPUs came after its load stage
                gpus = gpu_descriptions(lease, manager.inventory)
        finally:
            manager.release(lease)
            hooks.released(lease)
        step = decide(
            progress,
            outcome,
            job_class=job_class,
            policy=policy,
            oom_policy=oom_policy,
            gpu_sizes=sizes,
            stopping=stop_event.is_set(),
            work=work,
        )
        hooks.ended(outcome, step, progress)
        if step.action is Action.RELAUNCH:
            hooks.wait_to_relaunch(step, outcome, progress)
        elif step.action is Action.SUCCEEDED:
            return hooks.succeeded(RunResult(0, gpus, progress.attempts, log_path, hooks.value(work), progress.history))
        elif step.action is not Action.RETRY_BIGGER:
            hooks.failed(step, outcome, progress)
            raise GpuschedError(f"attempt hooks {type(hooks).__name__}.failed returned instead of raising")


class _Blocking(AttemptHooks):
    """:class:`GPUWorkSupervisor`'s way: wait for a lease and before a relaunch in this thread, tell ``on_event``."""

    def __init__(self, supervisor: GPUWorkSupervisor, work: Work, log_path: str, acquire_timeout: float | None) -> None:
        self.supervisor, self._work, self._log_path, self.acquire_timeout = supervisor, work, log_path, acquire_timeout
        self.policy = supervisor.manager.classes[supervisor.job_class].local

    def acquire(self, progress: WorkProgress) -> Lease:
        r = self.supervisor
        return r.manager.acquire(
            progress.request,
            r.owner,
            timeout=self.acquire_timeout,
            poll_interval=r.poll_interval,
            job_class=r.job_class,
            priority=r.priority,
            preemptible=progress.history.preemptible(self.policy),
            on_wait=lambda why: r.on_event(f"waiting for GPUs: {why}"),
            work=r.work,
        )

    def work(self) -> Work:
        return self._work

    def log_path(self) -> str:
        return self._log_path

    def attempt_options(self) -> dict[str, Any]:
        r = self.supervisor
        return {
            "on_line": r.on_line,
            "sample_interval": r.sample_interval,
            "yield_interval": r.yield_interval,
            "on_gpus": lambda grown: r.on_event(f"train stage on GPU {grown.cuda_visible_devices}"),
            "host": r.host,
        }

    def starting(self, banner: str, lease: Lease, log_path: str) -> None:
        self.supervisor.on_event(banner)

    def ended(self, outcome: AttemptOutcome, step: NextStep, progress: WorkProgress) -> None:
        if self.supervisor.on_attempt is not None:
            self.supervisor.on_attempt(outcome.attempt, outcome.lease)
        self.supervisor.on_event(step.message)

    def wait_to_relaunch(self, step: NextStep, outcome: AttemptOutcome, progress: WorkProgress) -> None:
        if self.supervisor.stop_event.wait(step.wait):
            raise GPUWorkFailed(
                "stopped while waiting to relaunch after a preemption", progress.attempts, outcome.tail, False
            )


class GPUWorkSupervisor:
    """Acquire, run, release, and retry GPU OOMs with a bigger reservation (blocking)."""

    def __init__(
        self,
        manager: LeaseManager,
        *,
        oom_policy: OOMRetryPolicy | None = None,
        owner: str = "",
        job_class: str = "normal",
        priority: int = 0,
        grace: float = 10.0,
        poll_interval: float = 0.5,
        sample_interval: float = 1.0,
        yield_interval: float = 1.0,
        on_line: Callable[[str], None] | None = None,
        on_event: Callable[[str], None] | None = None,
        work: WorkTag | None = None,
        on_attempt: Callable[[Attempt, Lease], None] | None = None,
        host: str = "",
    ) -> None:
        self.manager = manager
        #: told of every attempt when it ends (with its lease): the GPU timeline's bars
        self.on_attempt = on_attempt
        self.host = host or this_host()
        self.work = work  # which task the leases run for (gpusched queue)
        self.oom_policy = oom_policy or OOMRetryPolicy()
        self.owner = owner or f"pid {os.getpid()}"
        self.job_class = job_class
        self.priority = priority
        self.grace = grace
        self.poll_interval = poll_interval
        self.sample_interval = sample_interval
        self.yield_interval = yield_interval
        self.on_line = on_line
        self.on_event = on_event or (lambda message: None)
        self.stop_event = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()

    def run(self, request: GPURequest, work: Work, log_path: str, *, acquire_timeout: float | None = None) -> RunResult:
        """Run ``work`` to its end on leases of ``request`` (:func:`attempt_loop`, blocking); GPUWorkFailed when it
        fails for good."""
        self.manager.check_possible(request)
        result = attempt_loop(
            self.manager,
            WorkProgress(request),
            _Blocking(self, work, log_path, acquire_timeout),
            job_class=self.job_class,
            oom_policy=self.oom_policy,
            stop_event=self.stop_event,
            grace=self.grace,
        )
        assert isinstance(result, RunResult)  # what the blocking hooks end the loop with
        return result
