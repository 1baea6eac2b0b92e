"""The api-server's own GPU host (outside a fleet): its inventory, read at most every OWN_INVENTORY_SECONDS, and its
measured use, sampled every 10 s by a thread that the plugin app's lifespan starts and stops (never a request), and
the telemetry each page shows: in a fleet, what each host's worker published."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.board import BoardGPU, KnownHost
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.fleet import read_fleet_telemetry
from airflow_provider_gpusched.core.gpu.telemetry import HostSampler, TelemetryRing, sample_gpus, sample_host
from airflow_provider_gpusched.metrics import emit_gpu_samples

#: how long the api-server's own GPU inventory is reused between board refreshes
OWN_INVENTORY_SECONDS = 30.0
_own_inventory: dict[str, Any] = {"at": 0.0, "host": None}


def airflow_hostname() -> str:
    """This host as Airflow names task instances' hosts (``[core] hostname_callable``), so that its GPUs and the
    leases its tasks publish land on one row."""
    try:
        from airflow.utils.net import get_hostname

        return get_hostname()
    except Exception:  # noqa: BLE001 - a misconfigured callable: the plain host name
        return socket.getfqdn()


def own_host() -> KnownHost | None:
    """The api-server's own host when it is a GPU host (NVML finds GPUs, or [gpusched] simulate_gpus is set):
    listed on the board with its GPUs even when nothing runs. Read at most every OWN_INVENTORY_SECONDS."""
    now = time.monotonic()
    if now - _own_inventory["at"] < OWN_INVENTORY_SECONDS:
        return _own_inventory["host"]
    from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError, get_inventory

    host = None
    try:
        inventory = get_inventory(settings.simulate_gpus() or None)
        gpus = [BoardGPU(g.index, g.uuid, g.name, g.memory_total, g.simulated) for g in inventory.gpus()]
        if gpus:
            host = KnownHost(airflow_hostname(), gpus, "the api-server's own host")
    except (GPUInventoryError, OSError):
        host = None
    _own_inventory.update(at=now, host=host)
    return host


class OwnSampler:
    """The sampler of the api-server's own GPUs: :meth:`start` (the app's lifespan, at start-up) begins sampling
    when this host is a GPU host and not part of a fleet; :meth:`stop` ends it (at shutdown)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sampler: HostSampler | None = None

    def start(self) -> bool:
        """Start sampling this host's GPUs (once); whether a sampler runs now."""
        from airflow_provider_gpusched.fleet import enabled as in_a_fleet

        with self._lock:
            if self._sampler is not None:
                return True
            host = None if in_a_fleet() else own_host()
            if host is None:
                return False
            try:
                from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

                manager = LocalGPUHook().get_conn()
                take, inventory = (lambda: sample_host(manager)), manager.inventory
            except (GpuschedError, OSError):  # its lease directory cannot be made: processes stay unattributed
                from airflow_provider_gpusched.core.gpu.inventory import get_inventory

                inventory = get_inventory(settings.simulate_gpus() or None)
                manager = None
                take = lambda: sample_gpus(inventory.gpus(), None)  # noqa: E731
            ring = TelemetryRing(host.host, inventory.source)
            sampler = HostSampler(ring, take, on_sample=lambda samples: emit_gpu_samples(host.host, samples, manager))
            self._sampler = sampler.start()
            return True

    def stop(self) -> None:
        with self._lock:
            sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()

    def restart(self) -> bool:
        """Stop, then start with the settings of now (tests that change the simulated GPUs' usage file)."""
        self.stop()
        return self.start()

    def record(self) -> dict[str, Any] | None:
        """Its telemetry record (core/gpu/telemetry.py), or None while it does not run."""
        sampler = self._sampler
        if sampler is None:
            return None
        return {**sampler.ring.to_dict(), "sampled_by": "the api-server", "error": sampler.error}


#: the api-server's one sampler of its own GPUs
OWN_SAMPLER = OwnSampler()


def host_telemetry(problems: list[str]) -> dict[str, dict[str, Any]]:
    """Measured GPU use per host: in a fleet, what each host's worker published; else the api-server's own host."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet

    if in_a_fleet():
        found, bad = read_fleet_telemetry(settings.fleet_dir())
        problems += bad
        return {host: {**record, "sampled_by": "its Edge worker"} for host, record in found.items()}
    own = own_host()
    telemetry = OWN_SAMPLER.record() if own is not None else None
    return {own.host: telemetry} if own is not None and telemetry is not None else {}
