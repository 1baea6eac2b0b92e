"""The ``[gpusched]`` Airflow configuration section, read in one place."""

from __future__ import annotations

import os

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


def slurm_output_dir() -> str:
    configured = conf.get(SECTION, "slurm_output_dir", fallback="") or ""
    if configured:
        return os.path.expanduser(configured)
    home = os.environ.get("AIRFLOW_HOME") or conf.get("core", "airflow_home", fallback="") or "~/airflow"
    return os.path.join(os.path.expanduser(home), "gpusched", "slurm")


def simulate_gpus() -> str:
    """A simulated inventory spec such as ``4x24GiB`` (used only where NVML finds no GPU)."""
    return conf.get(SECTION, "simulate_gpus", fallback="") or os.environ.get("GPUSCHED_SIMULATE_GPUS", "")


def gpu_state_dir() -> str | None:
    return conf.get(SECTION, "gpu_state_dir", fallback="") or None


def gpu_poll_interval() -> float:
    return conf.getfloat(SECTION, "gpu_poll_interval", fallback=5.0)


def local_run_dir() -> str:
    configured = conf.get(SECTION, "local_run_dir", fallback="") or ""
    if configured:
        return os.path.expanduser(configured)
    home = os.environ.get("AIRFLOW_HOME") or conf.get("core", "airflow_home", fallback="") or "~/airflow"
    return os.path.join(os.path.expanduser(home), "gpusched", "local")
