"""How a sweep runs is one SweepExecution; bad options are refused naming the option."""

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched.core.sweep import SweepSpec
from airflow_provider_gpusched.task_groups.execution import SweepExecution
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

pytestmark = pytest.mark.airflow


def spec(n):
    return SweepSpec(name="exec", test_config=[{"x": list(range(n))}], command=["true", "{x}"])


def test_batching_and_chunks():
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
    with DAG("t_exec_bad", schedule=None), pytest.raises(AirflowException) as err:
        sweep_task_group(spec(2), results_root=str(tmp_path), **options)
    assert problem in str(err.value) and str(err.value).startswith("sweep exec: ")


def test_execution_object_or_shortcuts_not_both(tmp_path):
    with DAG("t_exec_both", schedule=None), pytest.raises(AirflowException, match="not both"):
        sweep_task_group(spec(2), results_root=str(tmp_path), execution=SweepExecution(), backend="slurm")


def test_execution_object_builds_the_same_group_as_shortcuts(tmp_path):
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
