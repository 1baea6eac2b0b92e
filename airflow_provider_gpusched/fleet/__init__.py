"""Several GPU hosts as one pool, on Airflow's EdgeExecutor (docs/fleet.md): the Airflow side of core/fleet.py.

* :func:`publish_this_host` — a GPU host writes its record (called by its Edge worker's heartbeat through
  :func:`edge_worker_sysinfo`, and by our tasks when they take or give back GPUs);
* :func:`fleet_queue` — the queue a local GPU task goes to when its author named none;
* :func:`read_this_fleet` — the head node's view (board, CLI, triggers).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core import fleet
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.host_name import this_host

log = logging.getLogger(__name__)


def enabled() -> bool:
    return bool(settings.fleet_dir())


def host_name() -> str:
    """``[core] hostname_callable`` for a GPU host whose name is set by ``$GPUSCHED_HOST_NAME`` (containers on the
    machine's network all have its name): Airflow's task instances then say the host their record says."""
    return this_host()


def worker_host(ti) -> str:
    """The host a task instance runs on as Airflow names it (``[core] hostname_callable``), as the UI shows it; in a
    fleet, the name its host record has (the board and the timeline put the two on one row)."""
    if enabled():
        return this_host()
    return getattr(ti, "hostname", None) or socket.gethostname()


def read_this_fleet() -> fleet.FleetView | None:
    """The fleet's host records, or None when ``[gpusched] fleet_dir`` is not set (one host)."""
    folder = settings.fleet_dir()
    return fleet.read_fleet(folder) if folder else None


def publish_this_host(manager=None) -> fleet.HostRecord | None:
    """Publish this host's GPUs and leases to the fleet directory (nothing when it is not set)."""
    folder = settings.fleet_dir()
    if not folder:
        return None
    if manager is None:
        from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

        manager = LocalGPUHook().get_conn()
    record = fleet.record_of(manager, this_host())
    fleet.publish(folder, record, shared=settings.gpu_state_dir_shared())
    return record


def publish_quietly(manager) -> None:
    """:func:`publish_this_host` for a task's lease change (nothing outside a fleet): a failure is logged,
    never fails the task."""
    try:
        publish_this_host(manager)
    except (GpuschedError, OSError) as exc:
        log.warning("Could not publish this host's GPU record to the fleet directory: %s", exc)


_sampler = None


def start_sampling(manager=None):
    """In a fleet, sample this host's GPUs every 10 s on a thread of this (long-lived) process and publish the last
    10 minutes to ``<fleet_dir>/telemetry/<host>.json``, where the head node's board reads them (once per process;
    the Edge worker starts it on its first heartbeat). None outside a fleet."""
    global _sampler
    folder = settings.fleet_dir()
    if not folder:
        return None
    if _sampler is not None and _sampler.running():
        return _sampler
    from airflow_provider_gpusched.core.gpu.telemetry import HostSampler, TelemetryRing, sample_host
    from airflow_provider_gpusched.metrics import emit_gpu_samples

    if manager is None:
        from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

        manager = LocalGPUHook().get_conn()
    host = this_host()
    ring = TelemetryRing(host, manager.inventory.source)
    shared = settings.gpu_state_dir_shared()

    def published(samples) -> None:
        fleet.publish_telemetry(folder, ring.to_dict(), shared=shared)
        emit_gpu_samples(host, samples, manager)

    _sampler = HostSampler(ring, lambda: sample_host(manager), on_sample=published).start()
    return _sampler


async def edge_worker_sysinfo() -> dict[str, Any]:
    """``[edge] extended_system_info_function`` for a GPU host's Edge worker: publishes the host's record on
    each heartbeat and reports its GPUs. Status ERROR (with ``[edge] automatic_maintenance_on = Error``: the
    worker takes no jobs) while processes of others hold every GPU; INFO again once one is free."""
    try:
        record = await asyncio.to_thread(publish_this_host)
        sampler = await asyncio.to_thread(start_sampling)
    except (GpuschedError, OSError) as exc:
        return {"status": logging.WARNING, "status_text": f"gpusched: cannot publish this host's GPUs: {exc}"}
    if record is None:
        return {"status": logging.WARNING, "status_text": "gpusched: [gpusched] fleet_dir is not set on this host"}
    free = sum(
        1
        for g in record.gpus
        if not any(g.index in lease.gpus for lease in record.leases) and g.index not in record.foreign_busy
    )
    info: dict[str, Any] = {
        "gpus": record.sizes(),
        "gpus_free": free,
        "gpu_leases": len(record.leases),
        "gpu_source": record.source,
    }
    if sampler is not None and sampler.error:
        info["gpu_sampling"] = sampler.error
    if record.gpus and len(record.foreign_busy) >= len(record.gpus):
        return {
            **info,
            "status": logging.ERROR,
            "status_text": f"every GPU is held by processes of others (GPUs {record.foreign_busy})",
        }
    return {**info, "status": logging.INFO}


def fleet_queue(kwargs: dict[str, Any], job_class: str, gpus: Any, gpu_memory: Any) -> None:
    """In a fleet, route a local GPU task by its lane and memory tier (the caller leaves a queue its author
    named alone; this one replaces a queue the job-class mapping gave). A request that no host that published a
    record can ever hold is refused here, when the DAG file is parsed, naming the hosts' sizes: no worker
    would ever take it (each has one concurrency slot per GPU)."""
    if not enabled():
        return
    try:
        request = GPURequest(gpus=gpus if is_int(gpus) and gpus > 0 else 1, gpu_memory=gpu_memory)
    except GpuschedError:
        return  # the operator reports the bad argument itself
    view = read_this_fleet()
    if view is not None:
        try:
            view.refuse_impossible(request)
        except GpuschedError as exc:
            from airflow.sdk.exceptions import AirflowException

            raise AirflowException(f"{kwargs.get('task_id', '?')}: {exc}") from exc
    lane = "idle" if settings.job_class_mapping()[job_class].local.fill_in else "gpu"
    kwargs["queue"] = fleet.queue_for(request, lane)
