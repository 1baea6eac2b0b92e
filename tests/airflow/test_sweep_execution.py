"""How a sweep runs is one SweepExecution; bad options are refused naming the option."""

import pytest

from airflow_provider_gpusched.core.sweep import SweepSpec

# Airflow is imported by the tests, not when this module is collected (see tests/airflow/test_fleet_routing.py)
pytestmark = pytest.mark.airflow


def spec(n):
    return SweepSpec(name="exec", test_config=[{"x": list(range(n))}], command=["true", "{x}"])


def test_batching_and_chunks():
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    auto = SweepExecution(max_mapped_trials=10)
    assert not auto.batched(10) and auto.batched(11) and SweepExecution(batching="batched").batched(1)
    assert not SweepExecution(batching="mapped", max_mapped_trials=1).batched(1000)
    assert auto.chunk_size_for(3) == 2 and auto.chunk_size_for(5000) == 500
    assert SweepExecution(chunk_size=7).chunk_size_for(5000) == 7


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"backend": "k8s"}, "backend must be one of"),
        ({"batching": "some"}, "batching must be one of"),
        ({"chunk_size": 0}, "chunk_size must be a whole number >= 1"),
        ({"parallel": 1.5}, "parallel must be"),
        ({"poll_interval": 0}, "poll_interval must be seconds"),
        ({"trial_kwargs": ["retries"]}, "trial_kwargs must be"),
        ({"chunksize": 10}, "unknown option(s) chunksize; expected one of backend, batching"),
    ],
)
def test_bad_options_are_named(options, problem, tmp_path):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    with DAG("t_exec_bad", schedule=None), pytest.raises(AirflowException) as err:
        sweep_task_group(spec(2), results_root=str(tmp_path), **options)
    assert problem in str(err.value) and str(err.value).startswith("sweep exec: ")


def test_execution_object_or_shortcuts_not_both(tmp_path):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.task_groups.execution import SweepExecution
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    with DAG("t_exec_both", schedule=None), pytest.raises(AirflowException, match="not both"):
        sweep_task_group(spec(2), results_root=str(tmp_path), execution=SweepExecution(), backend="slurm")


def test_execution_object_builds_the_same_group_as_shortcuts(tmp_path):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.task_groups.execution import SweepExecution
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    shapes = []
    for i, kwargs in enumerate(
        (
            {
                "execution": SweepExecution(
                    backend="slurm", batching="batched", chunk_size=2, max_array_parallel=2, trial_kwargs={"retries": 2}
                )
            },
            {
                "backend": "slurm",
                "batching": "batched",
                "chunk_size": 2,
                "max_array_parallel": 2,
                "trial_kwargs": {"retries": 2},
            },
        )
    ):
        with DAG(f"t_exec_{i}", schedule=None) as dag:
            sweep_task_group(spec(5), results_root=str(tmp_path), **kwargs)
        array = dag.get_task("exec.trial_array")
        shapes.append(
            (sorted(dag.task_ids), array.partial_kwargs.get("retries"), array.partial_kwargs["slurm_conn_id"])
        )
    assert shapes[0] == shapes[1] and shapes[0][1:] == (2, "slurm_default")


def test_a_sweep_name_the_spec_accepts_is_a_group_id_airflow_accepts():
    """Issue 53, item 8: the spec refuses the names Airflow would refuse as a task group id
    (tests/core/test_sweep_spec.py), and the ones it accepts Airflow accepts."""
    from airflow.sdk import DAG, TaskGroup

    name = SweepSpec(name="lr-v2_b", command=["train"], test_config=[{"lr": [0.1]}]).name
    with DAG("names", schedule=None):
        assert TaskGroup(name).group_id == "lr-v2_b"


def test_a_relative_script_of_a_spec_made_in_a_dag_file_is_found_next_to_the_dag_file(tmp_path):
    """The DAG file's folder (Airflow's ``dag.fileloc``) anchors the command's relative paths: the trial runs in
    its own folder, where ``scripts/train.py`` would name nothing."""
    from .conftest import load_dag_file

    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text("print('train')\n")
    (tmp_path / "dag_with_relative_script.py").write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_provider_gpusched import SweepSpec\n"
        "from airflow_provider_gpusched.task_groups.sweep import sweep_task_group\n"
        "SPEC = SweepSpec(name='relative', test_config=[{'x': [1, 2]}], command=['python', 'scripts/train.py', '{x}'])\n"
        "with DAG('relative_script', schedule=None) as dag:\n"
        "    sweep_task_group(SPEC)\n"
    )
    module = load_dag_file(tmp_path / "dag_with_relative_script.py")
    assert module.SPEC.base_dir == str(tmp_path)
    assert module.SPEC.command == ["python", str(tmp_path / "scripts" / "train.py"), "{x}"]
