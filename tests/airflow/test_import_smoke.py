"""Import smoke test: on the installed Airflow, every module of the package imports and everything the provider
info names exists. scripts/test-compat.sh runs this first on each Airflow version the package declares."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_gpusched
from airflow_provider_gpusched.provider_info import get_provider_info

pytestmark = pytest.mark.airflow

PACKAGE_DIR = Path(airflow_provider_gpusched.__file__).parent


def _module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _module_names()


def test_the_package_has_the_modules_it_is_known_for():
    assert len(MODULES) > 40
    for name in (
        "airflow_provider_gpusched.operators.local_gpu",
        "airflow_provider_gpusched.triggers.slurm",
        "airflow_provider_gpusched.plugins.api",
        "airflow_provider_gpusched.core.partition",
    ):
        assert name in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_imports(module):
    importlib.import_module(module)


def _resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def test_everything_the_provider_info_names_exists():
    info = get_provider_info()
    for conn in info["connection-types"]:
        assert _resolve(conn["hook-class-name"]).conn_type == conn["connection-type"]
    for link in info["extra-links"]:
        _resolve(link)
    for section in ("operators", "sensors", "hooks"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for entry in info["triggers"]:
        for module in entry["python-modules"]:
            importlib.import_module(module)
    for entry in info.get("task-decorators", []):
        assert callable(_resolve(entry["class-name"]))
    from airflow.sdk import BaseNotifier

    assert info["notifications"] and all(issubclass(_resolve(n), BaseNotifier) for n in info["notifications"])


def test_airflow_lists_the_hooks_without_an_import_error(airflow_db):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "hooks"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "airflow_provider_gpusched.hooks.slurm.SlurmHook" in proc.stdout
    assert "Error when importing" not in proc.stdout + proc.stderr


def test_the_installed_version_is_the_package_version():
    from importlib.metadata import version

    assert version("airflow-provider-gpusched") == airflow_provider_gpusched.__version__
