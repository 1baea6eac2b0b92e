"""The quota rules, as pure functions of what runs and what waits (no files, no clocks of their own).

* **In quota or borrowed.** A group's claims, oldest first, count against its quota until it is full; the rest
  are *borrowed*. So when a group's old work ends, its newer work becomes its own (no one preempts it then).
* **Admission** (:func:`admit`): within its quota a group is admitted whenever GPUs are free, and when they are not
  it reclaims borrowed ones (:func:`reclaim_order`). Beyond its quota it may borrow GPUs that are free now, up to
  its ``borrowing_limit``, never while another group's in-quota work waits anywhere, and never ahead of a
  group that is further below its weighted share of the surplus (borrowed / weight): as GPUs free, the surplus is
  divided by weight among the groups that want it.
* **Reclaim order:** borrowed work of other groups, lowest job priority first, then the newest: the least work
  lost, the order Kueue uses. Choosing by weight instead would let a heavily weighted group's week-old run be
  kept while a light group's ten-second-old one goes: more work lost for the same GPUs.
* :func:`fair_shares` (water-filling by weight) and :func:`jain_index`: what each group is entitled to, and how
  evenly entitlements were met; the board, the CLI and ``bench/fair_share.py`` use them.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from airflow_provider_gpusched.core.quota.config import QuotaConfig, describe_amount
from airflow_provider_gpusched.core.records import Float, RecordType, record_class, says

EPS = 1e-9
Name = Annotated[str, says("a name of at most 250 characters", max_length=250)]
#: finite (NaN, infinities and whole numbers too large for a float are refused); how much at most is the reader's to
#: say (the book counts no claim of more than the fleet has: core/quota/book.py)
Amount = Annotated[Float, says("an amount >= 0 (a finite number)", ge=0, strict=None)]
Time = Annotated[Float, says("a time stamp (a finite number)", strict=None)]


@record_class
@dataclass(frozen=True)
class Claim:
    """One lease counted against its group: written when the lease is taken, removed when it is given back."""

    lease_id: Annotated[str, says("a lease id", pattern=r"^[0-9a-f]{16}$")]
    host: Name
    group: Name
    amount: Amount  # GPUs (a memory slice as its fraction) or bytes of GPU memory
    created: Time
    priority: Annotated[int, says("a whole number")] = 0
    owner: Name = ""
    until: Time = 0.0  # the holder renews it; past this, a holder that stopped renewing is taken as gone


@record_class
@dataclass(frozen=True)
class Waiter:
    """A request that waits for GPUs, and on whom."""

    owner: Name
    host: Name
    group: Name
    amount: Amount
    kind: Literal["quota", "borrow"]
    since: Time
    until: Time
    reason: Annotated[str, says("a reason of at most 500 characters", max_length=500)] = ""


CLAIM = RecordType(Claim, name="quota claim")
WAITER = RecordType(Waiter, name="quota waiter")


@dataclass(frozen=True)
class Verdict:
    """``quota``: admitted within the group's quota; ``borrow``: admitted, borrowed (reclaimable); ``wait``."""

    kind: Literal["quota", "borrow", "wait"]
    reason: str = ""
    #: for an in-quota request that does not fit: reclaiming is allowed
    may_reclaim: bool = False


@dataclass
class GroupUse:
    group: str
    quota: float
    weight: float
    borrowing_limit: float | None
    used: float = 0.0
    in_quota: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    waiting: float = 0.0
    leases: int = 0
    waiters: list[Waiter] = field(default_factory=list)


def borrowed_ids(config: QuotaConfig, claims: Iterable[Claim], capacity: float) -> set[str]:
    """The lease ids of claims beyond their group's quota (oldest claims fill the quota first)."""
    out: set[str] = set()
    by_group: dict[str, list[Claim]] = {}
    for c in claims:
        by_group.setdefault(c.group, []).append(c)
    for group, mine in by_group.items():
        room = config.quota(group, capacity)
        for c in sorted(mine, key=lambda c: (c.created, c.lease_id)):
            if c.amount <= room + EPS:
                room -= c.amount
            else:
                room = -1.0  # a later, smaller claim does not jump the queue into the quota
                out.add(c.lease_id)
    return out


def usage(
    config: QuotaConfig, claims: Sequence[Claim], waiters: Sequence[Waiter], capacity: float
) -> dict[str, GroupUse]:
    """Per group: quota, use, in-quota and borrowed amounts, what of its quota others borrow, who waits."""
    out = {
        name: GroupUse(name, config.quota(name, capacity), g.weight, config.borrowing_limit(name, capacity))
        for name, g in config.groups.items()
    }
    borrowed = borrowed_ids(config, claims, capacity)
    for c in claims:
        use = out.setdefault(c.group, GroupUse(c.group, 0.0, 1.0, None))
        use.used += c.amount
        use.leases += 1
        if c.lease_id in borrowed:
            use.borrowed += c.amount
        else:
            use.in_quota += c.amount
    for w in waiters:
        use = out.setdefault(w.group, GroupUse(w.group, 0.0, 1.0, None))
        use.waiting += w.amount
        use.waiters.append(w)
    total_borrowed = sum(u.borrowed for u in out.values())
    unused = {n: max(0.0, u.quota - u.in_quota) for n, u in out.items()}
    spare = sum(unused.values())
    if total_borrowed > EPS and spare > EPS:
        for n, u in out.items():
            u.lent = unused[n] * min(1.0, total_borrowed / spare)
    return out


def admit(
    config: QuotaConfig,
    capacity: float,
    claims: Sequence[Claim],
    waiters: Sequence[Waiter],
    *,
    group: str,
    amount: float,
    host: str,
    owner: str,
) -> Verdict:
    """May ``owner``'s request of ``amount`` for ``group`` on ``host`` start, in quota or borrowed, as far as
    quotas go? (Whether GPUs are free on the host is the lease's business.)"""
    res = config.resource
    mine = [c for c in claims if c.group == group]
    used = sum(c.amount for c in mine)
    quota = config.quota(group, capacity)
    if used + amount <= quota + EPS:
        return Verdict("quota", may_reclaim=True)
    beyond = used + amount - quota
    limit = config.borrowing_limit(group, capacity)
    if limit is not None and beyond > limit + EPS:
        return Verdict(
            "wait",
            f"group {group} holds {describe_amount(used, res)} of its quota {describe_amount(quota, res)}; "
            f"{describe_amount(amount, res)} more would borrow {describe_amount(beyond, res)}, over its borrowing "
            f"limit {describe_amount(limit, res)}",
        )
    for w in sorted(waiters, key=lambda w: w.since):
        if w.kind == "quota" and w.group != group:
            return Verdict(
                "wait",
                f"group {w.group}'s work within its quota waits for GPUs ({w.owner} on {w.host}); borrowing waits",
            )
    others = [w for w in waiters if w.host == host and w.owner != owner and w.group != group]
    use = usage(config, claims, (), capacity)
    after = (max(0.0, used - quota) + amount) / config.weight(group)
    for w in sorted(others, key=lambda w: w.since):
        u = use.get(w.group)
        theirs = ((u.borrowed if u else 0.0) + w.amount) / config.weight(w.group)
        if theirs < after - EPS:
            return Verdict(
                "wait",
                f"group {w.group} is further below its weighted share of the spare GPUs "
                f"(weight {config.weight(w.group):g} vs {config.weight(group):g}) and waits on {host} ({w.owner})",
            )
    return Verdict("borrow")


def reclaim_order(
    config: QuotaConfig,
    capacity: float,
    claims: Sequence[Claim],
    *,
    group: str,
    host: str,
    now: float,
    asked: Mapping[str, str] | None = None,
    owner: str = "",
) -> tuple[list[Claim], list[Claim]]:
    """What an in-quota request (``owner``) of ``group`` may reclaim on ``host``: ``(may be reclaimed now, in the
    order to reclaim them; still inside their min_runtime)``. Any claim of another group that holds more than its quota
    may go, up to what that group borrows (it keeps its quota), lowest priority first, then the newest: which of a
    group's leases counts as borrowed is a matter of age, but the GPUs a request needs are on one host. ``asked``
    (lease id -> who asked) are reclaims already under way: those others asked are neither offered again nor counted
    twice against their group's borrowing (two requests never take a group below its quota between them)."""
    use: dict[str, float] = {}
    for c in claims:
        use[c.group] = use.get(c.group, 0.0) + c.amount
    over = {g: u - config.quota(g, capacity) for g, u in use.items() if g != group}
    asked = asked or {}
    for c in claims:
        if asked.get(c.lease_id, owner) != owner and c.group in over:
            over[c.group] -= c.amount
    ready: list[Claim] = []
    young: list[Claim] = []
    theirs = sorted(
        (
            c
            for c in claims
            if c.host == host and over.get(c.group, 0.0) > EPS and asked.get(c.lease_id, owner) == owner
        ),
        key=lambda c: (c.priority, -c.created, c.lease_id),
    )
    budget = dict(over)
    for c in theirs:
        if c.amount > budget[c.group] + EPS:
            continue  # taking it would take the group below its quota
        if now - c.created >= config.reclaim.min_runtime:
            budget[c.group] -= c.amount
            ready.append(c)
        else:
            young.append(c)
    return ready, young


def fair_shares(
    config: QuotaConfig, capacity: float, demand: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """What each group is entitled to with ``demand`` (what it would use if it could): its quota (at most its
    demand), then the rest divided by weight among groups that want more (water-filling), each at most its demand
    and its quota plus borrowing limit."""
    groups = set(demand) | set(config.groups)
    weight = {g: (weights or {}).get(g, config.weight(g)) for g in groups}
    cap = {}
    for g in groups:
        limit = config.borrowing_limit(g, capacity)
        most = demand.get(g, 0.0)
        if limit is not None:
            most = min(most, config.quota(g, capacity) + limit)
        cap[g] = most
    share = {g: min(cap[g], config.quota(g, capacity)) for g in groups}
    left = capacity - sum(share.values())
    while left > EPS:
        hungry = [g for g in groups if cap[g] - share[g] > EPS]
        if not hungry:
            break
        total_w = sum(weight[g] for g in hungry)
        step = min((cap[g] - share[g]) * total_w / weight[g] for g in hungry)
        step = min(step, left)
        for g in hungry:
            share[g] += step * weight[g] / total_w
        left -= step
    return share


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values`` (1: all equal; 1/n: one gets everything)."""
    vals = [v for v in values]
    if not vals or not any(vals):
        return 1.0
    return sum(vals) ** 2 / (len(vals) * sum(v * v for v in vals))
