"""Sweeps: parameter spaces, grid/random expansion, searches in rounds (optuna, evolution), trial identity,
results and leaderboards (pure Python, no Airflow).

The names below are loaded on first use: a trial-runner process (``python -m ...sweep.running.trial_run``) imports
this package too, and should not pay for the spec and job-class modules it never uses."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Objective": "parts.objective",
    "SweepSpec": "definition.sweep_spec",
    "TrialResources": "parts.resources",
    "EvolutionSettings": "searches.evolution",
    "choice": "parts.spaces",
    "uniform": "parts.spaces",
    "loguniform": "parts.spaces",
    "randint": "parts.spaces",
    "quniform": "parts.spaces",
    "when": "parts.spaces",
    "ModelCost": "searches.model_cost",
}

__all__ = [
    "Objective",
    "SweepSpec",
    "TrialResources",
    "EvolutionSettings",
    "choice",
    "uniform",
    "loguniform",
    "randint",
    "quniform",
    "when",
    "ModelCost",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.objective import Objective
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.parts.spaces import choice, loguniform, quniform, randint, uniform, when
    from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSettings
    from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost
