"""Team quotas on Slurm: each group is a Slurm account (its fair-share weight) with a QOS (its limits).

Slurm's own accounting (slurmdbd) enforces them; this provider submits each group's work with ``--account`` and
``--qos`` and says which ``sacctmgr`` commands set the accounts up (``gpusched quota slurm``):

* account ``<group>``: ``Fairshare=<weight>`` (Slurm's multifactor fair share divides the cluster by it);
* QOS ``<group>``: ``GrpTRES=gres/gpu=<quota + borrowing limit>`` (the most the group holds at once),
  ``Priority`` from the weight;
* QOS ``gpusched-borrow``: the QOS beyond-quota work could use on a preemptible partition; Slurm cannot move a
  pending job from one QOS to another, so borrowing on Slurm is Slurm's own idle-partition preemption
  (docs/idle-filling.md), not this provider's.

A group's ``slurm.account`` / ``slurm.qos`` name an existing account or QOS instead of ``<group>``.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

from airflow_provider_gpusched.core.quota.config import QuotaConfig


def slurm_settings(config: QuotaConfig, group: str) -> dict[str, str]:
    """sbatch ``account`` and ``qos`` for ``group`` ({} when quotas are off or the group is unknown)."""
    g = config.groups.get(group)
    if g is None:
        return {}
    return {"account": g.slurm_account or g.name, "qos": g.slurm_qos or g.name}


def sacctmgr_plan(config: QuotaConfig, cluster: str = "", capacity_gpus: int | None = None) -> list[list[str]]:
    """The ``sacctmgr -i`` argument lists that create each group's account and QOS with its limits (run as the
    Slurm administrator; ``modify`` lines make a second run update them). GPU quotas only: a memory quota has no
    Slurm TRES to stand for it."""
    if config.resource != "gpus":
        return []
    out: list[list[str]] = []
    where = [f"Cluster={cluster}"] if cluster else []
    for g in config.groups.values():
        s = slurm_settings(config, g.name)
        most: float | None = None
        if not g.quota.fraction and (g.borrowing_limit is None or not g.borrowing_limit.fraction):
            most = g.quota.value + (g.borrowing_limit.value if g.borrowing_limit is not None else 0.0)
            if g.borrowing_limit is None:
                most = float(capacity_gpus) if capacity_gpus else None
        elif capacity_gpus:
            limit = capacity_gpus if g.borrowing_limit is None else g.borrowing_limit.of(capacity_gpus)
            most = g.quota.of(capacity_gpus) + limit
        if most is not None and capacity_gpus:
            most = min(most, float(capacity_gpus))
        qos_limits = [f"Priority={int(round(g.weight * 100))}"]
        if most is not None:
            qos_limits.append(f"GrpTRES=gres/gpu={int(most)}")
        out.append(["sacctmgr", "-i", "add", "qos", s["qos"]])
        out.append(["sacctmgr", "-i", "modify", "qos", s["qos"], "set", *qos_limits])
        out.append(
            [
                "sacctmgr",
                "-i",
                "add",
                "account",
                s["account"],
                *where,
                f"Fairshare={int(round(g.weight * 100))}",
                f"QOS={s['qos']}",
                f"DefaultQOS={s['qos']}",
                f"Description=gpusched group {g.name}",
            ]
        )
        for member in g.members:
            out.append(["sacctmgr", "-i", "add", "user", member, f"Account={s['account']}", *where])
    return out
