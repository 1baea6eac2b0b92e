"""A host's CPUs and RAM as leases reserve them (a lease's ``cpus`` and ``host_memory``): what the host has to
share, whether a request could ever fit, and whether it fits now beside the live leases. The lease manager asks
it under its allocation lock, so no two requests count the same CPU or byte.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.lease_store import Lease
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.units import format_bytes, parse_bytes


class HostReservations:
    """``host_memory``: the RAM reservations share (bytes or a size such as "64GiB"; None: ``$GPUSCHED_HOST_MEMORY``,
    else 90% of the host's RAM, read once)."""

    def __init__(self, host_memory: int | str | None = None) -> None:
        self._memory = host_memory

    @staticmethod
    def cpus() -> list[int]:
        """The CPUs that ``cpus`` reservations share: those this process may run on."""
        return sorted(os.sched_getaffinity(0))

    def memory_budget(self) -> int:
        """The host RAM that ``host_memory`` reservations share."""
        if self._memory is None:
            raw = os.environ.get("GPUSCHED_HOST_MEMORY", "")
            if raw:
                self._memory = parse_bytes(raw, argument="$GPUSCHED_HOST_MEMORY")
            else:
                import psutil

                self._memory = int(psutil.virtual_memory().total * 0.9)
        elif isinstance(self._memory, str):
            self._memory = parse_bytes(self._memory, argument="host_memory")
        return int(self._memory)

    def check_possible(self, request: GPURequest) -> None:
        """Refuse a request more than the whole host could ever give (InvalidArgumentError naming the argument)."""
        if request.host_memory and request.host_memory > self.memory_budget():
            raise InvalidArgumentError(
                "host_memory",
                format_bytes(request.host_memory),
                f"at most this host's budget for reservations, "
                f"{format_bytes(self.memory_budget())} ($GPUSCHED_HOST_MEMORY, else 90% of its RAM)",
            )
        if request.cpus and request.cpus > len(self.cpus()):
            raise InvalidArgumentError(
                "cpus", request.cpus, f"at most this host's {len(self.cpus())} CPUs (those this process may run on)"
            )

    def cpus_for(self, request: GPURequest, leases: Sequence[Lease]) -> tuple[list[int], str]:
        """The CPUs to reserve for ``request`` (the lowest numbers no live lease holds), or ``([], why not)``."""
        if not request.cpus:
            return [], ""
        taken = {c for lease in leases for c in lease.cpus}
        free = [c for c in self.cpus() if c not in taken]
        if len(free) >= request.cpus:
            return free[: request.cpus], ""
        holders = sum(1 for lease in leases if lease.cpus)
        return [], (
            f"host CPUs: {len(taken)} of {len(self.cpus())} are reserved by {holders} lease(s); the "
            f"request wants {request.cpus}"
        )

    def memory_problem(self, request: GPURequest, leases: Sequence[Lease]) -> str:
        """'' when the request's host RAM fits beside what ``leases`` (the live ones) reserved, else why not."""
        if not request.host_memory:
            return ""
        self.check_possible(request)
        reserved = sum(lease.host_memory for lease in leases)
        budget = self.memory_budget()
        if reserved + request.host_memory <= budget:
            return ""
        holders = sum(1 for lease in leases if lease.host_memory)
        return (
            f"host RAM: {format_bytes(reserved)} of the {format_bytes(budget)} budget is reserved by {holders} "
            f"lease(s); the request wants {format_bytes(request.host_memory)}"
        )

    def problem(self, request: GPURequest, leases: Sequence[Lease]) -> str:
        """Why ``request``'s host RAM or CPUs do not fit now ('' when they do)."""
        return self.memory_problem(request, leases) or self.cpus_for(request, leases)[1]
