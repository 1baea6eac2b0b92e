"""`gpusched queue health` asks each registered backend for its own checks (``Backend.health_checks``): a third
backend registered here gets its checks in without an edit elsewhere; Slurm's and the GPUs' checks live in their
wings, their old names still import from core/health.py."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import pytest

from airflow_provider_gpusched.cli import main
from airflow_provider_gpusched.core.backends import Backend, register_backend, unregister_backend
from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.health import FAIL, OK, SKIP, WARN, Check, HealthContext

SEEN: list[HealthContext] = []


class ToyBackend(Backend):
    """A backend of this test only: one check, with what the command told it."""

    name = "toy"
    summary = "toy"
    handle = "toy_handle"

    def health_checks(self, context: HealthContext) -> list[Check]:
        SEEN.append(context)
        return [Check("toy scheduler", WARN, f"asked with state dir {context.state_dir}")]


@pytest.fixture
def toy():
    SEEN.clear()
    register_backend(ToyBackend)
    try:
        yield
    finally:
        unregister_backend("toy")


def health(tmp_path, capsys, *extra: str) -> tuple[int, str]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    argv = ["queue", "health", "--no-slurm", "--no-airflow", "--simulate", "2x16GiB", "--state-dir", str(state)]
    code = main([*argv, *extra])
    return code, capsys.readouterr().out


def test_a_registered_backend_s_checks_come_after_the_built_in_ones(toy, tmp_path, capsys):
    code, out = health(tmp_path, capsys)
    lines = out.splitlines()
    assert code == 0, out
    assert lines[1] == "[skip] slurm reachable: Slurm not looked at (--no-slurm)"
    assert lines[-2] == f"[warn] toy scheduler: asked with state dir {tmp_path / 'state'}"
    assert lines[-3] == "[  ok] stop orders: none in force"
    assert lines[-1] == "healthy: 8 checks, none failed"
    (context,) = SEEN
    assert context.handle is None and context.simulate == "2x16GiB" and context.fleet_dir == ""


def test_the_json_report_holds_the_registered_backend_s_checks(toy, tmp_path, capsys):
    code, out = health(tmp_path, capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["healthy"]
    detail = f"asked with state dir {tmp_path / 'state'}"
    assert report["checks"][-1] == {"name": "toy scheduler", "status": "warn", "detail": detail}


def test_without_the_toy_backend_its_check_is_gone(tmp_path, capsys):
    code, out = health(tmp_path, capsys)
    assert code == 0 and "toy scheduler" not in out and out.splitlines()[-1] == "healthy: 7 checks, none failed"


def test_a_backend_that_checks_nothing_adds_nothing():
    assert Backend().health_checks(HealthContext()) == []


class FakeRunner:
    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs

    def run(self, argv):
        return SimpleNamespace(stdout=self.outputs[argv[0] + " " + argv[-1]])


class FakeSlurm:
    """What the Slurm checks ask a client: its partitions and, through its runner, sacctmgr and scontrol."""

    def __init__(self, idle_tier: str = "1"):
        self.runner = FakeRunner(
            {
                "sacctmgr format=Name": "normal\nlow\n",
                "scontrol config": "PreemptType = preempt/partition_prio\n",
                "scontrol idle": f"PartitionName=idle PreemptMode=REQUEUE PriorityTier={idle_tier}",
                "scontrol batch": "PartitionName=batch PreemptMode=OFF PriorityTier=10",
            }
        )

    def partitions(self):
        return {"batch": {"state": "UP", "default": True}, "idle": {"state": "UP", "default": False}}


def slurm_checks(context: HealthContext) -> list[Check]:
    from airflow_provider_gpusched.core.backends import get_backend

    return get_backend("slurm").health_checks(context)


def test_slurm_s_checks_through_its_backend():
    classes = {"normal": {"partition": "batch", "qos": "normal"}, "idle": {"partition": "idle", "qos": "low"}}
    context = HealthContext(handle=FakeSlurm(), reached="a fake", class_settings=classes.__getitem__)
    checks = {c.name: c for c in slurm_checks(context)}
    assert checks["slurm reachable"] == Check("slurm reachable", OK, "a fake: partitions batch, idle")
    assert checks["idle class partition"].status == OK and checks["normal class QOS"].status == OK
    assert checks["idle work preemptible"].detail == (
        "preempt/partition_prio, 'idle' PreemptMode=REQUEUE PriorityTier 1 < 'batch' 10"
    )
    context.handle = FakeSlurm(idle_tier="20")
    assert {c.name: c for c in slurm_checks(context)}["idle work preemptible"].status == FAIL


def test_slurm_without_a_client_is_a_skip_that_says_why():
    assert slurm_checks(HealthContext(unavailable="no squeue")) == [Check("slurm reachable", SKIP, "no squeue")]


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("check_slurm", "airflow_provider_gpusched.core.slurm.health"),
        ("check_gpus", "airflow_provider_gpusched.core.gpu.health"),
        ("check_lease_dir", "airflow_provider_gpusched.core.gpu.health"),
    ],
)
def test_the_old_names_still_import_from_core_health(name, home):
    import importlib

    from airflow_provider_gpusched.core import health

    with pytest.warns(GpuschedDeprecationWarning, match=home):
        old = getattr(health, name)
    assert old is getattr(importlib.import_module(home), name)


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("slurm_launch_function", "airflow_provider_gpusched.core.slurm.ranks"),
        ("slurm_launch_argv", "airflow_provider_gpusched.core.slurm.ranks"),
        ("PORT_BASE", "airflow_provider_gpusched.core.slurm.ranks"),
        ("local_launch_argv", "airflow_provider_gpusched.core.gpu.ranks"),
        ("torchrun_command", "airflow_provider_gpusched.core.gpu.ranks"),
    ],
)
def test_the_old_names_still_import_from_core_distributed(name, home):
    import importlib

    from airflow_provider_gpusched.core import distributed

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        old = getattr(distributed, name)
    assert old is getattr(importlib.import_module(home), name)
    assert [w.category for w in said] == [GpuschedDeprecationWarning]
