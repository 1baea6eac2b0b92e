"""What the quotas look like now, for people (CLI, GPU board, health) and for metrics: one view, built here.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import time

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
    """A group: its quota and what it holds, lends and waits for (in the quota's resource: GPUs or bytes)."""

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
    """A lease a group holds: within its quota or borrowed from others'."""

    group: str
    state: str  # "within" or "borrowed"
    host: str


class QuotaView(TypedDict):
    """The team quotas now: the one record the CLI, the GPU board (its ``quotas``), health and metrics read."""

    resource: str  # "gpus" or "gpu_memory"
    capacity: float
    source: str
    groups: list[QuotaGroupView]
    #: lease id -> its group, "within" or "borrowed", its host
    leases: dict[str, QuotaLeaseView]
    problems: list[str]
    #: '' while the quota file is as it should be; else what is wrong with it now: the quotas above are its last
    #: good version, kept in force until it is fixed (core/quota/last_good.py). The board shows it as an error.
    config_error: str


def quota_lines(view: QuotaView) -> list[str]:
    """The table people read (``gpusched quota``, ``queue list``)."""
    r = view["resource"]
    unit = "GPUs" if r == "gpus" else "GPU memory"
    out = [f"quotas ({view['source']}; {describe_amount(view['capacity'], r)} in the fleet, in {unit}):"]
    if view["config_error"]:
        out.append(f"  ERROR: the quota file is broken: {view['config_error']}")
    out.append(
        f"  {'group':<14}{'quota':>10}{'used':>10}{'in quota':>10}{'borrowed':>10}{'lent':>10}{'waiting':>10}  weight"
    )
    for g in view["groups"]:
        limit = g["borrowing_limit"]
        out.append(
            f"  {g['group']:<14}{_n(g['quota'], r):>10}{_n(g['used'], r):>10}{_n(g['in_quota'], r):>10}"
            f"{_n(g['borrowed'], r):>10}{_n(g['lent'], r):>10}{_n(g['waiting'], r):>10}  {g['weight']:g}"
            + (f" (borrows at most {_n(limit, r)})" if limit is not None else "")
        )
    for g in view["groups"]:
        for w in g["waiters"]:
            kind = "within its quota" if w["kind"] == "quota" else "to borrow"
            out.append(
                f"  waiting: {g['group']}: {w['owner']} on {w['host']}, {_n(w['amount'], r)} {kind}, "
                f"{w['for_s']:.0f}s: {w['reason']}"
            )
    out += [f"  problem: {p}" for p in view["problems"]]
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
    claims = book.claims(now=now, capacity=capacity)
    waiters = book.waiters(now, capacity)
    problems = [why for _path, why in book.problems]
    use = usage(config, claims, waiters, capacity)
    borrowed = borrowed_ids(config, claims, capacity)
    groups: list[QuotaGroupView] = [
        {
            "group": name,
            "quota": u.quota,
            "used": u.used,
            "in_quota": u.in_quota,
            "borrowed": u.borrowed,
            "lent": u.lent,
            "waiting": u.waiting,
            "weight": u.weight,
            "borrowing_limit": u.borrowing_limit,
            "leases": u.leases,
            "waiters": [
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
        }
        for name, u in use.items()
    ]
    leases: dict[str, QuotaLeaseView] = {
        c.lease_id: {"group": c.group, "state": "borrowed" if c.lease_id in borrowed else "within", "host": c.host}
        for c in claims
    }
    fits = config.check_capacity(capacity)
    if fits:
        problems.append(fits)
    return {
        "resource": config.resource,
        "capacity": capacity,
        "source": config.source,
        "groups": groups,
        "leases": leases,
        "problems": problems,
        "config_error": config.config_error,
    }


def starved(view: QuotaView, after: float = STARVED_AFTER) -> list[str]:
    """In-quota requests that waited longer than ``after`` seconds: the guarantee is not being kept."""
    return [
        f"group {g['group']}: {w['owner']} on {w['host']} has waited {w['for_s']:.0f}s within its quota ({w['reason']})"
        for g in view["groups"]
        for w in g["waiters"]
        if w["kind"] == "quota" and w["for_s"] > after
    ]
