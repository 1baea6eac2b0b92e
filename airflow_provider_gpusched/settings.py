"""The ``[gpusched]`` Airflow configuration section, read in one place."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable
from typing import Any

from airflow.sdk import conf

from airflow_provider_gpusched.core.options import BY_NAME, SECTION, default_directory

_GETTERS: dict[str, Callable[..., Any]] = {
    "float": conf.getfloat,
    "integer": conf.getint,
    "boolean": conf.getboolean,
    "string": conf.get,
}


def _value(name: str):
    """``[gpusched] name`` as its declared type, with the declared default (core/options.py) as fallback."""
    option = BY_NAME[name]
    return _GETTERS[option.type](SECTION, name, fallback=option.default)


def host_limit_defaults() -> dict[str, Any]:
    """``[gpusched] max_cpu_percent``, ``min_free_ram``, ``gpu_memory_margin`` as GPURequest arguments."""
    from airflow_provider_gpusched.core.options import host_limit_defaults as defaults

    return defaults(_value)


def tracking() -> str:
    """``[gpusched] tracking``: the trackers every sweep sends to (comma-separated names), "" for none."""
    return str(_value("tracking") or "")


def poll_interval() -> float:
    return _value("slurm_poll_interval")


def not_found_timeout() -> float:
    return _value("slurm_not_found_timeout")


def default_deferrable() -> bool:
    return _value("default_deferrable")


def output_tail_lines() -> int:
    return _value("output_tail_lines")


def ui_live_slurm() -> bool:
    return _value("ui_live_slurm")


def _directory(name: str) -> str:
    """``[gpusched] name``, or ``<AIRFLOW_HOME>/gpusched/<leaf>`` when it is empty."""
    configured = _value(name) or ""
    if configured:
        return os.path.expanduser(configured)
    home = os.environ.get("AIRFLOW_HOME") or conf.get("core", "airflow_home", fallback="") or None
    return default_directory(name, home)


def slurm_output_dir() -> str:
    return _directory("slurm_output_dir")


def simulate_gpus() -> str:
    """A simulated inventory spec such as ``4x24GiB`` (used only where NVML finds no GPU)."""
    return _value("simulate_gpus") or os.environ.get("GPUSCHED_SIMULATE_GPUS", "")


def gpu_state_dir() -> str | None:
    return _value("gpu_state_dir") or None


def gpu_state_dir_shared() -> bool:
    """The lease directory is a group directory several users share on purpose (see docs/local-gpus.md)."""
    if conf.has_option(SECTION, "gpu_state_dir_shared"):
        return _value("gpu_state_dir_shared")
    from airflow_provider_gpusched.core.gpu.lease_store import shared_from_env

    return shared_from_env()


def fleet_dir() -> str:
    """Where the GPU hosts of a fleet publish their records ('' on one host): see core/fleet.py."""
    value = _value("fleet_dir") or ""
    return os.path.expanduser(value) if value else ""


def gpu_poll_interval() -> float:
    return _value("gpu_poll_interval")


def pool_slots_per_gpu() -> int:
    """Pool slots per GPU that ``gpusched pools sync`` gives the job classes' pools (a whole number >= 1)."""
    from airflow_provider_gpusched.core.errors import GpuschedError

    try:
        value = _value("pool_slots_per_gpu")
    except ValueError:
        value = None
    if not isinstance(value, int) or value < 1:
        raise GpuschedError(
            f"[gpusched] pool_slots_per_gpu: expected a whole number >= 1, got "
            f"{conf.get(SECTION, 'pool_slots_per_gpu', fallback='?')!r}"
        )
    return value


def defer_after() -> float:
    """Seconds a task waiting for GPUs looks again in its worker before deferring (0: defer at once)."""
    return max(0.0, _value("defer_after"))


def min_deferral() -> float:
    """Seconds a deferred task stays deferred at least (see triggers/deferral.py)."""
    return max(0.0, _value("min_deferral"))


def local_run_dir() -> str:
    return _directory("local_run_dir")


def task_directory(root: str, ti, *extra: str) -> str:
    """``root/<dag>/<run>/<task>[.<map index>]/<extra...>`` with every part made safe for a path."""
    name = ti.task_id + (f".{ti.map_index}" if ti.map_index is not None and ti.map_index >= 0 else "")
    parts = [ti.dag_id, ti.run_id, name, *extra]
    return os.path.join(root, *(_UNSAFE.sub("_", p).strip("._") or "_" for p in parts))


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def sweep_results_root() -> str:
    """Where sweeps keep their trial folders (``[gpusched] sweep_results_root``)."""
    return _directory("sweep_results_root")


def job_class_mapping():
    """The job-class mapping (``[gpusched] job_classes``: a YAML/JSON file path or inline text; empty:
    the built-in defaults). Parsed once per distinct value."""
    return _mapping_for(_value("job_classes") or "")


def quota_config():
    """The team quotas (``[gpusched] quotas``: a YAML/JSON file path or inline text; empty: no quotas). Parsed
    once per distinct value, and for a file again when it changes: the triggerer and the api-server see an admin's
    edit without a restart."""
    from airflow_provider_gpusched.core.yaml_loader import names_a_file

    value = _value("quotas") or ""
    stamp = 0.0
    if names_a_file(value):
        with contextlib.suppress(OSError):
            stamp = os.stat(os.path.expanduser(value.strip())).st_mtime_ns
    return _quotas_for(value, stamp)


@functools.lru_cache(maxsize=8)
def _quotas_for(value: str, stamp: float = 0.0):
    from airflow_provider_gpusched.core.quota.config import QuotaConfig

    return QuotaConfig.load(value)


def attach_quotas(manager) -> None:
    """Put ``manager`` (a host's lease manager) under the team quotas, if any: the book in ``<fleet_dir>/quota``
    (one for the fleet) or ``<lease dir>/quota`` (one host)."""
    config = quota_config()
    if not config.enabled:
        return
    from airflow_provider_gpusched.core.fleet import attach_quotas

    attach_quotas(manager, config, fleet_dir())


@functools.lru_cache(maxsize=8)
def _mapping_for(value: str):
    from airflow_provider_gpusched.core.job_classes import JobClassMapping

    return JobClassMapping.load(value)
