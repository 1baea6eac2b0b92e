"""Who gets which GPUs on this host: admission under the job-class rules, across every process.

:class:`LeaseManager` looks at the host (the GPUs, the live leases in the
:class:`~airflow_provider_gpusched.core.gpu.lease_store.LeaseStore`, foreign work) under the allocation
lock and places a request, or says why not. A lease may name the task it runs for (``task_key``):
another try of the same task waits until it is gone, so a retry never runs next to a surviving first
copy. Fill-in classes (local policy ``fill_in``; ``idle`` by default) never start ahead
of waiting normal work and only on GPUs quiet for their ``idle_for``; a normal request that does not fit
holds its place and asks fill-in leases to yield (:mod:`~airflow_provider_gpusched.core.gpu.yielding`).
GPU time goes to the host's ledger (:mod:`~airflow_provider_gpusched.core.gpu.accounting`).

Questions do not write: :meth:`LeaseManager.why_not` only looks. :meth:`~LeaseManager.hold_place` (a
waiting task's poll) and :meth:`~LeaseManager.try_acquire` also tidy dead leases, record GPU activity,
mark the request waiting and ask for yields.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger, gpu_share
from airflow_provider_gpusched.core.gpu.activity import GPUActivity, gpu_is_busy
from airflow_provider_gpusched.core.gpu.host_reservations import HostReservations
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.lease_store import Lease, LeaseStore, place_on
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, Placement, gpu_usage, place
from airflow_provider_gpusched.core.gpu.yielding import YieldMarks, plan_preemption
from airflow_provider_gpusched.core.host_name import this_host
from airflow_provider_gpusched.core.job_classes import JobClassMapping
from airflow_provider_gpusched.core.quota.book import CLAIM_TTL, WAITER_TTL, QuotaBook
from airflow_provider_gpusched.core.quota.policy import Claim, Waiter, admit, reclaim_order
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.stops import StopOrders, StopRequest
from airflow_provider_gpusched.core.units import format_bytes
from airflow_provider_gpusched.core.work_tag import WorkTag


@dataclass
class _Look:
    """What one look at the host found for a request."""

    placement: Placement | None
    reason: str
    gpus: list[GPUInfo]
    leases: list[Lease] = field(default_factory=list)
    views: dict[str, LeaseView] = field(default_factory=dict)
    may_preempt: bool = False  # a normal request that does not fit: fill-in leases may be asked to yield
    #: with quotas: "quota" (within the group's quota), "borrow" (beyond it, reclaimable) or "" (no quotas)
    quota: str = ""
    amount: float = 0.0  # what the request counts against its group's quota
    #: borrowed leases of other groups on this host that an in-quota request may reclaim, in order
    reclaim: list[tuple[str, int, float]] = field(default_factory=list)
    #: borrowed claims of other groups on other hosts, in reclaim order: asked when nothing here would do
    reclaim_elsewhere: list[Claim] = field(default_factory=list)
    group: str = ""
    #: with quotas: the waiting mark written for a request that does not start (its reason completed by _hold_place)
    waiter: Waiter | None = None


class _SameRequests:
    """The waiters in this process with one request (state directory, request, class, priority,
    preemptibility). Woken by a release, they try in turn; once one of them has failed since that
    release, the others do not try again until the next release or their poll interval: 16 identical
    waiters cost one or two attempts per release, not 16 (each holds the allocation lock for a while)."""

    _all: dict[tuple[Any, ...], _SameRequests] = {}
    _all_lock = threading.Lock()

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.failed_at: int | None = None  # the release count at which the last attempt failed

    @classmethod
    def of(
        cls, state_dir: str, request: GPURequest, job_class: str, priority: int, preemptible: bool | None
    ) -> _SameRequests:
        key = (state_dir, repr(request), job_class, priority, preemptible)
        with cls._all_lock:
            return cls._all.setdefault(key, cls())


class LeaseManager:
    """Allocates GPUs of ``inventory`` to requests, across all processes that share ``state_dir``."""

    def __init__(
        self,
        inventory: GPUInventory,
        state_dir: str | None = None,
        host_check: Callable[[GPURequest], str] | None = None,
        classes: JobClassMapping | None = None,
        shared: bool | None = None,
        host_memory: int | str | None = None,
    ) -> None:
        """``shared``: the state directory is a group directory set up on purpose for several users
        (default ``$GPUSCHED_STATE_DIR_SHARED``); otherwise it must be this user's own. ``host_memory``: the
        host RAM that requests' ``host_memory`` reservations share (default ``$GPUSCHED_HOST_MEMORY``, else
        90% of the host's RAM)."""
        self.inventory = inventory
        #: the host's CPUs and RAM as leases reserve them
        self.host = HostReservations(host_memory)
        self.store = LeaseStore(inventory, state_dir, shared)
        self.host_check = host_check or check_host_limits
        self.classes = classes or JobClassMapping()
        self.activity = GPUActivity(self.state_dir, file_mode=self.file_mode)
        self.yields = YieldMarks(self.state_dir, self.file_mode)
        self.ledger = GPUTimeLedger(self.state_dir, self.file_mode)
        #: in a fleet, the fleet's stop orders folder (core/fleet.py :func:`join`), heeded besides this host's
        self.fleet_orders = ""
        #: team quotas (core/quota; :meth:`use_quotas`): the book every host shares, and what it is a share of
        self.quotas: QuotaBook | None = None
        self.quota_capacity: Callable[[], float] | None = None
        self.host_name = ""

    def use_quotas(self, book: QuotaBook, capacity: Callable[[], float] | None = None, host: str = "") -> None:
        """Admit normal-class work under ``book``'s quotas: ``capacity`` says how much there is in all (the
        fleet's GPUs or GPU memory; default this host's), ``host`` this host's name in the book."""
        self.quotas = book
        self.quota_capacity = capacity
        self.host_name = host or this_host()

    def capacity(self, gpus: list[GPUInfo] | None = None) -> float:
        """What the quotas are shares of: the fleet's (``quota_capacity``) or this host's GPUs or GPU memory."""
        if self.quota_capacity is not None:
            return self.quota_capacity()
        gpus = self.inventory.gpus() if gpus is None else gpus
        if self.quotas is None:
            return float(len(gpus))
        return self.quotas.config.capacity_of(gpus)

    def group_of(self, group: str) -> str:
        """The quota group a request counts for ('' : none, when quotas are off or it names none and there is no
        default group)."""
        if self.quotas is None:
            return ""
        return group or self.quotas.config.default_group

    @contextlib.contextmanager
    def _quota_lock(self, group: str) -> Iterator[None]:
        if self.quotas is not None and self.group_of(group):
            with self.quotas.lock():
                yield
        else:
            yield

    def stop_orders(self) -> StopOrders:
        """The stop orders this host's work heeds: its lease directory's, and the fleet's."""
        return StopOrders(self.state_dir, self.file_mode, also=[self.fleet_orders] if self.fleet_orders else ())

    @property
    def state_dir(self) -> str:
        return self.store.state_dir

    @property
    def shared(self) -> bool:
        return self.store.shared

    @property
    def file_mode(self) -> int:
        return self.store.file_mode

    @property
    def unreadable(self) -> list[tuple[str, str]]:
        """Lease files of live holders that could not be read at the last look: ``[(file, why)]``."""
        return self.store.unreadable

    # -- looking ------------------------------------------------------------------------------------
    def leases(self) -> list[Lease]:
        with self.store.allocation_lock():
            return self.store.live()

    def snapshot(self) -> tuple[list[GPUInfo], list[Lease]]:
        with self.store.allocation_lock():
            gpus = self.inventory.gpus()
            return gpus, self.store.live(gpus)

    def check_possible(self, request: GPURequest) -> None:
        request.check_possible(self.inventory.gpus())
        self.host.check_possible(request)

    def _look(
        self, request: GPURequest, owner: str, job_class: str, task_key: str, *, write: bool, group: str = ""
    ) -> _Look:
        """Placement (or the reason there is none) under the job-class rules and the quotas; the caller holds
        the allocation lock (and with a group, the quota lock). ``write``: tidy dead leases, record GPU activity
        and mark a request that waits, on the way."""
        gpus = self.inventory.gpus()
        request.check_possible(gpus)
        leases = self.store.live(gpus, tidy=write)
        earlier = [lease for lease in leases if task_key and lease.task_key == task_key and lease.owner != owner]
        if earlier:
            lease = earlier[0]
            state = (
                f"its worker (pid {lease.pid}) is gone; stopping its process group {lease.child_pids}"
                if lease.orphaned_at
                else f"pid {lease.pid} still runs it"
            )
            return _Look(
                None,
                (
                    f"another try of this task still holds lease {lease.lease_id} on GPU "
                    f"{lease.cuda_visible_devices} ({lease.owner}; {state})"
                ),
                gpus,
            )
        if request.load_stage:  # the load stage takes no GPU: only host RAM, CPUs and max_waiting admit it
            return self._look_load_stage(request, owner, gpus, leases)
        views = dict(zip((lease.lease_id for lease in leases), self.store.views(gpus, leases), strict=True))
        usage = gpu_usage(gpus, views.values())
        fill_in = [c.local for c in self.classes.classes.values() if c.local.fill_in]
        quiet_since = self.activity.quiet_since(usage, fill_in, record=write) if fill_in else {}
        policy = self.classes[job_class].local
        if policy.fill_in:  # never ahead of waiting normal work, only on quiet GPUs
            waiting = [w for w in self.yields.waiting(prune=write) if w.get("owner") != owner]
            if waiting:
                return _Look(None, f"normal work is waiting for GPUs ({waiting[0].get('owner', '?')})", gpus)
            now = time.time()
            noisy = {
                i: gpu_is_busy(u, policy)
                or (
                    f"GPU {i}: quiet for {now - quiet_since.get(i, now):.0f}s of the {policy.idle_for:.0f}s "
                    f"idle work waits for"
                    if now - quiet_since.get(i, now) < policy.idle_for
                    else ""
                )
                for i, u in usage.items()
            }
            placement, reason = place(request, {i: u for i, u in usage.items() if not noisy[i]})
            busy = "; ".join(why for why in noisy.values() if why)
            return _Look(placement, reason + (f"; not idle: {busy}" if busy and placement is None else ""), gpus)
        placement, reason = place(request, usage)
        if placement is None and self.store.unreadable:
            reason += "; unreadable lease file(s) of live holders count as taken: " + "; ".join(
                why for _, why in self.store.unreadable
            )
        look = _Look(placement, reason, gpus, leases, views, may_preempt=placement is None and bool(owner))
        if self.quotas is not None and self.group_of(group) and owner:
            self._quota_gate(look, request, owner, self.group_of(group), write=write)
        return look

    def _amount(self, request: GPURequest, placement: Placement | None, gpus: list[GPUInfo]) -> float:
        """What ``request`` counts against its group: GPUs (a memory slice as its fraction) or bytes of GPU memory."""
        assert self.quotas is not None
        totals = {g.index: g.memory_total for g in gpus}
        biggest = max(totals.values(), default=0)
        if self.quotas.config.resource == "gpu_memory":
            if placement is not None:
                return float(sum(placement.memory.values()))
            return float(request.gpus * (request.gpu_memory or biggest))
        if placement is not None:
            return gpu_share(placement.indices, placement.memory, placement.whole, totals)
        if request.gpu_memory is None or biggest <= 0:
            return float(request.gpus)
        return request.gpus * min(1.0, request.gpu_memory / biggest)

    def _quota_gate(self, look: _Look, request: GPURequest, owner: str, group: str, *, write: bool) -> None:
        """Put the quotas on ``look`` (the caller holds the quota lock): a request beyond its group's quota that
        may not borrow waits; an in-quota request that does not fit may reclaim borrowed leases here."""
        book = self.quotas
        assert book is not None
        now = time.time()
        capacity = self.capacity(look.gpus)
        claims = book.claims(host=self.host_name, live=[lease.lease_id for lease in look.leases] if write else None)
        waiters = book.waiters(now)
        look.amount = self._amount(request, look.placement, look.gpus)
        look.group = group
        verdict = admit(
            book.config, capacity, claims, waiters, group=group, amount=look.amount, host=self.host_name, owner=owner
        )
        kind: Literal["quota", "borrow"] = "borrow" if verdict.kind != "quota" else "quota"
        look.quota = verdict.kind
        if verdict.kind == "wait":
            look.placement, look.reason, look.may_preempt = None, verdict.reason, False
        elif look.placement is None and verdict.kind == "quota":
            asked = {lid: by for (_, lid), by in book.reclaims().items()}  # reclaims under way, and for whom
            ready, young = reclaim_order(
                book.config, capacity, claims, group=group, host=self.host_name, now=now, asked=asked, owner=owner
            )
            look.reclaim = [(c.lease_id, c.priority, c.created) for c in ready]
            look.reclaim_elsewhere = [
                c
                for other in sorted({c.host for c in claims} - {self.host_name})
                for c in reclaim_order(
                    book.config, capacity, claims, group=group, host=other, now=now, asked=asked, owner=owner
                )[0]
            ]
            if young and not ready:
                look.reason += "; borrowed lease(s) here may be reclaimed after reclaim.min_runtime: " + ", ".join(
                    f"{c.lease_id} ({c.group}) in {book.config.reclaim.min_runtime - (now - c.created):.0f}s"
                    for c in young
                )
        if look.placement is None and write:
            look.waiter = Waiter(
                owner, self.host_name, group, look.amount, kind, now, now + WAITER_TTL, look.reason[:500]
            )
            if not look.may_preempt:  # else _hold_place marks it, with whom it asked to yield
                book.mark_waiting(look.waiter)

    @staticmethod
    def _look_load_stage(request: GPURequest, owner: str, gpus: list[GPUInfo], leases: list[Lease]) -> _Look:
        """A load stage's look: no GPUs placed; at most ``max_waiting`` load stages loading or loaded at once."""
        staged = [lease for lease in leases if lease.stage in ("load", "wait") and lease.owner != owner]
        if request.max_waiting and len(staged) >= request.max_waiting:
            loading = sum(1 for lease in staged if lease.stage == "load")
            return _Look(
                None,
                (
                    f"max_waiting={request.max_waiting}: {loading} task(s) loading and "
                    f"{len(staged) - loading} loaded and waiting for GPUs on this host"
                ),
                gpus,
                leases,
            )
        return _Look(Placement([], {}, True), "", gpus, leases)

    def _hold_place(self, request: GPURequest, owner: str, look: _Look) -> str:
        """Mark ``owner`` waiting and ask the fewest eligible fill-in leases to yield; the reason's tail."""
        self.yields.mark_waiting(owner)
        victims, tail = plan_preemption(request, look.gpus, look.leases, look.views, time.time(), borrowed=look.reclaim)
        borrowed = {c[0] for c in look.reclaim}
        self.yields.ask([v for v in victims if v not in borrowed], owner)
        if self.quotas is not None:  # through the book, so that every host's requests see whom others asked
            group = self.group_of(look.group)
            for v in victims:
                if v in borrowed:
                    self.quotas.ask_reclaim(self.host_name, v, owner, group)
        if not victims and look.quota == "quota" and look.reclaim_elsewhere:
            tail += self._reclaim_elsewhere(owner, look)
        if look.waiter is not None and self.quotas is not None:  # who it waits on, for the board and CLI
            import dataclasses

            self.quotas.mark_waiting(dataclasses.replace(look.waiter, reason=(look.reason + tail)[:500]))
        return tail

    def _reclaim_elsewhere(self, owner: str, look: _Look) -> str:
        """An in-quota request that nothing on this host can make fit: ask borrowed leases on the one other host
        whose borrowed work covers the request (newest first) to give their GPUs back; the request then waits for
        room in the fleet (its task moves there). Borrowing waits meanwhile (policy.admit)."""
        book = self.quotas
        assert book is not None
        pending = book.reclaims_by(owner)
        if pending:
            return "; waiting for borrowed lease(s) " + ", ".join(f"{lid} on {h}" for h, lid in pending)
        by_host: dict[str, list[Claim]] = {}  # hosts in the order of their first candidate: lowest priority, newest
        for c in sorted(look.reclaim_elsewhere, key=lambda c: (c.priority, -c.created, c.lease_id)):
            if c.host != self.host_name:
                by_host.setdefault(c.host, []).append(c)
        for host, claims in by_host.items():
            chosen, got = [], 0.0
            for c in claims:
                chosen.append(c)
                got += c.amount
                if got >= look.amount - 1e-9:
                    break
            if got >= look.amount - 1e-9:
                for c in chosen:
                    book.ask_reclaim(host, c.lease_id, owner, look.group)
                return f"; reclaiming borrowed lease(s) {', '.join(c.lease_id for c in chosen)} on {host}"
        return ""

    def why_not(
        self, request: GPURequest, owner: str = "", *, job_class: str = "normal", task_key: str = "", group: str = ""
    ) -> str:
        """'' if the request could be placed now, else the reason. Only looks: nothing is written."""
        with self.store.allocation_lock(), self._quota_lock(group):
            look = self._look(request, owner, job_class, task_key, write=False, group=group)
            if look.placement is None:
                return look.reason
            ram = self.host.problem(request, look.leases)
        return ram or self.host_check(request) or ""

    def hold_place(
        self, request: GPURequest, owner: str, *, job_class: str = "normal", task_key: str = "", group: str = ""
    ) -> str:
        """:meth:`why_not` for a request that waits (a deferred task's poll): a normal request that does
        not fit also marks itself waiting and asks fill-in leases (and, within its group's quota, borrowed
        leases) to yield, as :meth:`try_acquire` does."""
        with self.store.allocation_lock(), self._quota_lock(group):
            look = self._look(request, owner, job_class, task_key, write=True, group=group)
            if look.placement is None:
                return look.reason + (self._hold_place(request, owner, look) if look.may_preempt else "")
            ram = self.host.problem(request, look.leases)
        return ram or self.host_check(request) or ""

    # -- taking and giving back -----------------------------------------------------------------------
    def try_acquire(
        self,
        request: GPURequest,
        owner: str,
        *,
        job_class: str = "normal",
        priority: int = 0,
        preemptible: bool | None = None,
        task_key: str = "",
        grace: float = 10.0,
        work: WorkTag | None = None,
    ) -> tuple[Lease | None, str]:
        """Take a lease now, or return ``(None, reason)``. ``preemptible`` defaults to the class's policy.
        ``task_key`` names the task (not the try): while another try's lease for it lives, none is given.
        ``work`` says which DAG run, task and sweep the lease runs for (``gpusched queue``), and its quota group."""
        group = work.group if work is not None else ""
        with self.store.allocation_lock(), self._quota_lock(group):
            look = self._look(request, owner, job_class, task_key, write=True, group=group)
            if look.placement is None:
                return None, look.reason + (self._hold_place(request, owner, look) if look.may_preempt else "")
            cpus, cpu_problem = self.host.cpus_for(request, look.leases)
            host_problem = self.host.memory_problem(request, look.leases) or cpu_problem or self.host_check(request)
            if host_problem:
                return None, host_problem
            policy = self.classes[job_class].local
            lease = self.store.write(
                look.placement,
                look.gpus,
                owner,
                job_class,
                priority,
                policy.preemptible if preemptible is None else preemptible,
                policy.min_runtime,
                task_key=task_key,
                grace=grace,
                host_memory=request.host_memory or 0,
                cpus=cpus,
                work=work,
                stage="load" if request.load_stage else "",
            )
            self.yields.clear_waiting(owner)
            self._claim(lease, look, group, priority)
            return lease, ""

    def _claim(self, lease: Lease, look: _Look, group: str, priority: int) -> None:
        """Count ``lease`` against its group (the caller holds the quota lock); nothing without quotas."""
        if self.quotas is None or not look.quota:
            return
        now = time.time()
        self.quotas.add_claim(
            Claim(
                lease.lease_id,
                self.host_name,
                self.group_of(group),
                look.amount,
                now,
                priority,
                lease.owner,
                now + CLAIM_TTL,
            )
        )
        self.quotas.clear_waiting("", lease.owner)
        for host, lease_id in self.quotas.reclaims_by(lease.owner):  # it has its GPUs: nobody else need give theirs
            self.quotas.drop_reclaim(host, lease_id)

    def quota_waiter(self, owner: str) -> dict[str, Any] | None:
        """``owner``'s waiting mark in the quota book (for a task that defers: its trigger keeps it), or None."""
        if self.quotas is None:
            return None
        from airflow_provider_gpusched.core.quota.policy import WAITER

        waiter = self.quotas.waiter(self.host_name, owner)
        return WAITER.dump(waiter) if waiter is not None else None

    # -- a two-stage task: the load stage's lease grows its GPUs ----------------------------------------
    def mark_loaded(self, lease: Lease) -> None:
        """The work on load-stage ``lease`` has loaded: it now waits for its GPUs (stage ``wait``)."""
        with self.store.allocation_lock():
            lease.stage = "wait"
            self.store.save(lease)

    def try_add_gpus(self, lease: Lease, request: GPURequest, *, task_key: str = "") -> str:
        """Give the loaded work on ``lease`` its GPUs (its train stage), placed as ``request`` without its host
        part (the lease holds that already) under the job-class rules; '' when done, else why not. A normal
        request that does not fit holds its place and asks fill-in leases to yield, as :meth:`try_acquire`."""
        gpu_part = request.gpu_part()
        group = lease.tag.group
        with self.store.allocation_lock(), self._quota_lock(group):
            look = self._look(gpu_part, lease.owner, lease.job_class, task_key, write=True, group=group)
            if look.placement is None:
                return look.reason + (self._hold_place(gpu_part, lease.owner, look) if look.may_preempt else "")
            place_on(lease, look.placement, look.gpus)
            lease.stage = "train"
            self.store.save(lease)
            self.yields.clear_waiting(lease.owner)
            self._claim(lease, look, group, lease.priority)
        return ""

    def acquire(
        self,
        request: GPURequest,
        owner: str,
        *,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        job_class: str = "normal",
        priority: int = 0,
        preemptible: bool | None = None,
        on_wait: Callable[[str], None] | None = None,
        work: WorkTag | None = None,
    ) -> Lease:
        """Wait until the request fits and take the lease. Raises TimeoutError after ``timeout`` s.

        Between attempts the waiter sleeps until a lease is released (woken at once in this process, within
        20 ms from another), or ``poll_interval`` seconds at most: what frees GPUs without a release (a
        holder that died, a GPU that went quiet for fill-in work) is seen at the next poll."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_reason = None
        woken = False
        reason = ""
        same = _SameRequests.of(self.store.state_dir, request, job_class, priority, preemptible)
        while True:
            with same.turn:
                seen = self.store.release_count()
                if woken and same.failed_at == seen:
                    lease = None  # an identical request here already tried after this release, and failed
                else:
                    lease, reason = self.try_acquire(
                        request, owner, job_class=job_class, priority=priority, preemptible=preemptible, work=work
                    )
                    if lease is None:
                        same.failed_at = seen
            if lease is not None:
                return lease
            if on_wait and reason_kind(reason) != last_reason:
                on_wait(reason)
            last_reason = reason_kind(reason)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no GPUs for {request.describe()} within {timeout}s: {reason}")
            wait = poll_interval if deadline is None else min(poll_interval, max(0.0, deadline - time.monotonic()))
            woken = self.store.wait_for_release(seen, wait)

    def record_child(self, lease: Lease, pid: int) -> None:
        self.store.record_child(lease, pid)

    def release(self, lease: Lease) -> None:
        self.store.release(lease)
        if self.quotas is not None:  # after the GPUs are free: the group never counts less than it holds
            self.quotas.drop_claim(self.host_name, lease.lease_id)
            self.quotas.drop_reclaim(self.host_name, lease.lease_id)

    # -- stopping for good (gpusched queue stop) -------------------------------------------------------
    def stop_reason(self, lease: Lease) -> str:
        """'' unless someone asked (``gpusched queue stop``) that the work on ``lease`` stop for good; then
        who, when and why, for the task's failure message."""
        record = self.store.stop_request(lease.lease_id)
        if record is None:
            return ""
        try:
            return StopRequest.from_record(record, self.store.path(lease.lease_id + ".stop")).describe()
        except BadRecordError as exc:
            return f"stopped by a stop request that cannot be read ({exc})"

    # -- yielding -------------------------------------------------------------------------------------
    def yield_reason(self, lease: Lease) -> str:
        """'' while ``lease`` may keep running; else why its holder must stop now: a normal request asked
        for its GPUs, or (preemptible leases) foreign work appeared on them."""
        asked = self.yields.request_for(lease.lease_id)
        if asked is not None:
            return f"preempted for {asked.get('by', 'normal work')}"
        if self.quotas is not None and lease.tag.group:
            self.quotas.renew(self.host_name, lease.lease_id)
            remote = self.quotas.reclaim_request(self.host_name, lease.lease_id)
            if remote is not None:
                return f"reclaimed for {remote['by']} (group {remote['group']}'s quota)"
        if not lease.preemptible:
            return ""
        policy = self.classes[lease.job_class].local
        with self.store.allocation_lock():
            gpus = self.inventory.gpus()
            leases = self.store.live(gpus)
            usage = gpu_usage(gpus, self.store.views(gpus, leases))
        for index in lease.gpus:
            busy = gpu_is_busy(usage[index], policy) if index in usage else ""
            if busy:
                return f"foreign work appeared ({busy})"
        return ""

    def yielding_to(self, owner: str) -> list[Lease]:
        """The live leases that ``owner`` (a waiting normal request) has asked to yield."""
        asked = set(self.yields.asked_by(owner))
        if self.quotas is not None:
            asked |= {lid for host, lid in self.quotas.reclaims_by(owner) if host == self.host_name}
        if not asked:
            return []
        with self.store.allocation_lock():
            return [lease for lease in self.store.live(tidy=False) if lease.lease_id in asked]

    def yield_grace(self, leases: list[Lease]) -> float:
        """How long these leases may take to give their GPUs back (their classes' grace periods; borrowed quota
        work: the quotas' ``reclaim.grace_period``)."""
        return max((self._grace(lease) for lease in leases), default=0.0)

    def _grace(self, lease: Lease) -> float:
        policy = self.classes[lease.job_class].local
        if self.quotas is not None and lease.tag.group and not policy.preemptible:
            return self.quotas.config.reclaim.grace_period
        return policy.grace_period


def reason_kind(reason: str) -> str:
    """A wait reason without its numbers (seconds, sizes): log a reason again only when its kind changes."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def check_host_limits(request: GPURequest) -> str:
    """fedflow-style host limits: '' when free RAM and CPU utilisation allow the request."""
    if request.min_free_ram is None and request.max_cpu_percent is None:
        return ""
    import psutil

    if request.min_free_ram is not None:
        available = psutil.virtual_memory().available
        if available < int(request.min_free_ram):
            return (
                f"host has {format_bytes(available)} RAM free, the request wants {format_bytes(request.min_free_ram)}"
            )
    if request.max_cpu_percent is not None:
        busy = psutil.cpu_percent(interval=0.2)
        if busy > float(request.max_cpu_percent):
            return f"host CPU utilisation {busy:.0f}% is above max_cpu_percent={request.max_cpu_percent}"
    return ""
