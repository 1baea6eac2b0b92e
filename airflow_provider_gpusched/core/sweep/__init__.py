"""Sweeps: parameter spaces, grid/random expansion, searches in rounds (optuna, evolution), trial identity,
results and leaderboards (pure Python, no Airflow)."""

from airflow_provider_gpusched.core.sweep.objective import Objective
from airflow_provider_gpusched.core.sweep.spaces import choice, loguniform, quniform, randint, uniform, when
from airflow_provider_gpusched.core.sweep.spec import EvolutionSettings, SweepSpec, TrialResources

__all__ = ["Objective", "SweepSpec", "TrialResources", "EvolutionSettings", "choice", "uniform", "loguniform",
           "randint", "quniform", "when"]
