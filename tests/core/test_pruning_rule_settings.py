"""A pruning rule owns its settings (issue 78): an outside rule with a typed settings class of its own, the limit
rule of docs/development.md "Adding a pruning rule", is registered here and nowhere else, and its keys are read from a
spec's `pruning:` (YAML and Python), checked by their annotations with errors naming `pruning.<key>`, carried to the
trials as JSON, and described by `gpusched sweep schema` while it is registered."""

import json
import re
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.definition.schema import sweep_schema
from airflow_provider_gpusched.core.sweep.pruning_rules.base import PruningRule, register_pruner, unregister_pruner
from airflow_provider_gpusched.core.sweep.pruning_rules.judging import judge

DOC = Path(__file__).resolve().parents[2] / "docs" / "development.md"


def _the_pages_rule() -> dict:
    """The page's module with a settings class of its own (the section's python block that declares one)."""
    text = DOC.read_text()
    section = text[text.index("## Adding a pruning rule") :]
    section = section[: section.index("\n## ", 3)]
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "settings_class =" in b]
    namespace: dict = {}
    exec(compile(code, "docs/development.md (the limit rule)", "exec"), namespace)
    return namespace


@pytest.fixture
def limit():
    """The page's rule registered in this process, removed afterwards."""
    before = sweep_schema()
    namespace = {**_the_pages_rule(), "schema before": before}
    register_pruner(namespace["LimitRule"])
    yield namespace
    unregister_pruner("limit")
    assert sweep_schema() == before  # gone with its rule


def _spec(pruning, **extra) -> SweepSpec:
    return SweepSpec(
        name="x",
        test_config=[{"a": [1]}],
        command=["true"],
        objective=Objective("loss", "minimize"),
        pruning=pruning,
        **extra,
    )


def curve(values):
    return [{"step": i, "metrics": {"loss": v}} for i, v in enumerate(values)]


def test_its_keys_are_read_from_a_yaml_spec_into_its_settings_class(limit, tmp_path):
    path = tmp_path / "limit.yaml"
    path.write_text(
        "name: limit-demo\n"
        "test_config: [{a: [1, 2]}]\n"
        "command: [python, train.py]\n"
        "objective: {metric: loss, mode: minimize}\n"
        "pruning: {rule: limit, limit: 2.5, after_steps: 1}\n"
    )
    rule = SweepSpec.from_yaml(str(path)).pruning
    settings = rule.settings_as(limit["LimitSettings"])
    assert type(settings) is limit["LimitSettings"] and (settings.limit, settings.after_steps) == (2.5, 1)
    assert (rule.limit, rule.after_steps, rule.metric, rule.mode) == (2.5, 1, "loss", "minimize")


def test_its_keys_are_read_from_python_and_judge_a_trial(limit):
    rule = _spec({"rule": "limit", "limit": 3}).pruning
    assert rule.after_steps == 0  # its default
    assert judge(rule, curve([9.0, 2.0]), []) == ""
    assert "limit: loss 4 is past 3 at step 1" in judge(rule, curve([9.0, 4.0]), [])
    made = PruningRule("limit", metric="loss", mode="minimize", limit=3, after_steps=2)
    assert judge(made, curve([9.0, 4.0]), []) == ""  # before after_steps
    # it travels to a trial as JSON (core/sweep/pruning_rules/judging.py rule_from_env) and comes back the same
    again = PruningRule(**json.loads(json.dumps(made.to_dict())))
    assert again == made and again.settings_as(limit["LimitSettings"]).after_steps == 2


@pytest.mark.parametrize(
    ("pruning", "argument", "expected"),
    [
        ({"rule": "limit", "limit": 2, "after_steps": -1}, "pruning.after_steps", "a whole number >= 0"),
        ({"rule": "limit", "limit": "high"}, "pruning.limit", "a number"),
        ({"rule": "limit", "limit": True}, "pruning.limit", "a number"),
        ({"rule": "limit"}, "pruning.limit", "a value (it has no default)"),
        ({"rule": "median", "limit": 2}, "pruning.limit", "limit only with rule: limit"),
        ({"rule": "limit", "limit": 2, "warmup_steps": -1}, "pruning.warmup_steps", "a whole number >= 0"),
    ],
)
def test_its_bad_settings_are_refused_naming_the_key(limit, pruning, argument, expected):
    with pytest.raises(InvalidArgumentError) as err:
        _spec(pruning)
    assert err.value.argument == f"sweep: {argument}" and err.value.expected == expected


def test_a_key_no_rule_reads_is_refused_with_the_known_keys_its_own_included(limit):
    with pytest.raises(InvalidArgumentError) as err:
        _spec({"rule": "limit", "limit": 2, "after_step": 1})
    assert err.value.argument == "sweep: pruning.after_step"
    assert "did you mean after_steps?" in str(err.value) and "limit" in err.value.expected


def test_the_schema_describes_its_keys_while_it_is_registered(limit):
    before = limit["schema before"]["$defs"]["PruningRule"]
    assert "limit" not in before["properties"]
    after = sweep_schema()["$defs"]["PruningRule"]
    assert after["properties"]["after_steps"]["minimum"] == 0
    assert after["properties"]["limit"]["description"] == "a number"
    assert "limit" in after["properties"]["rule"]["enum"] and after["additionalProperties"] is False
    built_in = {k: v for k, v in after["properties"].items() if k not in ("limit", "after_steps", "rule")}
    assert built_in == {k: v for k, v in before["properties"].items() if k != "rule"}


def test_the_built_in_rules_keep_their_keyword_names():
    rule = PruningRule("asha", min_steps=2)
    assert (rule.min_steps, rule.reduction_factor, rule.warmup_steps, rule.pruner) == (2, 3, 0, None)
    rule.reduction_factor = 4
    assert rule.settings.reduction_factor == 4 and rule.to_dict()["reduction_factor"] == 4
    assert PruningRule(**rule.to_dict()) == rule
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        PruningRule("asha", bogus=1)
