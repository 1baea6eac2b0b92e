"""Every resource setting either works on the backend a sweep runs on, or is refused naming the setting and the
backend (never dropped): here the local backend, on SIMULATED GPUs."""

import json

import pytest

from .conftest import REPO, load_dag_file, run_and_collect

pytestmark = pytest.mark.airflow


def test_setup_lines_and_cpus_hold_for_each_local_trial_mapped_and_batched(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    env_script = tmp_path / "env.sh"
    env_script.write_text("export TRAIN_ENV='activated env'\n")
    monkeypatch.setenv("GPUSCHED_TEST_ENV_SCRIPT", str(env_script))
    state, _, states = run_and_collect(
        load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py").local_setup
    )
    assert state == "success", states
    for batching in ("mapped", "batched"):
        records = json.loads((tmp_path / "sweeps" / f"local_setup_{batching}" / "summary.json").read_text())["records"]
        assert sorted(r["result"]["args"][0] for r in records) == ["a b", "it's; $HOME"]  # verbatim
        assert {r["result"]["env"] for r in records} == {"activated env"}
        assert all(
            len(r["result"]["cpus"]) == 1 and r["result"]["reserved"] == str(r["result"]["cpus"][0]) for r in records
        )  # cpus=1: one CPU reserved, the trial pinned to it


def test_a_local_trial_past_its_time_limit_is_stopped_and_ends_timeout(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    state, xcoms, states = run_and_collect(
        load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py").local_time_limit
    )
    assert state == "success", states  # max_failed_trials=1: the timed-out trial is allowed
    for batching in ("mapped", "batched"):
        records = json.loads((tmp_path / "sweeps" / f"local_limit_{batching}" / "summary.json").read_text())["records"]
        by_pace = {r["params"]["pace"]: r for r in records}
        assert by_pace["quick"]["state"] == "succeeded"
        assert by_pace["slow"]["state"] == "timeout", by_pace["slow"]
        assert "reached its time limit (00:00:03)" in by_pace["slow"]["error"]
        counts = xcoms[f"local_limit_{batching}.collect"]["return_value"]["counts"]
        assert counts["timeout"] == 1 and counts["succeeded"] == 1 and counts["failed"] == 0


@pytest.mark.parametrize(
    "resources, named",
    [
        ({"partition": "batch"}, "resources.partition='batch': a Slurm partition"),
        ({"qos": "high"}, "resources.qos='high': a Slurm QOS"),
    ],
)
def test_a_setting_the_local_backend_cannot_honour_is_refused_naming_it(airflow_db, resources, named):
    import pendulum
    from airflow.exceptions import AirflowException
    from airflow.sdk import DAG

    from airflow_provider_gpusched import Objective, SweepSpec, TrialResources, sweep_task_group

    spec = SweepSpec(
        name="s",
        test_config=[{"x": [1]}],
        command=["true"],
        objective=Objective("y"),
        resources=TrialResources(**resources),
    )
    with DAG("refused", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        with pytest.raises(
            AirflowException,
            match=f"sweep s: {named}.* is not something the local backend honours; "
            "run such trials with backend='slurm'",
        ):
            sweep_task_group(spec, backend="local")
        sweep_task_group(spec, backend="slurm", group_id="on_slurm")  # where it means something: accepted


def test_a_trial_whose_task_reached_its_time_limit_ends_timeout_on_either_backend():
    from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus
    from airflow_provider_gpusched.operators.local_gpu import WorkTimedOut
    from airflow_provider_gpusched.operators.slurm import SlurmJobFailed
    from airflow_provider_gpusched.task_groups.trial_operators import _ended_as

    def slurm(phase):
        status = JobStatus(job_id="7", state=phase.name, phase=phase, exit_code=0)
        return SlurmJobFailed(status.describe(), status.to_dict())

    assert _ended_as(WorkTimedOut("t: work on GPU(s) [0] reached its time limit")) == "timeout"
    assert _ended_as(slurm(JobPhase.TIMEOUT)) == "timeout"
    assert _ended_as(slurm(JobPhase.FAILED)) == "failed"
    assert _ended_as(RuntimeError("anything else")) == "failed"


def test_a_dag_skips_what_a_terminal_run_of_the_same_sweep_finished(airflow_db, tmp_path, monkeypatch):
    import os

    from airflow_provider_gpusched import run_sweep
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py")
    manager = LeaseManager(SimulatedInventory("4x24GiB"), os.environ["AIRFLOW__GPUSCHED__GPU_STATE_DIR"])
    summary = run_sweep(module.SHARED_WITH_TERMINAL, manager=manager, progress=False)  # the same results root
    assert summary["counts"]["succeeded"] == 3
    state, xcoms, states = run_and_collect(module.after_terminal)
    assert state == "success", states
    assert not [k for k in states if isinstance(k, tuple) and k[0] == "shared_with_terminal.trial"]  # none ran
    counts = xcoms["shared_with_terminal.collect"]["return_value"]["counts"]
    assert counts["skipped"] == 3 and counts["succeeded"] == 3
    assert xcoms["shared_with_terminal.leaderboard"]["return_value"]["score"] == summary["best"]["score"]


def test_fedflows_host_limits_are_gpusched_options_that_local_work_gets_by_default(airflow_db, monkeypatch):
    """fedflow's utilization-limit.cpu, remain-limit.memory and remain-limit.cuda-memory: [gpusched] options that
    every local-GPU request gets unless it gives its own."""
    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_gpusched import LocalGPUOperator
    from airflow_provider_gpusched.core.options import host_limit_defaults

    start = pendulum.datetime(2026, 1, 1, tz="UTC")
    with DAG("limits_default", schedule=None, start_date=start):
        plain = LocalGPUOperator(task_id="plain", command=["true"])
    assert (plain.request.max_cpu_percent, plain.request.min_free_ram, plain.request.memory_margin) == (None, None, 0)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__MAX_CPU_PERCENT", "80")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__MIN_FREE_RAM", "8GiB")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__GPU_MEMORY_MARGIN", "1GiB")
    with DAG("limits_set", schedule=None, start_date=start):
        limited = LocalGPUOperator(task_id="limited", command=["true"])
        own = LocalGPUOperator(task_id="own", command=["true"], max_cpu_percent=95, memory_margin=0)
    assert (limited.request.max_cpu_percent, limited.request.min_free_ram, limited.request.memory_margin) == (
        80.0,
        8 * 2**30,
        2**30,
    )
    assert (own.request.max_cpu_percent, own.request.memory_margin) == (95, 0)  # its own win
    assert host_limit_defaults() == {
        "max_cpu_percent": 80.0,
        "min_free_ram": "8GiB",
        "memory_margin": "1GiB",
        "max_waiting": 0,
    }
    # fedflow's scheduler.max-waiting: [gpusched] max_waiting, the default bound of two-stage work
    monkeypatch.setenv("AIRFLOW__GPUSCHED__MAX_WAITING", "3")
    with DAG("waiting_set", schedule=None, start_date=start):
        staged = LocalGPUOperator(task_id="staged", command=["true"], load_stage=True)
        bounded = LocalGPUOperator(task_id="bounded", command=["true"], load_stage=True, max_waiting=1)
    assert (staged.request.load_stage, staged.request.max_waiting, bounded.request.max_waiting) == (True, 3, 1)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__MAX_WAITING", "many")
    with pytest.raises(
        Exception, match=r"\[gpusched\] max_waiting: expected a whole number >= 0 \(0: no bound\), got 'many'"
    ):
        host_limit_defaults()


def test_a_two_stage_trial_loads_without_a_gpu_then_trains_on_the_one_it_is_given(airflow_db, tmp_path, monkeypatch):
    """fedflow's load and train stages, as sweep trials (mapped and batched) and as a @task.local_gpu function."""
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    state, _, states = run_and_collect(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py").two_stage)
    assert state == "success", states
    for batching in ("mapped", "batched"):
        records = json.loads((tmp_path / "sweeps" / f"two_stage_{batching}" / "summary.json").read_text())["records"]
        assert len(records) == 3 and all(r["state"] == "succeeded" for r in records)
        for record in records:
            result = record["result"]
            assert result["before"] == "" and len(result["gpus"]) == 1 and result["memory"] == str(2 * 2**30)

    dag = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py").two_stage
    state, xcoms, states = run_and_collect(dag)
    assert state == "success", states
    value = xcoms["load_then_train"]["return_value"]
    assert value["before"] == "" and value["n"] == 1000 and value["cvd"] == ",".join(map(str, value["gpus"]))
    assert [g["index"] for g in xcoms["load_then_train"]["gpus_used"]] == value["gpus"]


@pytest.mark.parametrize(
    "resources, named",
    [
        ({"gpu_memory": "2GiB"}, "resources.gpu_memory='2GiB': a share of a GPU's memory"),
        ({"devices": [0, 1]}, r"resources.devices=\[0, 1\]: this host's GPU indices"),
        ({"device_groups": [[0, 1]]}, r"resources.device_groups=\[\[0, 1\]\]: this host's GPU groups"),
        ({"load_stage": True}, r"resources.load_stage=True: a load stage before the GPUs"),
    ],
)
def test_a_setting_the_slurm_backend_cannot_honour_is_refused_naming_it(airflow_db, resources, named):
    import pendulum
    from airflow.exceptions import AirflowException
    from airflow.sdk import DAG

    from airflow_provider_gpusched import Objective, SweepSpec, TrialResources, sweep_task_group

    spec = SweepSpec(
        name="s",
        test_config=[{"x": [1]}],
        command=["true"],
        objective=Objective("y"),
        resources=TrialResources(**resources),
    )
    with DAG("refused_on_slurm", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        with pytest.raises(AirflowException, match=f"sweep s: {named}.* is not something the Slurm backend honours"):
            sweep_task_group(spec, backend="slurm")
        sweep_task_group(spec, backend="local", group_id="here")  # where it means something: accepted
