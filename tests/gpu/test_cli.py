"""`gpusched gpus`: the inventory and who holds which GPU."""

import json
import subprocess
import sys

from airflow_provider_gpusched.core.gpu.placement import GPURequest


def gpusched(*args, env_extra=None):
    import os

    env = {k: v for k, v in os.environ.items() if not k.endswith("SIMULATE_GPUS")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "airflow_provider_gpusched.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_gpus_table_and_json_show_leases(manager, state_dir):
    lease, _ = manager.try_acquire(GPURequest(gpu_memory="6GiB"), "sweep.trial[3]", job_class="idle")
    out = gpusched("gpus", "--simulate", "4x24GiB", "--state-dir", state_dir)
    assert out.returncode == 0, out.stderr
    assert "SIMULATED" in out.stdout and "GPU-SIMULATED-0000" in out.stdout
    assert "sweep.trial[3]" in out.stdout and "idle" in out.stdout and "6.0GiB" in out.stdout
    data = json.loads(gpusched("gpus", "--json", "--state-dir", state_dir,
                               env_extra={"GPUSCHED_SIMULATE_GPUS": "4x24GiB"}).stdout)
    assert data["source"] == "simulated" and len(data["gpus"]) == 4
    assert data["gpus"][0]["reserved"] == 6 * 2**30 and data["gpus"][0]["available"] == 18 * 2**30
    assert [(x["owner"], x["gpus"], x["job_class"]) for x in data["leases"]] == [("sweep.trial[3]", [0], "idle")]
    manager.release(lease)


def test_gpus_without_nvml_or_simulation_is_a_clear_error(state_dir):
    out = gpusched("gpus", "--state-dir", state_dir)
    assert out.returncode == 2
    assert "gpusched: error: No GPU inventory" in out.stderr and "Traceback" not in out.stderr
