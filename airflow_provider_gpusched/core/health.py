"""The checks an operator runs before trusting a host's setup (``gpusched queue health``): each a
:class:`Check` with a pass, fail, warning or skip and one line that says what was seen.

The Slurm, GPU, lease-directory and folder checks live here (no Airflow import); the Airflow checks (pools,
triggerer) are made by the CLI with Airflow's own API and reported the same way.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.errors import GpuschedError

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.quota.report import QuotaView

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


# -- Slurm ------------------------------------------------------------------------------------------------
def check_slurm(client: Any, classes: Mapping[str, Mapping[str, Any]], where: str) -> list[Check]:
    """Slurm reachable through ``client`` (``where`` says how), the partitions and QOS the job classes name
    exist, and the idle class's partition can be preempted by normal work's."""
    from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError

    try:
        found = client.partitions()
    except (SlurmUnavailableError, SlurmCommandError, OSError) as exc:
        return [Check("slurm reachable", FAIL, f"{where}: {exc}")]
    partitions = {name: str(p["state"]).lower() for name, p in found.items()}
    default = next((name for name, p in found.items() if p["default"]), "")
    checks = [Check("slurm reachable", OK, f"{where}: partitions {', '.join(sorted(partitions)) or 'none'}")]
    for job_class, values in sorted(classes.items()):
        partition = values.get("partition")
        if not partition:
            checks.append(Check(f"{job_class} class partition", OK, "none set: the cluster's default partition"))
        elif partition not in partitions:
            checks.append(
                Check(
                    f"{job_class} class partition",
                    FAIL,
                    f"{partition!r} is not a partition sinfo knows ({', '.join(sorted(partitions))})",
                )
            )
        elif partitions[partition] != "up":
            checks.append(Check(f"{job_class} class partition", FAIL, f"{partition!r} is {partitions[partition]}"))
        else:
            checks.append(Check(f"{job_class} class partition", OK, f"{partition!r} is up"))
    checks += _check_qos(client, classes)
    missing = [v["partition"] for v in classes.values() if v.get("partition") and v["partition"] not in partitions]
    if missing:
        checks.append(Check("idle work preemptible", SKIP, f"not checked: partition(s) {', '.join(missing)} missing"))
    else:
        checks.append(_check_preemption(client, classes, default))
    return checks


def _check_qos(client: Any, classes: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError

    wanted = {c: v["qos"] for c, v in classes.items() if v.get("qos")}
    if not wanted:
        return [Check("QOS", OK, "the job classes name none")]
    if _is_rest(client):
        return [Check("QOS", WARN, "not checked through slurmrestd: its API v0.0.38 lists no QOS without slurmdbd")]
    try:
        out = client.runner.run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name"]).stdout
    except (SlurmUnavailableError, SlurmCommandError, OSError) as exc:
        return [Check("QOS", WARN, f"cannot list QOS (no accounting database?): {str(exc)[:200]}")]
    known = {line.strip() for line in out.splitlines() if line.strip()}
    return [
        Check(
            f"{c} class QOS",
            OK if q in known else FAIL,
            f"{q!r} exists" if q in known else f"{q!r} is not a QOS sacctmgr knows ({', '.join(sorted(known))})",
        )
        for c, q in sorted(wanted.items())
    ]


def _is_rest(client: Any) -> bool:
    from airflow_provider_gpusched.core.slurm.rest import SlurmRestClient

    return isinstance(client, SlurmRestClient)


def _rest_preemption(client: Any, idle: str, normal: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What the preemption check reads, from slurmrestd's partitions (it shows no PreemptType: assumed
    partition_prio, said so)."""
    parts = client.partitions()

    def fields(name: str) -> dict[str, str]:
        p = parts.get(name) or {}
        mode = "OFF" if p.get("preempt_mode") in ("DISABLED", "OFF") else str(p.get("preempt_mode") or "?")
        return {"PreemptMode": mode, "PriorityTier": str(p.get("priority_tier", "0"))}

    return (
        {"PreemptType": "preempt/partition_prio (assumed: slurmrestd does not show it)"},
        fields(idle),
        (fields(normal) if normal else {}),
    )


def _cli_preemption(client: Any, idle: str, normal: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What the preemption check reads: ``scontrol show config`` and the two partitions."""
    config = dict(
        re.findall(r"^(\w+)\s*=\s*(\S*)", client.runner.run(["scontrol", "show", "config"]).stdout, re.MULTILINE)
    )
    idle_part = _scontrol_fields(client.runner.run(["scontrol", "-o", "show", "partition", idle]).stdout)
    normal_part = (
        _scontrol_fields(client.runner.run(["scontrol", "-o", "show", "partition", normal]).stdout) if normal else {}
    )
    return config, idle_part, normal_part


def _scontrol_fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"(?:^| )([A-Za-z]+)=(\S*)", text))


def _check_preemption(client: Any, classes: Mapping[str, Mapping[str, Any]], default: str) -> Check:
    name = "idle work preemptible"
    idle = (classes.get("idle") or {}).get("partition")
    normal = (classes.get("normal") or {}).get("partition") or default
    if not idle:
        return Check(
            name,
            WARN,
            "the idle class names no partition: idle jobs queue with normal ones and "
            "cannot be preempted by partition priority",
        )
    read = _rest_preemption if _is_rest(client) else _cli_preemption
    try:
        config, idle_part, normal_part = read(client, idle, normal)
    except Exception as exc:  # noqa: BLE001 - any failure here is what the check reports
        return Check(name, FAIL, f"{'slurmrestd' if _is_rest(client) else 'scontrol'}: {str(exc)[:200]}")
    preempt_type = config.get("PreemptType", "?")
    mode = idle_part.get("PreemptMode", "?")
    if preempt_type in ("preempt/none", "?"):
        return Check(name, FAIL, f"PreemptType is {preempt_type}: nothing is ever preempted")
    if mode.upper().startswith("OFF"):
        return Check(name, FAIL, f"partition {idle!r} has PreemptMode=OFF")
    if preempt_type.startswith("preempt/partition_prio") and normal_part:
        tiers = idle_part.get("PriorityTier", "0"), normal_part.get("PriorityTier", "0")
        if not (tiers[0].isdigit() and tiers[1].isdigit() and int(tiers[0]) < int(tiers[1])):
            return Check(
                name,
                FAIL,
                f"partition {idle!r} has PriorityTier {tiers[0]}, not below {normal!r}'s "
                f"{tiers[1]}: normal jobs cannot preempt idle ones",
            )
        return Check(
            name, OK, f"{preempt_type}, {idle!r} PreemptMode={mode} PriorityTier {tiers[0]} < {normal!r} {tiers[1]}"
        )
    return Check(name, OK, f"{preempt_type}, {idle!r} PreemptMode={mode}")


# -- this host ---------------------------------------------------------------------------------------------
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
    from airflow_provider_gpusched.core.gpu.lease_store import LEASE_FILE, LeaseStore
    from airflow_provider_gpusched.core.safe_files import UnsafePathError

    try:
        store = LeaseStore(inventory, state_dir, shared)
    except (UnsafePathError, OSError) as exc:
        return [Check("lease directory", FAIL, str(exc))]
    checks = []
    try:
        fd, probe = tempfile.mkstemp(dir=store.state_dir, prefix=".health-")
        os.close(fd)
        os.remove(probe)
        mode = stat.S_IMODE(os.stat(store.state_dir).st_mode)
        checks.append(
            Check(
                "lease directory",
                OK,
                f"{store.state_dir} (mode {mode:04o}{', shared group directory' if store.shared else ''}) writable",
            )
        )
    except OSError as exc:
        return [Check("lease directory", FAIL, f"{store.state_dir}: not writable ({exc.strerror})")]
    files = {name[:-5] for name in os.listdir(store.state_dir) if LEASE_FILE.match(name)}
    with store.allocation_lock():
        live = store.live(tidy=False)
    stale = sorted(files - {lease.lease_id for lease in live})
    orphans = [lease for lease in live if lease.child_pids and not lease.unreadable and not store.holder_alive(lease)]
    checks.append(
        Check(
            "stale leases",
            WARN if stale else OK,
            f"{len(stale)} lease file(s) of dead processes ({', '.join(stale[:5])}): they hold no GPU and "
            f"go at the next allocation"
            if stale
            else "none",
        )
    )
    checks.append(
        Check(
            "orphaned GPU processes",
            WARN if orphans else OK,
            "; ".join(
                f"lease {lease.lease_id} ({lease.owner}): holder pid {lease.pid} died, child "
                f"{','.join(map(str, lease.child_pids))} still runs and is being stopped"
                for lease in orphans
            )
            or "none",
        )
    )
    if store.unreadable:
        checks.append(Check("lease files readable", FAIL, "; ".join(why for _, why in store.unreadable)[:500]))
    return checks


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
