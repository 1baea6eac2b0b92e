"""GPU leases shared by every process on a host, safe against crashes.

A lease is two files in the state directory: ``<id>.json`` (what it holds) and ``<id>.lock``, on which
the holder keeps an exclusive ``flock`` for as long as it lives. The kernel drops that lock when the last
process holding the file descriptor exits — also on SIGKILL — so a dead holder's lease is recognised
(the lock can be taken) and removed by the next process that looks, with no cleanup daemon. The launcher
passes the descriptor to the GPU child as well: the lease lasts while the task *or* its child lives, so
a crashed Airflow worker does not hand out a GPU that its orphaned child still uses.

Every allocation decision happens under one more ``flock`` (``alloc.lock``), so concurrent requests
are serialised and reservations are recorded before anyone starts a child.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, Placement, gpu_usage, place

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

    def __init__(self, inventory: GPUInventory, state_dir: str | None = None,
                 host_check: Callable[[GPURequest], str] | None = None) -> None:
        self.inventory = inventory
        self.state_dir = state_dir or default_state_dir()
        self.host_check = host_check or check_host_limits
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
            if not name.endswith(".json"):
                continue
            path = os.path.join(self.state_dir, name)
            lock_path = path[:-5] + ".lock"
            if not self._is_held(lock_path):
                for p in (path, lock_path):
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

    def why_not(self, request: GPURequest) -> str:
        """'' if the request could be placed now, else the reason."""
        with self._allocation_lock():
            gpus = self.inventory.gpus()
            placement, reason = place(request, gpu_usage(gpus, self._views(gpus, self._live_leases())))
        return reason if placement is None else (self.host_check(request) or "")

    def try_acquire(self, request: GPURequest, owner: str, *, job_class: str = "normal",
                    priority: int = 0) -> tuple[Lease | None, str]:
        """Take a lease now, or return ``(None, reason)``."""
        with self._allocation_lock():
            gpus = self.inventory.gpus()
            request.check_possible(gpus)
            placement, reason = place(request, gpu_usage(gpus, self._views(gpus, self._live_leases())))
            if placement is None:
                return None, reason
            host_problem = self.host_check(request)
            if host_problem:
                return None, host_problem
            return self._write(placement, gpus, owner, job_class, priority), ""

    def acquire(self, request: GPURequest, owner: str, *, timeout: float | None = None, poll_interval: float = 1.0,
                job_class: str = "normal", priority: int = 0,
                on_wait: Callable[[str], None] | None = None) -> Lease:
        """Wait until the request fits and take the lease. Raises TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_reason = None
        while True:
            lease, reason = self.try_acquire(request, owner, job_class=job_class, priority=priority)
            if lease is not None:
                return lease
            if on_wait and reason != last_reason:
                on_wait(reason)
            last_reason = reason
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no GPUs for {request.describe()} within {timeout}s: {reason}")
            time.sleep(poll_interval)

    def _write(self, placement: Placement, gpus: list[GPUInfo], owner: str, job_class: str, priority: int) -> Lease:
        by_index = {g.index: g for g in gpus}
        lease = Lease(
            lease_id=uuid.uuid4().hex[:16], gpus=placement.indices,
            uuids=[by_index[i].uuid for i in placement.indices], memory=placement.memory,
            whole=placement.whole, owner=owner, pid=os.getpid(), job_class=job_class, priority=priority,
            simulated=any(by_index[i].simulated for i in placement.indices),
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
            for p in (base + ".json", base + ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(p)
        if lease.fd is not None:
            with contextlib.suppress(OSError):
                os.close(lease.fd)
            lease.fd = None


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
