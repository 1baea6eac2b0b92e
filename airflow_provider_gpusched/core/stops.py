"""Stop requests, orders and marks: who stopped which work and why, read by whatever would start or run it.

``gpusched queue stop`` (core/queue.py) finds running work and stops it; the records here outlive that: a
:class:`StopRequest` says who and why, a :class:`StopOrder` (in a host's lease directory) keeps work of a
selection from starting while it is in force, and a backend may leave a mark that says its job was cancelled on
purpose (Slurm's: core/slurm/stop_marks.py). The GPU leases, the batch runner and the Slurm operator read them;
this module imports nothing from ``core/gpu`` or ``core/slurm``, so those can."""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from airflow_provider_gpusched.core.checks import is_json_number
from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.work_tag import MAX_FIELD, WorkTag

ORDER_PREFIX = "stop-order-"
DEFAULT_HOLD = 600.0


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


class SelectableWork(Protocol):
    """What a selector looks at in a listed piece of work (core/queue.py's QueueEntry)."""

    id: str
    state: str
    tag: WorkTag

    @property
    def stop_id(self) -> str: ...


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
                raise GpuschedError(
                    f"--{name.replace('_id', '').replace('_', '-')}: longer than {MAX_FIELD} characters"
                )

    @property
    def empty(self) -> bool:
        return not any((self.dag_id, self.run_id, self.task_id, self.sweep, self.job_class, self.states, self.ids))

    @property
    def by_tag(self) -> dict[str, str]:
        """The fields a stop order keeps (those that also name work not started yet)."""
        return {
            k: v
            for k, v in (
                ("dag_id", self.dag_id),
                ("run_id", self.run_id),
                ("task_id", self.task_id),
                ("sweep", self.sweep),
                ("job_class", self.job_class),
            )
            if v
        }

    def matches_tag(self, tag: WorkTag) -> bool:
        return all(getattr(tag, name) == value for name, value in self.by_tag.items())

    def matches(self, entry: SelectableWork) -> bool:
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

    def _selector(self) -> Selector:
        """The order's selector (its record holds the tag fields only: ``Selector.by_tag``)."""
        s = self.selector
        return Selector(
            dag_id=s.get("dag_id", ""),
            run_id=s.get("run_id", ""),
            task_id=s.get("task_id", ""),
            sweep=s.get("sweep", ""),
            job_class=s.get("job_class", ""),
        )

    def matches(self, tag: WorkTag) -> bool:
        return self._selector().matches_tag(tag)

    @property
    def selection(self) -> str:
        return self._selector().describe()

    def seconds_left(self) -> float:
        return max(0.0, self.until - time.time())

    def describe(self) -> str:
        return f"{self.selection}: {self.request.describe()} (for {self.seconds_left():.0f}s more)"

    def refusal(self) -> str:
        """Why a task it covers does not start (its failure message)."""
        return (
            f"not started: {self.request.describe()} (a stop order for {self.selection}, in force for "
            f"{self.seconds_left():.0f}s more)"
        )


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
            raise GpuschedError(
                "a stop order needs --dag, --run, --task, --sweep or --class (job ids name only work that already runs)"
            )
        path = self._path(selector.by_tag)
        write_json_atomic(
            path, {"selector": selector.by_tag, **request.to_dict(), "until": request.at + hold}, self.file_mode
        )
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
        found: list[tuple[str, StopOrder | None]] = []
        self.problems = []
        paths = []
        for folder in [self.state_dir] + ([] if own_only else self.also):
            try:
                paths += [
                    os.path.join(folder, name)
                    for name in sorted(os.listdir(folder))
                    if name.startswith(ORDER_PREFIX) and name.endswith(".json")
                ]
            except FileNotFoundError:
                continue
        for path in paths:
            try:
                data = read_json_record(path)
                request = StopRequest.from_record(data, path)
                selector = data.get("selector")
                if (
                    not isinstance(selector, dict)
                    or not selector
                    or not all(
                        k in Selector.__dataclass_fields__ and isinstance(v, str) and len(v) <= MAX_FIELD
                        for k, v in selector.items()
                    )
                    or "ids" in selector
                    or "states" in selector
                ):
                    raise BadRecordError(
                        f"{path}: key 'selector': expected an object of dag_id, run_id, task_id, sweep, job_class"
                    )
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


# the Slurm stop marks moved into the Slurm wing; the old names still import, with a warning
__getattr__ = moved_names(
    __name__,
    {
        name: f"airflow_provider_gpusched.core.slurm.stop_marks:{name}"
        for name in ("SLURM_STOP_MARK", "slurm_stop_mark", "write_slurm_stop_mark", "read_slurm_stop_mark")
    },
)
