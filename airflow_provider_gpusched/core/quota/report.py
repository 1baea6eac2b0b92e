"""What the quotas look like now, for people (CLI, GPU board, health) and for metrics: one view, built here.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from typing_extensions import TypedDict

from airflow_provider_gpusched.core.quota.book import QuotaBook
from airflow_provider_gpusched.core.quota.config import describe_amount
from airflow_provider_gpusched.core.quota.policy import borrowed_ids, usage

#: an in-quota request waiting longer than this is a health problem (reclaiming takes a grace period)
STARVED_AFTER = 300.0


class QuotaWaiterView(TypedDict):
    """A request that waits for GPUs of its group's quota (``kind`` "quota") or to borrow (``kind`` "borrow")."""

    owner: str
    host: str
    amount: float
    kind: str
    for_s: float
    reason: str


class QuotaGroupView(TypedDict):
    group: str
    quota: float
    used: float
    in_quota: float
    borrowed: float
    lent: float
    waiting: float
    weight: float
    borrowing_limit: float | None
    leases: int
    waiters: list[QuotaWaiterView]


class QuotaLeaseView(TypedDict):
    group: str
    state: str  # "within" or "borrowed"
    host: str


class QuotaViewDict(TypedDict):
    """:class:`QuotaView` as JSON (the GPU board's ``quotas``)."""

    resource: str  # "gpus" or "gpu_memory"
    capacity: float
    source: str
    groups: list[QuotaGroupView]
    leases: dict[str, QuotaLeaseView]
    problems: list[str]


@dataclass
class GroupRow:
    group: str
    quota: float
    used: float
    in_quota: float
    borrowed: float
    lent: float
    waiting: float
    weight: float
    borrowing_limit: float | None
    leases: int
    #: who waits: ``[{"owner", "host", "amount", "kind", "for_s", "reason"}]``
    waiters: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class QuotaView:
    resource: str
    capacity: float
    source: str
    groups: list[GroupRow]
    #: lease id -> {"group", "state": "within" | "borrowed", "host"}
    leases: dict[str, dict[str, str]]
    problems: list[str]

    def to_dict(self) -> QuotaViewDict:
        return cast(QuotaViewDict, asdict(self))

    def lines(self) -> list[str]:
        """The table people read (``gpusched quota``, ``queue list``)."""
        r = self.resource
        unit = "GPUs" if r == "gpus" else "GPU memory"
        out = [f"quotas ({self.source}; {describe_amount(self.capacity, r)} in the fleet, in {unit}):"]
        out.append(
            f"  {'group':<14}{'quota':>10}{'used':>10}{'in quota':>10}{'borrowed':>10}{'lent':>10}{'waiting':>10}  weight"
        )
        for g in self.groups:
            out.append(
                f"  {g.group:<14}{_n(g.quota, r):>10}{_n(g.used, r):>10}{_n(g.in_quota, r):>10}{_n(g.borrowed, r):>10}"
                f"{_n(g.lent, r):>10}{_n(g.waiting, r):>10}  {g.weight:g}"
                + (f" (borrows at most {_n(g.borrowing_limit, r)})" if g.borrowing_limit is not None else "")
            )
        for g in self.groups:
            for w in g.waiters:
                kind = "within its quota" if w["kind"] == "quota" else "to borrow"
                out.append(
                    f"  waiting: {g.group}: {w['owner']} on {w['host']}, {_n(w['amount'], r)} {kind}, "
                    f"{w['for_s']:.0f}s: {w['reason']}"
                )
        out += [f"  problem: {p}" for p in self.problems]
        return out


def _n(value: float | None, resource: str) -> str:
    if value is None:
        return "-"
    if resource == "gpu_memory":
        return describe_amount(value, resource)
    return f"{value:.2f}".rstrip("0").rstrip(".")


def quota_view(book: QuotaBook, capacity: float, now: float | None = None) -> QuotaView:
    now = time.time() if now is None else now
    config = book.config
    claims = book.claims(now=now)
    waiters = book.waiters(now)
    problems = [why for _path, why in book.problems]
    use = usage(config, claims, waiters, capacity)
    borrowed = borrowed_ids(config, claims, capacity)
    rows = []
    for name, u in use.items():
        rows.append(
            GroupRow(
                name,
                u.quota,
                u.used,
                u.in_quota,
                u.borrowed,
                u.lent,
                u.waiting,
                u.weight,
                u.borrowing_limit,
                u.leases,
                [
                    {
                        "owner": w.owner,
                        "host": w.host,
                        "amount": w.amount,
                        "kind": w.kind,
                        "for_s": round(now - w.since, 1),
                        "reason": w.reason,
                    }
                    for w in sorted(u.waiters, key=lambda w: w.since)
                ],
            )
        )
    leases = {
        c.lease_id: {"group": c.group, "state": "borrowed" if c.lease_id in borrowed else "within", "host": c.host}
        for c in claims
    }
    fits = config.check_capacity(capacity)
    if fits:
        problems.append(fits)
    return QuotaView(config.resource, capacity, config.source, rows, leases, problems)


def starved(view: QuotaView, after: float = STARVED_AFTER) -> list[str]:
    """In-quota requests that waited longer than ``after`` seconds: the guarantee is not being kept."""
    return [
        f"group {g.group}: {w['owner']} on {w['host']} has waited {w['for_s']:.0f}s within its quota ({w['reason']})"
        for g in view.groups
        for w in g.waiters
        if w["kind"] == "quota" and w["for_s"] > after
    ]
