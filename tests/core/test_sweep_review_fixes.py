"""The review of issue 78's core/sweep split: a broken installed search kind breaks no other spec, an old pickle of
a pruning rule loads whole, builtin.py's rules are the rules themselves, a built-in kind's settings under
search_settings are refused, an alias run as a script names itself, the layers name the moved modules, and the
judge of a rule is kept without comparing the rule on every report."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition import search_kind as kinds
from airflow_provider_gpusched.core.sweep.definition.schema import sweep_schema
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.pruning_rules import asha, builtin, median, optuna
from airflow_provider_gpusched.core.sweep.pruning_rules.base import PruningRule
from airflow_provider_gpusched.core.sweep.pruning_rules.judging import SweepReports

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "airflow_provider_gpusched" / "core" / "sweep"
CMD = {"command": ["python", "train.py"], "space": {"lr": [0.1, 0.2]}}
PBT = {"population": 4, "perturbation_interval": 2, "steps": 6, "quantile_fraction": 0.25}


@pytest.fixture
def broken_kind():
    """An installed search kind whose module fails to import."""
    kinds.REGISTRY.register("no_such_package_gpusched.kinds:Broken", "broken")
    yield
    kinds.unregister_search_kind("broken")


class Counted(SearchKind["SweepSpec"]):
    """A kind that counts how often it is made."""

    name = "counted"
    settings_key = "counted"
    made = 0

    def __init__(self) -> None:
        type(self).made += 1


@pytest.fixture
def counted_kind():
    Counted.made = 0
    kinds.register_search_kind(Counted)
    yield Counted
    kinds.unregister_search_kind("counted")


def pbt_spec(**kw):
    return SweepSpec(name="s", search="pbt", objective="maximize score", **CMD, **kw)


# -- 1. a broken installed kind --------------------------------------------------------------------------------
def test_a_broken_installed_kind_breaks_no_spec_that_gives_another_kinds_settings(broken_kind):
    assert pbt_spec(pbt=PBT).pbt.population == 4
    assert SweepSpec.from_dict({"name": "s", "search": "pbt", "objective": "maximize score", "pbt": PBT, **CMD})
    with pytest.raises(InvalidArgumentError, match="sweep: nope"):  # an unknown key is still refused
        SweepSpec.from_dict({"name": "s", "nope": {}, **CMD})


def test_a_broken_installed_kind_leaves_the_schema_whole(broken_kind):
    schema = sweep_schema()
    assert {"pbt", "evolution", "hyperband"} <= set(schema["properties"])
    assert "broken" in schema["properties"]["search"]["enum"]


def test_no_other_kind_is_made_for_a_plain_spec_or_one_with_its_own_settings(counted_kind):
    SweepSpec(name="s", **CMD)
    SweepSpec.from_dict({"name": "s", "callable": "os.path:join", "space": {"lr": [0.1]}})
    pbt_spec(pbt=PBT)
    SweepSpec.from_dict({"name": "s", "search": "pbt", "objective": "maximize score", "pbt": PBT, **CMD})
    assert counted_kind.made == 0


# -- 2. an old pickle of PruningRule ---------------------------------------------------------------------------
OLD_STATE = {
    "rule": "asha",
    "metric": "loss",
    "mode": "minimize",
    "max_steps": None,
    "warmup_steps": 0,
    "min_trials": 3,
    "min_steps": 2,
    "reduction_factor": 4,
    "pruner": None,
    "options": None,
}


def test_an_old_pickles_state_makes_the_rule_again():
    rule = PruningRule.__new__(PruningRule)
    rule.__setstate__(dict(OLD_STATE))
    assert rule == PruningRule("asha", metric="loss", mode="minimize", min_steps=2, reduction_factor=4)
    assert isinstance(rule.settings, asha.ASHASettings) and rule.min_steps == 2
    rule.check("pruning")


def test_an_old_pickle_keeps_another_rules_setting_given_and_a_new_one_round_trips():
    import pickle

    rule = PruningRule.__new__(PruningRule)
    rule.__setstate__({**OLD_STATE, "rule": "median", "min_steps": 1, "reduction_factor": 5})
    assert rule.to_dict()["reduction_factor"] == 5 and "min_steps" not in rule.to_dict()
    again = pickle.loads(pickle.dumps(rule))
    assert again == rule and again.settings == rule.settings


# -- 3. builtin.py's rules are the rules -----------------------------------------------------------------------
def test_builtins_rules_are_their_modules_classes():
    assert builtin.MedianRule is median.MedianRule
    assert builtin.ASHARule is asha.ASHARule
    assert builtin.OptunaRule is optuna.OptunaRule
    assert isinstance(PruningRule("asha", metric="m", mode="minimize").make_judge(), builtin.ASHARule)


# -- 4. a built-in kind's settings under search_settings ------------------------------------------------------
def test_a_built_in_kinds_settings_under_search_settings_are_refused_not_ignored():
    with pytest.raises(InvalidArgumentError, match=r"search_settings\.pbt: .*write pbt:"):
        pbt_spec(search_settings={"pbt": {**PBT, "population": 8}})


def test_settings_of_the_wrong_type_are_refused_by_the_kinds_one_check():
    with pytest.raises(InvalidArgumentError, match=r"sweep: pbt: expected a mapping of PBT settings"):
        pbt_spec(pbt=5)


# -- 5. an alias run as a script ------------------------------------------------------------------------------
def test_an_alias_run_as_a_script_warns_naming_its_own_module():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-W", "always", "-m", "airflow_provider_gpusched.core.sweep.trial_run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "airflow_provider_gpusched.core.sweep.trial_run is now" in done.stderr
    assert "__main__ is now" not in done.stderr and "runpy" not in done.stderr.split("is now")[0]


# -- 6. the layers name modules, not aliases ------------------------------------------------------------------
def _code_figures():
    spec = importlib.util.spec_from_file_location("code_figures_review", ROOT / "scripts" / "code_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_layer_names_a_module_that_is_not_a_moved_alias():
    figures = _code_figures()
    for importer, imported, _why in figures.LAYERS:
        for name in (importer, imported):
            path = ROOT / "airflow_provider_gpusched" / Path(*name.split(".")) if name else None
            if path is None or path.is_dir():
                continue
            source = path.with_suffix(".py")
            assert source.is_file(), name
            assert not figures.is_moved_alias(ast.parse(source.read_text())), f"{name} is a moved alias"


# -- 7. no text in the subpackages names an old flat module ---------------------------------------------------
OLD_MODULES = sorted(p.stem for p in SWEEP.glob("*.py") if p.name != "__init__.py")


def test_the_subpackages_name_no_old_flat_module():
    pattern = re.compile(r"(?:core/sweep/|core\.sweep\.|\.\.\.sweep\.)(" + "|".join(OLD_MODULES) + r")\b")
    found = [
        f"{path.relative_to(SWEEP)}:{n}"
        for path in [SWEEP / "__init__.py", *SWEEP.glob("*/*.py")]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith(("from ", "import "))
    ]
    assert found == []


# -- 8. the judge of a rule is kept by identity ---------------------------------------------------------------
def test_judging_with_the_same_rule_does_not_compare_it(tmp_path, monkeypatch):
    reports = SweepReports(str(tmp_path))
    rule = PruningRule("median", metric="loss", mode="minimize")
    reports.judge(rule, "t0")
    judge = reports._pruner
    calls = []
    real = PruningRule.to_dict
    monkeypatch.setattr(PruningRule, "to_dict", lambda self: calls.append(1) or real(self))
    assert reports.judge(rule, "t0") == ""
    assert calls == [] and reports._pruner is judge
    reports.judge(PruningRule("median", metric="loss", mode="minimize"), "t0")  # an equal rule: the same judge
    assert reports._pruner is judge
