"""What the lease manager asks of the team quotas, as the gpu package's own small interface.

The quotas are built on the GPU mechanics (core/quota/host.py's :class:`HostQuotas` reads GPUs, requests and
placements), so the GPU package does not import them: it says here what it needs, :class:`HostQuotas` answers it,
and whoever attaches quotas (core/fleet.py ``attach_quotas``) builds the gate and gives it to the manager
(:meth:`~airflow_provider_gpusched.core.gpu.leases.LeaseManager.use_quotas`). Pure Python, no Airflow imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.gpu.placement import GPURequest, Placement


class QuotaVerdict(Protocol):
    """What the quotas make of one request on this host (core/quota/host.py ``QuotaGate``)."""

    @property
    def kind(self) -> str:
        """ "quota" (within the group's quota), "borrow" (beyond it, reclaimable) or "wait"."""

    @property
    def reason(self) -> str:
        """Why it waits (kind "wait")."""

    @property
    def note(self) -> str:
        """For a request that does not fit: the borrowed leases it may reclaim later, and when."""

    @property
    def borrowed(self) -> list[tuple[str, int, float]]:
        """The reclaimable leases here as the preemption planner takes them: (lease id, priority, created)."""


Verdict = TypeVar("Verdict", bound=QuotaVerdict)


@runtime_checkable
class HostQuotaGate(Protocol[Verdict]):
    """The team quotas as one host's lease manager applies them: the gate on a request, waiting marks,
    reclaims here and elsewhere, claims for the leases given (core/quota/host.py ``HostQuotas``)."""

    @property
    def grace_period(self) -> float:
        """How long borrowed work has to give its GPUs back when they are reclaimed."""

    def group_of(self, group: str) -> str:
        """The group a request counts for ('': none, no quota applies)."""

    def lock(self, group: str) -> AbstractContextManager[None]:
        """Held around a look at a request of ``group`` (the caller holds the allocation lock)."""

    def gate(
        self,
        request: GPURequest,
        owner: str,
        group: str,
        placement: Placement | None,
        gpus: list[GPUInfo],
        live: Sequence[str] | None,
    ) -> Verdict:
        """The quotas' word on ``request`` placed at ``placement`` (None: it does not fit)."""

    def wait(self, gate: Verdict, owner: str, reason: str, *, mark: bool) -> None:
        """``owner`` does not start now: keep (``mark``) its waiting mark."""

    def hold(self, gate: Verdict, owner: str, victims: Sequence[str], reason: str) -> str:
        """``owner`` waits for ``victims`` to yield: ask borrowed leases back; the reason's tail."""

    def claim(self, gate: Verdict, lease_id: str, owner: str, priority: int) -> None:
        """Count the lease given against its group."""

    def release(self, lease_id: str) -> None:
        """The lease ended: its claim goes."""

    def reclaimed_for(self, lease_id: str) -> str:
        """Who reclaims this borrowed lease ('' : nobody)."""

    def asked_here_by(self, owner: str) -> set[str]:
        """The leases on this host that ``owner`` asked to give borrowed GPUs back."""

    def waiter_record(self, owner: str) -> dict[str, Any] | None:
        """``owner``'s waiting mark, or None."""
