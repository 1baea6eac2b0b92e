"""docs/development.md's worked backend under Airflow: its Airflow side makes each trial a task, and a sweep on it
runs through dag.test() like one on the built-in backends (the same plan, collect and leaderboard tasks)."""

import os
from pathlib import Path

import pytest
import yaml

from tests.core.test_backends import _spec_data, process_backend  # noqa: F401 - the fixture, used by name

from .conftest import run_and_collect, the_dag


def _dag(spec, **options):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    with DAG(f"process_backend_{spec.name.replace('-', '_')}", schedule=None) as dag:
        sweep_task_group(spec, **options)
    return dag


DAG_FILE = """
from airflow.sdk import DAG

from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

with DAG("process_backend_sweep", schedule=None) as dag:
    sweep_task_group({spec!r}, backend="process")
"""


def test_a_sweep_on_the_documented_backend_runs_as_a_dag(airflow_db, process_backend, tmp_path):  # noqa: F811
    spec = tmp_path / "cpu-check.yaml"
    spec.write_text(yaml.safe_dump(_spec_data(tmp_path)))
    # dag.test() runs DAGs of the DAGs folder: the file is there while the test runs
    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / f"t_process_backend_{os.getpid()}.py"
    path.write_text(DAG_FILE.format(spec=str(spec)))
    try:
        state, xcoms, states = run_and_collect(the_dag(path))
    finally:
        path.unlink()
    assert state == "success", states
    trials = sorted(k for k in states if isinstance(k, tuple) and k[0] == "cpu-check.trial")
    assert len(trials) == 3 and all(states[k][0] == "success" for k in trials)
    assert xcoms["cpu-check.collect"]["return_value"]["counts"]["succeeded"] == 3
    assert xcoms["cpu-check.plan"]["gpusched_sweep_plan"]["backend"] == "process"


def test_the_documented_backend_refuses_a_batched_stage_by_name(airflow_db, process_backend, tmp_path):  # noqa: F811
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec

    spec = SweepSpec.from_dict(_spec_data(tmp_path), where="cpu-check.yaml")
    with pytest.raises(AirflowException, match="the process backend runs no batched stages; give batching='mapped'"):
        _dag(spec, backend="process", batching="batched")
    with pytest.raises(AirflowException, match=r"backend must be one of \('local', 'process', 'slurm'\)"):
        _dag(spec, backend="proces")


ONE_OFF_DAG = """
import sys

from airflow.sdk import DAG

from my_lab.airflow_backends import ProcessOperator

with DAG("process_backend_one_off", schedule=None) as dag:
    ProcessOperator(
        task_id="hello",
        command=[sys.executable, "-c", "import os; print('on', repr(os.environ['CUDA_VISIBLE_DEVICES']))"],
    )
    ProcessOperator(task_id="fails", command=[sys.executable, "-c", "raise SystemExit(3)"], retries=0)
"""


def test_a_one_off_task_runs_through_the_documented_backends_operator(airflow_db, process_backend):  # noqa: F811
    """The third backend's one-off operator, from the page's module alone: its command runs as a process with no
    GPU visible and its last line is the XCom; a command that fails fails its task, saying its status."""
    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / f"t_process_one_off_{os.getpid()}.py"
    path.write_text(ONE_OFF_DAG)
    try:
        state, xcoms, states = run_and_collect(the_dag(path))
    finally:
        path.unlink()
    assert states["hello"][0] == "success" and xcoms["hello"]["return_value"] == "on ''"
    assert states["fails"][0] == "failed"
    assert state == "failed"
