"""The team quotas as one host's lease manager applies them (core/gpu/leases.py asks, this answers).

The lease manager places a request on its GPUs under the job-class rules; then, for normal work of a quota group,
:class:`HostQuotas` says what the quotas make of it (:meth:`~HostQuotas.gate`): within the group's quota, borrowed
beyond it, or waiting; which borrowed leases an in-quota request may reclaim, here or on another host; and it keeps
the shared book (core/quota/book.py) up to date: claims for the leases given, waiting marks, reclaim requests.
The rules themselves are core/quota/policy.py's. Pure Python, no Airflow imports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_gpusched.core.gpu.accounting import gpu_share
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.gpu.placement import GPURequest, Placement
from airflow_provider_gpusched.core.quota.book import CLAIM_TTL, WAITER_TTL, QuotaBook
from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.policy import WAITER, Claim, Waiter, admit, reclaim_order


@dataclass
class QuotaGate:
    """What the quotas make of one request on this host."""

    group: str
    #: policy.admit's verdict: "quota" (within the group's quota), "borrow" (beyond it, reclaimable) or "wait"
    kind: str
    amount: float  # what the request counts against its group's quota
    reason: str = ""  # why it waits ("wait")
    #: borrowed claims of other groups on this host that the request may reclaim now, in reclaim order
    reclaim: list[Claim] = field(default_factory=list)
    #: borrowed claims of other groups on other hosts, in reclaim order: asked when nothing here would do
    reclaim_elsewhere: list[Claim] = field(default_factory=list)
    #: borrowed leases here that may be reclaimed once they ran reclaim.min_runtime (for the reason)
    note: str = ""
    #: the waiting mark written for a request that does not start (its reason completed by :meth:`HostQuotas.hold`)
    waiter: Waiter | None = None

    @property
    def borrowed(self) -> list[tuple[str, int, float]]:
        """The reclaimable leases here as the preemption planner takes them: (lease id, priority, created)."""
        return [(c.lease_id, c.priority, c.created) for c in self.reclaim]


class HostQuotas:
    """``book``'s quotas on host ``host``: ``capacity`` says how much there is in all (the fleet's GPUs or GPU
    memory); without it, this host's ``gpus()``."""

    def __init__(
        self,
        book: QuotaBook,
        host: str,
        gpus: Callable[[], list[GPUInfo]],
        capacity: Callable[[], float] | None = None,
    ) -> None:
        self.book = book
        self.host = host
        self._gpus = gpus
        self._capacity = capacity

    @property
    def config(self) -> QuotaConfig:
        return self.book.config

    def capacity(self, gpus: list[GPUInfo] | None = None) -> float:
        """What the quotas are shares of: the fleet's, or this host's GPUs (``gpus`` when already read)."""
        if self._capacity is not None:
            return self._capacity()
        return self.config.capacity_of(self._gpus() if gpus is None else gpus)

    def group_of(self, group: str) -> str:
        """The group a request counts for: its own, else the default group ('' : none)."""
        return group or self.config.default_group

    @contextlib.contextmanager
    def lock(self, group: str) -> Iterator[None]:
        """The book's lock, for a request that counts for a group (the caller holds the allocation lock)."""
        if self.group_of(group):
            with self.book.lock():
                yield
        else:
            yield

    # -- one request --------------------------------------------------------------------------------
    def amount(self, request: GPURequest, placement: Placement | None, gpus: list[GPUInfo]) -> float:
        """What ``request`` counts against its group: GPUs (a memory slice as its fraction) or bytes of GPU memory."""
        totals = {g.index: g.memory_total for g in gpus}
        biggest = max(totals.values(), default=0)
        if self.config.resource == "gpu_memory":
            if placement is not None:
                return float(sum(placement.memory.values()))
            return float(request.gpus * (request.gpu_memory or biggest))
        if placement is not None:
            return gpu_share(placement.indices, placement.memory, placement.whole, totals)
        if request.gpu_memory is None or biggest <= 0:
            return float(request.gpus)
        return request.gpus * min(1.0, request.gpu_memory / biggest)

    def gate(
        self,
        request: GPURequest,
        owner: str,
        group: str,
        placement: Placement | None,
        gpus: list[GPUInfo],
        live: Sequence[str] | None,
    ) -> QuotaGate:
        """The quotas' word on ``request`` (the caller holds the book's lock): beyond its group's quota and not
        allowed to borrow, it waits; within it and not fitting, it may reclaim borrowed leases. ``live``: the
        lease ids alive here (their claims are kept, the others dropped), or None to only look."""
        book = self.book
        config = book.config  # one version of the quotas for the whole decision (the book may follow the file)
        now = time.time()
        capacity = self.capacity(gpus)
        claims = book.claims(host=self.host, live=live, now=now, capacity=capacity)
        amount = self.amount(request, placement, gpus)
        verdict = admit(
            config,
            capacity,
            claims,
            book.waiters(now, capacity),
            group=group,
            amount=amount,
            host=self.host,
            owner=owner,
        )
        gate = QuotaGate(group, verdict.kind, amount)
        if verdict.kind == "wait":
            gate.reason = verdict.reason
        elif placement is None and verdict.kind == "quota":
            asked = {lid: by for (_, lid), by in book.reclaims().items()}  # reclaims under way, and for whom

            def order(host: str) -> tuple[list[Claim], list[Claim]]:
                return reclaim_order(
                    config, capacity, claims, group=group, host=host, now=now, asked=asked, owner=owner
                )

            ready, young = order(self.host)
            gate.reclaim = ready
            gate.reclaim_elsewhere = [
                c for other in sorted({c.host for c in claims} - {self.host}) for c in order(other)[0]
            ]
            if young and not ready:
                gate.note = "; borrowed lease(s) here may be reclaimed after reclaim.min_runtime: " + ", ".join(
                    f"{c.lease_id} ({c.group}) in {config.reclaim.min_runtime - (now - c.created):.0f}s" for c in young
                )
        return gate

    def wait(self, gate: QuotaGate, owner: str, reason: str, *, mark: bool) -> None:
        """A request that does not start: its waiting mark (for the board and the CLI, and so that borrowing
        waits behind it), written now when ``mark``, else by :meth:`hold` with whom it asked."""
        now = time.time()
        kind: Literal["quota", "borrow"] = "quota" if gate.kind == "quota" else "borrow"
        gate.waiter = Waiter(owner, self.host, gate.group, gate.amount, kind, now, now + WAITER_TTL, reason[:500])
        if mark:
            self.book.mark_waiting(gate.waiter)

    def hold(self, gate: QuotaGate, owner: str, victims: Sequence[str], reason: str) -> str:
        """A waiting request's claims on others: reclaim the borrowed leases among ``victims`` (here, through the
        book, so that every host's requests see whom others asked); with no victim here, borrowed leases on
        another host. Marks it waiting with ``reason`` and what it asked; returns the reason's tail."""
        borrowed = {c.lease_id for c in gate.reclaim}
        for lease_id in victims:
            if lease_id in borrowed:
                self.book.ask_reclaim(self.host, lease_id, owner, gate.group)
        tail = ""
        if not victims and gate.kind == "quota" and gate.reclaim_elsewhere:
            tail = self._reclaim_elsewhere(owner, gate)
        if gate.waiter is not None:
            self.book.mark_waiting(dataclasses.replace(gate.waiter, reason=(reason + tail)[:500]))
        return tail

    def _reclaim_elsewhere(self, owner: str, gate: QuotaGate) -> str:
        """An in-quota request that nothing on this host can make fit: ask borrowed leases on the one other host
        whose borrowed work covers the request (newest first) to give their GPUs back; the request then waits for
        room in the fleet (its task moves there). Borrowing waits meanwhile (policy.admit)."""
        pending = self.book.reclaims_by(owner)
        if pending:
            return "; waiting for borrowed lease(s) " + ", ".join(f"{lid} on {h}" for h, lid in pending)
        by_host: dict[str, list[Claim]] = {}  # hosts in the order of their first candidate: lowest priority, newest
        for c in sorted(gate.reclaim_elsewhere, key=lambda c: (c.priority, -c.created, c.lease_id)):
            if c.host != self.host:
                by_host.setdefault(c.host, []).append(c)
        for host, claims in by_host.items():
            chosen, got = [], 0.0
            for c in claims:
                chosen.append(c)
                got += c.amount
                if got >= gate.amount - 1e-9:
                    break
            if got >= gate.amount - 1e-9:
                for c in chosen:
                    self.book.ask_reclaim(host, c.lease_id, owner, gate.group)
                return f"; reclaiming borrowed lease(s) {', '.join(c.lease_id for c in chosen)} on {host}"
        return ""

    def claim(self, gate: QuotaGate, lease_id: str, owner: str, priority: int) -> None:
        """Count a lease just given against its group (the caller holds the book's lock); its waiting mark and
        the reclaims it asked go: it has its GPUs."""
        now = time.time()
        self.book.add_claim(Claim(lease_id, self.host, gate.group, gate.amount, now, priority, owner, now + CLAIM_TTL))
        self.book.clear_waiting("", owner)
        for host, asked in self.book.reclaims_by(owner):
            self.book.drop_reclaim(host, asked)

    # -- leases that run ----------------------------------------------------------------------------
    def release(self, lease_id: str) -> None:
        """A lease gave its GPUs back: its claim and any reclaim asked of it go."""
        self.book.drop_claim(self.host, lease_id)
        self.book.drop_reclaim(self.host, lease_id)

    def reclaimed_for(self, lease_id: str) -> str:
        """'' while a borrowed lease may keep its GPUs; else for whom they are reclaimed. Renews its claim."""
        self.book.renew(self.host, lease_id)
        remote = self.book.reclaim_request(self.host, lease_id)
        return f"reclaimed for {remote['by']} (group {remote['group']}'s quota)" if remote is not None else ""

    def asked_here_by(self, owner: str) -> set[str]:
        """The leases on this host that ``owner`` asked to give borrowed GPUs back."""
        return {lid for host, lid in self.book.reclaims_by(owner) if host == self.host}

    def waiter_record(self, owner: str) -> dict[str, Any] | None:
        """``owner``'s waiting mark in the book (for a task that defers: its trigger keeps it), or None."""
        waiter = self.book.waiter(self.host, owner)
        return WAITER.dump(waiter) if waiter is not None else None

    @property
    def grace_period(self) -> float:
        """How long borrowed work has to give its GPUs back when they are reclaimed."""
        return float(self.config.reclaim.grace_period)
