"""Following jobs to the end: one tracker per job, one shared poller per cluster and event loop.

:class:`JobTracker` turns successive statuses into log lines (state changes, preemptions) and decides
when waiting is over. :class:`SharedJobPoller` lets any number of asyncio waiters (Airflow triggers in
one triggerer process) share a single ``squeue`` call per poll interval. Slurm being unreachable is
retried with backoff and never reported as a job failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, ClassVar

from airflow_provider_gpusched.core.slurm.client import SlurmClient
from airflow_provider_gpusched.core.slurm.runner import SlurmUnavailableError
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus

log = logging.getLogger(__name__)


@dataclass
class JobTracker:
    """What happened to one job so far. Feed it statuses with :meth:`update`."""

    job_id: str
    not_found_timeout: float = 300.0
    clock: Callable[[], float] = time.monotonic
    last: JobStatus | None = None
    preemptions: int = 0
    events: list[str] = field(default_factory=list)
    _not_found_since: float | None = None

    def update(self, status: JobStatus) -> list[str]:
        """Record a status; return the log lines it causes (state changes, requeues)."""
        lines: list[str] = []
        prev = self.last
        if status.phase is JobPhase.NOT_FOUND:
            if self._not_found_since is None:
                self._not_found_since = self.clock()
                lines.append(f"job {self.job_id} is not known to squeue or the completion record; "
                             f"waiting up to {self.not_found_timeout:.0f}s for it to show up")
            self.events.extend(lines)
            return lines  # keep the last known status
        else:
            self._not_found_since = None
        if prev is not None and status.restarts > prev.restarts:
            self.preemptions += status.restarts - prev.restarts
            lines.append(f"job {self.job_id} was preempted/requeued (restart {status.restarts}); "
                         f"still waiting for it to complete")
        if prev is None or (status.state, status.reason) != (prev.state, prev.reason):
            lines.append(f"{status.describe()}")
        self.last = status
        self.events.extend(lines)
        return lines

    @property
    def lost(self) -> bool:
        return (self._not_found_since is not None
                and self.clock() - self._not_found_since > self.not_found_timeout)

    @property
    def done(self) -> bool:
        return self.lost or (self.last is not None and self.last.is_terminal)

    def final_status(self) -> JobStatus:
        if self.lost:
            return JobStatus(job_id=self.job_id, phase=JobPhase.NOT_FOUND, state="NOT_FOUND",
                             reason="the job disappeared from squeue and no completion record was found")
        assert self.last is not None
        return self.last


@dataclass
class PollProblem:
    """Delivered to waiters instead of a status when a poll failed."""

    message: str
    transient: bool
    consecutive_failures: int


@dataclass
class _Waiter:
    job_id: str
    poll_interval: float
    array_size: int | None
    queue: asyncio.Queue


class SharedJobPoller:
    """One poller per (event loop, cluster): every waiter's job is checked by the same squeue call."""

    _registry: ClassVar[dict[tuple[int, str], SharedJobPoller]] = {}
    max_backoff: float = 60.0
    #: consecutive non-transient failures (e.g. squeue missing) before waiters are told to give up
    max_permanent_failures: int = 5

    def __init__(self, client: SlurmClient, key: str):
        self.client = client
        self.key = key
        self._waiters: list[_Waiter] = []
        self._task: asyncio.Task | None = None
        self.polls = 0

    @classmethod
    def shared(cls, key: str, make_client: Callable[[], SlurmClient]) -> SharedJobPoller:
        loop = asyncio.get_running_loop()
        reg_key = (id(loop), key)
        poller = cls._registry.get(reg_key)
        if poller is None:
            poller = cls(make_client(), key)
            cls._registry[reg_key] = poller
        return poller

    @classmethod
    def active(cls) -> list[SharedJobPoller]:
        return list(cls._registry.values())

    async def watch(self, job_id: str, *, poll_interval: float = 10.0,
                    array_size: int | None = None) -> AsyncIterator[JobStatus | PollProblem]:
        """Yield the job's status after every poll (or a :class:`PollProblem`) until the caller stops."""
        waiter = _Waiter(str(job_id), float(poll_interval), array_size, asyncio.Queue())
        self._waiters.append(waiter)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slurm-poller:{self.key}")
        try:
            while True:
                yield await waiter.queue.get()
        finally:
            self._waiters.remove(waiter)

    async def _run(self) -> None:
        failures = 0
        try:
            while self._waiters:
                waiters = list(self._waiters)
                interval = min(w.poll_interval for w in waiters)
                ids = sorted({w.job_id for w in waiters})
                sizes = {w.job_id: w.array_size for w in waiters if w.array_size}
                delay = interval
                try:
                    statuses = await asyncio.to_thread(self.client.statuses, ids, sizes)
                    self.polls += 1
                    failures = 0
                    for w in waiters:
                        w.queue.put_nowait(statuses[w.job_id])
                except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
                    failures += 1
                    transient = isinstance(exc, SlurmUnavailableError)
                    delay = min(interval * (2 ** min(failures, 6)), self.max_backoff)
                    problem = PollProblem(f"{type(exc).__name__}: {exc}", transient, failures)
                    log.warning("polling Slurm failed (%s, attempt %d); next try in %.0fs", exc, failures, delay)
                    for w in waiters:
                        w.queue.put_nowait(problem)
                await asyncio.sleep(delay)
        finally:
            for reg_key, poller in list(self._registry.items()):
                if poller is self and not self._waiters:
                    del self._registry[reg_key]
