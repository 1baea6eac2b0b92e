"""The ``[gpusched]`` Airflow configuration section, read in one place."""

from __future__ import annotations

import functools
import os
import re

from airflow.sdk import conf

SECTION = "gpusched"


def poll_interval() -> float:
    return conf.getfloat(SECTION, "slurm_poll_interval", fallback=10.0)


def not_found_timeout() -> float:
    return conf.getfloat(SECTION, "slurm_not_found_timeout", fallback=300.0)


def default_deferrable() -> bool:
    return conf.getboolean(SECTION, "default_deferrable", fallback=True)


def output_tail_lines() -> int:
    return conf.getint(SECTION, "output_tail_lines", fallback=40)


def ui_live_slurm() -> bool:
    return conf.getboolean(SECTION, "ui_live_slurm", fallback=True)


def _directory(option: str, default_leaf: str) -> str:
    """``[gpusched] option``, or ``<AIRFLOW_HOME>/gpusched/<default_leaf>`` when it is empty."""
    configured = conf.get(SECTION, option, fallback="") or ""
    if configured:
        return os.path.expanduser(configured)
    home = os.environ.get("AIRFLOW_HOME") or conf.get("core", "airflow_home", fallback="") or "~/airflow"
    return os.path.join(os.path.expanduser(home), "gpusched", default_leaf)


def slurm_output_dir() -> str:
    return _directory("slurm_output_dir", "slurm")


def simulate_gpus() -> str:
    """A simulated inventory spec such as ``4x24GiB`` (used only where NVML finds no GPU)."""
    return conf.get(SECTION, "simulate_gpus", fallback="") or os.environ.get("GPUSCHED_SIMULATE_GPUS", "")


def gpu_state_dir() -> str | None:
    return conf.get(SECTION, "gpu_state_dir", fallback="") or None


def gpu_state_dir_shared() -> bool:
    """The lease directory is a group directory several users share on purpose (see docs/local-gpus.md)."""
    if conf.has_option(SECTION, "gpu_state_dir_shared"):
        return conf.getboolean(SECTION, "gpu_state_dir_shared", fallback=False)
    from airflow_provider_gpusched.core.gpu.lease_store import shared_from_env

    return shared_from_env()


def gpu_poll_interval() -> float:
    return conf.getfloat(SECTION, "gpu_poll_interval", fallback=5.0)


def min_deferral() -> float:
    """Seconds a deferred task stays deferred at least (see triggers/deferral.py)."""
    return max(0.0, conf.getfloat(SECTION, "min_deferral", fallback=10.0))


def local_run_dir() -> str:
    return _directory("local_run_dir", "local")


def task_directory(root: str, ti, *extra: str) -> str:
    """``root/<dag>/<run>/<task>[.<map index>]/<extra...>`` with every part made safe for a path."""
    name = ti.task_id + (f".{ti.map_index}" if ti.map_index is not None and ti.map_index >= 0 else "")
    parts = [ti.dag_id, ti.run_id, name, *extra]
    return os.path.join(root, *(_UNSAFE.sub("_", p).strip("._") or "_" for p in parts))


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def sweep_results_root() -> str:
    """Where sweeps keep their trial folders (``[gpusched] sweep_results_root``)."""
    return _directory("sweep_results_root", "sweeps")


def job_class_mapping():
    """The job-class mapping (``[gpusched] job_classes``: a YAML/JSON file path or inline text; empty:
    the built-in defaults). Parsed once per distinct value."""
    return _mapping_for(conf.get(SECTION, "job_classes", fallback="") or "")


@functools.lru_cache(maxsize=8)
def _mapping_for(value: str):
    from airflow_provider_gpusched.core.job_classes import JobClassMapping

    return JobClassMapping.load(value)
