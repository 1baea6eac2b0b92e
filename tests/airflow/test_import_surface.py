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
