"""What ``gpusched queue health`` checks of this host's GPUs (:meth:`LocalBackend.health_checks`): the inventory,
the lease directory, stale leases and orphaned processes, and the stop orders of the lease directory."""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Any

from airflow_provider_gpusched.core.health_check import FAIL, OK, SKIP, WARN, Check, HealthContext, check_stop_orders


def local_health(context: HealthContext) -> list[Check]:
    """The GPU inventory (a skip on a fleet's head node without GPUs), then, where there is one, the lease
    directory and, when that is sound, the stop orders in it."""
    gpu_check, inventory = check_gpus(context.simulate)
    if context.fleet_dir and gpu_check.failed:  # a head node without GPUs: the hosts' checks follow
        gpu_check = Check(
            "GPU inventory",
            SKIP,
            f"none on this host ({gpu_check.detail[:120]}); the fleet's hosts are checked from their records",
        )
    checks = [gpu_check]
    if inventory is not None:
        lease_checks = check_lease_dir(inventory, context.state_dir, context.shared)
        checks += lease_checks
        if not any(c.failed for c in lease_checks):
            from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir

            checks.append(check_stop_orders(context.state_dir or default_state_dir()))
    return checks


def check_gpus(simulate: str | None) -> tuple[Check, Any]:
    """The GPU inventory (NVML, or the simulation, said so) and the inventory itself (None if there is none)."""
    from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError, get_inventory

    try:
        inventory = get_inventory(simulate or None)
        gpus = inventory.gpus()
    except GPUInventoryError as exc:
        return Check("GPU inventory", FAIL, str(exc)), None
    if inventory.source == "simulated":
        return Check(
            "GPU inventory",
            WARN,
            f"SIMULATED: {len(gpus)} GPU(s) from {simulate or 'the environment'}; NVML found no GPU",
        ), inventory
    return Check(
        "GPU inventory",
        OK,
        f"NVML, driver {inventory.driver_version()}: {len(gpus)} GPU(s) ({', '.join(sorted({g.name for g in gpus}))})",
    ), inventory


def check_lease_dir(inventory: Any, state_dir: str | None, shared: bool | None) -> list[Check]:
    """The lease directory is safe (private, or a group directory on purpose) and writable; how many lease
    files belong to dead processes (stale) and how many children outlived their task (orphans)."""
    from airflow_provider_gpusched.core.gpu.lease_store import LeaseStore
    from airflow_provider_gpusched.core.safe_files import UnsafePathError

    try:
        store = LeaseStore(inventory, state_dir, shared)
    except (UnsafePathError, OSError) as exc:
        return [Check("lease directory", FAIL, str(exc))]
    try:
        checks = [_writable(store)]
    except OSError as exc:
        return [Check("lease directory", FAIL, f"{store.state_dir}: not writable ({exc.strerror})")]
    checks += _leftovers(store)
    if store.unreadable:
        checks.append(Check("lease files readable", FAIL, "; ".join(why for _, why in store.unreadable)[:500]))
    return checks


def _writable(store: Any) -> Check:
    """A file can be made in the lease directory (OSError when not), and what its mode is."""
    fd, probe = tempfile.mkstemp(dir=store.state_dir, prefix=".health-")
    os.close(fd)
    os.remove(probe)
    mode = stat.S_IMODE(os.stat(store.state_dir).st_mode)
    return Check(
        "lease directory",
        OK,
        f"{store.state_dir} (mode {mode:04o}{', shared group directory' if store.shared else ''}) writable",
    )


def _leftovers(store: Any) -> list[Check]:
    """Lease files of dead processes (stale), and children still running after their holder died (orphans)."""
    from airflow_provider_gpusched.core.gpu.lease_store import LEASE_FILE

    files = {name[:-5] for name in os.listdir(store.state_dir) if LEASE_FILE.match(name)}
    with store.allocation_lock():
        live = store.live(tidy=False)
    stale = sorted(files - {lease.lease_id for lease in live})
    orphans = [lease for lease in live if lease.child_pids and not lease.unreadable and not store.holder_alive(lease)]
    return [
        Check(
            "stale leases",
            WARN if stale else OK,
            f"{len(stale)} lease file(s) of dead processes ({', '.join(stale[:5])}): they hold no GPU and "
            f"go at the next allocation"
            if stale
            else "none",
        ),
        Check(
            "orphaned GPU processes",
            WARN if orphans else OK,
            "; ".join(
                f"lease {lease.lease_id} ({lease.owner}): holder pid {lease.pid} died, child "
                f"{','.join(map(str, lease.child_pids))} still runs and is being stopped"
                for lease in orphans
            )
            or "none",
        ),
    ]
