"""The provider's work queue on one host: what runs (Slurm jobs it submitted, this host's GPU leases), and
stopping it by DAG run, task, sweep, class or id.

* :func:`list_work` — each backend's work (core/backends.py): one ``squeue`` call for this user's jobs tagged by
  the provider (their comment), the live leases in the host's lease directory; each as a :class:`QueueEntry`
  carrying its :class:`~airflow_provider_gpusched.core.work_tag.WorkTag`.
* :class:`Selector` — which work a ``list`` shows or a ``stop`` stops.
* :func:`stop_work` — cancel the selected Slurm jobs (a :class:`StopRequest` mark next to each job's output
  first, so its operator fails the task saying who stopped it instead of reporting a bare CANCELLED) and ask
  the holders of the selected leases to stop their child (the same SIGTERM, grace period, SIGKILL path as a
  killed task); with a *stop order* (:class:`StopOrders`) tasks of the same selection that have not started
  yet fail at once instead of starting, for ``hold`` seconds.

No Airflow import: the CLI (``gpusched queue``) and the operators use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.backends import QueueEntry, StopOutcome, backends, by_backend, get_backend
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.stops import StopOrder, StopOrders, StopRequest

__all__ = [
    "QueueEntry",  # the records each backend answers in: defined in core/backends.py, imported from here too
    "QueueListing",
    "StopOrder",
    "StopOrders",
    "StopOutcome",
    "StopRequest",
    "known_states",
    "list_work",
    "stop_work",
]


def known_states() -> set[str]:
    """Every state a listed entry can have, lower case: each backend's."""
    return {s.lower() for backend in backends() for s in backend.states()}


# -- what runs -------------------------------------------------------------------------------------------
@dataclass
class QueueListing:
    entries: list[QueueEntry] = field(default_factory=list)
    #: what could not be looked at, said as it is (Slurm unreachable, unreadable lease files)
    problems: list[str] = field(default_factory=list)
    orders: list[StopOrder] = field(default_factory=list)


def list_work(*, orders: StopOrders | None = None, **handles: Any) -> QueueListing:
    """Everything the provider runs that the backends' handles can see (``client=`` a Slurm client,
    ``manager=`` this host's lease manager: each backend's ``handle`` keyword); a part that cannot be looked at
    is a problem in the listing, never an exception."""
    listing = QueueListing()
    _check_handles(handles)
    for backend in backends():
        handle = handles.get(backend.handle)
        if handle is not None:
            entries, problems = backend.queue_entries(handle)
            listing.entries += entries
            listing.problems += problems
    if orders is not None:
        listing.orders = orders.active()
        listing.problems += orders.problems
    return listing


def _check_handles(handles: dict[str, Any]) -> None:
    known = {b.handle for b in backends()}
    for name in handles:
        if name not in known:
            raise TypeError(f"unexpected keyword {name!r}: a backend's handle is one of {sorted(known)}")


# -- stopping ---------------------------------------------------------------------------------------------
def stop_work(
    entries: Iterable[QueueEntry],
    request: StopRequest,
    *,
    dry_run: bool = False,
    wait: float = 30.0,
    **handles: Any,
) -> list[StopOutcome]:
    """Stop each entry through its backend and the handle given for it (``client=``, ``manager=``): Slurm jobs
    are marked and cancelled (one ``scancel`` for all); leases get a stop request their holder acts on within a
    second (SIGTERM to the child's process group, the lease's grace period, SIGKILL), waiting up to ``wait``
    seconds past the longest grace period; a child still alive then is killed here (``forced``)."""
    entries = list(entries)
    _check_handles(handles)
    if dry_run:
        return [StopOutcome(e, "would stop", e.describe()) for e in entries]
    outcomes: list[StopOutcome] = []
    for name, group in by_backend(entries, lambda e: e.backend).items():
        backend = get_backend(name, "queue entry backend")
        handle = handles.get(backend.handle)
        if handle is None:
            raise GpuschedError(
                f"{len(group)} {backend.work_noun}(s) to stop and no {backend.handle_noun} to stop them with"
            )
        outcomes += backend.stop(group, request, handle, wait)
    return outcomes
