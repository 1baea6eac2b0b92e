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

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.stops import StopOrder, StopOrders, StopRequest, write_slurm_stop_mark
from airflow_provider_gpusched.core.work_tag import WorkTag

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.slurm.client import SlurmClient

# The Slurm errors are imported where Slurm is used: listing local leases must not pay for the Slurm package,
# which brings asyncio.

#: the states `gpusched queue list` gives local leases (Slurm jobs have Slurm's own states)
LOCAL_STATES = ("running", "starting", "yielding", "stopping", "orphaned")


def known_states() -> set[str]:
    """Every state a listed entry can have, lower case: the local ones and Slurm's."""
    from airflow_provider_gpusched.core.slurm.states import PENDING_STATES, RUNNING_STATES, TERMINAL_STATES

    return {s.lower() for s in (*LOCAL_STATES, *PENDING_STATES, *RUNNING_STATES, *TERMINAL_STATES)}


# -- what runs -------------------------------------------------------------------------------------------
@dataclass
class QueueEntry:
    """One piece of running (or queued, on Slurm) work this provider launched."""

    backend: str  # "slurm" or "local"
    id: str  # Slurm job id (ARRAY_TASK for array tasks) or lease id
    tag: WorkTag
    state: str  # Slurm's state, or running / starting / yielding / stopping / orphaned
    elapsed: float | None = None
    requeues: int | None = None
    where: str = ""  # GPUs (local) or partition and nodes (Slurm)
    host: str = ""  # in a fleet: the GPU host that published the lease ('' for this host's own)
    reason: str = ""  # Slurm's pending reason, a yield or stop request
    pid: int | None = None
    output: str = ""  # a Slurm job's output file
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


def local_entries(manager: LeaseManager) -> list[QueueEntry]:
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
        entries.append(
            QueueEntry(
                backend="local",
                id=lease.lease_id,
                tag=tag,
                state=state,
                elapsed=round(now - lease.created, 1),
                where="GPU " + ",".join(map(str, lease.gpus)),
                reason=reason,
                pid=lease.child_pids[-1] if lease.child_pids else lease.pid,
                job_name=lease.owner,
            )
        )
    return entries


def slurm_where(job: dict[str, Any]) -> str:
    """``batch on n3``; a multi-node job ``batch on n[1-2] (2 nodes)``, or ``batch (2 nodes)`` while it waits."""
    count = job.get("node_count")
    several = f" ({count} nodes)" if isinstance(count, int) and count > 1 else ""
    return str(job["partition"]) + (f" on {job['nodes']}" if job["nodes"] else "") + several


def slurm_entries(client: SlurmClient) -> list[QueueEntry]:
    """This user's unfinished Slurm jobs that the provider submitted (one ``squeue`` call)."""
    entries = []
    for job in client.provider_jobs():
        entries.append(
            QueueEntry(
                backend="slurm",
                id=job["job_id"],
                tag=WorkTag.from_comment(job["fields"]),
                state=job["state"],
                elapsed=job["elapsed"],
                requeues=job["restarts"],
                where=slurm_where(job),
                reason="" if job["reason"] in ("None", "") else job["reason"],
                output=job["output"],
                job_name=job["name"],
            )
        )
    return entries


def list_work(
    *, client: SlurmClient | None = None, manager: LeaseManager | None = None, orders: StopOrders | None = None
) -> QueueListing:
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


# -- stopping ---------------------------------------------------------------------------------------------
@dataclass
class StopOutcome:
    entry: QueueEntry
    action: str  # "cancelled", "stopped", "forced", "still running", "would stop", "failed"
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.entry.backend,
            "id": self.entry.id,
            "task": self.entry.tag.task,
            "run_id": self.entry.tag.run_id,
            "action": self.action,
            "detail": self.detail,
        }


def stop_work(
    entries: Iterable[QueueEntry],
    request: StopRequest,
    *,
    client: SlurmClient | None = None,
    manager: LeaseManager | None = None,
    dry_run: bool = False,
    wait: float = 30.0,
) -> list[StopOutcome]:
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
        if client is None:
            raise GpuschedError(f"{len(jobs)} Slurm job(s) to stop and no Slurm client to stop them with")
        outcomes += _cancel_jobs(jobs, request, client)
    if leases:
        if manager is None:
            raise GpuschedError(f"{len(leases)} GPU lease(s) to stop and no lease manager to stop them with")
        outcomes += _stop_leases(leases, request, manager, wait)
    return outcomes


def _cancel_jobs(jobs: list[QueueEntry], request: StopRequest, client: SlurmClient) -> list[StopOutcome]:
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


#: how long `gpusched queue stop` waits for the processes it killed to have ended before it says so
KILL_WAIT_SECONDS = 2.0


def _stop_leases(
    leases: list[QueueEntry], request: StopRequest, manager: LeaseManager, wait: float
) -> list[StopOutcome]:
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
                outcomes[entry.id] = StopOutcome(
                    entry,
                    "stopped",
                    f"its holder stopped GPU process(es) {','.join(map(str, lease.child_pids)) or '-'}",
                )
                asked.remove((entry, lease))
        if asked:
            time.sleep(0.2)
    for entry, lease in asked:  # the holder did not act (hung, or not a provider operator): kill the child
        killed = kill_family(lease.child_pids, wait=KILL_WAIT_SECONDS)
        outcomes[entry.id] = StopOutcome(
            entry,
            "forced" if killed else "still running",
            f"its holder (pid {lease.pid}) did not stop it within {grace + wait:.0f}s; "
            + (f"killed {killed} process(es)" if killed else "no child process to kill"),
        )
    return [outcomes[e.id] for e in leases]
