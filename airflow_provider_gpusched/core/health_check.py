"""The record a health check answers in (:class:`Check`), what ``gpusched queue health`` hands a backend's checks
(:class:`HealthContext`), and the stop-order check the wings and the fleet share: a module of its own, below the
backends, so that core/backends.py and each wing's checks name them without importing core/health.py, which is
built on the backends."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError

OK, FAIL, WARN, SKIP = "ok", "FAIL", "warn", "skip"


@dataclass
class Check:
    name: str
    status: str  # ok, FAIL, warn, skip
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"[{self.status:>4}] {self.name}: {self.detail}"


@dataclass
class HealthContext:
    """What ``gpusched queue health`` hands a backend's checks (``Backend.health_checks``): its handle, if the
    command made one, and the command's options."""

    #: the handle the command reaches the backend through (a client of its scheduler), None when there is none
    handle: Any = None
    #: how the handle reaches the backend ("connection 'x' (ssh to login1)"), said in the checks
    reached: str = ""
    #: why there is no handle, said as a skip
    unavailable: str = ""
    #: what a job class means through the handle's connection (its extras on top of the mapping); None: the
    #: mapping alone
    class_settings: Callable[[str], Mapping[str, Any]] | None = None
    #: the job-class mapping in force (``JobClassMapping``)
    job_classes: Any = None
    simulate: str | None = None  # the simulated GPUs (--simulate)
    state_dir: str | None = None  # the lease directory (--state-dir)
    shared: bool | None = None  # a shared group lease directory
    fleet_dir: str = ""  # the fleet's folder, "" outside a fleet


def check_stop_orders(state_dir: str) -> Check:
    from airflow_provider_gpusched.core.stops import StopOrders

    try:
        orders = StopOrders(state_dir)
        active = orders.active()
    except (OSError, GpuschedError) as exc:
        return Check("stop orders", FAIL, str(exc))
    if not active:
        return Check(
            "stop orders", OK, "none in force" + (f" ({'; '.join(orders.problems)})" if orders.problems else "")
        )
    return Check(
        "stop orders",
        WARN,
        f"{len(active)} in force: matching tasks fail at start: "
        + "; ".join(order.describe() for order in active)[:400],
    )
