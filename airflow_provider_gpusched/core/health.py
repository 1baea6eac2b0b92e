"""The checks an operator runs before trusting a host's setup (``gpusched queue health``): each a
:class:`Check` with a pass, fail, warning or skip and one line that says what was seen.

The shared checks live here (folders, stop orders, the fleet, settings files, team quotas; no Airflow import);
each backend's own checks live in its package and come through ``Backend.health_checks`` (Slurm's in
core/slurm/health.py, this host's GPUs' in core/gpu/health.py). The Airflow checks (pools, triggerer) are made by
the CLI with Airflow's own API and reported the same way.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import TYPE_CHECKING

from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.health_check import FAIL, OK, SKIP, WARN, Check, HealthContext, check_stop_orders

#: the record and the stop-order check live in core/health_check.py (below the backends) and import from here too
__all__ = [
    "FAIL",
    "OK",
    "SKIP",
    "WARN",
    "Check",
    "HealthContext",
    "check_stop_orders",
    "check_writable",
    "check_fleet",
    "check_settings_file",
    "check_quotas",
]

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.quota.report import QuotaView

#: each backend's checks live in its own package now (``Backend.health_checks``); the old names still import
__getattr__ = moved_names(
    __name__,
    {
        "check_slurm": "airflow_provider_gpusched.core.slurm.health:check_slurm",
        "check_gpus": "airflow_provider_gpusched.core.gpu.health:check_gpus",
        "check_lease_dir": "airflow_provider_gpusched.core.gpu.health:check_lease_dir",
    },
)


def check_writable(name: str, path: str) -> Check:
    """``path`` exists (or can be created) and this user can create files in it."""
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".health-")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        return Check(name, FAIL, f"{path}: {exc.strerror or exc}")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return Check(name, FAIL, f"{path} is writable by every user (mode {mode:04o})")
    return Check(name, OK, f"{path} writable")


def check_fleet(fleet_dir: str, now: float | None = None) -> list[Check]:
    """Each GPU host of a fleet, from the record it published: up (recent), every GPU held by others (it takes
    no work), or down; records that cannot be read; and the fleet's stop orders."""
    import time

    from airflow_provider_gpusched.core.fleet import FRESH_FOR, orders_dir, read_fleet

    now = now or time.time()
    view = read_fleet(fleet_dir, now)
    if not view.hosts and not view.unreadable:
        return [
            Check(
                "fleet hosts",
                FAIL,
                f"{fleet_dir}: no GPU host published a record in the last day (is "
                f"[gpusched] fleet_dir the same on the hosts, and their workers up?)",
            )
        ]
    checks = []
    for h in view.hosts:
        age = now - h.time
        if not h.fresh(now):
            checks.append(
                Check(
                    f"fleet host {h.host}",
                    FAIL,
                    f"no record for {age:.0f}s (more than {FRESH_FOR:.0f}s): the host or its Edge worker is down",
                )
            )
        elif h.gpus and len(h.foreign_busy) >= len(h.gpus):
            checks.append(
                Check(
                    f"fleet host {h.host}",
                    WARN,
                    f"up, {h.sizes()}, but processes of others hold every GPU: it takes no work",
                )
            )
        else:
            simulated = " SIMULATED" if h.source == "simulated" else ""
            checks.append(
                Check(
                    f"fleet host {h.host}", OK, f"up ({age:.0f}s ago), {h.sizes()}{simulated}, {len(h.leases)} lease(s)"
                )
            )
    checks += [Check("fleet record", FAIL, why) for _path, why in view.unreadable]
    orders = check_stop_orders(orders_dir(fleet_dir))
    checks.append(Check("fleet stop orders", orders.status, orders.detail))
    return checks


# -- settings files and team quotas ----------------------------------------------------------------------------
def check_settings_file(name: str, source: str, config_error: str) -> Check:
    """A settings file read while the scheduler runs (the quota file, the job-class file): a FAIL while it is
    broken (its last good version is in force meanwhile: core/quota/last_good.py), else which one is in force."""
    if config_error:
        return Check(name, FAIL, config_error)
    return Check(name, OK, source)


def check_quotas(view: QuotaView) -> list[Check]:
    """The quotas (:func:`~airflow_provider_gpusched.core.quota.report.quota_view`): each group's quota and use;
    a FAIL while the quota file is broken (its last good version in force), when the quotas add up to more than there
    is, or when work has waited within its group's quota for longer than reclaiming takes (the guarantee not kept); a
    warning for each record of the book that could not be read."""
    from airflow_provider_gpusched.core.quota.report import starved

    groups = ", ".join(
        f"{g['group']} {g['used']:g}/{g['quota']:g}" + (f" (+{g['borrowed']:g} borrowed)" if g["borrowed"] else "")
        for g in view["groups"]
    )
    if view["resource"] == "gpu_memory":
        groups = ", ".join(f"{g['group']} {g['used'] / 2**30:.0f}/{g['quota'] / 2**30:.0f} GiB" for g in view["groups"])
    out = [
        Check(
            "team quotas",
            OK,
            f"{view['source']}: {groups} (of {view['capacity']:g} {'GPUs' if view['resource'] == 'gpus' else 'bytes'})",
        )
    ]
    if view["config_error"]:
        out.append(check_settings_file("quota file", view["source"], view["config_error"]))
    over = [p for p in view["problems"] if "add up to" in p]
    if over:
        out.append(Check("quotas fit the fleet", FAIL, over[0]))
    late = starved(view)
    out.append(
        Check("work within quota waits", FAIL, "; ".join(late[:5]))
        if late
        else Check("work within quota waits", OK, "no request waits beyond reclaiming within its group's quota")
    )
    out += [Check("quota book", WARN, p) for p in view["problems"] if "add up to" not in p][:10]
    return out
