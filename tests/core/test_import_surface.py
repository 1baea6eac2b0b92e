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
        "False airflow_provider_gpusched.core.sweep.definition.sweep_spec airflow_provider_gpusched.core.sweep.running.trial_report",
    ]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    import airflow_provider_gpusched

    with pytest.raises(AttributeError, match="has no attribute 'SweepSpecs'"):
        airflow_provider_gpusched.SweepSpecs  # noqa: B018
    with pytest.raises(ImportError, match="SweepSpecs"):
        exec("from airflow_provider_gpusched import SweepSpecs", {})


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("core.slurm.tracking", "core.slurm.poller", ["SharedJobPoller", "PollProblem"]),
        (
            "core.gpu.board",
            "core.board",
            ["build_board", "lease_record", "read_lease_record", "BoardLease", "MAX_NAME"],
        ),
    ],
)
def test_a_moved_module_still_imports_under_its_old_name_with_a_warning(old, new, names, monkeypatch):
    """Issue 78 moved these modules; their old import paths keep working, with a warning naming the new one at the
    line that imported the old (the import machinery's frames skipped)."""
    import importlib

    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning

    package = "airflow_provider_gpusched"
    monkeypatch.delitem(sys.modules, f"{package}.{old}", raising=False)
    with pytest.warns(GpuschedDeprecationWarning, match=f"{package}.{old} is now {package}.{new}") as caught:
        alias = importlib.import_module(f"{package}.{old}")
    assert [w.filename for w in caught] == [__file__]
    moved = importlib.import_module(f"{package}.{new}")
    for name in names:
        assert getattr(alias, name) is getattr(moved, name), name
