"""GPU leases shared by every process on a host, safe against crashes.

A lease is two files in the state directory: ``<id>.json`` (what it holds) and ``<id>.lock``, on which
the holder keeps an exclusive ``flock`` for as long as it lives. The kernel drops that lock when the last
process holding the file descriptor exits — also on SIGKILL — so a dead holder's lease is recognised
(the lock can be taken) and removed by the next process that looks, with no cleanup daemon. The launcher
passes the descriptor to the GPU child as well: the lease lasts while the task *or* its child lives, so
a crashed Airflow worker does not hand out a GPU that its orphaned child still uses. Such an orphan (its
holder is dead, its child alive) is stopped by the next process that looks at the leases: SIGTERM to the
child's process group, SIGKILL after the lease's grace period; nobody is left to collect its result.
A lease may name the task it runs for (``task_key``): another try of the same task waits until it is gone,
so a retry never runs next to a surviving first copy.

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
import os
import re
import signal
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView, Placement, gpu_usage, place
from airflow_provider_gpusched.core.gpu.preemption import (
    GPUActivity,
    append_accounting,
    choose_victims,
    gpu_is_busy,
)
from airflow_provider_gpusched.core.job_classes import JobClassMapping
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    ensure_private_dir,
    open_regular,
    read_json_record,
    write_json_atomic,
)

STATE_DIR_ENV = "GPUSCHED_STATE_DIR"
SHARED_ENV = "GPUSCHED_STATE_DIR_SHARED"


def default_state_dir() -> str:
    """``$GPUSCHED_STATE_DIR``, else a directory of this user's own (``<tmp>/gpusched-<uid>``): a fixed name
    in a world-writable place could be created first by another user."""
    return os.environ.get(STATE_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"gpusched-{os.geteuid()}")


def shared_from_env() -> bool:
    return os.environ.get(SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


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
    task_key: str = ""       # the task (not the try) this lease runs for: one copy per task at a time
    pid_started: float = 0.0  # the holder's start time: a reused pid is not mistaken for the holder
    grace: float = 10.0       # seconds between SIGTERM and SIGKILL when its child is stopped
    orphaned_at: float = 0.0  # when its holder was found dead with the child still running (not stored)
    unreadable: str = ""  # why the lease file could not be read (its GPUs then count as taken)
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
    def from_dict(cls, data: Any, source: str = "lease") -> Lease:
        """A lease read back from disk, every field checked: :class:`BadRecordError` names the file and key."""
        if not isinstance(data, dict):
            raise BadRecordError(f"{source}: expected a JSON object, got {type(data).__name__}")

        def bad(key: str, expected: str) -> BadRecordError:
            return BadRecordError(f"{source}: key {key!r}: expected {expected}, got {data.get(key)!r:.80}")

        for key, check, expected in _LEASE_FIELDS:
            if key in data and not check(data[key]):
                raise bad(key, expected)
            if key not in data and key in _REQUIRED:
                raise BadRecordError(f"{source}: key {key!r} is missing")
        memory = data["memory"]
        if not all(isinstance(k, str) and k.isdigit() and _is_int(v) and v >= 0 for k, v in memory.items()):
            raise bad("memory", "an object of GPU index -> reserved bytes")
        values = {k: v for k, v in data.items()
                  if k in cls.__dataclass_fields__ and k not in ("fd", "path", "orphaned_at", "unreadable")}
        values["memory"] = {int(k): int(v) for k, v in memory.items()}
        return cls(**values)

    def view(self, with_pids: bool = True) -> LeaseView:
        """What placement needs; ``with_pids`` walks the process tree (only needed when GPUs list processes)."""
        pids = _family({self.pid, *self.child_pids}) if with_pids else set()
        return LeaseView(memory=self.memory, whole=self.whole, pids=pids)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) and v >= 0 for v in value)


_LEASE_FIELDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("lease_id", lambda v: isinstance(v, str) and bool(re.fullmatch(r"[0-9a-f]{16}", v)), "16 hex digits"),
    ("gpus", _int_list, "a list of GPU indices"),
    ("uuids", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of GPU UUIDs"),
    ("memory", lambda v: isinstance(v, dict), "an object of GPU index -> reserved bytes"),
    ("whole", lambda v: isinstance(v, bool), "true or false"),
    ("owner", lambda v: isinstance(v, str), "a string"),
    ("pid", lambda v: _is_int(v) and v > 0, "a process id"),
    ("job_class", lambda v: isinstance(v, str), "a job class name"),
    ("priority", _is_int, "a whole number"),
    ("created", _is_number, "a time stamp"),
    ("simulated", lambda v: isinstance(v, bool), "true or false"),
    ("preemptible", lambda v: isinstance(v, bool), "true or false"),
    ("min_runtime", _is_number, "seconds"),
    ("child_pids", _int_list, "a list of process ids"),
    ("task_key", lambda v: isinstance(v, str), "a string"),
    ("pid_started", _is_number, "a time stamp"),
    ("grace", lambda v: _is_number(v) and v >= 0, "seconds (>= 0)"),
)
_REQUIRED = frozenset({"lease_id", "gpus", "uuids", "memory", "whole", "owner", "pid"})


def _started_at(pid: int) -> float:
    """The start time of process ``pid`` (0.0 when it does not exist)."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or no psutil
        return 0.0


def _holder_alive(lease: Lease) -> bool:
    """Whether the process that took ``lease`` still runs (the same process, not a later one with its pid)."""
    started = _started_at(lease.pid)
    if not started:
        return False
    return not lease.pid_started or abs(started - lease.pid_started) < 1.0


def _signal_family(pids: list[int], sig: int) -> None:
    """``sig`` to each child's process group (the launcher starts each in its own) and all descendants."""
    for pid in _family(set(pids)):
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, sig)


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
                 classes: JobClassMapping | None = None, shared: bool | None = None) -> None:
        """``shared``: the state directory is a group directory set up on purpose for several users
        (default ``$GPUSCHED_STATE_DIR_SHARED``); otherwise it must be this user's own."""
        self.inventory = inventory
        self.shared = shared_from_env() if shared is None else shared
        self.state_dir = ensure_private_dir(state_dir or default_state_dir(), shared=self.shared,
                                            what="GPU lease directory")
        self.file_mode = 0o660 if self.shared else 0o600
        self.host_check = host_check or check_host_limits
        self.classes = classes or JobClassMapping()
        self.activity = GPUActivity(self.state_dir, file_mode=self.file_mode)
        #: lease files of live holders that could not be read (their GPUs count as taken): ``[(file, why)]``
        self.unreadable: list[tuple[str, str]] = []

    # -- locking -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _allocation_lock(self) -> Iterator[None]:
        fd = open_regular(os.path.join(self.state_dir, "alloc.lock"), os.O_CREAT | os.O_RDWR, self.file_mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _is_held(self, lock_path: str) -> bool:
        try:
            fd = open_regular(lock_path, os.O_RDWR)
        except FileNotFoundError:
            return False
        except (OSError, GpuschedError):  # a link or something else planted there: not a holder's lock
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

    def _live_leases(self, gpus: list[GPUInfo] | None = None) -> list[Lease]:
        """Leases whose holder is alive; the others are removed (must hold the allocation lock). A live
        holder's lease file that cannot be read never counts as free capacity: it is returned as an
        ``unreadable`` lease holding the GPUs it names (all GPUs when it names none) whole."""
        leases = []
        unreadable = []
        for name in sorted(os.listdir(self.state_dir)):
            if not _LEASE_FILE.match(name):  # not waiting-*.json, activity.json, ...
                continue
            path = os.path.join(self.state_dir, name)
            lock_path = path[:-5] + ".lock"
            if not self._is_held(lock_path):
                for p in (path, lock_path, path[:-5] + ".preempt", path[:-5] + ".orphan"):
                    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                        os.remove(p)
                continue
            data: Any = None
            try:
                data = read_json_record(path)
                lease = Lease.from_dict(data, source=path)
                if lease.lease_id != name[:-5]:
                    raise BadRecordError(f"{path}: key 'lease_id': {lease.lease_id!r} does not match the file name")
            except FileNotFoundError:
                continue
            except BadRecordError as exc:
                if gpus is None:
                    gpus = self.inventory.gpus()
                lease = _unreadable_lease(name[:-5], data, gpus, str(exc))
                unreadable.append((path, str(exc)))
            lease.path = path
            if not lease.unreadable and lease.child_pids and not _holder_alive(lease):
                self._stop_orphan(lease)
            leases.append(lease)
        self.unreadable = unreadable
        return leases

    def _stop_orphan(self, lease: Lease) -> None:
        """The holder of ``lease`` is dead, its child still runs (the lock is held): stop the child — SIGTERM
        now, SIGKILL once the lease's grace period has passed. The lease keeps its GPUs until the child is gone
        (the kernel then drops the lock and the next look removes the lease)."""
        mark = os.path.join(self.state_dir, lease.lease_id + ".orphan")
        try:
            since = read_json_record(mark)
            since = float(since["at"]) if isinstance(since, dict) and _is_number(since.get("at")) else None
        except (OSError, BadRecordError):
            since = None
        now = time.time()
        if since is None:
            write_json_atomic(mark, {"at": now, "pids": lease.child_pids}, self.file_mode)
            _signal_family(lease.child_pids, signal.SIGTERM)
            since = now
        elif now - since >= lease.grace:
            _signal_family(lease.child_pids, signal.SIGKILL)
        lease.orphaned_at = since

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
            gpus = self.inventory.gpus()
            return gpus, self._live_leases(gpus)

    def check_possible(self, request: GPURequest) -> None:
        request.check_possible(self.inventory.gpus())

    def why_not(self, request: GPURequest, owner: str = "", *, job_class: str = "normal", task_key: str = "") -> str:
        """'' if the request could be placed now, else the reason. A normal request that does not fit
        still marks itself waiting and asks idle leases to yield (as :meth:`try_acquire` does)."""
        with self._allocation_lock():
            placement, reason, _ = self._decide(request, owner, job_class, task_key)
        return reason if placement is None else (self.host_check(request) or "")

    def try_acquire(self, request: GPURequest, owner: str, *, job_class: str = "normal",
                    priority: int = 0, preemptible: bool | None = None, task_key: str = "",
                    grace: float = 10.0) -> tuple[Lease | None, str]:
        """Take a lease now, or return ``(None, reason)``. ``preemptible`` defaults to the class's policy.
        ``task_key`` names the task (not the try): while another try's lease for it lives, none is given."""
        with self._allocation_lock():
            placement, reason, gpus = self._decide(request, owner, job_class, task_key)
            if placement is None:
                return None, reason
            host_problem = self.host_check(request)
            if host_problem:
                return None, host_problem
            policy = self.classes[job_class].local
            lease = self._write(placement, gpus, owner, job_class, priority,
                                policy.preemptible if preemptible is None else preemptible, policy.min_runtime,
                                task_key=task_key, grace=grace)
            self._clear_waiting(owner)
            return lease, ""

    def _decide(self, request: GPURequest, owner: str, job_class: str,
                task_key: str = "") -> tuple[Placement | None, str, list[GPUInfo]]:
        """Placement (or the reason there is none) and the GPUs seen, under the job-class rules (the caller
        holds the allocation lock)."""
        gpus = self.inventory.gpus()
        request.check_possible(gpus)
        leases = self._live_leases(gpus)
        earlier = [lease for lease in leases if task_key and lease.task_key == task_key and lease.owner != owner]
        if earlier:
            lease = earlier[0]
            state = (f"its worker (pid {lease.pid}) is gone; stopping its process group {lease.child_pids}"
                     if lease.orphaned_at else f"pid {lease.pid} still runs it")
            return None, (f"another try of this task still holds lease {lease.lease_id} on GPU "
                          f"{lease.cuda_visible_devices} ({lease.owner}; {state})"), gpus
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
        if placement is None and self.unreadable:
            reason += "; unreadable lease file(s) of live holders count as taken: " + \
                "; ".join(why for _, why in self.unreadable)
        if placement is None and owner:
            reason += self._preempt_for(request, owner, gpus, leases, views)
        return placement, reason, gpus

    def _preempt_for(self, request: GPURequest, owner: str, gpus: list[GPUInfo], leases: list[Lease],
                     views: dict[str, LeaseView]) -> str:
        """Mark ``owner`` waiting and ask the fewest eligible idle leases to yield; the reason's tail."""
        self._mark_waiting(owner)
        now = time.time()
        preemptible = [lease for lease in leases if lease.preemptible and not lease.unreadable]
        if not preemptible:
            return ""
        eligible = [(lease.lease_id, lease.priority, lease.created) for lease in preemptible
                    if now - lease.created >= lease.min_runtime]
        victims = choose_victims(request, gpus, views, eligible) if eligible else None
        if victims:
            for lease_id in victims:
                path = os.path.join(self.state_dir, lease_id + ".preempt")
                if not os.path.lexists(path):
                    write_json_atomic(path, {"by": owner, "at": now}, self.file_mode)
            return f"; preempting idle lease(s) {', '.join(victims)}"
        young = [f"{lease.lease_id} in {lease.min_runtime - (now - lease.created):.0f}s" for lease in preemptible
                 if now - lease.created < lease.min_runtime]
        return f"; idle lease(s) become preemptible after their minimum runtime: {', '.join(young)}" if young else ""

    def _waiting_path(self, owner: str) -> str:
        return os.path.join(self.state_dir, f"waiting-{hashlib.sha1(owner.encode()).hexdigest()[:16]}.json")

    def _mark_waiting(self, owner: str) -> None:
        write_json_atomic(self._waiting_path(owner), {"owner": owner, "until": time.time() + self.waiting_ttl},
                          self.file_mode)

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
                mark = read_json_record(path)
            except (OSError, BadRecordError):
                mark = None
            if not (isinstance(mark, dict) and isinstance(mark.get("owner"), str)
                    and _is_number(mark.get("until"))):
                with contextlib.suppress(OSError):  # a mark we cannot read holds nothing back
                    os.remove(path)
                continue
            if float(mark["until"]) < time.time():
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                continue
            marks.append(mark)
        return marks

    def yield_request(self, lease_id: str) -> dict | None:
        """``{"by": owner, "at": time}`` if a normal request asked this lease to yield, else None."""
        try:
            asked = read_json_record(os.path.join(self.state_dir, lease_id + ".preempt"))
        except (OSError, BadRecordError):
            return None
        if not isinstance(asked, dict):
            return {"by": "an unreadable yield request"}
        return {"by": str(asked.get("by", "normal work")), "at": asked.get("at")}

    def yields_asked_by(self, owner: str) -> list[str]:
        """The leases that ``owner`` (a waiting normal request) has asked to yield and that still hold GPUs."""
        asked = []
        for name in os.listdir(self.state_dir):
            if name.endswith(".preempt") and _LEASE_FILE.match(name[:-8] + ".json"):
                request = self.yield_request(name[:-8])
                if request and request.get("by") == owner and os.path.exists(
                        os.path.join(self.state_dir, name[:-8] + ".json")):
                    asked.append(name[:-8])
        return sorted(asked)

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
            leases = self._live_leases(gpus)
            usage = gpu_usage(gpus, self._views(gpus, leases))
        for index in lease.gpus:
            busy = gpu_is_busy(usage[index], policy) if index in usage else ""
            if busy:
                return f"foreign work appeared ({busy})"
        return ""

    def account(self, record: dict) -> None:
        """Add one attempt to the host's GPU-time ledger."""
        append_accounting(self.state_dir, {"time": time.time(), **record}, self.file_mode)

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
               preemptible: bool = False, min_runtime: float = 0.0, task_key: str = "", grace: float = 10.0) -> Lease:
        by_index = {g.index: g for g in gpus}
        lease = Lease(
            lease_id=uuid.uuid4().hex[:16], gpus=placement.indices,
            uuids=[by_index[i].uuid for i in placement.indices], memory=placement.memory,
            whole=placement.whole, owner=owner, pid=os.getpid(), job_class=job_class, priority=priority,
            simulated=any(by_index[i].simulated for i in placement.indices), preemptible=preemptible,
            min_runtime=min_runtime, task_key=task_key, pid_started=_started_at(os.getpid()), grace=float(grace),
        )
        base = os.path.join(self.state_dir, lease.lease_id)
        fd = os.open(base + ".lock", os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode)
        os.fchmod(fd, self.file_mode)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lease.fd, lease.path = fd, base + ".json"
        self._save(lease)
        return lease

    def _save(self, lease: Lease) -> None:
        assert lease.path
        data = lease.to_dict()
        data.pop("unreadable", None)
        data.pop("orphaned_at", None)
        write_json_atomic(lease.path, data, self.file_mode)

    def record_child(self, lease: Lease, pid: int) -> None:
        """Remember the GPU child's pid: its processes on the GPU are ours, not foreign."""
        lease.child_pids.append(pid)
        self._save(lease)

    def release(self, lease: Lease) -> None:
        with self._allocation_lock():
            base = os.path.join(self.state_dir, lease.lease_id)
            for p in (base + ".json", base + ".lock", base + ".preempt", base + ".orphan"):
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


def _unreadable_lease(lease_id: str, data: Any, gpus: list[GPUInfo], why: str) -> Lease:
    """A stand-in for a live holder's lease file that cannot be read: it holds whole the GPUs the file names,
    or every GPU when it names none we know, so nothing is handed out twice."""
    known = {g.index: g for g in gpus}
    named = data.get("gpus") if isinstance(data, dict) else None
    held = sorted(set(named) & set(known)) if _int_list(named) and set(named) & set(known) else sorted(known)
    return Lease(lease_id=lease_id, gpus=held, uuids=[known[i].uuid for i in held],
                 memory={i: known[i].memory_total for i in held}, whole=True,
                 owner=f"? (unreadable lease file: {why})", pid=0, unreadable=why)


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
