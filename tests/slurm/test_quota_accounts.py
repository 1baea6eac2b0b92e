"""Team quotas on Slurm against real accounting: a cluster of its own with MariaDB and slurmdbd
(scripts/slurm-cluster.sh, GPUSCHED_SLURM_ACCOUNTING=1), the accounts and QOS that `gpusched quota slurm` prints
created with sacctmgr, and jobs submitted with each group's account and QOS: Slurm holds a group at its GrpTRES,
refuses an account that does not exist, and shares the cluster by the groups' Fairshare."""

import os
import shlex
import subprocess

import pytest

from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.slurm import sacctmgr_plan, slurm_settings
from airflow_provider_gpusched.core.slurm import JobPhase, SlurmCommandError, SlurmJobSpec, SlurmTransport, client_for
from tests import services
from tests.polling import wait_until

from .conftest import REPO

pytestmark = [pytest.mark.slurm]
QUOTAS = QuotaConfig.from_dict(
    {
        "groups": {
            "vision": {"quota": 2, "borrowing_limit": 1, "weight": 2, "slurm": {"account": "cv"}},
            "nlp": {"quota": 1, "borrowing_limit": 0},
        }
    },
    "test quotas",
)
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


@pytest.fixture(scope="module")
def accounting(slurm_cluster):
    """SLURM_CONF of a one-node cluster with real accounting (its own root, ports and subnet); down at the end."""
    root = REPO / f".slurm-acct{('-' + WORKER) if WORKER else ''}"
    index = int(WORKER[2:]) if WORKER.startswith("gw") and WORKER[2:].isdigit() else 0
    env = {
        **os.environ,
        "GPUSCHED_SLURM_ROOT": str(root),
        "GPUSCHED_SLURM_NODES": "1",
        "GPUSCHED_SLURM_ACCOUNTING": "1",
        "GPUSCHED_SLURMCTLD_PORT": str(17400 + 10 * index),
        "GPUSCHED_SLURMRESTD_PORT": str(17401 + 10 * index),
        "GPUSCHED_SLURM_NET": str(150 + index),
    }
    env.pop("SLURM_CONF", None)
    script = str(REPO / "scripts" / "slurm-cluster.sh")
    record = services.register(f"slurm-cluster-{root.name}", stop=["bash", script, "down"], env=env)
    up = subprocess.run(["bash", script, "up"], env=env, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    try:
        yield str(root / "etc" / "slurm.conf")
    finally:
        subprocess.run(["bash", script, "down"], env=env, capture_output=True, text=True, timeout=300)
        services.stopped(record)


def sacctmgr(conf, *args):
    return subprocess.run(
        ["sacctmgr", *args], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True, timeout=60
    )


def test_groups_get_their_accounts_and_slurm_enforces_their_limits(accounting, tmp_path):
    for argv in sacctmgr_plan(QUOTAS, "gpusched", capacity_gpus=4):
        done = sacctmgr(accounting, *argv[1:])
        # a second run of the plan (a kept cluster): `add` finds it there, `modify` sets the limits again
        again = done.returncode == 1 and "Nothing new added" in done.stdout
        assert done.returncode == 0 or again, f"{shlex.join(argv)}: {done.stdout} {done.stderr}"
    sacctmgr(accounting, "-i", "add", "user", "root", "Account=cv,nlp")
    qos = sacctmgr(accounting, "-n", "-P", "show", "qos", "format=name,grptres,priority").stdout
    assert "vision|gres/gpu=3|200" in qos and "nlp|gres/gpu=1|100" in qos, qos
    shares = sacctmgr(accounting, "-n", "-P", "show", "assoc", "where", "account=cv", "format=account,fairshare,qos")
    assert "cv|200|vision" in shares.stdout, shares.stdout
    client = client_for(SlurmTransport(slurm_conf=accounting))

    def job(group, name):
        return client.submit(
            SlurmJobSpec(
                command="sleep 60",
                job_name=name,
                gres="gpu:1",
                output=str(tmp_path / f"{name}-%j.out"),
                **slurm_settings(QUOTAS, group),
            )
        )

    def reason(job_id):  # once the scheduler has looked at it
        return wait_until(lambda: (st := client.status(job_id)).reason not in ("", "None") and st, 60, "a reason", 0.5)

    nlp = [job("nlp", f"nlp{i}") for i in range(2)]
    try:
        wait_until(lambda: client.status(nlp[0].job_id).phase is JobPhase.RUNNING, timeout=60, what="nlp's first job")
        # nlp may hold 1 GPU (quota 1, no borrowing): its second job waits on its QOS, with 3 GPUs free
        held = reason(nlp[1].job_id)
        assert held.phase is JobPhase.PENDING and "QOSGrpGRES" in held.reason, held
    finally:
        client.cancel([j.job_id for j in nlp])
    wait_until(lambda: all(client.status(j.job_id).phase is JobPhase.CANCELLED for j in nlp), 60, "nlp's jobs gone")
    vision = [job("vision", f"vision{i}") for i in range(4)]
    try:  # vision: quota 2 + 1 borrowed = 3 at once; the fourth waits on its QOS with a GPU free
        wait_until(
            lambda: sum(client.status(j.job_id).phase is JobPhase.RUNNING for j in vision) == 3,
            timeout=60,
            what="three vision jobs running",
        )
        pending = [j for j in vision if client.status(j.job_id).phase is JobPhase.PENDING]
        assert len(pending) == 1 and "QOSGrpGRES" in reason(pending[0].job_id).reason
    finally:
        client.cancel([j.job_id for j in vision])
    with pytest.raises(SlurmCommandError, match="Invalid account"):
        client.submit(SlurmJobSpec(command="true", account="nobody-here", output=str(tmp_path / "x-%j.out")))
