"""Every name of the package's import surface resolves to the object its module defines (Airflow adapters too)."""

import importlib

import pytest

pytestmark = pytest.mark.airflow


def test_every_exported_name_is_its_modules_object():
    import airflow_provider_gpusched as package

    names = [n for n in package.__all__ if n != "__version__"]
    assert names == list(package._EXPORTS)  # __all__ is written out for linters: it lists exactly the exports
    assert {"SweepSpec", "sweep_task_group", "LocalGPUOperator", "SlurmJobOperator", "report"} <= set(names)
    for name in names:
        module = importlib.import_module(f"airflow_provider_gpusched.{package._EXPORTS[name]}")
        assert getattr(package, name) is getattr(module, name), name
    assert set(names) <= set(dir(package))


def test_one_vocabulary_old_names_still_work_with_a_warning_and_both_names_are_refused():
    import pendulum
    from airflow.exceptions import AirflowException
    from airflow.sdk import DAG

    from airflow_provider_gpusched import LocalGPUOperator, SlurmJobOperator
    from airflow_provider_gpusched.operators.arguments import GpuschedDeprecationWarning

    with DAG("vocabulary", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        new = SlurmJobOperator(task_id="new", command="true", cpus=4, env={"A": "1"})
        with pytest.warns(GpuschedDeprecationWarning, match="old: cpus_per_task is now called cpus"):
            old = SlurmJobOperator(task_id="old", command="true", cpus_per_task=4, environment={"A": "1"})
        assert (new.cpus_per_task, new.environment) == (old.cpus_per_task, old.environment) == (4, {"A": "1"})
        with pytest.raises(AirflowException, match="both: give cpus or cpus_per_task \\(its old name\\), not both"):
            SlurmJobOperator(task_id="both", command="true", cpus=4, cpus_per_task=4)
        with pytest.raises(AirflowException, match="env2: give env or environment"):
            SlurmJobOperator(task_id="env2", command="true", env={}, environment={})
        assert LocalGPUOperator(task_id="mem", command=["true"], mem="8GiB").request.host_memory == 8 * 2**30
        with pytest.warns(GpuschedDeprecationWarning, match="host_memory is now called mem"):
            LocalGPUOperator(task_id="mem_old", command=["true"], host_memory="8GiB")
        with pytest.raises(AirflowException, match="give mem or host_memory"):
            LocalGPUOperator(task_id="mem_both", command=["true"], mem="8GiB", host_memory="8GiB")


def test_every_lazy_export_resolves():
    """Each name the package and core.sweep load on first use is found in the module their tables name (a moved
    name whose table was not updated fails here, not in a user's import)."""
    import airflow_provider_gpusched as package
    from airflow_provider_gpusched.core import sweep

    for module in (package, sweep):
        for name in module.__all__:
            value = getattr(module, name)
            assert value is not None, f"{module.__name__}.{name}"
    assert package.EvolutionSettings.__module__ == "airflow_provider_gpusched.core.sweep.searches.evolution"


def test_the_trial_operators_moved_to_their_wings_still_import_by_their_old_names_with_a_warning():
    """Each backend's sweep-trial operator lives in its backend's Airflow module; the old module answers the old
    names with a GpuschedDeprecationWarning naming the new home, and refuses a name it never had."""
    import airflow_provider_gpusched.task_groups.trial_operators as old
    from airflow_provider_gpusched.backends.local import SweepTrialGPUOperator
    from airflow_provider_gpusched.backends.slurm import SweepTrialSlurmOperator
    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning

    for name, cls in (
        ("SweepTrialGPUOperator", SweepTrialGPUOperator),
        ("SweepTrialSlurmOperator", SweepTrialSlurmOperator),
    ):
        with pytest.warns(GpuschedDeprecationWarning, match=rf"trial_operators\.{name} is now .*backends\.\w+\.{name}"):
            assert getattr(old, name) is cls
        assert issubclass(cls, old.RecordsTrialFailures)
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        old.Nothing  # noqa: B018
