"""A backend's Airflow side is handed a ``StageView`` of a sweep stage (task_groups/stage_view.py), never the task
group's stage itself (issue 78, item 1)."""

import pytest

# Airflow is imported by the tests, not when this module is collected (see tests/airflow/test_fleet_routing.py)
pytestmark = pytest.mark.airflow


def _view(**changes):
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.stage_view import StageView

    spec = SweepSpec(name="v", test_config=[{"x": [1, 2]}], command=["true", "{x}"])
    fields = dict(
        backend="local",
        sweep="v",
        resources=spec.resources,
        options=None,
        session=None,
        asynchronous=False,
        max_workers=None,
        parallel=None,
        trials_per_process=8,
        poll_interval=2.0,
        trial_kwargs={"retries": 1},
    )
    return StageView(**{**fields, **changes})


def test_the_trial_tasks_arguments():
    assert _view().trial_task("trial", "{{ x }}") == {
        "task_id": "trial",
        "map_index_template": "{{ x }}",
        "sweep_name": "v",
        "poll_interval": 2.0,
        "retries": 1,
    }
    # max_workers: trials of a DAG run at once; a chunk's task (a job array) holds them itself: one at a time
    assert _view(max_workers=3).trial_task("trial", "l")["max_active_tis_per_dagrun"] == 3
    assert _view(max_workers=3).trial_task("trial_array", "l", chunk=True)["max_active_tis_per_dagrun"] == 1


def test_each_backend_is_handed_the_view_not_the_stage(tmp_path, monkeypatch):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.backends.local import LocalAirflowBackend
    from airflow_provider_gpusched.backends.slurm import SlurmAirflowBackend
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.execution import SweepExecution
    from airflow_provider_gpusched.task_groups.stage_view import StageView
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    handed = []
    for cls in (LocalAirflowBackend, SlurmAirflowBackend):
        for method in ("trial_operator", "run_chunks"):
            original = getattr(cls, method)

            def spy(self, view, *args, _original=original):
                handed.append(view)
                return _original(self, view, *args)

            monkeypatch.setattr(cls, method, spy)
    spec = SweepSpec(name="seen", test_config=[{"x": [1, 2, 3]}], command=["true", "{x}"])
    for i, (backend, batching) in enumerate([("local", "mapped"), ("local", "batched"), ("slurm", "batched")]):
        with DAG(f"t_stage_view_{i}", schedule=None):
            sweep_task_group(spec, results_root=str(tmp_path), execution=SweepExecution(backend, batching))
    assert len(handed) == 4 and all(type(v) is StageView for v in handed), handed
    assert [v.backend for v in handed] == ["local", "local", "slurm", "slurm"]


def test_an_adapter_written_for_the_stage_still_reads_its_spec_and_execution_with_a_warning(tmp_path, monkeypatch):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.backends.local import LocalAirflowBackend
    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.execution import SweepExecution
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    handed = []
    original = LocalAirflowBackend.run_chunks

    def old_adapter(self, stage, round_no, planned):  # what an adapter of the stage read
        with pytest.warns(
            GpuschedDeprecationWarning, match=r"StageView, not the sweep stage: read .* instead of \.spec"
        ):
            handed.append(stage.spec)
        with pytest.warns(GpuschedDeprecationWarning, match=r"instead of \.execution"):
            handed.append(stage.execution)
        with pytest.warns(GpuschedDeprecationWarning, match=r"runner_task\(\.\.\.\) instead of \.class_kwargs"):
            handed.append(stage.class_kwargs(task_id="run_batch") == stage.runner_task(task_id="run_batch"))
        return original(self, stage, round_no, planned)

    monkeypatch.setattr(LocalAirflowBackend, "run_chunks", old_adapter)
    spec = SweepSpec(name="old", test_config=[{"x": [1, 2, 3]}], command=["true", "{x}"])
    execution = SweepExecution("local", "batched", parallel=2)
    with DAG("t_stage_view_old_adapter", schedule=None):
        sweep_task_group(spec, results_root=str(tmp_path), execution=execution)
    assert handed[0].name == "old" and handed[1] is execution and handed[2] is True


def test_a_view_made_without_its_execution_says_so():
    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning

    with pytest.raises(AttributeError, match="made without its execution"), pytest.warns(GpuschedDeprecationWarning):
        _view().execution  # noqa: B018
