"""What ``gpusched queue health`` checks of Slurm (:meth:`SlurmBackend.health_checks`): reachable, the job classes'
partitions and QOS exist, and idle work can be preempted by normal work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.health_check import FAIL, OK, SKIP, WARN, Check, HealthContext
from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError

#: the job classes whose partitions and QOS are checked
CHECKED_CLASSES = ("normal", "idle")


def slurm_health(context: HealthContext) -> list[Check]:
    """The Slurm checks through the command's client, or a skip that says why there is none."""
    if context.handle is None:
        return [Check("slurm reachable", SKIP, context.unavailable)]
    if context.class_settings is not None:  # a connection's view of the classes (its idle_partition...)
        classes = {c: context.class_settings(c) for c in CHECKED_CLASSES}
    else:
        from airflow_provider_gpusched.core.slurm.options import slurm_class_settings

        classes = {c: slurm_class_settings(c, context.job_classes) for c in CHECKED_CLASSES}
    return check_slurm(context.handle, classes, context.reached)


def check_slurm(client: Any, classes: Mapping[str, Mapping[str, Any]], where: str) -> list[Check]:
    """Slurm reachable through ``client`` (``where`` says how), the partitions and QOS the job classes name
    exist, and the idle class's partition can be preempted by normal work's."""
    try:
        found = client.partitions()
    except (SlurmUnavailableError, SlurmCommandError, OSError) as exc:
        return [Check("slurm reachable", FAIL, f"{where}: {exc}")]
    partitions = {name: str(p["state"]).lower() for name, p in found.items()}
    default = next((name for name, p in found.items() if p["default"]), "")
    checks = [Check("slurm reachable", OK, f"{where}: partitions {', '.join(sorted(partitions)) or 'none'}")]
    checks += [_check_partition(job_class, values, partitions) for job_class, values in sorted(classes.items())]
    checks += _check_qos(client, classes)
    missing = [v["partition"] for v in classes.values() if v.get("partition") and v["partition"] not in partitions]
    if missing:
        checks.append(Check("idle work preemptible", SKIP, f"not checked: partition(s) {', '.join(missing)} missing"))
    else:
        checks.append(_check_preemption(client, classes, default))
    return checks


def _check_partition(job_class: str, values: Mapping[str, Any], partitions: Mapping[str, str]) -> Check:
    """The job class's partition exists and is up (none set: the cluster's default)."""
    name = f"{job_class} class partition"
    partition = values.get("partition")
    if not partition:
        return Check(name, OK, "none set: the cluster's default partition")
    if partition not in partitions:
        return Check(name, FAIL, f"{partition!r} is not a partition sinfo knows ({', '.join(sorted(partitions))})")
    if partitions[partition] != "up":
        return Check(name, FAIL, f"{partition!r} is {partitions[partition]}")
    return Check(name, OK, f"{partition!r} is up")


def _check_qos(client: Any, classes: Mapping[str, Mapping[str, Any]]) -> list[Check]:
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
    return _judge_preemption(config, idle_part, normal_part, idle, normal)


def _judge_preemption(
    config: Mapping[str, str], idle_part: Mapping[str, str], normal_part: Mapping[str, str], idle: str, normal: str
) -> Check:
    """Whether normal work can preempt the idle partition's, from what Slurm said of its config and partitions."""
    name = "idle work preemptible"
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
