"""`gpusched gpus`: the inventory and who holds which GPU."""

import json
import subprocess
import sys

import pytest

from airflow_provider_gpusched.core.gpu.placement import GPURequest


def gpusched(*args, env_extra=None):
    """``gpusched ARGS`` through its ``main()`` in this process (tests/cli.py), without a simulated inventory from
    the environment unless ``env_extra`` sets one."""
    import os

    from tests.cli import gpusched as in_process

    env: dict[str, str | None] = {k: None for k in os.environ if k.endswith("SIMULATE_GPUS")}
    env.update(env_extra or {})
    return in_process(*args, env=env)


def test_gpus_table_and_json_show_leases(manager, state_dir):
    lease, _ = manager.try_acquire(GPURequest(gpu_memory="6GiB"), "sweep.trial[3]", job_class="idle")
    out = gpusched("gpus", "--simulate", "4x24GiB", "--state-dir", state_dir)
    assert out.returncode == 0, out.stderr
    assert "SIMULATED" in out.stdout and "GPU-SIMULATED-0000" in out.stdout
    assert "sweep.trial[3]" in out.stdout and "idle" in out.stdout and "6.0GiB" in out.stdout
    data = json.loads(
        gpusched("gpus", "--json", "--state-dir", state_dir, env_extra={"GPUSCHED_SIMULATE_GPUS": "4x24GiB"}).stdout
    )
    assert data["source"] == "simulated" and len(data["gpus"]) == 4
    assert data["gpus"][0]["reserved"] == 6 * 2**30 and data["gpus"][0]["available"] == 18 * 2**30
    assert [(x["owner"], x["gpus"], x["job_class"]) for x in data["leases"]] == [("sweep.trial[3]", [0], "idle")]
    manager.release(lease)


def test_gpus_without_nvml_or_simulation_is_a_clear_error(state_dir):
    out = gpusched("gpus", "--state-dir", state_dir)
    assert out.returncode == 2
    assert "gpusched: error: No GPU inventory" in out.stderr and "Traceback" not in out.stderr


def test_gpus_shows_preemptible_yielding_waiting_and_gpu_time(manager, state_dir):
    idle, _ = manager.try_acquire(GPURequest(gpus=4), "nas.search[0]", job_class="idle")
    assert manager.try_acquire(GPURequest(gpus=2), "train.main")[0] is None  # asks the idle lease to yield
    manager.ledger.append(
        {
            "owner": "nas.search[0]",
            "job_class": "idle",
            "gpu_seconds": 400.0,
            "preempted": "x",
            "lost_gpu_seconds": 12.5,
        }
    )
    manager.ledger.append({"owner": "train.main", "job_class": "normal", "gpu_seconds": 80.0, "preempted": None})
    out = gpusched("gpus", "--simulate", "4x24GiB", "--state-dir", state_dir)
    assert out.returncode == 0, out.stderr
    assert "nas.search[0]  [yielding to train.main]" in out.stdout
    assert "waiting (normal class, idle work held back): train.main" in out.stdout
    assert "idle         400.0 GPU-s used in 1 attempt(s), 12.5 GPU-s lost to 1 preemption(s)" in out.stdout
    assert "normal        80.0 GPU-s used in 1 attempt(s), 0.0 GPU-s lost to 0 preemption(s)" in out.stdout
    data = json.loads(gpusched("gpus", "--json", "--simulate", "4x24GiB", "--state-dir", state_dir).stdout)
    assert data["leases"][0]["preemptible"] is True and data["leases"][0]["yield_requested"]["by"] == "train.main"
    assert data["gpu_time"]["idle"]["lost_gpu_seconds"] == 12.5
    assert [w["owner"] for w in data["waiting"]] == ["train.main"]
    manager.release(idle)


@pytest.mark.heavy  # 2.5 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_gpus_imports_airflow_only_where_its_configuration_names_a_fleet(tmp_path, manager, state_dir):
    """`gpusched gpus` learns the fleet directory from Airflow's configuration, but imports Airflow (2 s) only where
    ``airflow.cfg`` or the environment could set it; otherwise it answers in a tenth of a second."""
    import os

    home, fleet = tmp_path / "home", tmp_path / "fleet"
    home.mkdir()
    fleet.mkdir()
    code = (
        "import sys; from airflow_provider_gpusched.cli import main; "
        f"code = main(['gpus', '--simulate', '4x24GiB', '--state-dir', {state_dir!r}]); "
        "print('airflow imported:', 'airflow' in sys.modules); sys.exit(code)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__GPUSCHED__FLEET_DIR")}
    env.update(AIRFLOW_HOME=str(home))
    env.pop("AIRFLOW_CONFIG", None)

    def run():
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)

    out = run()
    assert out.returncode == 0 and "airflow imported: False" in out.stdout, out
    assert "GPU-SIMULATED-0000" in out.stdout, out  # this host's own table
    (home / "airflow.cfg").write_text(f"[gpusched]\nfleet_dir = {fleet}\n")
    out = run()
    assert out.returncode == 0 and "airflow imported: True" in out.stdout, out
    assert "no host has published a record" in out.stdout  # the fleet's view, from the configured directory
