"""The built-in pruning rules' old home, kept for code that imports them from here and for ``module:Class`` names
that point here: each rule is now its own module (core/sweep/pruning_rules/median.py, asha.py, optuna.py; what they
share in curves.py), found by the registry of core/sweep/pruning_rules/base.py.

The rule classes here are their modules' classes under their old home's name (subclasses that add nothing), so that
a class loaded as ``builtin:MedianRule`` still says it came from here; every other name is the same object.
"""

from __future__ import annotations

import os  # noqa: F401 - importable here as before
import time  # noqa: F401
from collections.abc import Callable, Mapping, Sequence  # noqa: F401
from typing import TYPE_CHECKING, Any  # noqa: F401

from airflow_provider_gpusched.core.checks import is_int, is_number  # noqa: F401
from airflow_provider_gpusched.core.errors import InvalidArgumentError  # noqa: F401
from airflow_provider_gpusched.core.sweep.pruning_rules import asha, median, optuna
from airflow_provider_gpusched.core.sweep.pruning_rules.asha import ASHASettings, _top_fraction_cutoff  # noqa: F401
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Peer, Pruner, PruningRule, Reports
from airflow_provider_gpusched.core.sweep.pruning_rules.curves import (  # noqa: F401
    _own_curve,
    _scored,
    _value,
    _worse,
)
from airflow_provider_gpusched.core.sweep.pruning_rules.median import MedianSettings
from airflow_provider_gpusched.core.sweep.pruning_rules.optuna import (  # noqa: F401
    IN_STUDY_ONLY,
    OPTUNA_PRUNERS,
    OptunaJudge,
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


class MedianRule(median.MedianRule):
    """median.py's rule (this module's old name for it)."""


class ASHARule(asha.ASHARule):
    """asha.py's rule (this module's old name for it)."""


class OptunaRule(optuna.OptunaRule):
    """optuna.py's rule (this module's old name for it)."""
