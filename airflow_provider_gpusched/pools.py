"""Creating the Airflow pools that the job-class mapping and the team quotas name (``gpusched pools sync``).

Slots: one per GPU the pool's classes can use (``[gpusched] pool_slots_per_gpu`` per GPU when set above 1: then
deferred tasks count against the pool too) — this host's GPU inventory (NVML, or the configured
simulation) for local work, or with ``[gpusched] fleet_dir`` every GPU the fleet's hosts published; the
class's Slurm partition for Slurm work. Uses Airflow's own pool API
(``Pool.create_or_update_pool``, what ``airflow pools set`` uses), so it runs where the Airflow metadata
database is reachable. Idempotent: pools already right are left alone. While the job-class or quota file is broken,
the pools are those of its last good version, the one in force (core/quota/last_good.py); the log says so.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND


def desired_pools(
    backend: str = DEFAULT_BACKEND, slurm_conn_id: str | None = None, simulate: str | None = None
) -> dict[str, dict[str, Any]]:
    """The pools the job-class mapping wants, with a slot per GPU that ``backend`` counts for each class;
    ``simulate`` overrides ``[gpusched] simulate_gpus`` (local)."""
    from airflow_provider_gpusched.backends import airflow_backend

    gpus = airflow_backend(backend).pool_gpus(slurm_conn_id, simulate)
    mapping = settings.job_class_mapping()
    per_gpu = settings.pool_slots_per_gpu()
    plan = mapping.pool_plan(gpus, per_gpu)
    quotas = settings.quota_config()
    if quotas.enabled:  # one pool per quota group: its quota plus borrowing limit (docs/quotas.md), in the same unit
        plan.update(quotas.pool_plan(max(1, gpus(mapping["normal"])), per_gpu))
    return plan


def sync_pools(plan: dict[str, dict[str, Any]], dry_run: bool = False) -> list[dict[str, Any]]:
    """Create or update each pool of ``plan``; one row per pool with what was (or would be) done."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session
    from sqlalchemy import select

    rows = []
    with create_session() as session:
        for name, want in sorted(plan.items()):
            pool = session.scalar(select(Pool).filter_by(pool=name))
            if pool is None:
                action = "create"
            elif (
                pool.slots != want["slots"]
                or (pool.description or "") != want["description"]
                or bool(pool.include_deferred) != want["include_deferred"]
            ):
                action = "update"
            else:
                action = "unchanged"
            rows.append(
                {
                    "pool": name,
                    "slots": want["slots"],
                    "was": None if pool is None else pool.slots,
                    "classes": want["classes"],
                    "action": action,
                }
            )
            if action != "unchanged" and not dry_run:
                Pool.create_or_update_pool(
                    name, want["slots"], want["description"], include_deferred=want["include_deferred"], session=session
                )
    return rows
