"""`gpusched quota show|slurm`, and the quotas in `gpusched queue list` and `queue health`, on one (SIMULATED) host
whose lease directory holds the quota book."""

import json

from airflow_provider_gpusched.core.fleet import attach_quotas
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.work_tag import WorkTag
from tests.cli import gpusched

QUOTAS = '{"groups": {"vision": {"quota": 1, "members": ["alice"], "slurm": {"account": "cv"}}, "nlp": {"quota": 3, "borrowing_limit": 1}}}'


def host(state_dir):
    manager = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
    attach_quotas(manager, QuotaConfig.load(QUOTAS), host="gpu-a")
    return manager


def env(state_dir, quotas=QUOTAS):
    return {
        "AIRFLOW__GPUSCHED__QUOTAS": quotas,
        "AIRFLOW__GPUSCHED__GPU_STATE_DIR": state_dir,
        "GPUSCHED_SIMULATE_GPUS": "4x24GiB",
        "AIRFLOW__GPUSCHED__FLEET_DIR": None,
    }


def test_quota_show_lists_use_borrowing_and_who_waits(tmp_path):
    state_dir = str(tmp_path / "leases")
    m = host(state_dir)
    for i in range(3):
        lease, why = m.try_acquire(GPURequest(), f"v{i}", work=WorkTag(dag_id="d", task_id=f"t{i}", group="vision"))
        assert lease is not None, why
    assert m.try_acquire(GPURequest(gpus=2), "n0", work=WorkTag(group="nlp"))[0] is None  # 1 free: reclaims
    out = gpusched("quota", "show", env=env(state_dir))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "quotas ([gpusched] quotas; 4 GPUs in the fleet, in GPUs):"
    vision = next(line for line in lines if line.strip().startswith("vision"))
    assert vision.split()[1:7] == ["1", "3", "1", "2", "0", "0"]  # quota, used, in quota, borrowed, lent, waiting
    nlp = next(line for line in lines if line.strip().startswith("nlp"))
    assert nlp.split()[1:7] == ["3", "0", "0", "0", "2", "2"] and "(borrows at most 1)" in nlp
    assert any(
        line.startswith("  waiting: nlp: n0 on gpu-a, 2 within its quota") and "reclaiming" in line for line in lines
    )
    data = json.loads(gpusched("quota", "show", "--json", env=env(state_dir)).stdout)
    assert data["capacity"] == 4 and data["config"]["groups"]["nlp"]["borrowing_limit"] == "1 GPU"
    assert sorted(v["state"] for v in data["leases"].values()) == ["borrowed", "borrowed", "within"]
    # queue list: a group column, borrowed leases marked, and the table under it
    listing = gpusched("queue", "list", "--no-slurm", env=env(state_dir))
    assert listing.returncode == 0, listing.stderr
    assert "| group " in listing.stdout and listing.stdout.count("vision (borrowed)") == 2
    assert "quotas ([gpusched] quotas" in listing.stdout
    # health: quotas fit, nobody starved
    health = gpusched("queue", "health", "--no-slurm", "--no-airflow", env=env(state_dir))
    assert "[  ok] team quotas: [gpusched] quotas: vision 3/1 (+2 borrowed), nlp 0/3" in health.stdout
    assert "[  ok] work within quota waits" in health.stdout


def test_quotas_that_do_not_fit_fail_health_and_bad_ones_are_named(tmp_path):
    state_dir = str(tmp_path / "leases")
    too_big = '{"groups": {"a": 3, "b": 2}}'
    health = gpusched("queue", "health", "--no-slurm", "--no-airflow", env=env(state_dir, too_big))
    assert health.returncode == 1
    assert (
        "[FAIL] quotas fit the fleet: [gpusched] quotas: the groups' quotas add up to 5 GPUs, more than the 4 GPUs"
        in health.stdout
    )
    bad = gpusched("quota", "show", env=env(state_dir, '{"groups": {"a": {"quota": -1}}}'))
    assert bad.returncode != 0
    assert "[gpusched] quotas: groups.a.quota: expected a number of GPUs >= 0" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_quota_slurm_prints_the_accounts(tmp_path):
    out = gpusched("quota", "slurm", "--cluster", "lab", env=env(str(tmp_path / "leases")))
    assert out.returncode == 0, out.stderr
    assert "sacctmgr -i add account cv Cluster=lab Fairshare=100 QOS=vision DefaultQOS=vision" in out.stdout
    assert "sacctmgr -i add user alice Account=cv Cluster=lab" in out.stdout
    assert "sacctmgr -i modify qos nlp set Priority=100 GrpTRES=gres/gpu=4" in out.stdout
    off = gpusched("quota", "show", env={**env(str(tmp_path / "leases")), "AIRFLOW__GPUSCHED__QUOTAS": ""})
    assert off.returncode == 0 and off.stdout.startswith("no team quotas")
