"""The provider's work queue on one host: what runs (Slurm jobs it submitted, this host's GPU leases), and
stopping it by DAG run, task, sweep, class or id.

* :func:`list_work` — one ``squeue`` call for this user's jobs tagged by the provider (their comment), plus
  the live leases in the host's lease directory; each as a :class:`QueueEntry` carrying its
  :class:`~airflow_provider_gpusched.core.work_tag.WorkTag`.
* :class:`Selector` — which work a ``list`` shows or a ``stop`` stops.
* :func:`stop_work` — cancel the selected Slurm jobs (a :class:`StopRequest` mark next to each job's output
  first, so its operator fails the task saying who stopped it instead of reporting a bare CANCELLED) and ask
  the holders of the selected leases to stop their child (the same SIGTERM, grace period, SIGKILL path as a
  killed task); with a *stop order* (:class:`StopOrders`) tasks of the same selection that have not started
  yet fail at once instead of starting, for ``hold`` seconds.

No Airflow import: the CLI (``gpusched queue``) and the operators use it.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import socket
import stat
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from airflow_provider_gpusched.core.checks import is_json_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    UnsafePathError,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.work_tag import MAX_FIELD, WorkTag

# The Slurm errors are imported where Slurm is used: the local-GPU path (leases read stop requests through this
# module) must not pay for the Slurm package, which brings asyncio.

#: a Slurm job's stop mark, next to its output file: ``gpusched-stop-<job id>.json``
SLURM_STOP_MARK = "gpusched-stop-{job_id}.json"
ORDER_PREFIX = "stop-order-"
DEFAULT_HOLD = 600.0


#: the states `gpusched queue list` gives local leases (Slurm jobs have Slurm's own states)
LOCAL_STATES = ("running", "starting", "yielding", "stopping", "orphaned")


def known_states() -> set[str]:
    """Every state a listed entry can have, lower case: the local ones and Slurm's."""
    from airflow_provider_gpusched.core.slurm.states import PENDING_STATES, RUNNING_STATES, TERMINAL_STATES

    return {s.lower() for s in (*LOCAL_STATES, *PENDING_STATES, *RUNNING_STATES, *TERMINAL_STATES)}


class WorkHalted(GpuschedError):
    """Work stopped for good by ``gpusched queue stop`` (or not started under a stop order): no retry helps."""


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.geteuid()}"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class StopRequest:
    """Who stopped some work, why and when: what the stopped task's failure message says."""

    by: str
    reason: str
    at: float

    @classmethod
    def now(cls, reason: str = "") -> StopRequest:
        return cls(by=_who(), reason=(reason or "no reason given")[:500], at=time.time())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: Any, source: str) -> StopRequest:
        if not isinstance(data, dict):
            raise BadRecordError(f"{source}: expected an object, got {type(data).__name__}")
        for key in ("by", "reason"):
            if not isinstance(data.get(key), str) or len(data[key]) > 1000:
                raise BadRecordError(f"{source}: key {key!r}: expected a string, got {data.get(key)!r:.80}")
        if not is_json_number(data.get("at")):
            raise BadRecordError(f"{source}: key 'at': expected a time stamp, got {data.get('at')!r:.80}")
        return cls(by=data["by"], reason=data["reason"], at=float(data["at"]))

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at))
        return f"stopped by `gpusched queue stop` ({self.by}, {when}): {self.reason}"


# -- Slurm stop marks -----------------------------------------------------------------------------------
def slurm_stop_mark(output_path: str, job_id: str) -> str:
    """Where the stop mark of Slurm job ``job_id`` (its array's id for an array job) goes: the folder of
    its output file, which the task's operator reads the output tail from."""
    return os.path.join(os.path.dirname(output_path), SLURM_STOP_MARK.format(job_id=job_id.split("_")[0]))


def write_slurm_stop_mark(output_path: str, job_id: str, request: StopRequest) -> str:
    """Write the mark; refused (:class:`UnsafePathError`) unless the folder is this user's own and nobody
    else may write in it."""
    path = slurm_stop_mark(output_path, job_id)
    folder = os.path.dirname(path)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafePathError(f"{folder}: not a directory of this user's that only it may write to; no stop "
                              f"mark written there")
    write_json_atomic(path, request.to_dict(), 0o600)
    return path


def read_slurm_stop_mark(output_path: str, job_id: str) -> StopRequest | None:
    """The stop mark of a job that ended, or None (no mark, or one that cannot be trusted: a link, not ours,
    malformed)."""
    if not output_path or not job_id:
        return None
    path = slurm_stop_mark(output_path, job_id)
    try:
        if os.lstat(path).st_uid != os.geteuid():
            return None
        return StopRequest.from_record(read_json_record(path), path)
    except (OSError, GpuschedError):
        return None


# -- what runs -------------------------------------------------------------------------------------------
@dataclass
class QueueEntry:
    """One piece of running (or queued, on Slurm) work this provider launched."""

    backend: str             # "slurm" or "local"
    id: str                  # Slurm job id (ARRAY_TASK for array tasks) or lease id
    tag: WorkTag
    state: str               # Slurm's state, or running / starting / yielding / stopping / orphaned
    elapsed: float | None = None
    requeues: int | None = None
    where: str = ""          # GPUs (local) or partition and nodes (Slurm)
    host: str = ""           # in a fleet: the GPU host that published the lease ('' for this host's own)
    reason: str = ""         # Slurm's pending reason, a yield or stop request
    pid: int | None = None
    output: str = ""         # a Slurm job's output file
    job_name: str = ""

    @property
    def job_class(self) -> str:
        return self.tag.job_class

    @property
    def stop_id(self) -> str:
        """What to cancel or stop: the array's job id for an array task (scancel cancels all its tasks)."""
        return self.id.split("_")[0] if self.backend == "slurm" else self.id

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tag"] = self.tag.to_dict()
        return data

    def describe(self) -> str:
        what = self.tag.task or self.job_name or "(not launched by an Airflow task)"
        run = f" run {self.tag.run_id}" if self.tag.run_id else ""
        return f"{self.backend} {self.id} {self.state}: {what}{run}"


@dataclass
class QueueListing:
    entries: list[QueueEntry] = field(default_factory=list)
    #: what could not be looked at, said as it is (Slurm unreachable, unreadable lease files)
    problems: list[str] = field(default_factory=list)
    orders: list[StopOrder] = field(default_factory=list)


def local_entries(manager: Any) -> list[QueueEntry]:
    """The live leases of a :class:`~airflow_provider_gpusched.core.gpu.leases.LeaseManager`."""
    now = time.time()
    entries = []
    for lease in manager.leases():
        tag = lease.tag
        stop = manager.store.stop_request(lease.lease_id)
        asked = manager.yields.request_for(lease.lease_id)
        if lease.unreadable:
            state, reason = "unreadable", lease.unreadable
        elif lease.orphaned_at:
            state, reason = "orphaned", "its worker died; its child is being stopped"
        elif stop is not None:
            state, reason = "stopping", str(stop.get("reason", ""))[:200] if isinstance(stop, dict) else ""
        elif asked:
            state, reason = "yielding", f"preempted for {asked.get('by', '?')}"
        else:
            state, reason = ("running" if lease.child_pids else "starting"), ""
        entries.append(QueueEntry(
            backend="local", id=lease.lease_id, tag=tag, state=state, elapsed=round(now - lease.created, 1),
            where="GPU " + ",".join(map(str, lease.gpus)), reason=reason, pid=lease.child_pids[-1]
            if lease.child_pids else lease.pid, job_name=lease.owner))
    return entries


def slurm_where(job: dict) -> str:
    """``batch on n3``; a multi-node job ``batch on n[1-2] (2 nodes)``, or ``batch (2 nodes)`` while it waits."""
    count = job.get("node_count")
    several = f" ({count} nodes)" if isinstance(count, int) and count > 1 else ""
    return job["partition"] + (f" on {job['nodes']}" if job["nodes"] else "") + several


def slurm_entries(client: Any) -> list[QueueEntry]:
    """This user's unfinished Slurm jobs that the provider submitted (one ``squeue`` call)."""
    entries = []
    for job in client.provider_jobs():
        entries.append(QueueEntry(
            backend="slurm", id=job["job_id"], tag=WorkTag.from_comment(job["fields"]), state=job["state"],
            elapsed=job["elapsed"], requeues=job["restarts"],
            where=slurm_where(job),
            reason="" if job["reason"] in ("None", "") else job["reason"], output=job["output"],
            job_name=job["name"]))
    return entries


def list_work(*, client: Any = None, manager: Any = None, orders: StopOrders | None = None) -> QueueListing:
    """Everything the provider runs that ``client`` (Slurm) and ``manager`` (this host's leases) can see; a
    part that cannot be looked at is a problem in the listing, never an exception."""
    from airflow_provider_gpusched.core.slurm.runner import SlurmCommandError, SlurmUnavailableError

    listing = QueueListing()
    if client is not None:
        try:
            listing.entries += slurm_entries(client)
        except (SlurmUnavailableError, SlurmCommandError, OSError) as exc:
            listing.problems.append(f"Slurm: {exc}")
    if manager is not None:
        listing.entries += local_entries(manager)
        listing.problems += [f"unreadable lease file {path}: {why}" for path, why in manager.unreadable]
    if orders is not None:
        listing.orders = orders.active()
        listing.problems += orders.problems
    return listing


# -- choosing ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Selector:
    """Which work: every field given must match (``ids``: any of them, a Slurm job id or a lease id)."""

    dag_id: str = ""
    run_id: str = ""
    task_id: str = ""
    sweep: str = ""
    job_class: str = ""
    states: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("dag_id", "run_id", "task_id", "sweep", "job_class"):
            if len(getattr(self, name)) > MAX_FIELD:
                raise GpuschedError(f"--{name.replace('_id', '').replace('_', '-')}: longer than {MAX_FIELD} "
                                    f"characters")

    @property
    def empty(self) -> bool:
        return not any((self.dag_id, self.run_id, self.task_id, self.sweep, self.job_class, self.states, self.ids))

    @property
    def by_tag(self) -> dict[str, str]:
        """The fields a stop order keeps (those that also name work not started yet)."""
        return {k: v for k, v in (("dag_id", self.dag_id), ("run_id", self.run_id), ("task_id", self.task_id),
                                  ("sweep", self.sweep), ("job_class", self.job_class)) if v}

    def matches_tag(self, tag: WorkTag) -> bool:
        return all(getattr(tag, name) == value for name, value in self.by_tag.items())

    def matches(self, entry: QueueEntry) -> bool:
        if self.ids and entry.id not in self.ids and entry.stop_id not in self.ids:
            return False
        if self.states and entry.state.lower() not in {s.lower() for s in self.states}:
            return False
        return self.matches_tag(entry.tag)

    def describe(self) -> str:
        parts = [f"{k.replace('_id', '')}={v}" for k, v in self.by_tag.items()]
        if self.ids:
            parts.append("ids=" + ",".join(self.ids))
        if self.states:
            parts.append("state=" + ",".join(self.states))
        return " ".join(parts) or "everything"


# -- stop orders: work of a selection that has not started yet ------------------------------------------
@dataclass(frozen=True)
class StopOrder:
    selector: dict[str, str]
    request: StopRequest
    until: float

    def matches(self, tag: WorkTag) -> bool:
        return Selector(**self.selector).matches_tag(tag)

    @property
    def selection(self) -> str:
        return Selector(**self.selector).describe()

    def seconds_left(self) -> float:
        return max(0.0, self.until - time.time())

    def describe(self) -> str:
        return f"{self.selection}: {self.request.describe()} (for {self.seconds_left():.0f}s more)"

    def refusal(self) -> str:
        """Why a task it covers does not start (its failure message)."""
        return (f"not started: {self.request.describe()} (a stop order for {self.selection}, in force for "
                f"{self.seconds_left():.0f}s more)")


class StopOrders:
    """Stop orders in a host's lease directory (``stop-order-<hash>.json``): while one is in force, a task
    it matches fails at once instead of taking GPUs or submitting a Slurm job."""

    def __init__(self, state_dir: str, file_mode: int = 0o600, *, also: Iterable[str] = ()) -> None:
        """``also``: folders whose orders count too but that are not placed or lifted here (on a fleet host,
        the fleet's ``<fleet_dir>/stop-orders``, which the head node's ``gpusched queue stop`` writes)."""
        self.state_dir = state_dir
        self.file_mode = file_mode
        self.also = [d for d in also if d and d != state_dir]
        self.problems: list[str] = []

    def _path(self, selector: dict[str, str]) -> str:
        digest = hashlib.sha256(repr(sorted(selector.items())).encode()).hexdigest()[:16]
        return os.path.join(self.state_dir, f"{ORDER_PREFIX}{digest}.json")

    def place(self, selector: Selector, request: StopRequest, hold: float) -> str:
        if not selector.by_tag:
            raise GpuschedError("a stop order needs --dag, --run, --task, --sweep or --class (job ids name only "
                                "work that already runs)")
        path = self._path(selector.by_tag)
        write_json_atomic(path, {"selector": selector.by_tag, **request.to_dict(), "until": request.at + hold},
                          self.file_mode)
        return path

    def lift(self, selector: Selector | None = None) -> int:
        """Remove the orders that name every field ``selector`` gives, with the same values (all orders when
        None: ``--run R`` lifts an order for ``--dag D --run R`` too); how many were removed."""
        removed = 0
        wanted = selector.by_tag.items() if selector is not None else ()
        for order_path, order in self._read(own_only=True):
            if selector is None or (order is not None and all(order.selector.get(k) == v for k, v in wanted)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(order_path)
                    removed += 1
        return removed

    def _read(self, *, own_only: bool = False) -> list[tuple[str, StopOrder | None]]:
        found = []
        self.problems = []
        paths = []
        for folder in [self.state_dir] + ([] if own_only else self.also):
            try:
                paths += [os.path.join(folder, name) for name in sorted(os.listdir(folder))
                          if name.startswith(ORDER_PREFIX) and name.endswith(".json")]
            except FileNotFoundError:
                continue
        for path in paths:
            try:
                data = read_json_record(path)
                request = StopRequest.from_record(data, path)
                selector = data.get("selector")
                if not isinstance(selector, dict) or not selector or not all(
                        k in Selector.__dataclass_fields__ and isinstance(v, str) and len(v) <= MAX_FIELD
                        for k, v in selector.items()) or "ids" in selector or "states" in selector:
                    raise BadRecordError(f"{path}: key 'selector': expected an object of dag_id, run_id, task_id, "
                                         f"sweep, job_class")
                if not is_json_number(data.get("until")):
                    raise BadRecordError(f"{path}: key 'until': expected a time stamp")
                found.append((path, StopOrder(dict(selector), request, float(data["until"]))))
            except FileNotFoundError:
                continue
            except (OSError, GpuschedError) as exc:
                self.problems.append(f"ignored stop order: {exc}")
                found.append((path, None))
        return found

    def active(self) -> list[StopOrder]:
        """Orders in force now; expired ones are removed."""
        orders = []
        for path, order in self._read():
            if order is None:
                continue
            if order.until < time.time():
                if os.path.dirname(path) == self.state_dir:  # another folder's expired orders are its owner's
                    with contextlib.suppress(OSError):
                        os.remove(path)
                continue
            orders.append(order)
        return orders

    def order_for(self, tag: WorkTag) -> StopOrder | None:
        return next((order for order in self.active() if order.matches(tag)), None)


# -- stopping ---------------------------------------------------------------------------------------------
@dataclass
class StopOutcome:
    entry: QueueEntry
    action: str        # "cancelled", "stopped", "forced", "still running", "would stop", "failed"
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.entry.backend, "id": self.entry.id, "task": self.entry.tag.task,
                "run_id": self.entry.tag.run_id, "action": self.action, "detail": self.detail}


def stop_work(entries: Iterable[QueueEntry], request: StopRequest, *, client: Any = None, manager: Any = None,
              dry_run: bool = False, wait: float = 30.0) -> list[StopOutcome]:
    """Stop each entry: Slurm jobs are marked and cancelled (one ``scancel`` for all); leases get a stop
    request their holder acts on within a second (SIGTERM to the child's process group, the lease's grace
    period, SIGKILL). Waits up to ``wait`` seconds past the longest grace period for the leases to go; a
    child still alive then is killed here (``forced``)."""
    entries = list(entries)
    outcomes: list[StopOutcome] = []
    jobs = [e for e in entries if e.backend == "slurm"]
    leases = [e for e in entries if e.backend == "local"]
    if dry_run:
        return [StopOutcome(e, "would stop", e.describe()) for e in entries]
    if jobs:
        outcomes += _cancel_jobs(jobs, request, client)
    if leases:
        outcomes += _stop_leases(leases, request, manager, wait)
    return outcomes


def _cancel_jobs(jobs: list[QueueEntry], request: StopRequest, client: Any) -> list[StopOutcome]:
    from airflow_provider_gpusched.core.slurm.runner import SlurmCommandError, SlurmUnavailableError

    notes: dict[str, str] = {}
    for job in jobs:
        if not job.output or job.stop_id in notes:
            continue
        try:
            write_slurm_stop_mark(job.output, job.stop_id, request)
            notes[job.stop_id] = ""
        except (OSError, GpuschedError) as exc:
            notes[job.stop_id] = f"; no stop mark ({exc}): its task will report a plain CANCELLED"
    ids = sorted({job.stop_id for job in jobs}, key=lambda j: int(j) if j.isdigit() else 0)
    try:
        client.cancel(ids)
    except (SlurmUnavailableError, SlurmCommandError) as exc:
        return [StopOutcome(job, "failed", f"scancel: {exc}") for job in jobs]
    return [StopOutcome(job, "cancelled", "scancel" + notes.get(job.stop_id, "")) for job in jobs]


def _stop_leases(leases: list[QueueEntry], request: StopRequest, manager: Any, wait: float) -> list[StopOutcome]:
    from airflow_provider_gpusched.core.gpu.lease_store import kill_family

    by_id = {lease.lease_id: lease for lease in manager.leases()}
    outcomes: dict[str, StopOutcome] = {}
    asked = []
    for entry in leases:
        lease = by_id.get(entry.id)
        if lease is None:
            outcomes[entry.id] = StopOutcome(entry, "stopped", "it had already ended")
            continue
        manager.store.request_stop(entry.id, request.to_dict())
        asked.append((entry, lease))
    grace = max((lease.grace for _, lease in asked), default=0.0)
    deadline = time.monotonic() + grace + wait
    while asked and time.monotonic() < deadline:
        live = {lease.lease_id for lease in manager.leases()}
        for entry, lease in list(asked):
            if entry.id not in live:
                outcomes[entry.id] = StopOutcome(entry, "stopped", f"its holder stopped GPU process(es) "
                                                                   f"{','.join(map(str, lease.child_pids)) or '-'}")
                asked.remove((entry, lease))
        if asked:
            time.sleep(0.2)
    for entry, lease in asked:  # the holder did not act (hung, or not a provider operator): kill the child
        killed = kill_family(lease.child_pids)
        outcomes[entry.id] = StopOutcome(entry, "forced" if killed else "still running",
                                         f"its holder (pid {lease.pid}) did not stop it within {grace + wait:.0f}s; "
                                         + (f"killed {killed} process(es)" if killed else "no child process to kill"))
    return [outcomes[e.id] for e in leases]
