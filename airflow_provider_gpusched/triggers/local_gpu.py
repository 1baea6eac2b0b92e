"""GPUAvailableTrigger: fires when a GPU request would fit on this host (it reserves nothing)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core import options
from airflow_provider_gpusched.core.gpu.inventory import get_inventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager, reason_kind
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.triggers.deferral import hold_until


class GPUAvailableTrigger(BaseTrigger):
    """Checks every ``poll_interval`` seconds whether ``request`` fits; ``payload`` is echoed back.

    The triggerer must run on the GPU host (the usual single-box LocalExecutor setup); on several GPU
    hosts use ``wait_mode="reschedule"`` on the operator instead.
    """

    def __init__(
        self,
        request: dict[str, Any],
        simulate: str | None = None,
        state_dir: str | None = None,
        poll_interval: float = options.default("gpu_poll_interval"),
        payload: dict[str, Any] | None = None,
        owner: str = "",
        job_class: str = "normal",
        not_before: float | None = None,
        task_key: str = "",
        fire_after: float | None = None,
        group: str = "",
    ) -> None:
        super().__init__()
        self.fire_after = fire_after
        self.task_key = task_key
        self.group = group
        self.owner = owner
        self.job_class = job_class
        self.not_before = not_before
        self.request = dict(request)
        self.simulate = simulate
        self.state_dir = state_dir
        self.poll_interval = float(poll_interval)
        self.payload = dict(payload or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "request": self.request,
                "simulate": self.simulate,
                "state_dir": self.state_dir,
                "poll_interval": self.poll_interval,
                "payload": self.payload,
                "owner": self.owner,
                "job_class": self.job_class,
                "not_before": self.not_before,
                "task_key": self.task_key,
                "fire_after": self.fire_after,
                "group": self.group,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        manager = LeaseManager(
            get_inventory(self.simulate or None),
            self.state_dir,
            classes=settings.job_class_mapping(),
            shared=settings.gpu_state_dir_shared(),
        )
        settings.attach_quotas(manager)  # the same quota book as the task's (docs/quotas.md)
        request = GPURequest(**self.request)
        if self.not_before is not None and self.not_before > time.time():
            self.log.info("Relaunching after a preemption: backing off %.0fs", self.not_before - time.time())
            await asyncio.sleep(self.not_before - time.time())
        last = None
        while True:  # a normal request that does not fit asks idle leases to yield (see LeaseManager)
            seen = manager.store.release_count()
            why = await asyncio.to_thread(
                manager.hold_place,
                request,
                self.owner,
                job_class=self.job_class,
                task_key=self.task_key,
                group=self.group,
            )
            if not why and self.fire_after is not None and self.fire_after > time.time():
                await hold_until(self.fire_after)  # then look again: the GPUs may have gone meanwhile
                continue
            if not why:
                yield TriggerEvent({"status": "available", "payload": self.payload})
                return
            if reason_kind(why) != last:
                self.log.info("Waiting for %s: %s", request.describe(), why)
                last = reason_kind(why)
            await _release_or_timeout(manager, seen, self.poll_interval)


async def _release_or_timeout(manager: LeaseManager, seen: int, timeout: float, check_every: float = 0.1) -> None:
    """Sleep ``timeout`` seconds, or less: until a lease is released after the count ``seen`` (checked
    every 100 ms with one read of the releases counter, without the allocation lock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(min(check_every, max(0.0, deadline - time.monotonic())))
        if manager.store.release_count() != seen:
            return


class FleetRoomTrigger(BaseTrigger):
    """Fires when ``request`` fits on some host of the fleet, by the records the hosts publish under
    ``fleet_dir`` (core/fleet.py): the head node's triggerer cannot look at a GPU host's leases itself.
    It reserves nothing; the resumed task goes back to the executor's queue, and the host that takes it
    leases its GPUs (or waits again)."""

    def __init__(
        self,
        request: dict[str, Any],
        fleet_dir: str,
        poll_interval: float = options.default("gpu_poll_interval"),
        payload: dict[str, Any] | None = None,
        not_before: float | None = None,
        fire_after: float | None = None,
        waiter: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.request = dict(request)
        self.fleet_dir = fleet_dir
        #: with team quotas: the waiting request's mark (core/quota Waiter), kept while it waits here so that no
        #: group borrows the GPUs reclaimed for it
        self.waiter = dict(waiter) if waiter else None
        self.poll_interval = float(poll_interval)
        self.payload = dict(payload or {})
        self.not_before = not_before
        self.fire_after = fire_after

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "request": self.request,
                "fleet_dir": self.fleet_dir,
                "poll_interval": self.poll_interval,
                "payload": self.payload,
                "not_before": self.not_before,
                "fire_after": self.fire_after,
                "waiter": self.waiter,
            },
        )

    def _keep_waiting_mark(self) -> None:
        from airflow_provider_gpusched.core.quota.book import WAITER_TTL, QuotaBook, book_dir
        from airflow_provider_gpusched.core.quota.policy import WAITER

        config = settings.quota_config()
        if not self.waiter or not config.enabled:
            return
        now = time.time()
        waiter = WAITER.read({**self.waiter, "until": now + WAITER_TTL}, "the deferred task's waiting mark")
        QuotaBook(book_dir(self.fleet_dir, ""), config, shared=settings.gpu_state_dir_shared()).mark_waiting(waiter)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_gpusched.core import fleet

        request = GPURequest(**self.request)
        await hold_until(max(self.not_before or 0, self.fire_after or 0))
        last = None
        while True:
            await asyncio.to_thread(self._keep_waiting_mark)
            view = await asyncio.to_thread(fleet.read_fleet, self.fleet_dir)
            hosts, why = view.room(request)
            if hosts:
                yield TriggerEvent({"status": "available", "hosts": hosts, "payload": self.payload})
                return
            if why != last:
                self.log.info("Waiting for room in the fleet for %s: %s", request.describe(), why)
                last = why
            await asyncio.sleep(self.poll_interval)
