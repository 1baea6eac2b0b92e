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
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger
from airflow_provider_gpusched.core.gpu.activity import GPUActivity, gpu_is_busy
from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.gpu.gate import HostQuotaGate, QuotaVerdict
from airflow_provider_gpusched.core.gpu.host_reservations import HostReservations
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.lease_store import Lease, LeaseStore, place_on
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, Placement, gpu_usage, place
from airflow_provider_gpusched.core.gpu.yielding import YieldMarks, plan_preemption
from airflow_provider_gpusched.core.job_classes import JobClassMapping
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
    #: with quotas, for work of a group: what they make of the request (None: no quotas, or no group)
    quota: QuotaVerdict | None = None


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
        #: team quotas (core/gpu/gate.py; :meth:`use_quotas`): the shared book as this host applies it
        self.quotas: HostQuotaGate[Any] | None = None

    def use_quotas(self, quotas: HostQuotaGate[Any] | None) -> None:
        """Admit normal-class work under ``quotas``, the team quotas as this host applies them (core/quota/host.py
        ``HostQuotas``, built by core/fleet.py ``attach_quotas``); None: no quotas."""
        if quotas is not None and not isinstance(quotas, HostQuotaGate):
            raise InvalidArgumentError(
                "LeaseManager.use_quotas: quotas",
                quotas,
                "the host's quota gate (core/quota/host.py HostQuotas(book, host, manager.inventory.gpus, capacity), "
                "as core/fleet.py attach_quotas builds it) or None",
            )
        self.quotas = quotas

    @contextlib.contextmanager
    def _quota_lock(self, group: str) -> Iterator[None]:
        if self.quotas is not None:
            with self.quotas.lock(group):
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
        quotas = self.quotas
        if quotas is not None and quotas.group_of(group) and owner:
            live = [lease.lease_id for lease in leases] if write else None
            gate = look.quota = quotas.gate(request, owner, quotas.group_of(group), placement, gpus, live)
            if gate.kind == "wait":
                look.placement, look.reason, look.may_preempt = None, gate.reason, False
            elif look.placement is None:
                look.reason += gate.note
            if look.placement is None and write:  # with may_preempt, _hold_place marks it, with whom it asked
                quotas.wait(gate, owner, look.reason, mark=not look.may_preempt)
        return look

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
        gate = look.quota
        borrowed = gate.borrowed if gate is not None else []
        victims, tail = plan_preemption(request, look.gpus, look.leases, look.views, time.time(), borrowed=borrowed)
        reclaimable = {c[0] for c in borrowed}
        self.yields.ask([v for v in victims if v not in reclaimable], owner)
        if gate is not None and self.quotas is not None:  # borrowed leases are asked through the book
            tail += self.quotas.hold(gate, owner, victims, look.reason + tail)
        return tail

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
            self._claim(lease, look, priority)
            return lease, ""

    def _claim(self, lease: Lease, look: _Look, priority: int) -> None:
        """Count ``lease`` against its group (the caller holds the quota lock); nothing without quotas."""
        if self.quotas is not None and look.quota is not None:
            self.quotas.claim(look.quota, lease.lease_id, lease.owner, priority)

    def quota_waiter(self, owner: str) -> dict[str, Any] | None:
        """``owner``'s waiting mark in the quota book (for a task that defers: its trigger keeps it), or None."""
        return self.quotas.waiter_record(owner) if self.quotas is not None else None

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
            self._claim(lease, look, lease.priority)
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
            self.quotas.release(lease.lease_id)

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
            reclaimed = self.quotas.reclaimed_for(lease.lease_id)
            if reclaimed:
                return reclaimed
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
            asked |= self.quotas.asked_here_by(owner)
        if not asked:
            return []
        with self.store.allocation_lock():
            return [lease for lease in self.store.live(tidy=False) if lease.lease_id in asked]

    def yield_grace(self, leases: list[Lease]) -> float:
        """How long these leases may take to give their GPUs back (their classes' grace periods; borrowed quota
        work: the quotas' ``reclaim.grace_period``)."""
        return max((self._grace(lease) for lease in leases), default=0.0)

    def _grace(self, lease: Lease) -> float:
        policy: LocalClassPolicy = self.classes[lease.job_class].local
        if self.quotas is not None and lease.tag.group and not policy.preemptible:
            return self.quotas.grace_period
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
