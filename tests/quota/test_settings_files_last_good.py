"""Issue 76, item 4: a typo (``wieght``) in the live quota file turned every DAG file into an import error and
rescheduled starting tasks. A broken settings file read while the scheduler runs (``[gpusched] quotas``,
``[gpusched] job_classes``) keeps its last good version in force, in this process and in a fresh one (a DAG file's
parse, a new task), and says so: the task log, ``gpusched queue health``, the board's quota view, the metrics.
Fixing the file takes effect without a restart. A file that was never good fails as before."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.health import FAIL, check_quotas
from airflow_provider_gpusched.core.job_classes import JobClassConfigError
from airflow_provider_gpusched.core.quota.config import QuotaConfigError
from airflow_provider_gpusched.core.quota.last_good import JOB_CLASSES, QUOTAS, last_good_dir
from airflow_provider_gpusched.core.quota.report import quota_lines, quota_view
from airflow_provider_gpusched.core.work_tag import WorkTag
from tests.cli import gpusched
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]


class _Imported:
    """A module imported when first used, not when the tests are collected (``settings`` and ``metrics`` import
    Airflow: collection imports none, tests/test_tiers.py)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        import importlib

        return getattr(importlib.import_module(self._name), attr)


settings = _Imported("airflow_provider_gpusched.settings")
metrics = _Imported("airflow_provider_gpusched.metrics")

GOOD = """\
groups:
  vision: {quota: 1, borrowing_limit: 0, weight: 2, members: [alice]}
  nlp: {quota: 3}
"""
#: the typo of the report, and a bigger quota for vision that must not take effect while the file is broken
TYPO = """\
groups:
  vision: {quota: 2, borrowing_limit: 0, wieght: 2, members: [alice]}
  nlp: {quota: 2}
"""
FIXED = """\
groups:
  vision: {quota: 2, borrowing_limit: 0, weight: 2, members: [alice]}
  nlp: {quota: 2}
"""

#: a DAG file of a team member: its task's pool is its quota group's (operators/job_class.py reads the quota file)
DAG_FILE = """\
import pendulum
from airflow.sdk import DAG
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

with DAG("quota_typo", schedule=None, start_date=pendulum.datetime(2024, 1, 1), default_args={"owner": "alice"}):
    LocalGPUOperator(task_id="train", command=["true"], gpus=1)
"""

#: the DAG file parsed the way Airflow's DAG processor does, in a process of its own (nothing in its memory)
PARSE = textwrap.dedent("""\
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
    dag = bag.dags.get("quota_typo")
    print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                      "pool": dag.get_task("train").pool if dag else None}))
""")


@pytest.fixture
def live(tmp_path, monkeypatch):
    """A quota file named by ``[gpusched] quotas``, a lease directory, simulated GPUs; the loaders' memory of other
    tests' files forgotten."""
    quotas = tmp_path / "etc" / "quotas.yaml"
    quotas.parent.mkdir()
    quotas.write_text(GOOD)
    state = tmp_path / "leases"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__QUOTAS", str(quotas))
    monkeypatch.setenv("AIRFLOW__GPUSCHED__GPU_STATE_DIR", str(state))
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SIMULATE_GPUS", "4x24GiB")
    monkeypatch.delenv("AIRFLOW__GPUSCHED__FLEET_DIR", raising=False)
    monkeypatch.delenv("AIRFLOW__GPUSCHED__JOB_CLASSES", raising=False)
    QUOTAS.forget()
    JOB_CLASSES.forget()
    yield SimpleNamespace(quotas=quotas, state=state, tmp=tmp_path)
    QUOTAS.forget()
    JOB_CLASSES.forget()


def edit(path: Path, text: str) -> None:
    """An admin's edit in place, as an editor saves it."""
    path.write_text(text)


def parse_in_a_fresh_process(dag_dir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PARSE, str(dag_dir)], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.heavy  # DAG files parsed in fresh processes (Airflow's DagBag), a StatsD round trip: 12 s of CPU
def test_a_typo_in_the_live_quota_file_keeps_the_last_good_quotas_in_force_everywhere_and_says_so(live, statsd, caplog):
    # before: a lease manager under the quotas (as a task or a trigger attaches it), and a DAG file that parses
    manager = LeaseManager(SimulatedInventory("4x24GiB"), str(live.state))
    settings.attach_quotas(manager)
    assert manager.quotas is not None
    first, why = manager.try_acquire(GPURequest(), "v0", work=WorkTag(dag_id="d", task_id="t0", group="vision"))
    assert first is not None, why
    assert manager.try_acquire(GPURequest(), "v1", work=WorkTag(dag_id="d", task_id="t1", group="vision"))[0] is None
    dags = live.tmp / "dags"
    dags.mkdir()
    (dags / "quota_typo.py").write_text(DAG_FILE)
    assert parse_in_a_fresh_process(dags) == {"errors": {}, "pool": "gpusched_group_vision"}

    edit(live.quotas, TYPO)

    # this process: the last good quotas, with what is wrong with the file
    config = settings.quota_config()
    assert config.groups["vision"].quota.value == 1 and config.groups["nlp"].quota.value == 3
    assert f"{live.quotas}: groups.vision.wieght: unknown setting" in config.config_error
    assert "last good version" in config.config_error
    # the running lease manager keeps admitting under them: vision may still not borrow a second GPU
    held, why = manager.try_acquire(GPURequest(), "v1", work=WorkTag(dag_id="d", task_id="t1", group="vision"))
    assert held is None and "vision" in why
    nlp, why = manager.try_acquire(GPURequest(gpus=2), "n0", work=WorkTag(dag_id="d", task_id="n0", group="nlp"))
    assert nlp is not None, why
    # a fresh process (the DAG processor's parse of a file, a new task) has only the copy on disk: it parses
    assert os.listdir(last_good_dir(str(live.state)))
    assert parse_in_a_fresh_process(dags) == {"errors": {}, "pool": "gpusched_group_vision"}

    # loud: the board's quota view and `gpusched quota`, health, the metrics, the log of each task that reads it
    view = quota_view(manager.quotas.book, manager.quotas.capacity())
    assert view["config_error"] == config.config_error
    assert [g["quota"] for g in view["groups"]] == [1, 3]
    assert any(line.startswith("  ERROR: the quota file is broken: ") for line in quota_lines(view))
    health = {c.name: c for c in check_quotas(view)}
    assert health["quota file"].status == FAIL and "groups.vision.wieght" in health["quota file"].detail
    metrics.emit_settings_files()
    assert "airflow.gpusched.settings_file_broken.quotas:1|g" in statsd("airflow.gpusched.settings_file_broken.quotas")
    from airflow.sdk.execution_time.context import set_current_context

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="airflow_provider_gpusched.settings"):
        for try_number in (1, 2):
            ti = SimpleNamespace(dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=try_number)
            with set_current_context({"ti": ti}):
                settings.quota_config()
                settings.quota_config()  # said once per task, not once per read
    said = [r.getMessage() for r in caplog.records if "[gpusched] quotas is broken" in r.getMessage()]
    assert len(said) == 2 and all("groups.vision.wieght" in m for m in said), said

    # fixed: the next read takes it, the running manager too (vision's quota is 2 now), and the alarms go quiet
    edit(live.quotas, FIXED)
    assert settings.quota_config().config_error == ""
    assert settings.quota_config().groups["vision"].quota.value == 2
    second = wait_until(
        lambda: manager.try_acquire(GPURequest(), "v1", work=WorkTag(dag_id="d", task_id="t1", group="vision"))[0],
        timeout=30,
        what="the running lease manager to apply the fixed quota file",
    )
    assert second.gpus and set(second.gpus).isdisjoint(first.gpus)
    view = quota_view(manager.quotas.book, manager.quotas.capacity())
    assert view["config_error"] == "" and [g["quota"] for g in view["groups"]] == [2, 2]
    assert {c.name: c.status for c in check_quotas(view)}.get("quota file") is None
    metrics.emit_settings_files()
    assert "airflow.gpusched.settings_file_broken.quotas:0|g" in statsd("airflow.gpusched.settings_file_broken.quotas")


def test_a_quota_file_never_read_good_fails_as_before_naming_the_file_and_key(live):
    edit(live.quotas, TYPO)
    with pytest.raises(QuotaConfigError, match=r"quotas\.yaml: groups\.vision\.wieght: unknown setting"):
        settings.quota_config()
    # a copy made for another file is not this one's last good version
    other = live.tmp / "other.yaml"
    other.write_text(GOOD)
    QUOTAS.load(str(other), str(live.state))
    with pytest.raises(QuotaConfigError, match="wieght"):
        QUOTAS.load(str(live.quotas), str(live.state))


def test_a_copy_on_disk_that_is_no_longer_valid_is_not_used(live):
    assert settings.quota_config().enabled  # the good version, and its copy
    [copy] = [Path(last_good_dir(str(live.state))) / n for n in os.listdir(last_good_dir(str(live.state)))]
    record = json.loads(copy.read_text())
    record["data"]["groups"]["vision"]["quota"] = "four"  # tampered with: it must pass the same check again
    copy.write_text(json.dumps(record))
    QUOTAS.forget()  # a fresh process
    edit(live.quotas, TYPO)
    with pytest.raises(QuotaConfigError, match="wieght"):
        settings.quota_config()


def the_copy(live) -> Path:
    (copy,) = [Path(last_good_dir(str(live.state))) / n for n in os.listdir(last_good_dir(str(live.state)))]
    return copy


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: r.pop("data"),  # (a copy of another version's format, or corrupted)
        lambda r: r.update(mtime_ns="soon"),
        lambda r: r.update(file="/etc/other.yaml"),
    ],
    ids=["no data", "bad stamp", "another file"],
)
def test_a_copy_that_is_not_one_never_breaks_a_read_and_is_replaced(live, spoil):
    """Review of issue 76: a copy without its data made every read of a good quota file fail (KeyError)."""
    assert settings.quota_config().enabled
    copy = the_copy(live)
    record = json.loads(copy.read_text())
    spoil(record)
    copy.write_text(json.dumps(record))
    QUOTAS.forget()  # a fresh process: the file is good, the copy is not one
    assert settings.quota_config().groups["vision"].quota.describe("gpus") in ("1 GPU", "1 GPUs")
    assert "data" in json.loads(copy.read_text()) and json.loads(copy.read_text())["file"] == str(live.quotas)
    QUOTAS.forget()
    edit(live.quotas, TYPO)  # and the replaced copy keeps the good version in force
    assert "wieght" in settings.quota_config().config_error


def test_the_last_good_version_is_the_files_latest_edit_whatever_a_readers_clock_said(live):
    """Review of issue 76: a copy stamped in the future by a reader's clock was never replaced, and won over this
    process's newer good version once the file broke."""
    assert settings.quota_config().enabled
    copy = the_copy(live)
    record = json.loads(copy.read_text())
    record["read_at"] = 4_000_000_000.0  # (a reader whose clock ran ahead)
    copy.write_text(json.dumps(record))
    QUOTAS.forget()
    edit(live.quotas, FIXED)  # a later edit, good: vision's quota 2
    assert settings.quota_config().groups["vision"].quota.describe("gpus") == "2 GPUs"
    assert json.loads(copy.read_text())["data"]["groups"]["vision"]["quota"] == 2  # the copy follows the file
    edit(live.quotas, TYPO)
    assert settings.quota_config().groups["vision"].quota.describe("gpus") == "2 GPUs"  # this process's, the later edit
    QUOTAS.forget()  # and a fresh process's: the copy's
    assert settings.quota_config().groups["vision"].quota.describe("gpus") == "2 GPUs"


def test_in_a_shared_lease_directory_a_copy_by_another_user_is_not_used(live):
    assert settings.quota_config().enabled
    copy = the_copy(live)
    if os.geteuid() != 0:
        pytest.skip("needs root to give the copy to another user")  # (CI runs as root)
    os.chown(copy, 4321, 4321)
    QUOTAS.forget()
    edit(live.quotas, TYPO)
    with pytest.raises(QuotaConfigError, match="wieght"):  # another user's copy: no last good version here
        settings.quota_config()


@pytest.mark.heavy  # `gpusched queue health` three times and the api's board module (Airflow's app): 3-4 s of CPU
def test_a_typo_in_the_job_class_file_keeps_its_last_good_version_and_fails_health(live, monkeypatch):
    classes = live.tmp / "etc" / "classes.yaml"
    classes.write_text("idle:\n  airflow: {pool: lab_idle}\n  local: {grace_period: 12}\n")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__JOB_CLASSES", str(classes))
    assert settings.job_class_mapping()["idle"].airflow.pool == "lab_idle"
    env = {"AIRFLOW__GPUSCHED__JOB_CLASSES": str(classes), "AIRFLOW__GPUSCHED__GPU_STATE_DIR": str(live.state)}
    health = gpusched("queue", "health", "--no-slurm", "--no-airflow", env=env)
    assert f"[  ok] job-class file: {classes}" in health.stdout, health.stdout

    classes.write_text("idle:\n  airflow: {pool: lab_idle}\n  local: {grace_priod: 12}\n")
    mapping = settings.job_class_mapping()
    assert mapping["idle"].airflow.pool == "lab_idle" and mapping["idle"].local.grace_period == 12
    assert "idle.local.grace_priod: unknown setting" in mapping.config_error
    from airflow_provider_gpusched.plugins.api.gpus import settings_file_problems  # the GPU board's problem lines

    (line,) = settings_file_problems()
    assert "job_classes is broken, its last good version is in force" in line and "grace_priod" in line
    JOB_CLASSES.forget()  # `gpusched queue health` in a process of its own: the copy on disk
    health = gpusched("queue", "health", "--no-slurm", "--no-airflow", env=env)
    assert health.returncode == 1
    assert f"[FAIL] job-class file: {classes}: idle.local.grace_priod: unknown setting" in health.stdout
    assert "last good version" in health.stdout

    classes.write_text("idle:\n  airflow: {pool: lab_idle}\n  local: {grace_period: 20}\n")
    mapping = settings.job_class_mapping()
    assert mapping.config_error == "" and mapping["idle"].local.grace_period == 20
    assert settings_file_problems() == []
    health = gpusched("queue", "health", "--no-slurm", "--no-airflow", env=env)
    assert f"[  ok] job-class file: {classes}" in health.stdout


def test_a_job_class_file_never_read_good_fails_as_before(live, monkeypatch):
    classes = live.tmp / "etc" / "classes.yaml"
    classes.write_text("idel: {}\n")
    monkeypatch.setenv("AIRFLOW__GPUSCHED__JOB_CLASSES", str(classes))
    with pytest.raises(JobClassConfigError, match=r"classes\.yaml: unknown job class 'idel'"):
        settings.job_class_mapping()
