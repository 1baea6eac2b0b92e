"""The provider is registered with Airflow: providers list, hooks, connection form, config section."""

import subprocess
import sys

import pytest

from airflow_provider_gpusched.provider_info import get_provider_info

pytestmark = pytest.mark.airflow


def _airflow(*args):
    proc = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_provider_info_matches_airflow_schema():
    import json
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-provider-gpusched"
    assert set(info["config"]["gpusched"]["options"]) >= {"slurm_poll_interval", "slurm_output_dir"}


def test_providers_list_and_hooks_show_the_provider(airflow_db):
    assert "airflow-provider-gpusched" in _airflow("providers", "list")
    hooks = _airflow("providers", "hooks")
    assert "airflow_provider_gpusched.hooks.slurm.SlurmHook" in hooks
    assert "airflow_provider_gpusched.operators.local_gpu" in _airflow("providers", "get", "airflow-provider-gpusched",
                                                                       "--full", "-o", "json")


def test_connection_form_fields_and_triggers_are_declared(airflow_db):
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    widgets = pm.connection_form_widgets
    for field in ("partition", "account", "qos", "sbatch_options", "slurm_conf"):
        assert f"extra__slurm__{field}" in widgets
    assert pm.field_behaviours["slurm"]["relabeling"]["host"].startswith("Login host")
    assert "airflow_provider_gpusched.triggers.slurm" in {t.trigger_class_name for t in pm.trigger}


def test_task_slurm_decorator_is_available():
    from airflow.sdk import task

    from airflow_provider_gpusched.decorators.local_gpu import local_gpu_task
    from airflow_provider_gpusched.decorators.slurm import slurm_task

    assert task.slurm is slurm_task
    assert task.local_gpu is local_gpu_task


def test_config_section_is_readable(airflow_db):
    out = _airflow("config", "get-value", "gpusched", "slurm_poll_interval")
    assert out.strip() == "1"  # tests set AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL=1
