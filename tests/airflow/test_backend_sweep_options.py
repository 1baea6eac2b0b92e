"""A backend owns its sweep options (issue 78, item 1): ``SweepExecution`` carries one ``options`` value that the
backend's ``sweep_options`` dataclass parses and checks, and its ``sweep_keywords`` are shortcuts for them (the Slurm
backend's ``slurm_conn_id`` and ``max_array_parallel``). A third backend declares its own without touching
task_groups/execution.py."""

from dataclasses import dataclass

import pytest

from airflow_provider_gpusched.core.backends import Backend, register_backend, unregister_backend
from airflow_provider_gpusched.core.errors import InvalidArgumentError

# Airflow is imported by the tests, not when this module is collected (see tests/airflow/test_fleet_routing.py)
pytestmark = pytest.mark.airflow


@dataclass(frozen=True)
class ToySweepOptions:
    speed: int = 1
    lane: str = "fast"

    def __post_init__(self):
        if not isinstance(self.speed, int) or self.speed < 1:
            raise InvalidArgumentError("speed", self.speed, "a whole number >= 1")


class ToyBackend(Backend):
    name = "toy"
    summary = "toy"
    sweep_options = ToySweepOptions
    sweep_keywords = {"toy_speed": "speed"}


@pytest.fixture
def toy():
    register_backend(ToyBackend)
    try:
        yield
    finally:
        unregister_backend("toy")


def test_a_third_backend_parses_its_own_options(toy):
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    assert SweepExecution(backend="toy").options == ToySweepOptions()
    assert SweepExecution(backend="toy", options={"lane": "slow"}).options == ToySweepOptions(lane="slow")
    assert SweepExecution(backend="toy", options=ToySweepOptions(speed=2), toy_speed=3).options == ToySweepOptions(3)
    # another backend's keywords are left aside (a DAG that switches backends keeps them)
    assert SweepExecution(backend="toy", slurm_conn_id="c", max_array_parallel=2).options == ToySweepOptions()
    assert SweepExecution(backend="slurm", toy_speed=5).options.conn_id == "slurm_default"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"toy_speed": 0}, "toy_speed must be a whole number >= 1, got 0"),
        ({"options": {"speed": 0}}, "options.speed must be a whole number >= 1, got 0"),
        ({"options": {"sped": 2}}, "options: unknown option(s) sped of the toy backend; expected one of speed, lane"),
        ({"options": 3}, "options must be a ToySweepOptions or a mapping of its fields (the toy backend's options)"),
        ({"toy_sped": 2}, "unknown option(s) toy_sped; expected one of backend, batching"),
    ],
)
def test_its_options_are_refused_by_name(toy, options, problem):
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    with pytest.raises(AirflowException) as err:
        SweepExecution(backend="toy", **options)
    assert problem in str(err.value)


def test_the_slurm_keywords_are_its_options_and_a_backend_without_options_takes_none():
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.slurm.options import SlurmSweepOptions
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    by_keywords = SweepExecution(backend="slurm", slurm_conn_id="lab", max_array_parallel=4)
    assert by_keywords == SweepExecution(backend="slurm", options=SlurmSweepOptions("lab", 4))
    assert by_keywords.options.array_parallel(None) == 4 and by_keywords.options.array_parallel(2) == 2
    assert SweepExecution(backend="slurm").options.array_parallel(3) == 3
    assert SweepExecution(backend="local", slurm_conn_id="lab").options is None
    with pytest.raises(AirflowException, match="max_array_parallel must be a whole number >= 1, got 0"):
        SweepExecution(backend="slurm", max_array_parallel=0)
    with pytest.raises(AirflowException, match="the local backend takes no options"):
        SweepExecution(backend="local", options={"conn_id": "lab"})


def test_the_slurm_options_reach_its_trial_operator(tmp_path):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.core.slurm.options import SlurmSweepOptions
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.execution import SweepExecution
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    spec = SweepSpec(name="opts", test_config=[{"x": [1, 2, 3]}], command=["true", "{x}"])
    execution = SweepExecution(backend="slurm", batching="batched", options=SlurmSweepOptions(conn_id="lab"))
    with DAG("t_slurm_options", schedule=None) as dag:
        sweep_task_group(spec, results_root=str(tmp_path), execution=execution)
    assert dag.get_task("opts.trial_array").partial_kwargs["slurm_conn_id"] == "lab"


@pytest.fixture
def broken():
    """An installed backend whose module cannot be imported (its entry point names a module that is gone)."""
    register_backend("no_such_module_of_gpusched:GoneBackend", "gone")
    try:
        yield
    finally:
        unregister_backend("gone")


def test_a_broken_installed_backend_breaks_no_other_backends_shortcuts(broken):
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    by_keywords = SweepExecution(backend="slurm", slurm_conn_id="lab", max_array_parallel=2)
    assert by_keywords.options.conn_id == "lab" and by_keywords.options.max_array_parallel == 2
    assert SweepExecution.from_options(None, {"backend": "slurm", "slurm_conn_id": "lab"}) == SweepExecution(
        "slurm", options={"conn_id": "lab"}
    )
    assert SweepExecution(backend="local", slurm_conn_id="lab").options is None  # another backend's: left aside
    with pytest.raises(AirflowException, match="unknown option"):  # an unknown name is still refused by name
        SweepExecution(backend="slurm", slurm_con_id="lab")
    with pytest.raises(GpuschedError, match="backend 'gone': cannot load"):  # the broken one says so where named
        SweepExecution(backend="gone")


def test_the_old_attributes_answer_from_the_options_with_a_warning():
    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    slurm = SweepExecution(backend="slurm", slurm_conn_id="lab", max_array_parallel=4)
    with pytest.warns(GpuschedDeprecationWarning, match=r"SweepExecution\.slurm_conn_id is now .*options\.conn_id"):
        assert slurm.slurm_conn_id == "lab"
    with pytest.warns(GpuschedDeprecationWarning):
        assert slurm.max_array_parallel == 4
    local = SweepExecution(backend="local", slurm_conn_id="lab")  # as before: another backend's is its default
    with pytest.warns(GpuschedDeprecationWarning):
        assert local.slurm_conn_id == "slurm_default" and local.max_array_parallel is None
    with pytest.raises(AttributeError, match="no attribute 'conn_id'"):
        local.conn_id  # noqa: B018


def test_replace_switches_backends_leaving_the_other_backends_options_aside():
    import copy
    import dataclasses
    import pickle

    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.slurm.options import SlurmSweepOptions
    from airflow_provider_gpusched.task_groups.execution import SweepExecution

    slurm = SweepExecution(backend="slurm", batching="batched", slurm_conn_id="lab", max_array_parallel=4)
    local = dataclasses.replace(slurm, backend="local")
    assert local.options is None and local.batching == "batched"
    assert dataclasses.replace(slurm, chunk_size=3).options == SlurmSweepOptions("lab", 4)
    assert dataclasses.replace(local, backend="slurm").options == SlurmSweepOptions()
    assert copy.deepcopy(slurm) == slurm == pickle.loads(pickle.dumps(slurm))
    # a connection id of None was taken and failed when the task ran: it is refused where it is written
    with pytest.raises(AirflowException, match="slurm_conn_id must be an Airflow connection id, got None"):
        SweepExecution(backend="slurm", slurm_conn_id=None)
    assert SweepExecution(backend="local", slurm_conn_id=None).options is None


#: (parallel or max_array_parallel, the spec's max_workers) -> trials of a chunk at once (as before: one rule)
CAPS = [
    (None, None, None),
    (4, None, 4),
    (None, 3, 3),
    (2, 3, 2),
    (3, 3, 3),
    (5, 3, 3),
]


@pytest.mark.parametrize(("parallel", "max_workers", "expected"), CAPS)
def test_every_backend_caps_a_chunks_trials_by_max_workers_alike(monkeypatch, parallel, max_workers, expected):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.backends import AirflowBackend, local
    from airflow_provider_gpusched.backends.slurm import SlurmAirflowBackend
    from airflow_provider_gpusched.core.backends import within_max_workers
    from airflow_provider_gpusched.core.slurm.options import SlurmSweepOptions
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.stage_view import StageView

    assert within_max_workers(parallel, max_workers) == expected
    slurm = SlurmSweepOptions(max_array_parallel=parallel)
    assert slurm.array_parallel(max_workers) == expected
    assert SlurmAirflowBackend().chunk_parallel(slurm, max_workers) == expected
    assert AirflowBackend().chunk_parallel(None, max_workers) == max_workers  # no bound of its own
    given = []
    monkeypatch.setattr(local, "_ChunkRunner", lambda *args: given.append(args[3]))
    spec = SweepSpec(name="cap", test_config=[{"x": [1, 2]}], command=["true", "{x}"])
    view = StageView("local", "cap", spec.resources, None, None, False, max_workers, parallel, 8, None, {})
    with DAG(f"t_cap_{parallel}_{max_workers}", schedule=None):
        local.LocalAirflowBackend().run_chunks(view, None, [0, 1])
    assert given == [expected]
