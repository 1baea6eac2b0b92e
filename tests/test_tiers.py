"""The tiers (docs/development.md "Tiers"): the fast tier's command runs only tests that need no service, starts
none, and a test that asks for one there fails saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: what starting a service or installing something would run
SERVICES = ("sinfo", "slurmctld", "slurmd", "munged", "sshd", "chromium", "apt-get", "initdb", "pg_ctl", "docker")


def shims(tmp_path: Path) -> tuple[dict, Path]:
    """An environment whose PATH finds a recording stand-in for each of SERVICES first, and the log they write."""
    bin_dir, log = tmp_path / "bin", tmp_path / "called.log"
    bin_dir.mkdir()
    for name in SERVICES:
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit 1\n')
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "GPUSCHED_TIER", "PYTEST_XDIST_WORKER")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env, log


@pytest.mark.heavy  # 1.1 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_fast_tier_selects_only_tests_that_need_no_service(tmp_path):
    env, log = shims(tmp_path)
    files = [
        "tests/core/test_units.py",
        "tests/gpu/test_cli.py",
        "tests/airflow/test_provider.py",
        "tests/airflow/test_ui_api.py",
        "tests/airflow/test_slurm_dags.py",
        "tests/slurm/test_client.py",
        "tests/stack/test_deployed.py",
        "tests/fleet/test_fleet.py",
        "tests/test_docker.py",
        "tests/test_distribution.py",
    ]
    out = subprocess.run(
        ["bash", "scripts/test-fast.sh", "--collect-only", "-q", "-n", "0", *files],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    chosen = {line.split("::")[0] for line in out.stdout.splitlines() if "::" in line}
    ids = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    # tests/airflow/test_provider.py needs Airflow but no database; the others need a cluster, a database, a stack
    assert chosen == {
        "tests/core/test_units.py",
        "tests/gpu/test_cli.py",
        "tests/airflow/test_provider.py",
        "tests/test_docker.py",
        "tests/test_distribution.py",
    }, chosen
    # a test marked heavy (building the wheel) runs in the whole suite only; its module's other tests run here
    assert "tests/test_distribution.py::test_twine_accepts_both" not in ids, sorted(ids)
    assert (
        "tests/test_distribution.py::test_python_classifiers_are_the_versions_docs_compatibility_says_were_tested"
        in ids
    )
    assert not log.exists(), log.read_text()


@pytest.mark.heavy  # 0.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_fast_tier_runs_its_tests_and_starts_nothing(tmp_path):
    env, log = shims(tmp_path)
    out = subprocess.run(
        ["bash", "scripts/test-fast.sh", "-q", "-n", "0", "tests/core/test_units.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "deselected" not in out.stdout, out.stdout[-1000:]
    assert not log.exists(), log.read_text()


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_test_that_asks_for_a_service_in_the_fast_tier_fails_saying_so(tmp_path):
    (tmp_path / "test_wrong_tier.py").write_text("def test_needs_slurm(slurm_cluster):\n    pass\n")
    env, log = shims(tmp_path)
    env["GPUSCHED_TIER"] = "fast"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "0",
            str(tmp_path / "test_wrong_tier.py"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout[-3000:]
    assert (
        "the fast tier (scripts/test-fast.sh) must start no service, and this test asks for the Slurm test "
        "cluster" in out.stdout
    ), out.stdout[-3000:]
    assert not log.exists(), log.read_text()


def test_the_tests_of_a_shared_deployment_are_one_unit_of_work_on_the_workers():
    """scripts/test.sh's workers: the stack tier's tests (one deployment on fixed ports) and the fleet tier's go to
    one worker each, as one unit; any other test is a unit of its own."""
    from tests.conftest import tier_unit

    assert (
        tier_unit("tests/stack/test_ui.py::test_pages") == tier_unit("tests/stack/test_deployed.py::test_x") == "stack"
    )
    assert tier_unit("tests/fleet/test_fleet.py::test_y") == "fleet"
    assert tier_unit("tests/slurm/test_client.py::test_cancel") == "tests/slurm/test_client.py::test_cancel"
    assert tier_unit("tests/core/test_stacked.py::test_z") == "tests/core/test_stacked.py::test_z"
    # the modules that import PyTorch in the test process: one unit, so one worker pays the import
    assert tier_unit("tests/core/test_profile.py::test_a") == tier_unit("tests/core/test_model_cost.py::b") == "pytorch"
    # the partitioner's tests share its cases, read once per module: one unit, so they are read once
    assert (
        tier_unit("tests/core/test_partition.py::a") == tier_unit("tests/core/test_partition.py::b[64]") == "partition"
    )
    # the fast tier's tests that import Airflow in the test process: one unit, so one worker pays that import
    assert tier_unit("tests/airflow/test_provider.py::a", fast_tier=True) == "airflow"
    assert tier_unit("tests/airflow/test_ui_api.py::b", fast_tier=False) == "tests/airflow/test_ui_api.py::b"


@pytest.mark.heavy  # 1.2 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_collecting_the_tests_imports_no_airflow():
    """Every pytest-xdist worker imports every test module to collect it; a module that imports Airflow (2.7 s of
    CPU) at its top makes each worker pay for it, where the fast tier gives the tests that need Airflow to one."""
    code = (
        "import importlib, pathlib, sys\n"
        "for path in sorted(pathlib.Path('tests').rglob('*.py')):\n"
        "    if not (path.name.startswith('test_') or path.name == 'conftest.py'):\n"
        "        continue  # what pytest collects, and what those import\n"
        "    importlib.import_module('.'.join(path.with_suffix('').parts))\n"
        "    if 'airflow' in sys.modules:\n"
        "        sys.exit(f'{path} imports Airflow when it is collected')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


def test_the_deployment_tiers_which_the_fast_tier_does_not_collect_mark_every_module():
    """scripts/test-fast.sh does not collect tests/stack and tests/fleet at all (their modules' imports cost each
    worker): that is right only while every module there is marked as needing its deployment."""
    for tier in ("stack", "fleet"):
        modules = sorted((REPO / "tests" / tier).glob("test_*.py"))
        assert modules, tier
        for module in modules:
            text = module.read_text()
            assert f"pytestmark = pytest.mark.{tier}" in text or f"pytestmark = [pytest.mark.{tier}" in text, module


def test_the_modules_the_scheduling_names_exist():
    """A module renamed or removed would silently leave its unit or its early start (tests/conftest.py)."""
    from tests.conftest import SHARED_START_UNITS, START_EARLY

    for module in (*SHARED_START_UNITS, *START_EARLY):
        assert (REPO / module).is_file(), module
