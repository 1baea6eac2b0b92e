"""The built-in pruning rules' old home, kept for code that imports them from here and for ``module:Class`` names
that point here: each rule is now its own module (core/sweep/pruning_rules/median.py, asha.py, optuna.py; what they
share in curves.py), found by the registry of core/sweep/pruning_rules/base.py.

Every name here is the same object as in its new module (``builtin.ASHARule is asha.ASHARule``).
"""

from __future__ import annotations

import os  # noqa: F401 - importable here as before
import time  # noqa: F401
from collections.abc import Callable, Mapping, Sequence  # noqa: F401
from typing import TYPE_CHECKING, Any  # noqa: F401

from airflow_provider_gpusched.core.checks import is_int, is_number  # noqa: F401
from airflow_provider_gpusched.core.errors import InvalidArgumentError  # noqa: F401
from airflow_provider_gpusched.core.sweep.pruning_rules.asha import (  # noqa: F401
    ASHARule,
    ASHASettings,
    _top_fraction_cutoff,
)
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Peer, Pruner, PruningRule, Reports
from airflow_provider_gpusched.core.sweep.pruning_rules.curves import (  # noqa: F401
    _own_curve,
    _scored,
    _value,
    _worse,
)
from airflow_provider_gpusched.core.sweep.pruning_rules.median import MedianRule, MedianSettings
from airflow_provider_gpusched.core.sweep.pruning_rules.optuna import (  # noqa: F401
    IN_STUDY_ONLY,
    OPTUNA_PRUNERS,
    OptunaJudge,
    OptunaRule,
    OptunaSettings,
    StudyJudge,
    _halving_rungs,
    judge_with_optuna,
    make_optuna_pruner,
)

__all__ = [
    "IN_STUDY_ONLY",
    "OPTUNA_PRUNERS",
    "ASHARule",
    "ASHASettings",
    "MedianRule",
    "MedianSettings",
    "OptunaJudge",
    "OptunaRule",
    "OptunaSettings",
    "Peer",
    "Pruner",
    "PruningRule",
    "Reports",
    "StudyJudge",
    "judge_with_optuna",
    "make_optuna_pruner",
]
