"""One import surface: ``from airflow_provider_gpusched import ...`` for everything a DAG file or notebook needs,
loaded on first use, without Airflow for the pure-Python names."""

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout


def test_the_package_and_its_core_names_import_without_airflow():
    out = _run(
        "import sys, airflow_provider_gpusched as g\n"
        "print('airflow' in sys.modules)\n"
        "from airflow_provider_gpusched import SweepSpec, Objective, TrialResources, loguniform, report, rank_info\n"
        "print('airflow' in sys.modules, SweepSpec.__module__, report.__module__)"
    )
    assert out.split("\n")[:2] == [
        "False",
        "False airflow_provider_gpusched.core.sweep.spec airflow_provider_gpusched.core.sweep.trial_report",
    ]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    import airflow_provider_gpusched

    with pytest.raises(AttributeError, match="has no attribute 'SweepSpecs'"):
        airflow_provider_gpusched.SweepSpecs  # noqa: B018
    with pytest.raises(ImportError, match="SweepSpecs"):
        exec("from airflow_provider_gpusched import SweepSpecs", {})
