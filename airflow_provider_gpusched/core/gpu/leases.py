"""GPU leases shared by every process on a host, safe against crashes.

A lease is two files in the state directory: ``<id>.json`` (what it holds) and ``<id>.lock``, on which
the holder keeps an exclusive ``flock`` for as long as it lives. The kernel drops that lock when the last
process holding the file descriptor exits — also on SIGKILL — so a dead holder's lease is recognised
(the lock can be taken) and removed by the next process that looks, with no cleanup daemon. The launcher
passes the descriptor to the GPU child as well: the lease lasts while the task *or* its child lives, so
a crashed Airflow worker does not hand out a GPU that its orphaned child still uses.

Every allocation decision happens under one more ``flock`` (``alloc.lock``), so concurrent requests
are serialised and reservations are recorded before anyone starts a child.

Idle-class leases are *preemptible*. A normal request that does not fit marks itself as waiting
(``waiting-*.json``: no new idle work starts while it waits) and, when preempting some idle leases past
their minimum runtime would make it fit, asks them to yield (``<id>.preempt``). Their holders see that
(:meth:`LeaseManager.yield_reason`), stop their child (SIGTERM, grace period, SIGKILL) and release the
lease; the normal request takes the GPUs on its next try. See :mod:`~airflow_provider_gpusched.core.gpu.preemption`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, Placement, gpu_usage, place
from airflow_provider_gpusched.core.gpu.preemption import (
    GPUActivity,
    append_accounting,
    choose_victims,
    gpu_is_busy,
)
from airflow_provider_gpusched.core.job_classes import JobClassMapping

STATE_DIR_ENV = "GPUSCHED_STATE_DIR"


def default_state_dir() -> str:
    return os.environ.get(STATE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "gpusched-leases")


@dataclass
class Lease:
    lease_id: str
    gpus: list[int]
    uuids: list[str]
    memory: dict[int, int]
    whole: bool
    owner: str
    pid: int
    job_class: str = "normal"
    priority: int = 0
    created: float = field(default_factory=time.time)
    simulated: bool = False
    preemptible: bool = False
    min_runtime: float = 0.0
    child_pids: list[int] = field(default_factory=list)
    fd: int | None = field(default=None, repr=False, compare=False)
    path: str | None = field(default=None, repr=False, compare=False)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(i) for i in self.gpus)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("fd")
        data.pop("path")
        data["memory"] = {str(k): v for k, v in self.memory.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Lease:
        data = dict(data)
        data["memory"] = {int(k): int(v) for k, v in data["memory"].items()}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def view(self, with_pids: bool = True) -> LeaseView:
        """What placement needs; ``with_pids`` walks the process tree (only needed when GPUs list processes)."""
        pids = _family({self.pid, *self.child_pids}) if with_pids else set()
        return LeaseView(memory=self.memory, whole=self.whole, pids=pids)


def _family(pids: set[int]) -> set[int]:
    """The pids and all their descendants (the processes that belong to a lease)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return set(pids)
    family = set(pids)
    for pid in pids:
        try:
            family.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return family


class LeaseManager:
    """Allocates GPUs of ``inventory`` to requests, across all processes that share ``state_dir``."""

    #: seconds a normal request's "waiting" mark keeps new idle work off the GPUs after its last try
    waiting_ttl: float = 30.0

    def __init__(self, inventory: GPUInventory, state_dir: str | None = None,
                 host_check: Callable[[GPURequest], str] | None = None,
                 classes: JobClassMapping | None = None) -> None:
        self.inventory = inventory
        self.state_dir = state_dir or default_state_dir()
        self.host_check = host_check or check_host_limits
        self.classes = classes or JobClassMapping()
        self.activity = GPUActivity(self.state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        with contextlib.suppress(PermissionError):
            os.chmod(self.state_dir, 0o1777)  # several users' Airflow instances share one box's GPUs

    # -- locking -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _allocation_lock(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.state_dir, "alloc.lock"), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _is_held(self, lock_path: str) -> bool:
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        finally:
            os.close(fd)
        return False

    def _live_leases(self) -> list[Lease]:
        """Leases whose holder is alive; the others are removed (must hold the allocation lock)."""
        leases = []
        for name in sorted(os.listdir(self.state_dir)):
            if not _LEASE_FILE.match(name):  # not waiting-*.json, activity.json, ...
                continue
            path = os.path.join(self.state_dir, name)
            lock_path = path[:-5] + ".lock"
            if not self._is_held(lock_path):
                for p in (path, lock_path, path[:-5] + ".preempt"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(p)
                continue
            try:
                with open(path) as fh:
                    lease = Lease.from_dict(json.load(fh))
            except (OSError, ValueError, TypeError, KeyError):
                continue
            lease.path = path
            leases.append(lease)
        return leases

    @staticmethod
    def _views(gpus: list[GPUInfo], leases: list[Lease]) -> list[LeaseView]:
        with_pids = any(g.processes for g in gpus)  # who is foreign matters only if GPUs list processes
        return [lease.view(with_pids) for lease in leases]

    # -- public API -----------------------------------------------------------------------------------
    def leases(self) -> list[Lease]:
        with self._allocation_lock():
            return self._live_leases()

    def snapshot(self) -> tuple[list[GPUInfo], list[Lease]]:
        with self._allocation_lock():
            return self.inventory.gpus(), self._live_leases()

    def check_possible(self, request: GPURequest) -> None:
        request.check_possible(self.inventory.gpus())

    def why_not(self, request: GPURequest, owner: str = "", *, job_class: str = "normal") -> str:
        """'' if the request could be placed now, else the reason. A normal request that does not fit
        still marks itself waiting and asks idle leases to yield (as :meth:`try_acquire` does)."""
        with self._allocation_lock():
            placement, reason, _ = self._decide(request, owner, job_class)
        return reason if placement is None else (self.host_check(request) or "")

    def try_acquire(self, request: GPURequest, owner: str, *, job_class: str = "normal",
                    priority: int = 0, preemptible: bool | None = None) -> tuple[Lease | None, str]:
        """Take a lease now, or return ``(None, reason)``. ``preemptible`` defaults to the class's policy."""
        with self._allocation_lock():
            placement, reason, gpus = self._decide(request, owner, job_class)
            if placement is None:
                return None, reason
            host_problem = self.host_check(request)
            if host_problem:
                return None, host_problem
            policy = self.classes[job_class].local
            lease = self._write(placement, gpus, owner, job_class, priority,
                                policy.preemptible if preemptible is None else preemptible, policy.min_runtime)
            self._clear_waiting(owner)
            return lease, ""

    def _decide(self, request: GPURequest, owner: str, job_class: str) -> tuple[Placement | None, str, list[GPUInfo]]:
        """Placement (or the reason there is none) and the GPUs seen, under the job-class rules (the caller
        holds the allocation lock)."""
        gpus = self.inventory.gpus()
        request.check_possible(gpus)
        leases = self._live_leases()
        views = dict(zip((lease.lease_id for lease in leases), self._views(gpus, leases)))
        usage = gpu_usage(gpus, views.values())
        idle_policy = self.classes["idle"].local
        quiet_since = self.activity.update(usage, idle_policy)
        policy = self.classes[job_class].local
        if job_class == "idle":  # fill-in work: never ahead of waiting normal work, only on quiet GPUs
            waiting = [w for w in self.waiting() if w.get("owner") != owner]
            if waiting:
                return None, f"normal work is waiting for GPUs ({waiting[0].get('owner', '?')})", gpus
            now = time.time()
            noisy = {i: gpu_is_busy(u, policy) or
                     (f"GPU {i}: quiet for {now - quiet_since.get(i, now):.0f}s of the {policy.idle_for:.0f}s "
                      f"idle work waits for" if now - quiet_since.get(i, now) < policy.idle_for else "")
                     for i, u in usage.items()}
            placement, reason = place(request, {i: u for i, u in usage.items() if not noisy[i]})
            if placement is None:
                busy = "; ".join(why for why in noisy.values() if why)
                return None, (reason + (f"; not idle: {busy}" if busy else "")), gpus
            return placement, "", gpus
        placement, reason = place(request, usage)
        if placement is None and owner:
            reason += self._preempt_for(request, owner, gpus, leases, views)
        return placement, reason, gpus

    def _preempt_for(self, request: GPURequest, owner: str, gpus: list[GPUInfo], leases: list[Lease],
                     views: dict[str, LeaseView]) -> str:
        """Mark ``owner`` waiting and ask the fewest eligible idle leases to yield; the reason's tail."""
        self._mark_waiting(owner)
        now = time.time()
        preemptible = [lease for lease in leases if lease.preemptible]
        if not preemptible:
            return ""
        eligible = [(lease.lease_id, lease.priority, lease.created) for lease in preemptible
                    if now - lease.created >= lease.min_runtime]
        victims = choose_victims(request, gpus, views, eligible) if eligible else None
        if victims:
            for lease_id in victims:
                path = os.path.join(self.state_dir, lease_id + ".preempt")
                if not os.path.exists(path):
                    _write_json(path, {"by": owner, "at": now})
            return f"; preempting idle lease(s) {', '.join(victims)}"
        young = [f"{lease.lease_id} in {lease.min_runtime - (now - lease.created):.0f}s" for lease in preemptible
                 if now - lease.created < lease.min_runtime]
        return f"; idle lease(s) become preemptible after their minimum runtime: {', '.join(young)}" if young else ""

    def _waiting_path(self, owner: str) -> str:
        return os.path.join(self.state_dir, f"waiting-{hashlib.sha1(owner.encode()).hexdigest()[:16]}.json")

    def _mark_waiting(self, owner: str) -> None:
        _write_json(self._waiting_path(owner), {"owner": owner, "until": time.time() + self.waiting_ttl})

    def _clear_waiting(self, owner: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._waiting_path(owner))

    def waiting(self) -> list[dict]:
        """Normal requests waiting now: ``[{"owner", "until"}]`` (expired marks are removed)."""
        marks = []
        for name in os.listdir(self.state_dir):
            if not (name.startswith("waiting-") and name.endswith(".json")):
                continue
            path = os.path.join(self.state_dir, name)
            try:
                with open(path) as fh:
                    mark = json.load(fh)
            except (OSError, ValueError):
                continue
            if float(mark.get("until", 0)) < time.time():
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                continue
            marks.append(mark)
        return marks

    def yield_request(self, lease_id: str) -> dict | None:
        """``{"by": owner, "at": time}`` if a normal request asked this lease to yield, else None."""
        try:
            with open(os.path.join(self.state_dir, lease_id + ".preempt")) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def yield_reason(self, lease: Lease) -> str:
        """'' while ``lease`` may keep running; else why its holder must stop now: a normal request asked
        for its GPUs, or (preemptible leases) foreign work appeared on them."""
        asked = self.yield_request(lease.lease_id)
        if asked is not None:
            return f"preempted for {asked.get('by', 'normal work')}"
        if not lease.preemptible:
            return ""
        policy = self.classes[lease.job_class].local
        with self._allocation_lock():
            gpus = self.inventory.gpus()
            leases = self._live_leases()
            usage = gpu_usage(gpus, self._views(gpus, leases))
        for index in lease.gpus:
            busy = gpu_is_busy(usage[index], policy) if index in usage else ""
            if busy:
                return f"foreign work appeared ({busy})"
        return ""

    def account(self, record: dict) -> None:
        """Add one attempt to the host's GPU-time ledger."""
        append_accounting(self.state_dir, {"time": time.time(), **record})

    def acquire(self, request: GPURequest, owner: str, *, timeout: float | None = None, poll_interval: float = 1.0,
                job_class: str = "normal", priority: int = 0, preemptible: bool | None = None,
                on_wait: Callable[[str], None] | None = None) -> Lease:
        """Wait until the request fits and take the lease. Raises TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_reason = None
        while True:
            lease, reason = self.try_acquire(request, owner, job_class=job_class, priority=priority,
                                             preemptible=preemptible)
            if lease is not None:
                return lease
            if on_wait and reason_kind(reason) != last_reason:
                on_wait(reason)
            last_reason = reason_kind(reason)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no GPUs for {request.describe()} within {timeout}s: {reason}")
            time.sleep(poll_interval)

    def _write(self, placement: Placement, gpus: list[GPUInfo], owner: str, job_class: str, priority: int,
               preemptible: bool = False, min_runtime: float = 0.0) -> Lease:
        by_index = {g.index: g for g in gpus}
        lease = Lease(
            lease_id=uuid.uuid4().hex[:16], gpus=placement.indices,
            uuids=[by_index[i].uuid for i in placement.indices], memory=placement.memory,
            whole=placement.whole, owner=owner, pid=os.getpid(), job_class=job_class, priority=priority,
            simulated=any(by_index[i].simulated for i in placement.indices), preemptible=preemptible,
            min_runtime=min_runtime,
        )
        base = os.path.join(self.state_dir, lease.lease_id)
        fd = os.open(base + ".lock", os.O_CREAT | os.O_RDWR, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lease.fd, lease.path = fd, base + ".json"
        self._save(lease)
        return lease

    def _save(self, lease: Lease) -> None:
        assert lease.path
        tmp = lease.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(lease.to_dict(), fh)
        os.replace(tmp, lease.path)

    def record_child(self, lease: Lease, pid: int) -> None:
        """Remember the GPU child's pid: its processes on the GPU are ours, not foreign."""
        lease.child_pids.append(pid)
        self._save(lease)

    def release(self, lease: Lease) -> None:
        with self._allocation_lock():
            base = os.path.join(self.state_dir, lease.lease_id)
            for p in (base + ".json", base + ".lock", base + ".preempt"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(p)
        if lease.fd is not None:
            with contextlib.suppress(OSError):
                os.close(lease.fd)
            lease.fd = None


_LEASE_FILE = re.compile(r"^[0-9a-f]{16}\.json$")


def reason_kind(reason: str) -> str:
    """A wait reason without its numbers (seconds, sizes): log a reason again only when its kind changes."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def check_host_limits(request: GPURequest) -> str:
    """fedflow-style host limits: '' when free RAM and CPU utilisation allow the request."""
    if request.min_free_ram is None and request.max_cpu_percent is None:
        return ""
    import psutil

    from airflow_provider_gpusched.core.units import format_bytes

    if request.min_free_ram is not None:
        available = psutil.virtual_memory().available
        if available < int(request.min_free_ram):
            return f"host has {format_bytes(available)} RAM free, the request wants {format_bytes(request.min_free_ram)}"
    if request.max_cpu_percent is not None:
        busy = psutil.cpu_percent(interval=0.2)
        if busy > float(request.max_cpu_percent):
            return f"host CPU utilisation {busy:.0f}% is above max_cpu_percent={request.max_cpu_percent}"
    return ""
