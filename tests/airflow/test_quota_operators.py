"""Which group a task counts for, as DAG files are parsed: an explicit group=, the owner (the DAG's default_args
too, mapped tasks too), unassigned; the group's pool where none was named; Slurm's account and QOS; and a bad group
named at import. No database."""

import datetime

import pytest

START = datetime.datetime(2026, 1, 1)
QUOTAS = "groups:\n  vision: {quota: 3, members: [alice]}\n  nlp: {quota: 4, slurm: {account: nl}}\n"


@pytest.fixture
def quotas(tmp_path, monkeypatch):
    path = tmp_path / "quotas.yaml"
    path.write_text(QUOTAS)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__QUOTAS", str(path))
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SIMULATE_GPUS", "4x24GiB")
    monkeypatch.delenv("AIRFLOW__GPUSCHED__FLEET_DIR", raising=False)
    return path


def test_tasks_take_their_group_and_its_pool(quotas):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    with DAG("q", start_date=datetime.datetime(2026, 1, 1), schedule=None, default_args={"owner": "alice"}):
        mapped = LocalGPUOperator.partial(task_id="m", gpus=1).expand(command=[["true"]])
        plain = LocalGPUOperator(task_id="p", gpus=1, command=["true"])
        stranger = LocalGPUOperator(task_id="s", gpus=1, command=["true"], owner="carol")
        named = LocalGPUOperator.partial(task_id="n", gpus=1, group="nlp").expand(command=[["true"]])
        sliced = LocalGPUOperator.partial(task_id="sl", gpu_memory="8GiB").expand(command=[["true"]])
        sliced_one = LocalGPUOperator(task_id="sl1", gpu_memory="8GiB", command=["true"])
        own_pool = LocalGPUOperator(task_id="o", gpus=1, command=["true"], pool="mine")
        filler = LocalGPUOperator(task_id="i", gpus=1, command=["true"], job_class="idle")
        slurm = SlurmJobOperator(task_id="j", command=["true"], group="nlp")
        slurm_mine = SlurmJobOperator(task_id="k", command=["true"], group="nlp", account="other")
    assert mapped.partial_kwargs["pool"] == "gpusched_group_vision"
    # one slot per GPU, a memory slice one (the unit of a fleet worker's slots too: docs/fleet.md)
    assert (plain.pool_slots, sliced_one.pool_slots, sliced.partial_kwargs.get("pool_slots", 1)) == (1, 1, 1)
    assert (plain.group, plain.pool) == ("vision", "gpusched_group_vision")
    assert (stranger.group, stranger.pool) == ("unassigned", "gpusched_group_unassigned")
    assert named.partial_kwargs["pool"] == "gpusched_group_nlp"
    assert (own_pool.group, own_pool.pool) == ("vision", "mine")
    assert (filler.group, filler.pool) == ("vision", "gpusched_idle")  # idle work keeps its class's pool
    assert (slurm.account, slurm.qos, slurm.pool) == ("nl", "nlp", "default_pool")
    assert (slurm_mine.account, slurm_mine.qos) == ("other", "nlp")


def test_a_bad_group_fails_the_import_naming_the_task(quotas, monkeypatch, tmp_path):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    with (
        pytest.raises(
            AirflowException, match=r"bad: group: expected a group of .*quotas.yaml \(vision, nlp\), got 'nope'"
        ),
        DAG("q2", start_date=datetime.datetime(2026, 1, 1), schedule=None),
    ):
        LocalGPUOperator(task_id="bad", gpus=1, command=["true"], group="nope")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__QUOTAS", "")
    off = r"group='nlp' given, but \[gpusched\] quotas declares no groups"
    with pytest.raises(AirflowException, match=off), DAG("q3", start_date=START, schedule=None):
        LocalGPUOperator(task_id="off", gpus=1, command=["true"], group="nlp")
    # a file never good before (one that was good keeps that version in force: tests/quota/test_settings_files_last_good.py)
    never_good = tmp_path / "never_good.yaml"
    never_good.write_text("groups: {a: {quota: many}}")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__QUOTAS", str(never_good))
    bad = r"never_good.yaml: groups.a.quota: expected a number of GPUs"
    with pytest.raises(Exception, match=bad), DAG("q4", start_date=START, schedule=None):
        LocalGPUOperator(task_id="any", gpus=1, command=["true"])
