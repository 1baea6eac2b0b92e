"""What every launching operator does for ``gpusched queue``: tag its work with its task instance, and refuse
to start work that a stop order (``gpusched queue stop``) covers."""

from __future__ import annotations

import os

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.fleet import orders_dir
from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
from airflow_provider_gpusched.core.stops import StopOrders
from airflow_provider_gpusched.core.work_tag import WorkTag


class WorkStopped(AirflowFailException):
    """The task's work was stopped for good by ``gpusched queue stop`` (or not started under a stop order): no
    retry. A sweep's trials it had started are then marked ``stopped``, those it had not keep their records."""

    #: the state a sweep trial whose task raised this ends in (task_groups/trial_operators.py)
    trial_end = "stopped"


def work_tag(context, job_class: str, *, sweep: str = "", trial: str = "", group: str = "") -> WorkTag:
    return WorkTag.of_task(context["ti"], sweep=sweep, trial=trial, job_class=job_class, group=group)


def refuse_if_stopped(task_id: str, tag: WorkTag, state_dir: str | None = None) -> None:
    """Fail the task (no retry) when a stop order in this host's lease directory, or in a fleet the fleet's
    (``gpusched queue stop`` on the head node), covers ``tag``. A directory that does not exist yet holds no
    orders (it is not created here)."""
    state_dir = state_dir or settings.gpu_state_dir() or default_state_dir()
    fleet_dir = settings.fleet_dir()
    also = [orders_dir(fleet_dir)] if fleet_dir else []  # the head node's orders for the whole fleet
    if not os.path.isdir(state_dir) and not any(os.path.isdir(d) for d in also):
        return
    order = StopOrders(state_dir, also=also).order_for(tag)
    if order is not None:
        raise WorkStopped(f"{task_id}: {order.refusal()}")
