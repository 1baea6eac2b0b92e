"""GPUAvailableTrigger: fires when a GPU request would fit on this host (it reserves nothing)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_gpusched.core.gpu.inventory import get_inventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest


class GPUAvailableTrigger(BaseTrigger):
    """Checks every ``poll_interval`` seconds whether ``request`` fits; ``payload`` is echoed back.

    The triggerer must run on the GPU host (the usual single-box LocalExecutor setup); on several GPU
    hosts use ``wait_mode="reschedule"`` on the operator instead.
    """

    def __init__(self, request: dict, simulate: str | None = None, state_dir: str | None = None,
                 poll_interval: float = 5.0, payload: dict | None = None) -> None:
        super().__init__()
        self.request = dict(request)
        self.simulate = simulate
        self.state_dir = state_dir
        self.poll_interval = float(poll_interval)
        self.payload = dict(payload or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"request": self.request, "simulate": self.simulate, "state_dir": self.state_dir,
                 "poll_interval": self.poll_interval, "payload": self.payload})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        manager = LeaseManager(get_inventory(self.simulate or None), self.state_dir)
        request = GPURequest(**self.request)
        last = None
        while True:
            why = await asyncio.to_thread(manager.why_not, request)
            if not why:
                yield TriggerEvent({"status": "available", "payload": self.payload})
                return
            if why != last:
                self.log.info("Waiting for %s: %s", request.describe(), why)
                last = why
            await asyncio.sleep(self.poll_interval)
