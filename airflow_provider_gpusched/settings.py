"""The ``[gpusched]`` Airflow configuration section, read in one place."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from airflow.sdk import conf

from airflow_provider_gpusched.core.options import BY_NAME, SECTION, default_directory

log = logging.getLogger(__name__)

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
    """``root/<dag>/<run>/<task>[.<map index>]/<extra...>``, every part made safe for a path; the DAG's a folder
    name of its own (:func:`path_part`): two DAGs never share a folder. (A run's and a task's folder names are only
    made safe, as they always were: two runs or tasks whose ids clean alike are of one DAG, one author's.)"""
    name = ti.task_id + (f".{ti.map_index}" if ti.map_index is not None and ti.map_index >= 0 else "")
    rest = (_UNSAFE.sub("_", p).strip("._") or "_" for p in (ti.run_id, name, *extra))
    return os.path.join(root, path_part(ti.dag_id), *rest)


def path_part(text: str) -> str:
    """``text`` as one folder name, one to one. A plain text (``[A-Za-z0-9_.-]``, no ``.`` or ``_`` at either end,
    at most 200 characters) is kept as it is; any other is ``_`` + its first 200 characters with the others replaced
    by ``_`` + ``-`` + 16 hex digits of its SHA-256 (``x`` stays ``x``, ``_x`` is ``_x-a01e47cb4cec0963``). A plain
    name never starts with ``_`` and two changed ones differ in their hash: no DAG, run or task id can make another's
    folder its own (a second DAG whose id cleans alike took the first one's task folders)."""
    if len(text) <= 200 and _PLAIN.fullmatch(text):
        return text
    cleaned = _UNSAFE.sub("_", text).strip("._")[:200]
    return f"_{cleaned}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: a name kept as it is: no character replaced, no ``.``/``_`` at either end (so never ``.`` or ``..``)
_PLAIN = re.compile(r"[A-Za-z0-9-](?:[A-Za-z0-9_.-]*[A-Za-z0-9-])?")


def sweep_results_root() -> str:
    """Where sweeps keep their trial folders (``[gpusched] sweep_results_root``)."""
    return _directory("sweep_results_root")


def job_class_mapping():
    """The job-class mapping (``[gpusched] job_classes``: a YAML/JSON file path or inline text; empty: the built-in
    defaults). A file is read again when it changes, and while it is broken its last good version stays in force
    (``config_error`` says what is wrong, and the log of whatever reads it: core/quota/last_good.py)."""
    from airflow_provider_gpusched.core.quota.last_good import JOB_CLASSES

    value = _value("job_classes") or ""
    state_dir, shared = _last_good_state(value)
    mapping = JOB_CLASSES.load(value, state_dir, shared=shared)
    if mapping.config_error:
        _say_broken("[gpusched] job_classes", mapping.config_error)
    return mapping


def quota_config():
    """The team quotas (``[gpusched] quotas``: a YAML/JSON file path or inline text; empty: no quotas). A file is
    read again when it changes: the triggerer and the api-server see an admin's edit without a restart. While it is
    broken (a typo), its last good version stays in force: a DAG file's parse, a task, a trigger keep working under
    the quotas as they were, ``config_error`` says what is wrong (the board, health, the metrics) and so does the
    log of whatever reads it. Only a file that was never good fails (core/quota/last_good.py)."""
    from airflow_provider_gpusched.core.quota.last_good import QUOTAS

    value = _value("quotas") or ""
    state_dir, shared = _last_good_state(value)
    config = QUOTAS.load(value, state_dir, shared=shared)
    if config.config_error:
        _say_broken("[gpusched] quotas", config.config_error)
    return config


def _last_good_state(value: str) -> tuple[str, bool]:
    """For a setting that names a file: the lease directory (its ``last-good`` folder holds the settings files' last
    good versions, for every gpusched process of the host) and whether it is a shared group directory."""
    from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
    from airflow_provider_gpusched.core.yaml_loader import names_a_file

    if not names_a_file(value):
        return "", False
    return gpu_state_dir() or default_state_dir(), gpu_state_dir_shared()


#: (process, option, error, reader) of the warnings logged: a broken file is said once in each reader's log
_SAID: dict[tuple[Any, ...], None] = {}


def _say_broken(option: str, error: str) -> None:
    """A settings file that is broken (its last good version in force), said in the log of what reads it: once per
    task (its task log), per trigger, and per process otherwise (a DAG file's parse, a thread)."""
    key = (os.getpid(), option, error, _reader())
    if key in _SAID:
        return
    if len(_SAID) >= 1024:
        _SAID.clear()
    _SAID[key] = None
    log.warning("gpusched: %s is broken, its last good version is used: %s", option, error)


def _reader() -> Any:
    """Who reads a setting now: the running task instance, else the running trigger (an asyncio task), else None."""
    from airflow.sdk import get_current_context

    try:
        ti = get_current_context().get("ti")
    except RuntimeError:  # not inside a task's execution
        ti = None
    if ti is not None:
        return ("task", *(getattr(ti, k, None) for k in ("dag_id", "run_id", "task_id", "map_index", "try_number")))
    try:
        running = asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        running = None
    return ("trigger", id(running)) if running is not None else None


def attach_quotas(manager) -> None:
    """Put ``manager`` (a host's lease manager) under the team quotas, if any: the book in ``<fleet_dir>/quota``
    (one for the fleet) or ``<lease dir>/quota`` (one host). The book follows the quota file from then on (an edit
    applies without a restart; a broken edit keeps the last good quotas)."""
    config = quota_config()
    if not config.enabled:
        return
    from airflow_provider_gpusched.core.fleet import attach_quotas

    attach_quotas(manager, config, fleet_dir()).follow(quota_config)
