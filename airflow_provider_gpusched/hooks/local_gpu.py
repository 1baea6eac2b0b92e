"""LocalGPUHook: this host's GPUs (NVML, or the configured simulation) and their lease manager."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core import fleet
from airflow_provider_gpusched.core.gpu.inventory import GPUInventory, get_inventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager


class LocalGPUHook(BaseHook):
    """No connection: the GPUs are those of the machine the task runs on.

    ``[gpusched] simulate_gpus`` (or ``GPUSCHED_SIMULATE_GPUS``) gives a simulated inventory where NVML
    finds no GPU; ``[gpusched] gpu_state_dir`` is where the host's leases live.
    """

    hook_name = "Local GPUs"

    def __init__(self, simulate: str | None = None, state_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.simulate = simulate if simulate is not None else settings.simulate_gpus()
        self.state_dir = state_dir if state_dir is not None else settings.gpu_state_dir()
        self._manager: LeaseManager | None = None

    def inventory(self) -> GPUInventory:
        return self.get_conn().inventory

    def get_conn(self) -> LeaseManager:
        if self._manager is None:
            inventory = get_inventory(self.simulate or None)
            if inventory.source == "simulated":
                self.log.info("Using SIMULATED GPUs (%s): no GPU found through NVML", self.simulate)
            self._manager = LeaseManager(
                inventory, self.state_dir, classes=settings.job_class_mapping(), shared=settings.gpu_state_dir_shared()
            )
            if settings.fleet_dir():  # heed the head node's stop requests and stop orders (docs/fleet.md)
                fleet.join(self._manager, settings.fleet_dir())
            settings.attach_quotas(self._manager)  # team quotas, if any (docs/quotas.md)
        return self._manager
