"""One shared poller per cluster and event loop.

:class:`SharedJobPoller` lets any number of asyncio waiters (Airflow triggers in one triggerer process)
share a single ``squeue`` call per poll interval; each waiter feeds what it gets to its own
:class:`~airflow_provider_gpusched.core.slurm.states.JobTracker`. Slurm being unreachable is retried with
backoff and reported as a :class:`PollProblem`, never as a job failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_gpusched.core.slurm.client import SlurmClient
from airflow_provider_gpusched.core.slurm.states import JobStatus
from airflow_provider_gpusched.core.slurm.transport import SlurmUnavailableError

log = logging.getLogger(__name__)


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
    queue: asyncio.Queue[Any]


class SharedJobPoller:
    """One poller per (event loop, cluster): every waiter's job is checked by the same squeue call."""

    _registry: ClassVar[dict[tuple[int, str], SharedJobPoller]] = {}
    max_backoff: float = 60.0
    #: consecutive non-transient failures (e.g. squeue missing) before waiters are told to give up
    max_permanent_failures: int = 5

    def __init__(self, client: SlurmClient, key: str) -> None:
        self.client = client
        self.key = key
        #: told every poll's statuses (job id -> status): the Airflow side sends job counts as metrics
        self.on_poll: Callable[[dict[str, JobStatus]], None] | None = None
        self._waiters: list[_Waiter] = []
        self._task: asyncio.Task[None] | None = None
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

    async def watch(
        self, job_id: str, *, poll_interval: float = 10.0, array_size: int | None = None
    ) -> AsyncIterator[JobStatus | PollProblem]:
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
        # its own thread, not the event loop's shared pool: a cluster whose slurmrestd is slow (each exchange is
        # bounded, core/http.py) holds up its own waiters only, never another cluster's poller or the triggerer
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"slurm-poller-{id(self):x}")
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                waiters = list(self._waiters)
                interval = min(w.poll_interval for w in waiters)
                ids = sorted({w.job_id for w in waiters})
                sizes = {w.job_id: w.array_size for w in waiters if w.array_size}
                delay = interval
                try:
                    statuses = await loop.run_in_executor(executor, self.client.statuses, ids, sizes)
                    self.polls += 1
                    failures = 0
                    for w in waiters:
                        w.queue.put_nowait(statuses[w.job_id])
                    if self.on_poll is not None:
                        try:
                            self.on_poll(statuses)
                        except Exception as exc:  # noqa: BLE001 - a listener failing never stops the polling
                            log.debug("on_poll failed: %s", exc)
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
            executor.shutdown(wait=False)
            for reg_key, poller in list(self._registry.items()):
                if poller is self and not self._waiters:
                    del self._registry[reg_key]
