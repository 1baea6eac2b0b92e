"""Idle work giving its GPUs back: waiting marks, yield requests and the choice of whom to preempt.

Idle-class (fill-in) leases are *preemptible*. A normal request that does not fit marks itself as
waiting (``waiting-*.json``: no new fill-in work starts while it waits) and, when preempting some
fill-in leases past their minimum runtime would make it fit, asks them to yield (``<id>.preempt``).
Their holders see that (:meth:`~airflow_provider_gpusched.core.gpu.leases.LeaseManager.yield_reason`),
stop their child (SIGTERM, grace period, SIGKILL) and release the lease; the normal request takes the
GPUs on its next try.

* :func:`choose_victims` — the fewest preemptible leases whose removal lets a normal request fit
  (lowest priority first, then the youngest: least work lost).
* :func:`plan_preemption` — which leases to ask now, or why none can be asked yet.
* :class:`YieldMarks` — the waiting marks and yield requests in the lease directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_gpusched.core.checks import is_json_number
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.gpu.lease_store import LEASE_FILE, Lease
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, gpu_usage, place
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record, write_json_atomic


def choose_victims(
    request: GPURequest,
    gpus: Sequence[GPUInfo],
    views: dict[str, LeaseView],
    candidates: Sequence[tuple[str, int, float]],
) -> list[str] | None:
    """Lease ids to preempt so that ``request`` fits, or None if preempting every candidate would not do.

    ``views``: every live lease by id; ``candidates``: ``(lease id, priority, started)`` of the leases
    that may be preempted now. Greedy by (priority, youngest first), then pruned to a minimal set."""
    order = sorted(candidates, key=lambda c: (c[1], -c[2], c[0]))
    chosen: list[str] = []

    def fits(removed: Iterable[str]) -> bool:
        gone = set(removed)
        rest = [v for lid, v in views.items() if lid not in gone]
        return place(request, gpu_usage(gpus, rest))[0] is not None

    for lease_id, _, _ in order:
        chosen.append(lease_id)
        if fits(chosen):
            break
    else:
        return None
    for lease_id in list(reversed(chosen)):  # drop any that the request does not actually need
        trial = [x for x in chosen if x != lease_id]
        if trial and fits(trial):
            chosen = trial
    return chosen


#: fill-in leases go before borrowed quota work: a priority below any a task can have
_FILL_IN_FIRST = -(10**12)


def plan_preemption(
    request: GPURequest,
    gpus: Sequence[GPUInfo],
    leases: Sequence[Lease],
    views: dict[str, LeaseView],
    now: float,
    *,
    borrowed: Sequence[tuple[str, int, float]] = (),
) -> tuple[list[str], str]:
    """The lease ids to ask to yield so that ``request`` fits (empty when none would do, or none may be
    preempted yet), and the tail of the wait reason that says so. ``borrowed``: ``(lease id, priority, created)``
    of other groups' borrowed leases that an in-quota request may reclaim (core/quota), after the fill-in ones."""
    preemptible = [lease for lease in leases if lease.preemptible and not lease.unreadable]
    if not preemptible and not borrowed:
        return [], ""
    eligible = [
        (lease.lease_id, _FILL_IN_FIRST + lease.priority, lease.created)
        for lease in preemptible
        if now - lease.created >= lease.min_runtime
    ]
    live = set(views)
    eligible += [c for c in borrowed if c[0] in live and c[0] not in {e[0] for e in eligible}]
    victims = choose_victims(request, gpus, views, eligible) if eligible else None
    if victims:
        reclaimed = {c[0] for c in borrowed} & set(victims)
        idle = [v for v in victims if v not in reclaimed]
        said = []
        if idle:
            said.append(f"preempting idle lease(s) {', '.join(idle)}")
        if reclaimed:
            said.append(f"reclaiming borrowed lease(s) {', '.join(v for v in victims if v in reclaimed)}")
        return victims, "; " + "; ".join(said)
    young = [
        f"{lease.lease_id} in {lease.min_runtime - (now - lease.created):.0f}s"
        for lease in preemptible
        if now - lease.created < lease.min_runtime
    ]
    return [], (f"; idle lease(s) become preemptible after their minimum runtime: {', '.join(young)}" if young else "")


class YieldMarks:
    """Waiting marks (``waiting-<hash>.json``) and yield requests (``<lease id>.preempt``) in ``state_dir``."""

    #: seconds a normal request's "waiting" mark keeps new idle work off the GPUs after its last try
    waiting_ttl: float = 30.0

    def __init__(self, state_dir: str, file_mode: int = 0o600) -> None:
        self.state_dir = state_dir
        self.file_mode = file_mode
        self._marked_until: dict[str, float] = {}  # owner -> "until" of the mark this object last wrote

    def _waiting_path(self, owner: str) -> str:
        return os.path.join(self.state_dir, f"waiting-{hashlib.sha1(owner.encode()).hexdigest()[:16]}.json")

    def mark_waiting(self, owner: str) -> None:
        """Mark ``owner`` waiting for ``waiting_ttl`` seconds. A mark this object wrote that still has more
        than half its time left, and is still there, is kept as it is (a waiter retries after every release)."""
        now = time.time()
        path = self._waiting_path(owner)
        if self._marked_until.get(owner, 0.0) - now > self.waiting_ttl / 2 and os.path.exists(path):
            return
        until = now + self.waiting_ttl
        write_json_atomic(path, {"owner": owner, "until": until}, self.file_mode)
        self._marked_until[owner] = until

    def clear_waiting(self, owner: str) -> None:
        self._marked_until.pop(owner, None)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._waiting_path(owner))

    def waiting(self, *, prune: bool = True) -> list[dict[str, Any]]:
        """Normal requests waiting now: ``[{"owner", "until"}]``; with ``prune`` expired and unreadable
        marks are removed (they hold nothing back either way)."""
        marks = []
        for name in os.listdir(self.state_dir):
            if not (name.startswith("waiting-") and name.endswith(".json")):
                continue
            path = os.path.join(self.state_dir, name)
            try:
                mark = read_json_record(path)
            except (OSError, BadRecordError):
                mark = None
            valid = isinstance(mark, dict) and isinstance(mark.get("owner"), str) and is_json_number(mark.get("until"))
            if not valid or float(mark["until"]) < time.time():
                if prune:
                    with contextlib.suppress(OSError):
                        os.remove(path)
                continue
            marks.append(mark)
        return marks

    def ask(self, lease_ids: Iterable[str], by: str) -> None:
        """Ask these leases to yield for ``by`` (a request already made is kept, with its time)."""
        now = time.time()
        for lease_id in lease_ids:
            path = os.path.join(self.state_dir, lease_id + ".preempt")
            if not os.path.lexists(path):
                write_json_atomic(path, {"by": by, "at": now}, self.file_mode)

    def request_for(self, lease_id: str) -> dict[str, Any] | None:
        """``{"by": owner, "at": time}`` if a normal request asked this lease to yield, else None."""
        try:
            asked = read_json_record(os.path.join(self.state_dir, lease_id + ".preempt"))
        except (OSError, BadRecordError):
            return None
        if not isinstance(asked, dict):
            return {"by": "an unreadable yield request"}
        return {"by": str(asked.get("by", "normal work")), "at": asked.get("at")}

    def asked_by(self, owner: str) -> list[str]:
        """The lease ids that ``owner`` has asked to yield."""
        asked = []
        for name in os.listdir(self.state_dir):
            lease_id = name[:-8]
            if name.endswith(".preempt") and LEASE_FILE.match(lease_id + ".json"):
                request = self.request_for(lease_id)
                if request and request.get("by") == owner:
                    asked.append(lease_id)
        return sorted(asked)
