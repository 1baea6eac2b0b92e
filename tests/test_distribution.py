"""What goes to PyPI: `python -m build` makes a wheel and an sdist that `twine check` accepts; the sdist carries
LICENSE and what it takes to run the tests; metadata has what a provider on PyPI has."""

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import airflow_provider_gpusched
from tests.session_files import made_once

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The wheel and the sdist, built once per test session (tests/session_files.py), from a copy of the checkout:
    the sdist build writes setuptools' metadata (``*.egg-info``) next to the sources, and in the checkout itself that
    is a second copy of the package for every process the other test workers start meanwhile (see
    test_a_process_started_in_the_checkout_sees_one_installed_distribution)."""
    out = made_once(tmp_path_factory, "dist", lambda folder: _build(tmp_path_factory, folder))
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return wheels[0], sdists[0]


def _build(tmp_path_factory, out: Path) -> None:
    source = tmp_path_factory.mktemp("source") / "checkout"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".slurm*",
            ".stack*",
            ".airflow-demo",
            "test-artifacts",
            "__pycache__",
            "*.egg-info",
            ".mypy_cache",
            ".ruff_cache",
            ".hypothesis",
            "build",
            "dist",
        ),
    )
    # in this environment (the `test` extra holds setuptools): `build` still checks build-system.requires against
    # it, and needs no network or fresh virtual environment (half the CPU of an isolated build)
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (REPO / "airflow_provider_gpusched.egg-info").exists()


@pytest.mark.heavy
def test_twine_accepts_both(dist):
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


@pytest.mark.heavy
def test_the_wheel_has_the_license_the_ui_bundle_and_the_entry_points(dist):
    wheel, _ = dist
    version = airflow_provider_gpusched.__version__
    assert wheel.name == f"airflow_provider_gpusched-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"airflow_provider_gpusched-{version}.dist-info"
        assert f"{info}/licenses/LICENSE" in names
        assert "airflow_provider_gpusched/plugins/static/gpusched.js" in names
        with open(REPO / "airflow_provider_gpusched" / "plugins" / "static" / "gpusched.js", "rb") as f:
            assert zf.read("airflow_provider_gpusched/plugins/static/gpusched.js") == f.read()  # the built bundle
        assert "airflow_provider_gpusched/py.typed" in names  # PEP 561: users' type checkers read the annotations
        assert not [n for n in names if n.startswith(("tests/", "dags/", "docker/"))]
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode())
    assert "provider_info = airflow_provider_gpusched.provider_info:get_provider_info" in entry_points
    assert "gpusched = airflow_provider_gpusched.plugins:GpuschedPlugin" in entry_points
    assert meta["License-Expression"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier")
    for c in (
        "Framework :: Apache Airflow",
        "Framework :: Apache Airflow :: Provider",
        "Development Status :: 4 - Beta",
        "Programming Language :: Python :: 3.11",
    ):
        assert c in classifiers
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Documentation", "Source", "Issues"}
    assert meta["Keywords"] and "slurm" in meta["Keywords"]
    requires = meta.get_all("Requires-Dist")
    assert any(
        r.startswith("apache-airflow<4,>=3.3.2") or r.startswith("apache-airflow>=3.3.2,<4") for r in requires
    ), requires
    assert any(r.startswith("asyncpg") and 'extra == "postgres"' in r for r in requires), requires
    # NumPy and SciPy only with the partitioner's extra (docs/compatibility.md); the trackers' packages in theirs
    for name, extra in (
        ("numpy", "partition"),
        ("scipy", "partition"),
        ("tensorboard", "tensorboard"),
        ("wandb", "wandb"),
    ):
        found = [r for r in requires if re.match(rf"{name}\b", r)]
        assert found and all(f'extra == "{extra}"' in r for r in found), (name, found)


@pytest.mark.heavy
def test_the_sdist_carries_license_tests_examples_and_docker(dist):
    _, sdist = dist
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for path in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "tests/conftest.py",
        "tests/airflow/test_import_smoke.py",
        "dags/slurm_command.py",
        "scripts/slurm-cluster.sh",
        "scripts/test-compat.sh",
        "scripts/test-fast.sh",
        "scripts/lint.sh",
        ".pre-commit-config.yaml",
        "docker/compose.yaml",
        "constraints/airflow-3.3.2.txt",
        "airflow_provider_gpusched/plugins/static/gpusched.js",
        "ui/package.json",  # the UI's sources and lock file: the bundle can be built again from the sdist
        "ui/package-lock.json",
        "ui/src/main.tsx",
        "ui/openapi.json",
    ):
        assert path in names, path
    assert not [n for n in names if "node_modules" in n]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_python_classifiers_are_the_versions_docs_compatibility_says_were_tested():
    """Classifiers list only the Python versions the compatibility matrix records as tested."""
    import re

    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        c.rsplit(" ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    matrix = (REPO / "docs" / "compatibility.md").read_text()
    tested = set(re.findall(r"^\| (?:3\.\d+\.\d+) \| (3\.\d+) \|.*\| passed", matrix, re.M))
    assert declared and declared == tested, (declared, tested)
    floor = re.search(r"apache-airflow>=([\d.]+)", " ".join(project["dependencies"])).group(1)
    assert re.search(rf"^\| {re.escape(floor)} \| 3\.\d+ \|.*\| passed", matrix, re.M), f"floor {floor} not tested"


def test_a_process_started_in_the_checkout_sees_one_installed_distribution():
    """A second copy of the package's metadata (setuptools' egg-info in the checkout) doubles its entry points, and
    Airflow's Task SDK stops loading plugins at the first duplicate: the OpenLineage listener never ran in tasks.
    scripts/bootstrap.sh removes it; every process started here must see exactly one."""
    code = (
        "import importlib.metadata as m; "
        "print(len([d for d in m.distributions() if d.metadata['Name'] == 'airflow-provider-gpusched']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1", "remove airflow_provider_gpusched.egg-info from the checkout (bootstrap.sh does)"
