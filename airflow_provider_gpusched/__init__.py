"""airflow-provider-gpusched: schedule GPU work (local GPUs and Slurm) from Apache Airflow 3.

One import surface: everything a DAG file or a notebook needs comes from here, loaded on first use (PEP 562), so
``import airflow_provider_gpusched`` stays as cheap as before and the pure-Python names (sweep specs, spaces,
``report``, ``rank_info``) never load Airflow::

    from airflow_provider_gpusched import SweepSpec, Objective, TrialResources, loguniform, sweep_task_group
    from airflow_provider_gpusched import LocalGPUOperator, SlurmJobOperator
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: name -> the module that defines it (core modules first: they import no Airflow)
_EXPORTS = {
    # sweeps, searches and their parts (core: no Airflow)
    "SweepSpec": "core.sweep.spec",
    "TrialResources": "core.sweep.resources",
    "EvolutionSettings": "core.sweep.kind_settings",
    "Objective": "core.sweep.objective",
    "PruningRule": "core.sweep.pruning",
    "ModelCost": "core.sweep.model_cost",
    "choice": "core.sweep.spaces",
    "uniform": "core.sweep.spaces",
    "loguniform": "core.sweep.spaces",
    "randint": "core.sweep.spaces",
    "quniform": "core.sweep.spaces",
    "when": "core.sweep.spaces",
    "report": "core.sweep.trial_report",
    "run_sweep": "core.sweep.terminal",
    "load_spec": "core.sweep.terminal",
    # distributed starts, Slurm job specs (core)
    "RankInfo": "core.distributed",
    "rank_info": "core.distributed",
    "SlurmJobSpec": "core.slurm.job",
    "wait_for_gpus": "core.gpu.stages",
    # Airflow adapters
    "sweep_task_group": "task_groups.sweep",
    "LocalGPUOperator": "operators.local_gpu",
    "SlurmJobOperator": "operators.slurm",
    "SlurmPythonOperator": "operators.slurm",
    "PipelinePartitionOperator": "operators.partition",
    "SlurmJobSensor": "sensors.slurm",
    "GPUAvailableSensor": "sensors.local_gpu",
    "SlurmJobTrigger": "triggers.slurm",
    "GPUAvailableTrigger": "triggers.local_gpu",
    "SlurmHook": "hooks.slurm",
    "LocalGPUHook": "hooks.local_gpu",
    "EmailNotifier": "notifications.notifiers",
    "WebhookNotifier": "notifications.notifiers",
}

__all__ = [  # the names of _EXPORTS (a test checks that the two agree)
    "__version__",
    "SweepSpec",
    "TrialResources",
    "EvolutionSettings",
    "Objective",
    "PruningRule",
    "ModelCost",
    "choice",
    "uniform",
    "loguniform",
    "randint",
    "quniform",
    "when",
    "report",
    "run_sweep",
    "load_spec",
    "RankInfo",
    "rank_info",
    "SlurmJobSpec",
    "wait_for_gpus",
    "sweep_task_group",
    "LocalGPUOperator",
    "SlurmJobOperator",
    "SlurmPythonOperator",
    "PipelinePartitionOperator",
    "SlurmJobSensor",
    "GPUAvailableSensor",
    "SlurmJobTrigger",
    "GPUAvailableTrigger",
    "SlurmHook",
    "LocalGPUHook",
    "EmailNotifier",
    "WebhookNotifier",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from airflow_provider_gpusched.core.distributed import RankInfo, rank_info
    from airflow_provider_gpusched.core.gpu.stages import wait_for_gpus
    from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec
    from airflow_provider_gpusched.core.sweep.model_cost import ModelCost
    from airflow_provider_gpusched.core.sweep.objective import Objective
    from airflow_provider_gpusched.core.sweep.pruning import PruningRule
    from airflow_provider_gpusched.core.sweep.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.search_kinds import EvolutionSettings
    from airflow_provider_gpusched.core.sweep.spaces import choice, loguniform, quniform, randint, uniform, when
    from airflow_provider_gpusched.core.sweep.spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.terminal import load_spec, run_sweep
    from airflow_provider_gpusched.core.sweep.trial_report import report
    from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook
    from airflow_provider_gpusched.hooks.slurm import SlurmHook
    from airflow_provider_gpusched.notifications.notifiers import EmailNotifier, WebhookNotifier
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
    from airflow_provider_gpusched.operators.partition import PipelinePartitionOperator
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator, SlurmPythonOperator
    from airflow_provider_gpusched.sensors.local_gpu import GPUAvailableSensor
    from airflow_provider_gpusched.sensors.slurm import SlurmJobSensor
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group
    from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger
