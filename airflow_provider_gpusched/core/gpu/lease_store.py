"""GPU lease files shared by every process on a host, safe against crashes.

A lease is two files in the state directory: ``<id>.json`` (what it holds) and ``<id>.lock``, on which
the holder keeps an exclusive ``flock`` for as long as it lives. The kernel drops that lock when the last
process holding the file descriptor exits — also on SIGKILL — so a dead holder's lease is recognised
(the lock can be taken) and removed by the next process that looks, with no cleanup daemon. The launcher
passes the descriptor to the GPU child as well: the lease lasts while the task *or* its child lives, so
a crashed Airflow worker does not hand out a GPU that its orphaned child still uses. Such an orphan (its
holder is dead, its child alive) is stopped by the next process that tidies the leases: SIGTERM to the
child's process group, SIGKILL after the lease's grace period; nobody is left to collect its result.

:class:`LeaseStore` is that directory: the allocation lock (``alloc.lock``, under which every allocation
decision happens), the live leases, writing and releasing them. Who gets which GPUs is decided in
:mod:`~airflow_provider_gpusched.core.gpu.leases`; idle work giving GPUs back in
:mod:`~airflow_provider_gpusched.core.gpu.yielding`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import signal
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeGuard

from airflow_provider_gpusched.core.checks import is_int, is_json_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventory
from airflow_provider_gpusched.core.gpu.placement import LeaseView, Placement
from airflow_provider_gpusched.core.records import (
    RUNTIME_ONLY,
    Float,
    IndexKey,
    RecordType,
    Seconds,
    private_key,
    record_class,
    says,
)
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    brief_fd,
    ensure_private_dir,
    open_regular,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.work_tag import WorkTag

STATE_DIR_ENV = "GPUSCHED_STATE_DIR"


class _NotALock(Exception):
    """A lease's lock file that cannot be opened as one (gone, or not a regular file)."""


SHARED_ENV = "GPUSCHED_STATE_DIR_SHARED"


def default_state_dir() -> str:
    """``$GPUSCHED_STATE_DIR``, else a directory of this user's own: ``<tmp>/gpusched-<uid>``. Another user can
    create that name first (a file, a link, or a directory of theirs): then, rather than stop all local GPU work,
    this user's private fallback ``~/.cache/gpusched/leases`` is used, with a warning. Once the fallback exists it
    is kept (every process of the user must agree on one directory, whatever happens to the squatted name)."""
    if os.environ.get(STATE_DIR_ENV):
        return os.environ[STATE_DIR_ENV]
    usual = os.path.join(tempfile.gettempdir(), f"gpusched-{os.geteuid()}")
    if shared_from_env():  # a group directory is set up on purpose: no private fallback that would split it
        return usual
    fallback = fallback_state_dir()
    if os.path.isdir(fallback) and not os.path.islink(fallback):
        return fallback
    squatted = _squatted(usual)
    if not squatted:
        return usual
    import logging

    logging.getLogger(__name__).warning(
        "GPU lease directory %s %s; using this user's private %s instead (set $GPUSCHED_STATE_DIR or "
        "[gpusched] gpu_state_dir to choose one)",
        usual,
        squatted,
        fallback,
    )
    return fallback


def fallback_state_dir() -> str:
    """Where this user's leases go when the default name under the temporary directory is taken by someone else."""
    return os.path.join(os.path.expanduser("~"), ".cache", "gpusched", "leases")


def _squatted(path: str) -> str:
    """'' when ``path`` is free or this user's private directory; else what is wrong with it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}"
    if stat.S_IMODE(st.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def shared_from_env() -> bool:
    return os.environ.get(SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


#: a lease's stages: taken with its GPUs at once; a two-stage task's load, wait (loaded) and train stages
STAGES = ("", "load", "wait", "train")
_STAGE_WORDS = "one of " + ", ".join(repr(s) for s in STAGES)


Index = Annotated[int, says("a GPU index", ge=0)]
Pid = Annotated[int, says("a process id", ge=0)]
TimeStamp = Annotated[Float, says("a time stamp", strict=None)]
Flag = Annotated[bool, says("true or false")]
Text = Annotated[str, says("a string")]


@record_class
@dataclass
class Lease:
    """A lease on GPUs of this host: its file in the state directory (read back by :meth:`from_dict`, every field
    checked) and, while it is held, its holder's lock."""

    lease_id: Annotated[str, says("16 hex digits", pattern=r"^[0-9a-f]{16}$")]
    gpus: Annotated[list[Index], says("a list of GPU indices", strict=None)]
    uuids: Annotated[list[Annotated[str, says("a GPU UUID")]], says("a list of GPU UUIDs", strict=None)]
    memory: Annotated[
        dict[IndexKey, Annotated[int, says("reserved bytes", ge=0)]],
        says("an object of GPU index -> reserved bytes", strict=None),
    ]
    whole: Flag
    owner: Text
    pid: Annotated[int, says("a process id", gt=0)]
    job_class: Annotated[str, says("a job class name")] = "normal"
    priority: Annotated[int, says("a whole number")] = 0
    created: TimeStamp = field(default_factory=time.time)
    simulated: Flag = False
    preemptible: Flag = False
    min_runtime: Annotated[Float, says("seconds", strict=None)] = 0.0
    child_pids: Annotated[list[Pid], says("a list of process ids", strict=None)] = field(default_factory=list)
    task_key: Text = ""  # the task (not the try) this lease runs for: one copy per task at a time
    pid_started: TimeStamp = 0.0  # the holder's start time: a reused pid is not mistaken for the holder
    #: seconds between SIGTERM and SIGKILL when its child is stopped
    grace: Annotated[Seconds, says("seconds (>= 0)", strict=None)] = 10.0
    #: bytes of host RAM reserved (0: none asked)
    host_memory: Annotated[int, says("bytes of host RAM (>= 0)", ge=0)] = 0
    #: the host CPUs reserved, which its child is pinned to
    cpus: Annotated[list[Annotated[int, says("a CPU number", ge=0)]], says("a list of CPU numbers", strict=None)] = (
        field(default_factory=list)
    )
    #: the WorkTag (DAG, run, task, map index, sweep) it runs for
    work: Annotated[dict[str, Any], says("an object naming the DAG run and task", strict=None)] = field(
        default_factory=dict
    )
    #: a two-stage task's stage: "load" (host resources only), "wait" (loaded, waiting for GPUs), "train" (GPUs
    #: added); "" for a lease taken with its GPUs at once
    stage: Annotated[Literal["", "load", "wait", "train"], says(_STAGE_WORDS, strict=None)] = ""
    #: not stored: when its holder was found dead with the child still running
    orphaned_at: Annotated[float, RUNTIME_ONLY] = 0.0
    #: not stored: why the lease file could not be read (its GPUs then count as taken)
    unreadable: Annotated[str, RUNTIME_ONLY] = ""
    fd: Annotated[int | None, RUNTIME_ONLY] = field(default=None, repr=False, compare=False)
    path: Annotated[str | None, RUNTIME_ONLY] = field(default=None, repr=False, compare=False)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(i) for i in self.gpus)

    def copy(self) -> Lease:
        """An independent copy (its lists and mapping too), without the holder's lock fd."""
        twin = object.__new__(Lease)
        twin.__dict__.update(self.__dict__)
        twin.gpus, twin.uuids, twin.child_pids = list(self.gpus), list(self.uuids), list(self.child_pids)
        twin.memory, twin.work, twin.fd = dict(self.memory), dict(self.work), None
        return twin

    def to_dict(self) -> dict[str, Any]:
        return LEASE.dump(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "lease", key: bytes | None = None) -> Lease:
        """A lease read back from disk, every field checked: :class:`BadRecordError` names the file and key.
        ``key``: a lease sealed with it (by a process of this user, :class:`LeaseStore`) is taken as written."""
        if key is not None and isinstance(data, dict):
            sealed = LEASE.unseal(data, key)
            if sealed is not None:
                return sealed
        lease = LEASE.read(data, source)
        if lease.work:
            lease.work = WorkTag.from_dict(lease.work, f"{source}: key 'work'").to_dict()
        return lease

    @property
    def tag(self) -> WorkTag:
        """What the lease runs for (only its class for leases taken outside Airflow, or by an older version)."""
        tag = WorkTag.from_dict(self.work) if self.work else WorkTag()
        return tag if tag.job_class else dataclasses.replace(tag, job_class=self.job_class)

    def view(self, kin: Mapping[int, set[int]] | None = None) -> LeaseView:
        """What placement needs. ``kin`` maps each process the GPUs list to itself, its session and its
        ancestors (:func:`gpu_process_kin`); the lease's processes are those related to its holder or
        children. Without ``kin`` (GPUs that list no processes) none are named."""
        roots = {self.pid, *self.child_pids}
        pids = {pid for pid, related in (kin or {}).items() if related & roots}
        return LeaseView(memory=self.memory, whole=self.whole, pids=pids)


LEASE = RecordType(Lease, name="lease")


def _int_list(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(is_int(v) and v >= 0 for v in value)


def _started_at(pid: int) -> float:
    """The start time of process ``pid`` (0.0 when it does not exist)."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or no psutil
        return 0.0


_own_start: tuple[int, float] = (0, 0.0)


def _own_started_at() -> float:
    """This process's start time, asked once per process (a forked child asks again)."""
    global _own_start
    pid = os.getpid()
    if _own_start[0] != pid:
        _own_start = (pid, _started_at(pid))
    return _own_start[1]


def _holder_alive(lease: Lease) -> bool:
    """Whether the process that took ``lease`` still runs (the same process, not a later one with its pid)."""
    started = _started_at(lease.pid)
    if not started:
        return False
    return not lease.pid_started or abs(started - lease.pid_started) < 1.0


def gpu_process_kin(gpus: list[GPUInfo]) -> dict[int, set[int]]:
    """For each process the GPUs list: itself, its session leader and its ancestors. A lease owns a GPU
    process when its holder or a child is among them (children lead their own sessions, so a descendant
    is usually matched by ``getsid`` alone). This looks at the few processes on the GPUs, never walks the
    process trees of the leases."""
    kin: dict[int, set[int]] = {}
    for pid in {p.pid for g in gpus for p in g.processes}:
        related = {pid}
        try:
            related.add(os.getsid(pid))
            import psutil

            related.update(parent.pid for parent in psutil.Process(pid).parents())
        except Exception:  # noqa: BLE001 - gone or not ours to inspect: only itself
            pass
        kin[pid] = related
    return kin


def _signal_family(pids: list[int], sig: int) -> None:
    """``sig`` to each child's process group (the launcher starts each in its own) and all descendants."""
    for pid in _family(set(pids)):
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, sig)


def kill_family(pids: list[int], wait: float = 0.0) -> int:
    """SIGKILL the children ``pids``, their process groups and descendants; how many processes were alive. With
    ``wait``, for up to that many seconds until they have ended (a SIGKILL takes effect when the kernel next runs
    the process: whoever is told "killed" and looks at once must not find it still running)."""
    family = {pid for pid in _family(set(pids)) if _started_at(pid)}
    _signal_family(list(family), signal.SIGKILL)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(process_alive(pid) for pid in family):
        time.sleep(0.02)
    return len(family)


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie (ended, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _family(pids: set[int]) -> set[int]:
    """The pids and all their descendants (the processes that belong to a lease)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return set(pids)
    family = set(pids)
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            family.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    return family


LEASE_FILE = re.compile(r"^[0-9a-f]{16}\.json$")
#: files next to a lease that go with it: a yield request, an orphan's stop mark, a `gpusched queue stop` request
SIDE_FILES = (".preempt", ".orphan", ".stop")

#: the count of releases in a state directory, 20 ASCII digits, rewritten under the allocation lock
RELEASES_FILE = "releases"
_local_wakers: dict[str, threading.Condition] = {}
_local_wakers_lock = threading.Lock()


def _local_waker(state_dir: str) -> threading.Condition:
    """Waiters in this process sleep on this condition; a release here wakes them at once. Waiters in
    other processes see the releases file change."""
    with _local_wakers_lock:
        return _local_wakers.setdefault(os.path.realpath(state_dir), threading.Condition())


def place_on(lease: Lease, placement: Placement, gpus: list[GPUInfo]) -> None:
    """Give ``lease`` the GPUs of ``placement`` (a new lease, or a two-stage task's lease growing its GPUs)."""
    by_index = {g.index: g for g in gpus}
    lease.gpus, lease.memory, lease.whole = list(placement.indices), dict(placement.memory), placement.whole
    lease.uuids = [by_index[i].uuid for i in placement.indices]
    lease.simulated = any(by_index[i].simulated for i in placement.indices)


class LeaseStore:
    """The lease files in ``state_dir`` (this user's own, or a group directory set up for several users
    when ``shared``)."""

    def __init__(self, inventory: GPUInventory, state_dir: str | None = None, shared: bool | None = None) -> None:
        self.inventory = inventory
        self.shared = shared_from_env() if shared is None else shared
        self.state_dir = ensure_private_dir(
            state_dir or default_state_dir(), shared=self.shared, what="GPU lease directory"
        )
        self.file_mode = 0o660 if self.shared else 0o600
        #: this user's own directory: its lease files are sealed with the key only this user can read, and a
        #: sealed one is read without checking it again (core/records.py); a shared directory's are checked
        self.record_key = None if self.shared else private_key(self.state_dir)
        #: lease files of live holders that could not be read (their GPUs count as taken): ``[(file, why)]``
        self.unreadable: list[tuple[str, str]] = []
        # lease files already read and checked, by name: (inode, size, mtime, ctime), the lease. Holders
        # replace a lease file by renaming a new one over it (a new inode), so a file whose identity and
        # times are unchanged holds the record already checked; any change is read and checked again.
        self._checked: dict[str, tuple[tuple[int, int, int, int], Lease]] = {}
        self._releases_fd: int | None = None
        # when each lease's holder was last found alive (monotonic): checked at most once a second
        self._holder_seen: dict[str, float] = {}
        #: in a fleet: the folder where the head node's ``gpusched queue stop`` asks this host's holders to stop
        #: (``<fleet_dir>/stops/<host>``; see core/fleet.py), read as well as this directory's ``.stop`` files
        self.fleet_stops = ""

    def path(self, name: str) -> str:
        return f"{self.state_dir}/{name}"  # names are fixed or validated, never absolute

    @contextlib.contextmanager
    def allocation_lock(self) -> Iterator[None]:
        # closing releases the lock; a process forked meanwhile does not keep it (brief_fd)
        with brief_fd(lambda: open_regular(self.path("alloc.lock"), os.O_CREAT | os.O_RDWR, self.file_mode)) as fd:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield

    @staticmethod
    def _is_held(lock_path: str) -> bool:
        def open_lock() -> int:
            try:
                return open_regular(lock_path, os.O_RDWR)
            except (OSError, GpuschedError):  # gone, a link or something else planted there: not a holder's lock
                raise _NotALock from None

        try:
            with brief_fd(open_lock) as fd:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        return True
                    raise
                return False
        except _NotALock:
            return False

    def exists(self, lease_id: str) -> bool:
        return os.path.exists(self.path(lease_id + ".json"))

    def live(self, gpus: list[GPUInfo] | None = None, *, tidy: bool = True) -> list[Lease]:
        """Leases whose holder is alive (the caller holds the allocation lock). With ``tidy`` the dead ones'
        files are removed and orphaned children are stopped; without it nothing is written or signalled. A
        live holder's lease file that cannot be read never counts as free capacity: it is returned as an
        ``unreadable`` lease holding the GPUs it names (all GPUs when it names none) whole."""
        leases = []
        unreadable = []
        for name in sorted(os.listdir(self.state_dir)):
            if not LEASE_FILE.match(name):  # not waiting-*.json, activity.json, ...
                continue
            path = self.path(name)
            lock_path = path[:-5] + ".lock"
            if not self._is_held(lock_path):
                if tidy:
                    for p in (path, lock_path, *(path[:-5] + side for side in SIDE_FILES)):
                        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                            os.remove(p)
                continue
            try:
                lease = self._read_checked(name)
            except FileNotFoundError:
                continue
            except BadRecordError as exc:
                if gpus is None:
                    gpus = self.inventory.gpus()
                lease = _unreadable_lease(name[:-5], getattr(exc, "record", None), gpus, str(exc))
                unreadable.append((path, str(exc)))
            lease.path = path
            if tidy and not lease.unreadable and lease.child_pids and not self.holder_alive(lease):
                self._stop_orphan(lease)
            leases.append(lease)
        self.unreadable = unreadable
        live = {lease.lease_id + ".json" for lease in leases}
        for gone in set(self._checked) - live:
            del self._checked[gone]
        for gone in set(self._holder_seen) - {name[:-5] for name in live}:
            del self._holder_seen[gone]
        return leases

    def _read_checked(self, name: str) -> Lease:
        """The lease in file ``name``, checked (:meth:`Lease.from_dict`); a copy of the one already checked
        when the file is the same file as then. Raises FileNotFoundError or BadRecordError."""
        path = self.path(name)
        st = os.stat(path, follow_symlinks=False)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._checked.get(name)
        if cached is not None and cached[0] == key and stat.S_ISREG(st.st_mode):
            return cached[1].copy()
        data = read_json_record(path)
        try:
            lease = Lease.from_dict(data, source=path, key=self.record_key)
            if lease.lease_id != name[:-5]:
                raise BadRecordError(f"{path}: key 'lease_id': {lease.lease_id!r} does not match the file name")
        except BadRecordError as exc:
            exc.record = data  # what GPUs it names still counts
            raise
        self._checked[name] = (key, lease.copy())
        return lease

    def holder_alive(self, lease: Lease) -> bool:
        """:func:`_holder_alive`, asked at most once a second per lease while the answer is yes (an orphan
        is then found within a second, and a waiter's failed attempt does not look at every holder)."""
        now = time.monotonic()
        if now - self._holder_seen.get(lease.lease_id, -10.0) < 1.0:
            return True
        alive = _holder_alive(lease)
        if alive:
            self._holder_seen[lease.lease_id] = now
        return alive

    def _stop_orphan(self, lease: Lease) -> None:
        """The holder of ``lease`` is dead, its child still runs (the lock is held): stop the child — SIGTERM
        now, SIGKILL once the lease's grace period has passed. The lease keeps its GPUs until the child is gone
        (the kernel then drops the lock and the next look removes the lease)."""
        mark = self.path(lease.lease_id + ".orphan")
        try:
            since = read_json_record(mark)
            since = float(since["at"]) if isinstance(since, dict) and is_json_number(since.get("at")) else None
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

    def write(
        self,
        placement: Placement,
        gpus: list[GPUInfo],
        owner: str,
        job_class: str,
        priority: int,
        preemptible: bool = False,
        min_runtime: float = 0.0,
        task_key: str = "",
        grace: float = 10.0,
        host_memory: int = 0,
        cpus: list[int] | None = None,
        work: WorkTag | None = None,
        stage: str = "",
    ) -> Lease:
        """A new lease for ``placement``, held by this process (the caller holds the allocation lock)."""
        lease = Lease(
            lease_id=uuid.uuid4().hex[:16],
            gpus=[],
            uuids=[],
            memory={},
            whole=placement.whole,
            owner=owner,
            pid=os.getpid(),
            job_class=job_class,
            priority=priority,
            preemptible=preemptible,
            min_runtime=min_runtime,
            task_key=task_key,
            pid_started=_own_started_at(),
            grace=float(grace),
            host_memory=int(host_memory),
            cpus=list(cpus or []),
            work=work.to_dict() if work is not None else {},
            stage=stage,  # type: ignore[arg-type] # one of STAGES: the callers' own constants
        )
        place_on(lease, placement, gpus)
        base = self.path(lease.lease_id)
        fd = os.open(base + ".lock", os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode)
        os.fchmod(fd, self.file_mode)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lease.fd, lease.path = fd, base + ".json"
        self.save(lease)
        return lease

    def save(self, lease: Lease) -> None:
        assert lease.path
        data = LEASE.dump_sealed(lease, self.record_key) if self.record_key is not None else lease.to_dict()
        write_json_atomic(lease.path, data, self.file_mode)

    def record_child(self, lease: Lease, pid: int) -> None:
        """Remember the GPU child's pid: its processes on the GPU are ours, not foreign."""
        lease.child_pids.append(pid)
        self.save(lease)

    def release(self, lease: Lease) -> None:
        with self.allocation_lock():
            base = self.path(lease.lease_id)
            for p in (base + ".json", base + ".lock", *(base + side for side in SIDE_FILES)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(p)
            if self.fleet_stops:  # the head node's request, acted on: gone with the lease
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.fleet_stops, lease.lease_id + ".stop"))
            self._count_release()
        if lease.fd is not None:
            with contextlib.suppress(OSError):
                os.close(lease.fd)
            lease.fd = None

    # -- stop requests (gpusched queue stop) ------------------------------------------------------------
    def request_stop(self, lease_id: str, record: dict[str, Any]) -> None:
        """Ask the holder of ``lease_id`` to stop its work for good (``record``: who, why, when)."""
        if not LEASE_FILE.match(lease_id + ".json"):
            raise GpuschedError(f"lease id {lease_id!r}: expected 16 hex digits")
        write_json_atomic(self.path(lease_id + ".stop"), record, self.file_mode)

    def stop_request(self, lease_id: str) -> Any:
        """The stop request for ``lease_id`` as stored (None when there is none; the caller checks it): in
        the lease directory, else (in a fleet) where the head node asks this host to stop work
        (:attr:`fleet_stops`, ``<fleet_dir>/stops/<host>``)."""
        for path in [self.path(lease_id + ".stop")] + (
            [os.path.join(self.fleet_stops, lease_id + ".stop")] if self.fleet_stops else []
        ):
            try:
                return read_json_record(path)
            except FileNotFoundError:
                continue
            except (OSError, BadRecordError) as exc:
                return {"_unreadable": str(exc)}
        return None

    # -- waking waiters -------------------------------------------------------------------------------
    def release_count(self) -> int:
        """How many leases have been released here (read without the allocation lock; -1 if the counter
        file is unreadable or not 20 digits, which a waiter then treats as no news)."""
        if self._releases_fd is None:  # kept open: the counter is rewritten in place, one pread per look
            try:
                self._releases_fd = open_regular(self.path(RELEASES_FILE), os.O_RDONLY)
            except FileNotFoundError:
                return 0
            except (OSError, GpuschedError):
                return -1
        try:
            raw = os.pread(self._releases_fd, 32, 0)
        except OSError:
            return -1
        return int(raw) if len(raw) == 20 and raw.isdigit() else -1

    def __del__(self) -> None:
        fd = getattr(self, "_releases_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _count_release(self) -> None:
        """One more release (the caller holds the allocation lock); wakes this process's waiters."""
        try:
            fd = open_regular(self.path(RELEASES_FILE), os.O_CREAT | os.O_RDWR, self.file_mode)
        except (OSError, GpuschedError):
            return  # waiters fall back to their poll interval
        try:
            raw = os.pread(fd, 32, 0)
            count = int(raw) if len(raw) == 20 and raw.isdigit() else 0
            os.pwrite(fd, b"%020d" % ((count + 1) % 10**20), 0)
        finally:
            os.close(fd)
        waker = _local_waker(self.state_dir)
        with waker:
            waker.notify_all()

    def wait_for_release(self, seen: int, timeout: float, check_interval: float = 0.02) -> bool:
        """Sleep until a lease is released after the count ``seen`` (:meth:`release_count`, read before the
        attempt that failed), at most ``timeout`` seconds. A release in this process wakes the waiter at
        once; one in another process within ``check_interval`` (a 20-byte read, no lock)."""
        deadline = time.monotonic() + timeout
        waker = _local_waker(self.state_dir)
        with waker:
            while True:
                if self.release_count() != seen:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                waker.wait(min(check_interval, left))

    @staticmethod
    def views(gpus: list[GPUInfo], leases: list[Lease]) -> list[LeaseView]:
        kin = gpu_process_kin(gpus)  # empty unless the GPUs list processes
        return [lease.view(kin) for lease in leases]


def _unreadable_lease(lease_id: str, data: Any, gpus: list[GPUInfo], why: str) -> Lease:
    """A stand-in for a live holder's lease file that cannot be read: it holds whole the GPUs the file names,
    or every GPU when it names none we know, so nothing is handed out twice."""
    known = {g.index: g for g in gpus}
    named = data.get("gpus") if isinstance(data, dict) else None
    held = sorted(set(named) & set(known)) if _int_list(named) and set(named) & set(known) else sorted(known)
    return Lease(
        lease_id=lease_id,
        gpus=held,
        uuids=[known[i].uuid for i in held],
        memory={i: known[i].memory_total for i in held},
        whole=True,
        owner=f"? (unreadable lease file: {why})",
        pid=0,
        unreadable=why,
    )
