"""The quota book: which leases count against which group, and who waits, across every host of the fleet.

One directory every host shares (``<fleet_dir>/quota``, or ``<lease dir>/quota`` on a single host)::

    lock                           flock'd while a host decides an admission and writes its claim
    claims/<host>/<lease id>.json  one per lease of quota work: group, amount, when, until when renewed
    waiting/<host>/<hash>.json     one per waiting request: group, amount, in quota or borrowing, why
    reclaim/<host>/<lease id>.json a request from another host that this borrowed lease give its GPUs back

A host takes its own lease lock first and then this lock, decides with :mod:`.policy`, and writes the lease and
its claim before letting go: two hosts never both admit a group into the same quota. Only the host named in a
path writes there. Every record read back is checked (:data:`~.policy.CLAIM`); a file that fails the check is
named in :attr:`QuotaBook.problems` (``gpusched queue health`` and the board say so) and counts for no group;
its lease still holds its GPUs on its host, so no host is oversubscribed by it.

A claim's holder renews it (``until``) while it runs. A claim of a host that died stops being renewed and stops
counting after :data:`CLAIM_TTL` seconds; until then the group is taken to still hold those GPUs, so a host's
death never lets a group run beyond its quota elsewhere. The host itself drops claims whose lease is gone at its
next look.

What a record read back may say is bounded by the reader, whoever wrote it: a claim or a waiting mark counts only
when its ``until`` is at most its lifetime plus :data:`CLOCK_SKEW` ahead of the reader's clock, its amount at most
what there is (``capacity``, where the reader knows it), and its host one that exists
(:attr:`QuotaBook.host_known`: in a fleet, a host that published a record); any other is named in :attr:`QuotaBook.problems` and counts for no
group.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.policy import CLAIM, EPS, WAITER, Claim, Waiter
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    ensure_private_dir,
    open_regular,
    read_json_record,
    write_json_atomic,
)

#: seconds a claim counts after its holder last renewed it
CLAIM_TTL = 60.0
#: a holder renews its claim when it has less than this left
RENEW_BEFORE = 45.0
#: seconds a waiting mark counts after its request last looked
WAITER_TTL = 30.0
#: seconds by which a claim's or a waiting mark's ``until`` may be further ahead of the reader's clock than the record
#: lives (CLAIM_TTL, WAITER_TTL): the hosts' clocks may differ this much. A record further ahead (a host whose clock
#: runs ahead, that would keep counting that much longer after it died; a forged one) counts for nothing, named in
#: the book's problems
CLOCK_SKEW = 15.0
#: seconds a book that follows the quota file (:meth:`QuotaBook.follow`) uses what it read before looking again
FOLLOW_EVERY = 1.0

log = logging.getLogger(__name__)


def book_dir(fleet_dir: str, state_dir: str) -> str:
    """``<fleet_dir>/quota`` in a fleet (one book for every host), else ``<lease dir>/quota`` (this host)."""
    return os.path.join(fleet_dir or state_dir, "quota")


class QuotaBook:
    """The claims and waiters under ``root`` (created private, or group-shared with ``shared``)."""

    def __init__(self, root: str, config: QuotaConfig, *, shared: bool = False) -> None:
        self.root = ensure_private_dir(root, shared=shared, what="quota directory")
        self._config = config
        self._source: Callable[[], QuotaConfig] | None = None
        self._looked = 0.0
        self.file_mode = 0o660 if shared else 0o600
        self.shared = shared
        #: records that could not be read at the last look, or that were out of bounds: ``[(file, why)]``
        self.problems: list[tuple[str, str]] = []
        #: whether a host exists (in a fleet: it published a record, core/fleet.py); None: any host. A claim or a
        #: waiting mark of another host counts for nothing
        self.host_known: Callable[[str], bool] | None = None
        #: what each host that published a record has (host -> its capacity, read once per look); None: not known.
        #: A host's claims count together for at most that much: the oldest first, any beyond it counts for nothing
        self.host_capacities: Callable[[], Mapping[str, float]] | None = None
        self._renewed: dict[str, float] = {}  # lease id -> until, of claims this process wrote or renewed
        #: (host, owner) -> (until, what it waits for) of the waiting marks this object wrote
        self._marked: dict[tuple[str, str], tuple[float, tuple[Any, ...]]] = {}
        self._lock_depth = 0
        self._lock_fd: int | None = None

    @property
    def config(self) -> QuotaConfig:
        """The quotas in force: with :meth:`follow`, the quota file's as it is now (its last good version while it
        is broken), looked at most every :data:`FOLLOW_EVERY` seconds."""
        if self._source is not None and time.monotonic() - self._looked >= FOLLOW_EVERY:
            self._looked = time.monotonic()
            try:
                config = self._source()
            except GpuschedError as exc:  # no good version in this process: the one it started with stays
                log.warning("gpusched: the quotas stay as they were: %s", exc)
            else:
                # quotas turned off (a file emptied) are taken up by the next process: this book's work keeps its
                # groups, which a config without groups would not know
                if config.enabled:
                    self._config = config
        return self._config

    def follow(self, source: Callable[[], QuotaConfig]) -> None:
        """Take the quotas from ``source`` (the quota file read through core/quota/last_good.py) from now on: a
        lease manager that runs for long (the triggerer's, a fleet host's) applies an admin's edit without a
        restart, and keeps the last good quotas while the file is broken."""
        self._source = source
        self._looked = 0.0

    def _dir(self, kind: str, host: str) -> str:
        ensure_private_dir(os.path.join(self.root, kind), shared=self.shared, what="quota directory")
        return ensure_private_dir(os.path.join(self.root, kind, host), shared=self.shared, what="quota directory")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The fleet-wide admission lock (re-entrant in this object)."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fd = open_regular(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, self.file_mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._lock_depth = 1
            yield
        finally:
            self._lock_depth = 0
            os.close(fd)  # closing drops the flock

    # -- claims ---------------------------------------------------------------------------------------
    def _unknown_host(self, folder: str, host: str) -> bool:
        """Whether ``host`` (whose records are in ``folder``) is not one of the hosts that exist (named if so)."""
        if self.host_known is None or self.host_known(host):
            return False
        self.problems.append(
            (
                folder,
                f"{folder}: host {host!r} is not one of the fleet's hosts (no host record): its records count for nothing",
            )
        )
        return True

    def _out_of_bounds(
        self, path: str, until: float, lifetime: float, now: float, amount: float, capacity: float | None
    ) -> bool:
        """Whether a record read back says more than a record may (named if so): an ``until`` further ahead than
        its ``lifetime`` plus :data:`CLOCK_SKEW`, an ``amount`` beyond ``capacity``."""
        why = ""
        if until - now > lifetime + CLOCK_SKEW:
            why = (
                f"key 'until': {until - now:.4g} s ahead of this host's clock, more than a record lives "
                f"({lifetime:g} s, {CLOCK_SKEW:g} s more for clocks that differ): a clock that runs ahead, or a "
                "forged record"
            )
        elif capacity is not None and capacity > 0 and amount > capacity * (1 + EPS) + EPS:
            why = f"key 'amount': {amount:g} is more than there is ({capacity:g})"
        if why:
            self.problems.append((path, f"{path}: {why}; it counts for nothing"))
        return bool(why)

    def claims(
        self,
        *,
        host: str = "",
        live: Iterable[str] | None = None,
        now: float | None = None,
        capacity: float | None = None,
    ) -> list[Claim]:
        """Every claim that counts now. With ``host`` and ``live`` (that host's live lease ids), that host's claims
        whose lease is gone are removed (the caller holds :meth:`lock` and is that host). ``capacity``: what there is
        in all (a claim of more counts for nothing)."""
        now = time.time() if now is None else now
        alive = set(live) if live is not None else None
        out: list[Claim] = []
        self.problems = []
        base = os.path.join(self.root, "claims")
        per_host = self.host_capacities() if self.host_capacities is not None else {}
        for h in _listdir(base):
            folder = os.path.join(base, h)
            if self._unknown_host(folder, h):
                continue
            mine: list[Claim] = []
            for name in _listdir(folder):
                if not name.endswith(".json"):
                    continue
                path = os.path.join(folder, name)
                try:
                    claim = CLAIM.read(read_json_record(path), path)
                    if claim.host != h or claim.lease_id + ".json" != name:
                        raise BadRecordError(f"{path}: its host or lease id is not the one its path names")
                except FileNotFoundError:
                    continue
                except (OSError, BadRecordError) as exc:
                    self.problems.append((path, str(exc)))
                    continue
                if h == host and alive is not None and claim.lease_id not in alive:
                    _remove(path)
                    continue
                if claim.until < now:
                    if h == host:
                        _remove(path)
                    continue
                if self._out_of_bounds(path, claim.until, CLAIM_TTL, now, claim.amount, capacity):
                    continue
                mine.append(claim)
            out.extend(self._within_host(folder, h, mine, per_host.get(h)))
        return out

    def _within_host(self, folder: str, host: str, claims: list[Claim], capacity: float | None) -> list[Claim]:
        """A host's claims that fit in what it has (``capacity``; None: not known), the oldest first; the others
        are named and count for nothing (one host's claims of more GPUs than it has are forged or stale)."""
        if capacity is None:
            return claims
        kept: list[Claim] = []
        total = 0.0
        for claim in sorted(claims, key=lambda c: (c.created, c.lease_id)):
            if total + claim.amount > capacity * (1 + EPS) + EPS:
                self.problems.append(
                    (
                        os.path.join(folder, claim.lease_id + ".json"),
                        f"{folder}: host {host!r} has {capacity:g} in all, and its older claims hold {total:g}: "
                        f"claim {claim.lease_id} ({claim.amount:g}) counts for nothing",
                    )
                )
                continue
            kept.append(claim)
            total += claim.amount
        return kept

    def add_claim(self, claim: Claim) -> None:
        path = os.path.join(self._dir("claims", claim.host), claim.lease_id + ".json")
        write_json_atomic(path, CLAIM.dump(claim), self.file_mode)
        self._renewed[claim.lease_id] = claim.until

    def claim_of(self, host: str, lease_id: str) -> Claim | None:
        path = os.path.join(self.root, "claims", host, lease_id + ".json")
        try:
            return CLAIM.read(read_json_record(path), path)
        except (OSError, BadRecordError):
            return None

    def renew(self, host: str, lease_id: str, now: float | None = None) -> None:
        """Keep a running lease's claim counting (cheap: writes only when less than RENEW_BEFORE is left)."""
        now = time.time() if now is None else now
        if self._renewed.get(lease_id, 0.0) - now > RENEW_BEFORE:
            return
        claim = self.claim_of(host, lease_id)
        if claim is None:
            return
        import dataclasses

        self.add_claim(dataclasses.replace(claim, until=now + CLAIM_TTL))

    def drop_claim(self, host: str, lease_id: str) -> None:
        self._renewed.pop(lease_id, None)
        _remove(os.path.join(self.root, "claims", host, lease_id + ".json"))

    # -- waiters --------------------------------------------------------------------------------------
    @staticmethod
    def _waiter_name(owner: str) -> str:
        return hashlib.sha1(owner.encode()).hexdigest()[:16] + ".json"

    def mark_waiting(self, waiter: Waiter) -> None:
        """Mark ``waiter`` waiting (until its ``until``). A request that looks again every 0.2 s writes its mark again
        only when what it waits for changed, or when less than half its time is left."""
        key = (waiter.host, waiter.owner)
        said = (waiter.kind, waiter.amount, re.sub(r"\d+(\.\d+)?", "#", waiter.reason))
        last = self._marked.get(key)
        if last is not None and last[1] == said and last[0] - time.time() > WAITER_TTL / 2:
            return
        self._marked[key] = (waiter.until, said)
        path = os.path.join(self._dir("waiting", waiter.host), self._waiter_name(waiter.owner))
        since = waiter.since
        with contextlib.suppress(OSError, BadRecordError):
            old = WAITER.read(read_json_record(path), path)
            if old.owner == waiter.owner and old.until >= time.time():
                since = old.since  # still the same wait
        import dataclasses

        write_json_atomic(path, WAITER.dump(dataclasses.replace(waiter, since=since)), self.file_mode)

    def clear_waiting(self, host: str, owner: str) -> None:
        """Remove ``owner``'s waiting mark on ``host`` (every host's: ``host=""``, a task that moved)."""
        for key in [k for k in self._marked if k[1] == owner and (not host or k[0] == host)]:
            del self._marked[key]
        for h in [host] if host else _listdir(os.path.join(self.root, "waiting")):
            _remove(os.path.join(self.root, "waiting", h, self._waiter_name(owner)))

    def waiter(self, host: str, owner: str) -> Waiter | None:
        path = os.path.join(self.root, "waiting", host, self._waiter_name(owner))
        try:
            return WAITER.read(read_json_record(path), path)
        except (OSError, BadRecordError):
            return None

    def waiters(self, now: float | None = None, capacity: float | None = None) -> list[Waiter]:
        """Every waiting mark that counts now (bounded as :meth:`claims` bounds claims)."""
        now = time.time() if now is None else now
        out = []
        base = os.path.join(self.root, "waiting")
        for h in _listdir(base):
            folder = os.path.join(base, h)
            if self._unknown_host(folder, h):
                continue
            for name in _listdir(folder):
                path = os.path.join(folder, name)
                try:
                    w = WAITER.read(read_json_record(path), path)
                except FileNotFoundError:
                    continue
                except (OSError, BadRecordError) as exc:
                    self.problems.append((path, str(exc)))
                    continue
                if w.host != h or w.until < now:
                    continue
                if not self._out_of_bounds(path, w.until, WAITER_TTL, now, w.amount, capacity):
                    out.append(w)
        return out

    # -- reclaim requests across hosts -----------------------------------------------------------------
    def ask_reclaim(self, host: str, lease_id: str, by: str, group: str) -> None:
        """Ask borrowed lease ``lease_id`` on ``host`` to give its GPUs back to ``by`` (a request within ``group``'s
        quota that its own host cannot satisfy); a request already there is kept."""
        path = os.path.join(self._dir("reclaim", host), lease_id + ".json")
        if not os.path.lexists(path):
            write_json_atomic(path, {"by": by, "group": group, "at": time.time()}, self.file_mode)

    def reclaim_request(self, host: str, lease_id: str) -> dict[str, str] | None:
        """``{"by", "group"}`` when a request asked lease ``lease_id`` of ``host`` to give its GPUs back."""
        path = os.path.join(self.root, "reclaim", host, lease_id + ".json")
        try:
            data = read_json_record(path)
        except FileNotFoundError:
            return None
        except (OSError, BadRecordError) as exc:
            return {"by": f"an unreadable reclaim request ({exc})", "group": "?"}
        if not isinstance(data, dict):
            return {"by": "an unreadable reclaim request", "group": "?"}
        return {"by": str(data.get("by", "?"))[:250], "group": str(data.get("group", "?"))[:250]}

    def reclaims(self) -> dict[tuple[str, str], str]:
        """Every pending reclaim request: ``{(host, lease id): by}``."""
        out = {}
        base = os.path.join(self.root, "reclaim")
        for h in _listdir(base):
            for name in _listdir(os.path.join(base, h)):
                if name.endswith(".json"):
                    asked = self.reclaim_request(h, name[:-5])
                    if asked:
                        out[(h, name[:-5])] = asked["by"]
        return out

    def reclaims_by(self, by: str) -> list[tuple[str, str]]:
        """``[(host, lease id)]`` that ``by`` asked to give their GPUs back and that have not yet."""
        return [key for key, who in self.reclaims().items() if who == by]

    def drop_reclaim(self, host: str, lease_id: str) -> None:
        _remove(os.path.join(self.root, "reclaim", host, lease_id + ".json"))


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
