"""Every ``[gpusched]`` option, defined once: its type, default and description.

The provider info (the options Airflow lists and documents), ``settings.py`` (what the Airflow side reads,
with these defaults as fallbacks), the triggers' constructor defaults and the core's own defaults outside
Airflow (the ``gpusched`` command, scripts) all read this table. No Airflow import: provider info must stay
cheap to import, and the core is used without Airflow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError

SECTION = "gpusched"
ENV_PREFIX = f"AIRFLOW__{SECTION.upper()}__"


@dataclass(frozen=True)
class Option:
    name: str
    type: str  # "float", "integer", "boolean" or "string", as provider info spells them
    default: Any  # the Python value; for a directory, "" means <AIRFLOW_HOME>/gpusched/<directory_leaf>
    description: str
    example: str
    version_added: str = "0.1.0"
    directory_leaf: str | None = None

    def provider_info(self) -> dict[str, str]:
        default = (
            ("True" if self.default else "False")
            if self.type == "boolean"
            else f"{self.default:g}"
            if self.type == "float"
            else str(self.default)
        )
        return {
            "description": self.description,
            "version_added": self.version_added,
            "type": self.type,
            "example": self.example,
            "default": default,
        }


OPTIONS: tuple[Option, ...] = (
    Option(
        "tracking",
        "string",
        "",
        "Experiment trackers every sweep sends its trials to, on top of those its spec lists (comma-separated: "
        "mlflow, tensorboard, wandb; docs/tracking.md). MLflow's server is the connection mlflow_default.",
        "mlflow",
    ),
    Option(
        "slurm_poll_interval",
        "float",
        10.0,
        "Seconds between two squeue calls of the shared Slurm poller (one call covers every job the triggerer tracks).",
        "10",
    ),
    Option(
        "slurm_not_found_timeout",
        "float",
        300.0,
        "Seconds a tracked job may be unknown to squeue and the completion record before its task fails.",
        "300",
    ),
    Option(
        "slurm_output_dir",
        "string",
        "",
        "Directory for job output files and Python-callable payloads (must be on a file system the compute "
        "nodes share). Empty: <AIRFLOW_HOME>/gpusched/slurm.",
        "/shared/airflow/slurm",
        directory_leaf="slurm",
    ),
    Option("default_deferrable", "boolean", True, "Whether Slurm operators and sensors defer by default.", "True"),
    Option(
        "simulate_gpus",
        "string",
        "",
        "Simulated GPU inventory used where NVML finds no GPU, e.g. 4x24GiB (tests and demos on CPU-only "
        "machines; reported as simulated). Empty: no simulation, a clear error without GPUs.",
        "4x24GiB",
    ),
    Option(
        "gpu_state_dir",
        "string",
        "",
        "Directory of the host's GPU lease files, shared by every Airflow process of this user on the host; "
        "created 0700 and refused when another user owns it or it is writable by others. Empty: "
        "<tmp>/gpusched-<uid>.",
        "/var/lib/gpusched",
    ),
    Option(
        "gpu_state_dir_shared",
        "boolean",
        False,
        "The lease directory is a group directory that several Unix users share on purpose (install -d -m "
        "2770 -g GROUP DIR): accept it group-writable and owned by another member or root. Never "
        "world-writable.",
        "True",
    ),
    Option("gpu_poll_interval", "float", 5.0, "Seconds between checks while a task waits (deferred) for GPUs.", "5"),
    Option(
        "pool_slots_per_gpu",
        "integer",
        1,
        "Slots per GPU in the pools `gpusched pools sync` makes for the job classes. Above 1, more tasks than GPUs "
        "start, so the next task is ready when a GPU frees (short trials one task each: docs/sweeps.md; pair it "
        "with defer_after), and deferred tasks count against the pool.",
        "2",
    ),
    Option(
        "defer_after",
        "float",
        0.0,
        "Seconds a task that finds the GPUs busy looks again in its worker (every 0.2 s) before it defers: a GPU "
        "that frees within that time is taken at once, without a deferral and a task restart. Worth it where "
        "pools have more slots than GPUs (short trials, one task each: docs/sweeps.md). 0: defer at once.",
        "30",
    ),
    Option(
        "min_deferral",
        "float",
        10.0,
        "Seconds a deferred task (waiting for GPUs or a Slurm job) stays deferred at least: an event sooner "
        "after the deferral can make Airflow 3.3 fail the task (apache/airflow#72716). 0 turns the floor off.",
        "10",
    ),
    Option(
        "fleet_dir",
        "string",
        "",
        "Several GPU hosts as one pool (docs/fleet.md): a directory on a filesystem every GPU host and the head "
        "node share, where each host publishes its GPUs and leases. Set: local GPU tasks that name no queue go to "
        "the queue of their lane and memory tier, wait for room anywhere in the fleet, and the board and CLI "
        "show every host. Empty: one host.",
        "/shared/gpusched-fleet",
    ),
    Option(
        "local_run_dir",
        "string",
        "",
        "Per-run working directories and logs of local GPU tasks. Empty: <AIRFLOW_HOME>/gpusched/local.",
        "/scratch/airflow-runs",
        directory_leaf="local",
    ),
    Option(
        "sweep_results_root",
        "string",
        "",
        "Where sweeps keep trial folders, manifests, leaderboards (a shared file system when trials run on "
        "Slurm nodes). Empty: <AIRFLOW_HOME>/gpusched/sweeps.",
        "/shared/sweeps",
        directory_leaf="sweeps",
    ),
    Option(
        "job_classes",
        "string",
        "",
        "The job-class mapping: a YAML/JSON file path or inline YAML/JSON. It turns job_class (normal/idle) "
        "and priority into the Airflow pool, pool_slots and priority_weight, the Slurm "
        "partition/qos/nice/requeue, and the local-GPU preemption policy (grace_period, min_runtime, "
        "max_preemptions, backoff, idle_for, max_utilization, max_foreign_memory). Empty: built-in defaults "
        "(docs/idle-filling.md).",
        "/etc/airflow/gpusched-classes.yaml",
    ),
    Option(
        "quotas",
        "string",
        "",
        "Team quotas: a YAML/JSON file path or inline YAML/JSON declaring groups with a guaranteed share of the "
        "fleet's GPUs (or GPU memory), a borrowing limit, a fair-share weight, members (DAG owners) and Slurm "
        "account/QOS. Work beyond its group's quota borrows idle GPUs and is reclaimed when their group needs "
        "them. Empty: no quotas (docs/quotas.md).",
        "/etc/airflow/gpusched-quotas.yaml",
    ),
    # fedflow's host limits (its utilization-limit.cpu, remain-limit.memory, remain-limit.cuda-memory), as the
    # defaults of every local-GPU request that does not give its own
    Option(
        "max_cpu_percent",
        "float",
        0.0,
        "Default host limit of local GPU work (fedflow's utilization-limit.cpu, as a percentage): work starts "
        "only while the host's CPU utilisation is at most this. 0: no limit.",
        "80",
    ),
    Option(
        "min_free_ram",
        "string",
        "",
        "Default host limit of local GPU work (fedflow's remain-limit.memory): work starts only while at least "
        "this much host RAM is free. Empty: no limit.",
        "8GiB",
    ),
    Option(
        "gpu_memory_margin",
        "string",
        "",
        "Default GPU memory kept free on each GPU when local work is packed by memory (fedflow's "
        "remain-limit.cuda-memory). Empty: none.",
        "1GiB",
    ),
    Option(
        "max_waiting",
        "integer",
        0,
        "Default bound of local two-stage work (load_stage=True; fedflow's scheduler.max-waiting): a load stage "
        "starts only while fewer than this many load-stage tasks on the host are loading, or loaded and waiting "
        "for GPUs. 0: no bound.",
        "4",
    ),
    Option(
        "output_tail_lines",
        "integer",
        40,
        "Lines of a job's output quoted in the task log when it finishes, and shown on the UI's Slurm job page.",
        "40",
    ),
    Option(
        "ui_live_slurm",
        "boolean",
        True,
        "Whether the api-server may refresh a running Slurm job's state on the UI's Slurm job page through its "
        "own local Slurm commands (one shared poll per 10 s for all open pages; only for jobs submitted "
        "through the local Slurm CLI). Off: the page shows what the task recorded.",
        "True",
    ),
)
BY_NAME = {o.name: o for o in OPTIONS}


def default(name: str) -> Any:
    """The default of option ``name`` (a KeyError names an option that does not exist)."""
    return BY_NAME[name].default


def default_directory(name: str, airflow_home: str | None = None) -> str:
    """Where a directory option points when it is empty: ``<AIRFLOW_HOME>/gpusched/<leaf>``."""
    home = airflow_home or os.environ.get("AIRFLOW_HOME") or "~/airflow"
    return os.path.join(os.path.expanduser(home), "gpusched", BY_NAME[name].directory_leaf or name)


def directory_outside_airflow(name: str) -> str:
    """A directory option as the core sees it without Airflow's config: ``$AIRFLOW__GPUSCHED__<NAME>``,
    else the default under ``$AIRFLOW_HOME``."""
    configured = os.environ.get(ENV_PREFIX + name.upper())
    return os.path.expanduser(configured) if configured else default_directory(name)


def host_limit_defaults(read: Any = None) -> dict[str, Any]:
    """The host limits a local-GPU request gets when it gives none (GPURequest's ``max_cpu_percent``,
    ``min_free_ram``, ``memory_margin``, ``max_waiting``): from ``read(name)`` (Airflow's config), else ``$AIRFLOW__GPUSCHED__*``."""

    def value(name: str) -> Any:
        if read is not None:
            return read(name)
        raw = os.environ.get(ENV_PREFIX + name.upper(), "")
        return float(raw) if raw and BY_NAME[name].type == "float" else (raw or BY_NAME[name].default)

    cpu, ram, margin = value("max_cpu_percent"), value("min_free_ram"), value("gpu_memory_margin")
    waiting = value("max_waiting")
    try:
        waiting = int(waiting or 0)
    except ValueError:
        raise InvalidArgumentError("[gpusched] max_waiting", waiting, "a whole number >= 0 (0: no bound)") from None
    return {
        "max_cpu_percent": float(cpu) if cpu else None,
        "min_free_ram": ram or None,
        "memory_margin": margin or 0,
        "max_waiting": waiting,
    }


def provider_config() -> dict[str, Any]:
    """The ``config`` section of the provider info."""
    return {
        SECTION: {
            "description": "Settings of airflow-provider-gpusched.",
            "options": {o.name: o.provider_info() for o in OPTIONS},
        }
    }
